"""Several real `wf-rpc-server` processes on one PostgreSQL store, for the
failover tests (tests/reliability/test_pg_failover.py) and the failover
benchmark (bench/failover.py).

A `Node` is one server process, started with `--store-url` and
`--enable-scheduler` (`--standby` for all but the first), its log in JSON
lines in a file of its own, killed and frozen with real signals. A
`Cluster` starts the nodes, puts a workload of one-shot schedules spread
over a window on the store, and reads back what happened, from the
database directly (the operator's psql) and through the API.

The checks (`Cluster.verdict`): no (schedule, instant) decided twice and no
server that hit the unique key (a double admission the database refused
is a failure too); none lost (every one-shot has its one decided row); one
run a row, each terminal, the runs of a killed server failed with the
disclosure and those of live servers untouched.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from adapters.client import App, ServerUnreachable
from tests.pgserver import PostgresServer
from tests.rpc.live import free_port

__all__ = ["NAP_PLAN", "Cluster", "Node", "Verdict"]

ROOT: Final = Path(__file__).resolve().parents[2]

NAP_PLAN: Final[dict[str, Any]] = {
    "name": "nap",
    "input_schema": {"type": "object"},
    "start": "nap",
    "nodes": [
        {"id": "nap", "kind": "call", "capability": "wf.std.sleep", "params": {"seconds": 0.3}}
    ],
    "edges": {"nap": {"ok": "__end__"}},
    "output": {"slept": "state.nap"},
}
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
# What a run failed because its server died says (adapters/host/recovery.py).
DISCLOSURE: Final = "external effects may already have occurred"


def _instant(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Node:
    """One `wf-rpc-server` process of the cluster."""

    def __init__(self, name: str, url: str, config: Path, logs: Path, *, standby: bool) -> None:
        self.name = name
        self.url = url
        self.config = config
        self.log_path = logs / f"{name}.log"
        self.standby = standby
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        # This process's id on the store (from its health), each start a new one.
        self.server_id: str | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.port = free_port()
        self.starts += 1
        args = [
            sys.executable,
            "-m",
            "adapters.rpc_server_cli",
            "--store-url",
            self.url,
            "--port",
            str(self.port),
            "--config",
            str(self.config),
            "--enable-scheduler",
            "--log-format",
            "json",
        ]
        if self.standby:
            args.append("--standby")
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signum)

    def kill(self) -> None:
        """SIGKILL: no stop, no release, nothing written."""
        self.signal(signal.SIGKILL)
        assert self.process is not None
        self.process.wait(timeout=10)

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait: the clean stop."""
        if not self.alive:
            return self.process.returncode if self.process is not None else 0
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        assert self.process is not None
        return self.process.wait(timeout=timeout_s)

    async def health(self) -> dict[str, Any] | None:
        """`workflow.health`, or None when the process does not answer."""
        if not self.alive:
            return None
        try:
            async with App(self.base, timeout_s=2.0) as app:
                return await app.health()
        except (TimeoutError, ServerUnreachable, OSError):
            return None

    async def role(self) -> str | None:
        report = await self.health()
        return None if report is None else str(report.get("role"))

    async def wait_serving(self, timeout_s: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive:
                raise AssertionError(f"{self.name} exited:\n{self.log_text()[-3000:]}")
            report = await self.health()
            if report is not None and report.get("scheduler") == "running":
                self.server_id = report.get("server_id")
                return report
            await asyncio.sleep(0.05)
        raise AssertionError(f"{self.name} did not serve within {timeout_s} s")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def events(self) -> Iterator[dict[str, Any]]:
        for line in self.log_text().splitlines():
            if line.startswith("{"):
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue


@dataclass
class Verdict:
    """What the checks found (empty lists: all good)."""

    schedules: int
    decided: int
    admitted: int
    doubled: list[tuple[str, str]] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    unique_violations: list[str] = field(default_factory=list)
    runs_not_terminal: list[str] = field(default_factory=list)
    rows_not_terminal: list[str] = field(default_factory=list)
    rows_without_one_run: list[str] = field(default_factory=list)
    abandoned_without_disclosure: list[str] = field(default_factory=list)
    abandoned: int = 0
    abandoned_runs: set[str] = field(default_factory=set)
    statuses: dict[str, int] = field(default_factory=dict)

    @property
    def failures(self) -> dict[str, list[Any]]:
        return {
            name: value
            for name, value in {
                "doubled": self.doubled,
                "lost": self.lost,
                "unique_violations": self.unique_violations,
                "runs_not_terminal": self.runs_not_terminal,
                "rows_not_terminal": self.rows_not_terminal,
                "rows_without_one_run": self.rows_without_one_run,
                "abandoned_without_disclosure": self.abandoned_without_disclosure,
            }.items()
            if value
        }


class Cluster:
    """Nodes on one database, and the workload they schedule."""

    def __init__(
        self,
        pg: PostgresServer,
        url: str,
        directory: Path,
        *,
        lease_s: float = 2.0,
        renew_s: float = 0.5,
        poll_s: float = 0.2,
        slots: int = 200,
    ) -> None:
        self.pg = pg
        self.url = url
        self.dbname = url.rsplit("/", 1)[1].split("?")[0]
        self.directory = directory
        self.config = directory / "server.json"
        scheduler = {
            "poll_interval_s": poll_s,
            "lease_s": lease_s,
            "renew_interval_s": renew_s,
            "max_concurrent_runs": slots,
            "drain_grace_s": 5.0,
        }
        self.config.write_text(json.dumps({"server": {"scheduler": scheduler}}))
        self.lease_s = lease_s
        self.poll_s = poll_s
        self.nodes: list[Node] = []
        self.schedule_ids: list[str] = []
        self.window_end: datetime | None = None

    def add(self, name: str, *, standby: bool) -> Node:
        node = Node(name, self.url, self.config, self.directory, standby=standby)
        self.nodes.append(node)
        return node

    async def start(self, count: int) -> list[Node]:
        """`count` nodes, the first leading: started one after another so
        the first surely leads."""
        first = self.add("n0", standby=False)
        first.start()
        await first.wait_serving()
        for index in range(1, count):
            node = self.add(f"n{index}", standby=True)
            node.start()
        for node in self.nodes[1:]:
            report = await node.wait_serving()
            assert report["role"] == "standby", report
        return list(self.nodes)

    async def leader(self, timeout_s: float = 30.0, *, besides: Node | None = None) -> Node:
        """The node whose health says it leads (waiting for one)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node is not besides and await node.role() == "leader":
                    return node
            await asyncio.sleep(0.02)
        raise AssertionError(f"no node leads within {timeout_s} s")

    def sql(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        return self.pg.query(query, params, dbname=self.dbname)

    async def workload(
        self,
        through: Node,
        *,
        schedules: int,
        start_in_s: float,
        spread_s: float,
        creating_s: float = 0.04,
    ) -> datetime:
        """`schedules` one-shot schedules at instants spread evenly over
        `spread_s` seconds from `start_in_s` after they are all created
        (`creating_s` a schedule is allowed for that; from the database's
        now, the scheduler's clock), created through `through`; the instant of
        the last. A `latest` misfire and an hour of lateness allowed: an
        instant missed during a failover is admitted late, never skipped, so
        that every one must end with one run."""
        async with App(through.base, timeout_s=30.0) as app:
            await app.create_artifact_from_plan("nap", 1, NAP_PLAN)
            await app.save_deployment(
                {"deployment_id": "nap.default", "artifact_id": "nap", "artifact_version": 1}
            )
            [(now,)] = self.sql("SELECT now()")
            # Time to create them all first: a one-shot must be in the future
            # when it is created (40 ms each is ample on a loaded machine).
            first = now + timedelta(seconds=start_in_s + creating_s * schedules)
            step = spread_s / max(1, schedules - 1)
            base = len(self.schedule_ids)
            for index in range(schedules):
                schedule_id = f"one-{base + index:05d}"
                at = first + timedelta(seconds=index * step)
                await app.create_schedule(
                    schedule_id=schedule_id,
                    deployment_id="nap.default",
                    trigger={"kind": "oneshot", "at": _instant(at)},
                    misfire="latest",
                    lateness_allowance_s=3600,
                )
                self.schedule_ids.append(schedule_id)
        last = first + timedelta(seconds=spread_s)
        self.window_end = last
        return last

    async def settled(self, timeout_s: float = 60.0) -> None:
        """Wait until every schedule has its decided row and every run ended."""
        deadline = time.monotonic() + timeout_s
        ids = self.schedule_ids
        while time.monotonic() < deadline:
            [(decided,)] = self.sql(
                "SELECT count(DISTINCT schedule_id) FROM wf_occurrences"
                " WHERE schedule_id = ANY(%s)",
                (ids,),
            )
            [(open_runs,)] = self.sql(
                "SELECT count(*) FROM wf_runs WHERE status NOT IN"
                " ('completed', 'failed', 'cancelled') AND schedule_id = ANY(%s)",
                (ids,),
            )
            [(open_rows,)] = self.sql(
                "SELECT count(*) FROM wf_occurrences WHERE schedule_id = ANY(%s)"
                " AND status NOT IN ('completed', 'failed', 'cancelled')",
                (ids,),
            )
            if decided == len(ids) and open_runs == 0 and open_rows == 0:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"the cluster did not settle within {timeout_s} s")

    def verdict(self) -> Verdict:
        """The checks of the module docstring, from the database and the logs."""
        ids = self.schedule_ids
        # One row per decided instant (the unique key keeps a second one
        # out): its decision and its latest status.
        rows = self.sql(
            "SELECT schedule_id, instant, decision->>'status', status FROM wf_occurrences"
            " WHERE schedule_id = ANY(%s)",
            (ids,),
        )
        verdict = Verdict(schedules=len(ids), decided=len(rows), admitted=0)
        decided: dict[str, list[str]] = {}
        for schedule_id, instant, decision, status in rows:
            decided.setdefault(schedule_id, []).append(str(instant))
            verdict.admitted += decision == "admitted"
            if status not in TERMINAL:
                verdict.rows_not_terminal.append(f"{schedule_id}@{instant}: {status}")
        verdict.doubled = sorted(
            (schedule_id, ",".join(instants))
            for schedule_id, instants in decided.items()
            if len(instants) > 1
        )
        verdict.lost = sorted(set(ids) - set(decided))
        runs = self.sql(
            "SELECT record->>'run_id', status, schedule_id, record FROM wf_runs"
            " WHERE schedule_id = ANY(%s)",
            (ids,),
        )
        by_schedule: dict[str, list[str]] = {}
        for run_id, status, schedule_id, record in runs:
            by_schedule.setdefault(schedule_id, []).append(run_id)
            verdict.statuses[status] = verdict.statuses.get(status, 0) + 1
            if status not in TERMINAL:
                verdict.runs_not_terminal.append(f"{run_id}: {status}")
            message = str(((record or {}).get("error") or {}).get("message", ""))
            if status == "failed" and message.startswith("abandoned"):
                verdict.abandoned += 1
                verdict.abandoned_runs.add(run_id)
                if DISCLOSURE not in message:
                    verdict.abandoned_without_disclosure.append(f"{run_id}: {message}")
            elif status != "completed":
                verdict.runs_not_terminal.append(f"{run_id}: {status}: {message}")
        for schedule_id in ids:
            mine = by_schedule.get(schedule_id, [])
            if len(mine) != 1:
                verdict.rows_without_one_run.append(f"{schedule_id}: runs {mine}")
        for node in self.nodes:
            for event in node.events():
                message = str(event.get("message", "")) + str(event.get("exception", ""))
                if "duplicate key" in message or "UniqueViolation" in message:
                    verdict.unique_violations.append(f"{node.name}: {message[:300]}")
        return verdict

    def executing_on(self, node: Node) -> set[str]:
        """The runs whose executing marks name `node`'s server now."""
        rows = self.sql(
            "SELECT record->>'run_id' FROM wf_runs WHERE record->'executing'->>'server' = %s",
            (node.server_id,),
        )
        return {str(row[0]) for row in rows}

    def took_over_at(self, node: Node) -> list[float]:
        """When `node` took the leadership over (its log's timestamps)."""
        moments = []
        for event in node.events():
            if event.get("event") == "leadership.took_over":
                moments.append(datetime.fromisoformat(event["ts"].replace("Z", "+00:00")))
        return [moment.timestamp() for moment in moments]

    def stop_all(self) -> None:
        for node in self.nodes:
            if node.alive:
                try:
                    node.stop()
                except subprocess.TimeoutExpired:
                    node.kill()
