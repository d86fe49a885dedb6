"""Fixtures for the scheduler service tests: a host server and a service on a
manual clock, rebuilt on the same store to simulate restarts.

`harness` runs each test on both backends: the files under a store root
and a PostgreSQL database of its own (`pg_url`). Tests about files only (the
journal, the startup checkpoint, a full disk) use `file_harness`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from adapters import build_local_static_workflow_server
from adapters.host import LocalStaticWorkflowServer, build_postgres_workflow_server
from shell import ManualClock, SchedulerService, SchedulerServiceConfig, build_scheduler_service
from shell.disk import OS_DISK, Disk
from shell.pg.database import Database
from shell.schedules_api import build_schedules_api

from ..shell_errors import shell_errors

START = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)  # a Monday

CONSTANT_PLAN: dict[str, Any] = {
    "name": "report",
    "input_schema": {
        "type": "object",
        "properties": {"when": {"type": "string"}},
    },
    "start": "emit",
    "nodes": [
        {
            "id": "emit",
            "kind": "call",
            "capability": "wf.std.format",
            "params": {"template": "report for {input.when}"},
        }
    ],
    "edges": {"emit": {"ok": "__end__"}},
    "output": {"result": "state.emit"},
}

# CONSTANT_PLAN with a second step: its first step is recorded on its own
# (the step that reaches the end is recorded with the stop), and the output
# is the same.
TWO_STEP_PLAN: dict[str, Any] = {
    **CONSTANT_PLAN,
    "nodes": [
        *CONSTANT_PLAN["nodes"],
        {
            "id": "sign",
            "kind": "call",
            "capability": "wf.std.format",
            "params": {"template": "{state.emit} (signed)"},
        },
    ],
    "edges": {"emit": {"ok": "sign"}, "sign": {"ok": "__end__"}},
}

GATE_PLAN: dict[str, Any] = {
    "name": "gate",
    "input_schema": {"type": "object"},
    "start": "gate",
    "nodes": [
        {
            "id": "gate",
            "kind": "interrupt",
            "prompt": "go?",
            "resume_schema": {
                "type": "object",
                "properties": {"go": {"type": "boolean"}},
                "required": ["go"],
            },
        },
        {"id": "done", "kind": "call", "capability": "wf.std.constant", "params": {"value": 1}},
    ],
    "edges": {"gate": {"ok": "done"}, "done": {"ok": "__end__"}},
    "output": {"done": "state.done"},
}


def sleep_plan(seconds: float) -> dict[str, Any]:
    return {
        "name": "sleeper",
        "input_schema": {"type": "object"},
        "start": "nap",
        "nodes": [
            {
                "id": "nap",
                "kind": "call",
                "capability": "wf.std.sleep",
                "params": {"seconds": seconds},
            }
        ],
        "edges": {"nap": {"ok": "__end__"}},
        "output": {},
    }


# The backends every `harness` test runs on.
BACKENDS = ("file", "pg")


class Harness:
    """One store; `boot()` builds a server + service as a process start would."""

    def __init__(
        self,
        root: Path,
        clock: ManualClock,
        *,
        disk: Disk = OS_DISK,
        store_url: str | None = None,
        pg_options: dict[str, float] | None = None,
    ) -> None:
        """`disk` holds the schedule stores and the commit journal (a simulated
        one puts them on `shell.sim.disk`, with the run log; the host's other
        records stay on files).
        `store_url`: the store is that PostgreSQL database instead, and
        `pg_options` the server's heartbeat, silence, lease and renewal
        (`build_postgres_workflow_server`)."""
        self.root = root
        self.clock = clock
        self.disk = disk
        self.store_url = store_url
        self.pg_options = dict(pg_options or {})
        self.database: Database | None = None
        if disk is not OS_DISK:
            # The host creates the root on the OS disk; here it is made durable
            # on the simulated one before any store writes there.
            disk.make_directory(str(root), parents=True)
            disk.syncfs(str(root))
        self.server: LocalStaticWorkflowServer | None = None
        self.service: SchedulerService | None = None

    @property
    def backend(self) -> str:
        return "file" if self.store_url is None else "pg"

    async def build_server(self) -> LocalStaticWorkflowServer:
        if self.store_url is not None:
            return await self._build_pg_server(self.store_url)
        disk = self.disk
        if self.server is not None and self.server.store_lock is not None:
            # The process before this start is gone: the kernel dropped its lock.
            self.server.store_lock.abandon()
        self.server = build_local_static_workflow_server(
            self.root,
            schedules=True,
            clock=self.clock.now,
            schedules_factory=lambda server: build_schedules_api(server, disk=disk),
            disk=disk,
        )
        return self.server

    async def _build_pg_server(self, url: str) -> LocalStaticWorkflowServer:
        if self.server is not None:
            # The process before this start exited (a crash is
            # `World.abandon`, which leaves no server behind): it said so.
            await self.server.close()
        await self._close_database()
        database = Database(url)
        await database.open()
        self.database = database
        try:
            self.server = await build_postgres_workflow_server(
                database, schedules=True, clock=self.clock.now, **self.pg_options
            )
        except BaseException:
            await self._close_database()
            raise
        return self.server

    async def _close_database(self) -> None:
        database, self.database = self.database, None
        if database is not None:
            await database.close()

    def build_service(self, config: SchedulerServiceConfig) -> SchedulerService:
        assert self.server is not None
        self.service = build_scheduler_service(self.server, config, clock=self.clock)
        return self.service

    async def boot(self, **config: Any) -> SchedulerService:
        await self.build_server()
        config.setdefault("enabled", True)
        if self.store_url is None:
            # On a manual clock the loop sleeps from one instant to the next:
            # a minute ahead, every round it can is prepared ahead of its
            # instant (`shell.service`, prepared rounds), so the file
            # backend's tests exercise that path; PostgreSQL never prepares.
            config.setdefault("prepare_ahead_s", 60.0)
        service = self.build_service(SchedulerServiceConfig(**config))
        await service.start()
        await service.settle()
        return service

    @property
    def api(self) -> Any:
        assert self.server is not None
        return self.server.api

    @property
    def schedules(self) -> Any:
        return self.api.schedules

    async def deploy(self, deployment_id: str, plan: dict[str, Any]) -> None:
        artifact_id = deployment_id.split(".")[0]
        await self.api.create_artifact_from_plan(artifact_id, 1, plan)
        await self.api.save_deployment(
            {"deployment_id": deployment_id, "artifact_id": artifact_id, "artifact_version": 1}
        )

    async def at(self, instant: datetime) -> None:
        """Move the clock to `instant` and let the scheduler do everything due."""
        assert self.service is not None
        await self.clock.set(instant)
        await self.service.settle()

    async def until_runs_ended(self, schedule_id: str) -> None:
        """Wait (up to 10 s, settling) until no occurrence of `schedule_id` is
        admitted or running: a run executes on its own task, and its end
        reaches the history a round later."""
        assert self.service is not None
        for _ in range(200):
            rows = await self.occurrences(schedule_id)
            if all(row["status"] not in ("admitted", "running") for row in rows):
                return
            await asyncio.sleep(0.05)
            await self.service.settle()

    async def occurrences(self, schedule_id: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = await self.schedules.list_schedule_occurrences(
                schedule_id=schedule_id, limit=100, cursor=cursor
            )
            rows.extend(page["occurrences"])
            cursor = page["next_cursor"]
            if cursor is None:
                return rows

    async def statuses(self, schedule_id: str) -> list[tuple[str, str]]:
        return [
            (row["instant"][11:16], row["status"]) for row in await self.occurrences(schedule_id)
        ]

    async def shutdown(self) -> None:
        if self.service is not None and self.service.running:
            await self.service.stop()
        if self.server is not None:
            await self.server.api.cancel_executing()
            # A clean stop: on PostgreSQL the server says it stopped.
            await self.server.close()
        await self._close_database()


@pytest.fixture(autouse=True)
def no_failed_rounds(caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest) -> Any:
    """A scheduler round that raised is a bug even when the test's assertions
    happen to hold: fail on any ERROR the service logged, unless the test says
    it expects some (`@pytest.mark.expected_errors`)."""
    caplog.set_level(logging.WARNING, logger="shell")
    yield
    if request.node.get_closest_marker("expected_errors"):
        return
    errors = shell_errors(caplog)
    assert not errors, errors


@pytest.fixture(params=BACKENDS)
async def harness(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """A harness on each backend in turn."""
    url = request.getfixturevalue("pg_url") if request.param == "pg" else None
    h = Harness(tmp_path / "store", ManualClock(START), store_url=url)
    yield h
    await h.shutdown()


@pytest.fixture
async def file_harness(tmp_path: Path) -> AsyncIterator[Harness]:
    """A harness on the files under a store root (tests of files)."""
    h = Harness(tmp_path / "store", ManualClock(START))
    yield h
    await h.shutdown()


Booter = Callable[..., Any]
