"""PostgreSQL for the benchmarks: what `--store postgres` shares.

`herd.py`, `spread.py`, `restart.py` and `paging.py` take `--store
{file,postgres}` (`harness.add_store_option`). With `postgres` each starts
its own server, `tests.pgserver.PostgresServer(durable=True)`: initdb into a
temp dir on the same disk as the file benches' stores (`/tmp`), a postmaster
on loopback, PostgreSQL's defaults for durability (fsync on,
synchronous_commit on, full_page_writes on), and runs its workload against a
server built on a fresh database of it (`build_postgres_workflow_server`).
`describe()` is the line each bench prints with its figures: the version and
the settings that matter.

The PostgreSQL processes are not the bench's: what they spend is added where
a bench reports CPU (`server_cpu_seconds`, read from /proc for the
postmaster and its children).

Bulk set-up (`restart.py`, `paging.py`): a million history rows through the
API would take far longer than the measurement, so most of them are
generated with `INSERT ... SELECT generate_series(...)`
(`insert_occurrences`) as the rows `shell.pg.history` writes: one row per
occurrence holding its decision row and its latest transition row, the JSON
the file store appends to `history.jsonl`. Part of them is written through
the real stores first (`write_history`, the twin of `harness.write_history`),
and `check_generated` regenerates that part with the SQL and compares it
column by column: the bench refuses to measure if a single value differs.

Not a test and not part of the package.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

import harness

__all__ = [
    "SETTINGS",
    "BenchPostgres",
    "check_generated",
    "check_runs",
    "completed_runs",
    "describe",
    "insert_occurrences",
    "insert_runs",
    "maybe_postgres",
    "open_server",
    "round_trips",
    "server_cpu_seconds",
    "vacuum_analyze",
    "write_history",
    "write_runtime",
]

# What a durable figure depends on; shown with every figure.
SETTINGS: Final = (
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_sync_method",
    "shared_buffers",
    "wal_level",
)
# The reason write_history gives a skipped-misfire row (as harness.write_history).
SKIPPED_REASON: Final = "missed by more than the lateness allowance"


def _filesystem(path: Path) -> str:
    """The type of the filesystem holding `path` (the longest mount point)."""
    best, kind = "", "unknown"
    with contextlib.suppress(OSError), open("/proc/mounts", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            if len(fields) >= 3:
                point = fields[1]
                inside = str(path) == point or str(path).startswith(point.rstrip("/") + "/")
                if inside and len(point) > len(best):
                    best, kind = point, fields[2]
    return kind


class BenchPostgres:
    """The bench's own durable PostgreSQL server (see the module docstring)."""

    def __init__(self) -> None:
        from tests.pgserver import PostgresServer

        self.server = PostgresServer(durable=True)
        self.server.start()
        self._databases = 0

    def __enter__(self) -> BenchPostgres:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.server.close()

    @property
    def pid(self) -> int:
        pid = self.server.pid
        assert pid is not None, "the bench's PostgreSQL is not running"
        return pid

    def database(self, prefix: str = "bench") -> str:
        """A fresh database; its URL."""
        self._databases += 1
        return self.server.create_database(f"{prefix}_{self._databases}")

    def settings(self) -> dict[str, str]:
        rows = self.server.query(
            "SELECT name, setting, unit FROM pg_settings WHERE name = ANY(%s)", (list(SETTINGS),)
        )
        shown = {name: self.server.query(f"SHOW {name}")[0][0] for name, _, _ in rows}
        data = self.server.data_dir
        return {
            "version": self.server.version,
            **{name: shown[name] for name in SETTINGS if name in shown},
            "data_directory": f"{data} ({_filesystem(data)})",
        }


def describe(settings: dict[str, str]) -> str:
    """One line: the version and the settings that matter."""
    shown = ", ".join(f"{name} {settings[name]}" for name in SETTINGS if name in settings)
    return f"PostgreSQL {settings['version']}: {shown}; data directory {settings['data_directory']}"


def server_cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of the PostgreSQL server so far: the
    postmaster's own and its reaped children's, plus that of every live child
    (backends, WAL writer, checkpointer...). A difference of two readings is
    what the server spent in between, children that came and went included."""
    tick = os.sysconf("SC_CLK_TCK")

    def fields(process: int | str) -> list[str] | None:
        try:
            stat = Path(f"/proc/{process}/stat").read_text()
        except OSError:
            return None
        return stat.rsplit(")", 1)[1].split()

    own = fields(pid)
    if own is None:
        return float("nan")
    # After the command: state, ppid, ..., utime (11), stime, cutime, cstime.
    total = sum(int(own[index]) for index in (11, 12, 13, 14))
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        child = fields(entry)
        if child is not None and int(child[1]) == pid:
            total += int(child[11]) + int(child[12])
    return total / tick


async def open_server(url: str, *, clock: Callable[[], datetime] | None = None) -> Any:
    """A workflow server with schedules on the database at `url` (migrated
    on open); `await server.close()` closes the database."""
    from adapters.host import build_postgres_workflow_server
    from shell.pg.database import Database

    database = Database(url)
    await database.open()
    return await build_postgres_workflow_server(database, schedules=True, clock=clock)


async def write_history(
    server: Any,
    schedule_id: str,
    instants: Sequence[datetime],
    first_run: int,
    *,
    batch_rows: int = 30_000,
    extra_skipped: datetime | None = None,
    runtime: bool = True,
) -> int:
    """`harness.write_history` on PostgreSQL: the same rows, staged through
    the real history and runtime stores (`PgHistory`, `PgRuntime`) in
    `PgBatch`es of about `batch_rows` rows, each committed as the scheduler
    commits a round. Without `runtime`, no runtime record is written (the
    caller writes it once the rest of the history is there). Returns the
    next run number."""
    schedules = server.api.schedules
    history = schedules.history
    await history.recover(schedule_id)
    snapshot = {"deployment_id": harness.DEPLOYMENT, "inputs": {}, "max_steps": None, "revision": 1}
    run = first_run
    batch = schedules.backend.new_batch()
    staged = 0
    for instant in instants:
        run_id = f"run-{run:06d}"
        run += 1
        history.append_decision(
            schedule_id,
            instant=instant,
            status="admitted",
            run_id=run_id,
            revision=1,
            snapshot=snapshot,
            recorded_at=instant,
            batch=batch,
        )
        for status in ("running", "completed"):
            history.append_transition(
                schedule_id, instant=instant, status=status, run_id=run_id,
                recorded_at=instant, batch=batch,
            )  # fmt: skip
        staged += 3
        if staged >= batch_rows:
            await schedules.backend.commit(batch)
            batch = schedules.backend.new_batch()
            staged = 0
    last = instants[-1] if instants else None
    if extra_skipped is not None:
        history.append_decision(
            schedule_id,
            instant=extra_skipped,
            status="skipped-misfire",
            reason=SKIPPED_REASON,
            recorded_at=extra_skipped,
            batch=batch,
        )
        last = extra_skipped
    if last is not None and runtime:
        schedules.runtime.stage(
            batch, schedule_id, watermark=last, held=None, lifecycle_seq=1, written_at=last
        )
    await schedules.backend.commit(batch)
    history.forget([schedule_id])
    return run


async def write_runtime(server: Any, schedule_ids: Sequence[str], last: datetime) -> None:
    """The runtime record `write_history` ends with, for each of
    `schedule_ids`, through the real runtime store, in one transaction."""
    schedules = server.api.schedules
    batch = schedules.backend.new_batch()
    for schedule_id in schedule_ids:
        schedules.runtime.stage(
            batch, schedule_id, watermark=last, held=None, lifecycle_seq=1, written_at=last
        )
    await schedules.backend.commit(batch)


async def completed_runs(
    api: Any, schedule_id: str, instants: Sequence[datetime], first_run: int
) -> None:
    """The completed run record of each occurrence of `schedule_id`
    (`run-<first_run + i>` at `instants[i]`, as the history names them; the
    ids must be reserved), created, launched and run by the host."""
    for first in range(0, len(instants), 1000):
        chunk = instants[first : first + 1000]
        ids = [f"run-{first_run + first + i:06d}" for i in range(len(chunk))]
        await api.admit_runs(
            [
                {
                    "deployment_id": harness.DEPLOYMENT,
                    "inputs": {},
                    "max_steps": None,
                    "origin": {
                        "kind": "schedule",
                        "schedule_id": schedule_id,
                        "instant": instant.strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "revision": 1,
                    },
                    "run_id": run_id,
                }
                for run_id, instant in zip(ids, chunk, strict=True)
            ]
        )
        await api.launch_runs(ids)
        await api.drain(600)


# Instants as the stores write them (`shell.store_format.format_instant`):
# whole seconds, UTC, `Z`. The generated instants are whole minutes.
_TEXT: Final = """to_char(({0}) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')"""
# `run-%06d`: six digits at least (lpad would cut a seventh).
_RUN_ID: Final = "'run-' || CASE WHEN {0} < 1000000 THEN lpad({0}::text, 6, '0') ELSE {0}::text END"


def _occurrences_sql(table: str) -> str:
    """INSERT of the rows `write_history` writes, into `table` (a table like
    `wf_occurrences`). Parameters: ids (text[]), first instant, step
    (interval), first and last seq of the admitted occurrences to generate
    (seq k of schedule number s, from 1, at first + k * step, runs run number
    first_run + (s - 1) * per_schedule + k), per_schedule, first_run, and the
    skipped-misfire instant (NULL: none; it takes seq per_schedule)."""
    text = _TEXT.format("i.at")
    run_id = _RUN_ID.format("i.run")
    return f"""
INSERT INTO {table} (schedule_id, seq, instant, status, decision, latest)
SELECT o.schedule_id, o.seq, o.at, 'completed',
    jsonb_build_object(
        'seq', o.seq, 'instant', o.text, 'status', 'admitted', 'recorded_at', o.text,
        'run_id', o.run_id, 'revision', 1,
        'snapshot', jsonb_build_object(
            'deployment_id', %(deployment)s::text, 'inputs', '{{}}'::jsonb,
            'max_steps', NULL, 'revision', 1)),
    jsonb_build_object(
        'seq', o.seq, 'update', true, 'instant', o.text, 'status', 'completed',
        'recorded_at', o.text, 'run_id', o.run_id)
FROM (
    SELECT i.schedule_id, i.seq, i.at, {text} AS text, {run_id} AS run_id
    FROM (
        SELECT ids.schedule_id, k AS seq, %(first)s::timestamptz + k * %(step)s::interval AS at,
            %(first_run)s::bigint + (ids.number - 1) * %(per_schedule)s::bigint + k AS run
        FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS ids(schedule_id, number),
            generate_series(%(from_seq)s::int, %(to_seq)s::int) AS k
    ) AS i
) AS o
UNION ALL
SELECT ids.schedule_id, %(per_schedule)s, s.at, 'skipped-misfire',
    jsonb_build_object(
        'seq', %(per_schedule)s::int, 'instant', s.text, 'status', 'skipped-misfire',
        'recorded_at', s.text, 'reason', %(reason)s::text),
    NULL
FROM unnest(%(ids)s::text[]) AS ids(schedule_id),
    (SELECT %(skipped)s::timestamptz AS at,
        {_TEXT.format("%(skipped)s::timestamptz")} AS text) AS s
WHERE s.at IS NOT NULL AND %(with_skipped)s
"""


def _parameters(
    schedule_ids: Sequence[str],
    instants: Sequence[datetime],
    first_run: int,
    seqs: range,
    skipped: datetime | None,
) -> dict[str, Any]:
    if len(instants) > 1:
        step = instants[1] - instants[0]
        assert all(b - a == step for a, b in itertools.pairwise(instants))
    else:
        step = timedelta(0)
    return {
        "ids": list(schedule_ids),
        "first": instants[0],
        "step": step,
        "from_seq": seqs.start,
        "to_seq": seqs.stop - 1,
        "per_schedule": len(instants),
        "first_run": first_run,
        "deployment": harness.DEPLOYMENT,
        "reason": SKIPPED_REASON,
        "skipped": skipped,
        # The skipped row comes after the last admitted occurrence.
        "with_skipped": skipped is not None and seqs.stop == len(instants),
    }


async def insert_occurrences(
    server: Any,
    schedule_ids: Sequence[str],
    instants: Sequence[datetime],
    first_run: int,
    *,
    seqs: range | None = None,
    skipped: datetime | None = None,
) -> int:
    """Generate in `wf_occurrences`, with one statement, the history rows
    `write_history(server, id, instants, first_run + i * len(instants),
    extra_skipped=skipped)` writes for each `schedule_ids[i]`, the occurrences
    of `seqs` only (default: all; the skipped row only with the last).
    `instants` must be evenly spaced. Returns the rows inserted."""
    seqs = seqs if seqs is not None else range(len(instants))
    parameters = _parameters(schedule_ids, instants, first_run, seqs, skipped)
    async with server.database.transaction("generate history rows") as conn:
        cursor = await conn.execute(_occurrences_sql("wf_occurrences"), parameters)
        return int(cursor.rowcount)


async def check_generated(
    server: Any,
    schedule_ids: Sequence[str],
    instants: Sequence[datetime],
    first_run: int,
    *,
    seqs: range | None = None,
    skipped: datetime | None = None,
) -> int:
    """Regenerate with `insert_occurrences`' SQL, into a temp table, the
    rows of `schedule_ids` (and `seqs`) that `write_history` wrote through
    the stores, and compare every column with them. Raises if any row is
    missing on either side or differs; returns the rows compared."""
    seqs = seqs if seqs is not None else range(len(instants))
    parameters = _parameters(schedule_ids, instants, first_run, seqs, skipped)
    last_seq = seqs.stop - 1 + (1 if parameters["with_skipped"] else 0)
    async with server.database.transaction("check generated history rows") as conn:
        await conn.execute("CREATE TEMP TABLE bench_expected (LIKE wf_occurrences) ON COMMIT DROP")
        await conn.execute(_occurrences_sql("bench_expected"), parameters)
        cursor = await conn.execute(
            "SELECT count(*) FILTER (WHERE a.schedule_id IS NULL OR b.schedule_id IS NULL"
            "     OR (a.instant, a.status, a.decision, a.latest)"
            "        IS DISTINCT FROM (b.instant, b.status, b.decision, b.latest)),"
            "   count(*)"
            " FROM (SELECT * FROM wf_occurrences WHERE schedule_id = ANY(%s)"
            "       AND seq BETWEEN %s AND %s) AS a"
            " FULL JOIN bench_expected AS b ON a.schedule_id = b.schedule_id AND a.seq = b.seq",
            (list(schedule_ids), seqs.start, last_seq),
        )
        row = await cursor.fetchone()
    assert row is not None
    differing, compared = int(row[0]), int(row[1])
    if differing or compared == 0:
        raise SystemExit(
            f"the generated history differs from the stores' rows in {differing} of"
            f" {compared} rows: not measuring"
        )
    return compared


def _runs_sql(table: str) -> str:
    """INSERT into `table` (a table like `wf_runs`) of copies of the run
    record `template` (a run number), one per run `first_run + k` for k in
    `from_seq..to_seq`, whose origin instant is first + k * step: the run id
    and the origin's instant are all that differ between the records the
    host writes for the runs of one schedule on a clock that does not move
    (`check_runs` proves it for the runs the host wrote)."""
    text = _TEXT.format("%(first)s::timestamptz + k * %(step)s::interval")
    run_id = _RUN_ID.format("(%(first_run)s::bigint + k)")
    return f"""
INSERT INTO {table} (run_number, status, schedule_id, record)
SELECT %(first_run)s::bigint + k, t.status, t.schedule_id,
    jsonb_set(jsonb_set(t.record, '{{run_id}}', to_jsonb({run_id})),
        '{{origin,instant}}', to_jsonb({text}))
FROM (SELECT status, schedule_id, record FROM wf_runs WHERE run_number = %(template)s) AS t,
    generate_series(%(from_seq)s::int, %(to_seq)s::int) AS k
"""


def _run_parameters(
    instants: Sequence[datetime], first_run: int, seqs: range, template: int
) -> dict[str, Any]:
    step = instants[1] - instants[0] if len(instants) > 1 else timedelta(0)
    return {
        "first": instants[0],
        "step": step,
        "first_run": first_run,
        "from_seq": seqs.start,
        "to_seq": seqs.stop - 1,
        "template": template,
    }


async def insert_runs(
    server: Any, instants: Sequence[datetime], first_run: int, seqs: range, *, template: int
) -> int:
    """Generate in `wf_runs`, with one statement, the run records of the
    occurrences `seqs` of `instants` (run `first_run + k` at `instants[k]`)
    as copies of the record of run number `template` (a run the host
    created, ran and completed for instant `template - first_run`).
    Returns the rows inserted."""
    parameters = _run_parameters(instants, first_run, seqs, template)
    async with server.database.transaction("generate run records") as conn:
        cursor = await conn.execute(_runs_sql("wf_runs"), parameters)
        return int(cursor.rowcount)


async def check_runs(
    server: Any, instants: Sequence[datetime], first_run: int, seqs: range, *, template: int
) -> int:
    """Regenerate with `insert_runs`' SQL, into a temp table, the records of
    runs `seqs` the host wrote, and compare every column with them. Raises
    if any differs or is missing; returns the rows compared."""
    parameters = _run_parameters(instants, first_run, seqs, template)
    async with server.database.transaction("check generated run records") as conn:
        await conn.execute("CREATE TEMP TABLE bench_expected_runs (LIKE wf_runs) ON COMMIT DROP")
        await conn.execute(_runs_sql("bench_expected_runs"), parameters)
        cursor = await conn.execute(
            "SELECT count(*) FILTER (WHERE a.run_number IS NULL OR b.run_number IS NULL"
            "     OR (a.status, a.schedule_id, a.record)"
            "        IS DISTINCT FROM (b.status, b.schedule_id, b.record)),"
            "   count(*)"
            " FROM (SELECT * FROM wf_runs WHERE run_number BETWEEN %s AND %s) AS a"
            " FULL JOIN bench_expected_runs AS b ON a.run_number = b.run_number",
            (first_run + seqs.start, first_run + seqs.stop - 1),
        )
        row = await cursor.fetchone()
    assert row is not None
    differing, compared = int(row[0]), int(row[1])
    if differing or compared == 0:
        raise SystemExit(
            f"the generated run records differ from the host's in {differing} of"
            f" {compared} rows: not measuring"
        )
    return compared


async def round_trips(database: Any, samples: int = 500) -> dict[str, float]:
    """What talking to the server costs here: p50/p99 ms of `SELECT 1` on a
    connection of the store's (autocommit), and of a read transaction the way
    the stores open one (`Database.transaction`: pool checkout with its
    check, BEGIN, the query, COMMIT)."""
    select: list[float] = []
    transaction: list[float] = []
    conn = await database.connect(autocommit=True)
    try:
        for _ in range(samples):
            began = time.perf_counter()
            await conn.execute("SELECT 1")
            select.append(time.perf_counter() - began)
    finally:
        await conn.close()
    for _ in range(samples):
        began = time.perf_counter()
        async with database.transaction("round trip") as conn:
            await conn.execute("SELECT 1")
        transaction.append(time.perf_counter() - began)
    return {
        "select_p50_ms": 1000 * harness.percentile(select, 50),
        "select_p99_ms": 1000 * harness.percentile(select, 99),
        "transaction_p50_ms": 1000 * harness.percentile(transaction, 50),
        "transaction_p99_ms": 1000 * harness.percentile(transaction, 99),
    }


async def vacuum_analyze(server: Any) -> float:
    """VACUUM ANALYZE the whole database (as after a bulk load); seconds."""
    began = time.perf_counter()
    conn = await server.database.connect(autocommit=True)
    try:
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()
    return time.perf_counter() - began


@contextlib.contextmanager
def maybe_postgres(store: str) -> Iterator[BenchPostgres | None]:
    """The bench's PostgreSQL when `store` is postgres, else None."""
    if store != "postgres":
        yield None
        return
    with BenchPostgres() as postgres:
        yield postgres
