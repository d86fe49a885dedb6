"""Operators' rows (rules P and Q) in the PostgreSQL store, on a real database.

A history row names who opened its occurrence: the calendar, a trigger or a
backfill (`wf_occurrences.origin`, migration 0003). Calendar decisions
strictly increase, triggers among themselves; a backfill's row shares its
instant with the calendar's row of that instant. The same histories built in
the file store and in the database read back alike (pages, `occurrence_at`,
`backfill_decided`), a start finds the newest calendar decision and the
newest trigger behind operators' rows, a runtime record carries a backfill,
a database at migration 0002 with rows moves to 0003, and `wf-store copy`
carries the origin of every row.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from adapters.host.file_persistence import FileRunCounter
from adapters.store_copy import copy_store
from core.errors import InvalidInput, InvalidState, NotFound
from shell.definition_store import DefinitionStore
from shell.history_store import HistoryStore
from shell.pg.backend import PgBackend
from shell.pg.database import Database
from shell.pg.migrations import LATEST_VERSION, MIGRATIONS, schema_version
from shell.store_format import StoreDamaged
from shell.store_ports import ScheduleInputs
from tests.pgserver import PostgresServer

from .test_pg_store import Sql

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
DEFINITION: dict[str, Any] = {
    "deployment_id": "d.default",
    "trigger": {"kind": "cron", "expression": "0 * * * *"},
}
SNAPSHOT: dict[str, Any] = {
    "deployment_id": "d.default",
    "inputs": {"n": 1},
    "max_steps": None,
    "revision": 1,
}


def at(h: int, m: int = 0) -> datetime:
    return T0.replace(hour=h, minute=m)


@dataclass(frozen=True, slots=True)
class Decide:
    instant: datetime
    status: str
    origin: str | None = None
    recorded_at: datetime | None = None
    run_id: str | None = None
    reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def arguments(self) -> dict[str, Any]:
        arguments: dict[str, Any] = {
            "instant": self.instant,
            "status": self.status,
            "recorded_at": self.recorded_at or self.instant,
            "origin": self.origin,
            "reason": self.reason,
            **self.extra,
        }
        if self.status == "admitted":
            arguments.update(run_id=self.run_id, snapshot=SNAPSHOT, revision=1)
        return arguments


@dataclass(frozen=True, slots=True)
class Move:
    seq: int
    status: str
    recorded_at: datetime
    run_id: str | None = None


# A history with rows of every origin: calendar admissions (one completed,
# one still open), a span the calendar missed, a skip for overlap, a
# trigger, the backfill of the calendar's missed 09:00 and 10:00 (the first
# admitted and completed, the second refused by its preflight), and a
# calendar decision after the trigger whose instant is before the trigger's
# (the calendar's order ignores operators' rows).
HISTORY: tuple[Decide | Move, ...] = (
    Decide(at(8), "admitted", run_id="run-000001"),
    Move(0, "running", at(8, 0) + timedelta(seconds=1), "run-000001"),
    Move(0, "completed", at(8, 5)),
    Decide(
        at(9),
        "skipped-misfire",
        recorded_at=at(9, 1),
        extra={"count": 2, "first_instant": at(8, 30), "last_instant": at(9)},
    ),
    Decide(at(10), "skipped-overlap", reason="the run of 08:00 is active"),
    Decide(at(10, 50), "admitted", origin="trigger", run_id="run-000002"),
    Decide(at(9), "admitted", origin="backfill", recorded_at=at(10, 51), run_id="run-000003"),
    Move(4, "completed", at(10, 55)),
    Decide(at(10), "preflight-rejected", origin="backfill", recorded_at=at(10, 56)),
    Decide(at(10, 40), "skipped-misfire", recorded_at=at(10, 57)),
    Decide(at(11), "admitted", run_id="run-000004"),
    Decide(at(11, 20), "admitted", origin="trigger", run_id="run-000005"),
)


def _stage(history: Any, batch: Any, schedule_id: str, op: Decide | Move) -> int:
    if isinstance(op, Decide):
        seq: int = history.append_decision(schedule_id, batch=batch, **op.arguments())
        return seq
    moved: int = history.append_transition(
        schedule_id,
        seq=op.seq,
        status=op.status,
        recorded_at=op.recorded_at,
        run_id=op.run_id,
        batch=batch,
    )
    return moved


async def _open(url: str) -> tuple[Database, PgBackend]:
    database = Database(url, pool_size=2)
    await database.open()
    return database, PgBackend(database)


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PgBackend]:
    database, backend = await _open(pg_url)
    await backend.definitions.create("s", DEFINITION, at=T0)
    await backend.history.recover("s")
    try:
        yield backend
    finally:
        await database.close()


@pytest.fixture
def sql(pg_server: PostgresServer, pg_url: str) -> Sql:
    return Sql(pg_server, pg_url)


async def _write(backend: PgBackend, ops: Sequence[Decide | Move], schedule_id: str = "s") -> None:
    """Each op in its own round's transaction, as the scheduler writes them;
    a refused row drops its round, and the history is read again (as the
    scheduler rebuilds after a failed round)."""
    for op in ops:
        batch = backend.new_batch()
        try:
            _stage(backend.history, batch, schedule_id, op)
        except Exception:
            batch.abort()
            await backend.history.recover(schedule_id)
            raise
        await backend.commit(batch)


def _file_store(root: Path, ops: Sequence[Decide | Move], schedule_id: str = "s") -> HistoryStore:
    DefinitionStore(root).create(schedule_id, DEFINITION, at=T0)
    history = HistoryStore(root)
    history.recover(schedule_id)
    for op in ops:
        _stage(history, None, schedule_id, op)
    return history


async def _all_pages(history: Any, schedule_id: str, limit: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        page = history.page(schedule_id, limit=limit, cursor=cursor)
        if not isinstance(page, tuple):
            page = await page
        got, cursor = page
        rows.extend(got)
        if cursor is None:
            return rows


async def test_origin_rows_round_trip_through_every_page_as_in_the_file_store(
    store: PgBackend, tmp_path: Path
) -> None:
    await _write(store, HISTORY)
    files = _file_store(tmp_path, HISTORY)
    whole = await _all_pages(store.history, "s", 100)
    assert [(r["instant"][11:16], r["status"], r["origin"]) for r in whole] == [
        ("08:00", "completed", "schedule"),
        ("09:00", "skipped-misfire", "schedule"),
        ("10:00", "skipped-overlap", "schedule"),
        ("10:50", "admitted", "trigger"),
        ("09:00", "completed", "backfill"),
        ("10:00", "preflight-rejected", "backfill"),
        ("10:40", "skipped-misfire", "schedule"),
        ("11:00", "admitted", "schedule"),
        ("11:20", "admitted", "trigger"),
    ]
    assert whole == await _all_pages(files, "s", 100)
    # Every page boundary, including pages that start right after an
    # operator's row: the calendar's 10:40 follows 10:00, not the trigger's
    # 10:50 nor the backfills before it.
    for limit in range(1, len(whole) + 1):
        assert await _all_pages(store.history, "s", limit) == whole, limit


async def test_a_calendar_row_out_of_order_behind_operators_rows_is_damage(
    store: PgBackend, sql: Sql
) -> None:
    await _write(store, HISTORY)
    # The calendar's 10:40 (seq 6) made 09:30: not after the calendar's
    # 10:00 (seq 2), though after the backfills' 09:00 and 10:00 before it.
    sql.run(
        "UPDATE wf_occurrences SET instant = %s,"
        " decision = jsonb_set(decision, '{instant}', '\"2026-03-02T09:30:00Z\"')"
        " WHERE schedule_id = 's' AND seq = 6",
        (at(9, 30),),
    )
    with pytest.raises(StoreDamaged, match="not after the decision of seq 5"):
        await _all_pages(store.history, "s", 100)
    # A page that starts right after the backfill's row finds the calendar's
    # 10:00 behind it all the same.
    first, cursor = await store.history.page("s", limit=6)
    assert len(first) == 6 and cursor is not None
    with pytest.raises(StoreDamaged) as damaged:
        await store.history.page("s", limit=3, cursor=cursor)
    assert damaged.value.problem.record == "schedule_id 's', seq 6"


async def test_an_origin_column_that_contradicts_its_row_is_damage(
    store: PgBackend, sql: Sql
) -> None:
    await _write(store, HISTORY[:4])
    sql.run("UPDATE wf_occurrences SET origin = 'backfill' WHERE schedule_id = 's' AND seq = 1")
    with pytest.raises(StoreDamaged, match="origin column says 'backfill'"):
        await store.history.page("s", limit=10)


async def test_a_backfill_row_shares_its_instant_with_the_calendar_row(
    store: PgBackend, sql: Sql
) -> None:
    await _write(store, [Decide(at(9), "skipped-misfire")])
    await _write(store, [Decide(at(9), "admitted", origin="backfill", run_id="run-000001")])
    assert sql.rows(
        "SELECT seq, origin, status, decision->>'origin' FROM wf_occurrences"
        " WHERE schedule_id = 's' AND instant = %s ORDER BY seq",
        (at(9),),
    ) == [(0, "schedule", "skipped-misfire", None), (1, "backfill", "admitted", "backfill")]


async def test_two_calendar_rows_at_one_instant_are_still_refused(
    store: PgBackend, sql: Sql
) -> None:
    await _write(store, [Decide(at(9), "skipped-misfire")])
    # By the store, before anything is staged...
    with pytest.raises(InvalidState, match="not after the previous decision"):
        await _write(store, [Decide(at(9), "skipped-overlap")])
    # ...and by the database itself, whatever writes the row.
    [(decision,)] = sql.rows("SELECT decision::text FROM wf_occurrences WHERE seq = 0")
    with pytest.raises(psycopg.errors.UniqueViolation, match="one_decision_per_instant"):
        sql.run(
            "INSERT INTO wf_occurrences (schedule_id, seq, instant, status, decision)"
            " VALUES ('s', 1, %s, 'skipped-overlap', %s::jsonb)",
            (at(9), decision),
        )
    # Nor two backfills of one instant, nor a row of no known origin.
    await _write(store, [Decide(at(9), "preflight-rejected", origin="backfill")])
    [(backfill,)] = sql.rows("SELECT decision::text FROM wf_occurrences WHERE seq = 1")
    with pytest.raises(psycopg.errors.UniqueViolation, match="one_decision_per_instant"):
        sql.run(
            "INSERT INTO wf_occurrences (schedule_id, seq, instant, status, decision, origin)"
            " VALUES ('s', 2, %s, 'preflight-rejected', %s::jsonb, 'backfill')",
            (at(9), backfill),
        )
    with pytest.raises(psycopg.errors.CheckViolation, match="wf_occurrences_origin"):
        sql.run(
            "INSERT INTO wf_occurrences (schedule_id, seq, instant, status, decision, origin)"
            " VALUES ('s', 2, %s, 'skipped-misfire', %s::jsonb, 'manual')",
            (at(12), decision),
        )


async def test_a_start_finds_the_newest_calendar_decision_and_trigger_behind_operators_rows(
    store: PgBackend, pg_url: str
) -> None:
    await _write(store, HISTORY[:10])  # up to the calendar's 10:40 (seq 6)
    await _write(store, [Decide(at(10, 55), "skipped-misfire", origin="trigger")])
    await _write(store, [Decide(at(8, 30), "preflight-rejected", origin="backfill")])
    # A restart: a new process reads the store, by both recovery paths.
    database, restarted = await _open(pg_url)
    try:
        reader = restarted.recovery_reader(at_start=True)
        assert await reader.schedule_ids() == ["s"]
        inputs = await reader.read("s")
        assert isinstance(inputs, ScheduleInputs)
        at_start = inputs.recovered
        again = await restarted.history.recover("s")
        for recovered in (at_start, again):
            assert recovered.occurrences == 9
            assert recovered.problems == ()
            assert recovered.last_decided_instant == "2026-03-02T10:40:00Z"
            assert recovered.last_trigger_instant == "2026-03-02T10:55:00Z"
            assert [(o.seq, o.origin) for o in recovered.open_occurrences] == [(3, "trigger")]
        # The recovered order holds: a trigger must follow 10:55, a calendar
        # decision 10:40 (not the trigger's 10:55).
        with pytest.raises(InvalidState, match="not after the previous trigger"):
            await _write(
                restarted, [Decide(at(10, 55), "admitted", origin="trigger", run_id="run-8")]
            )
        with pytest.raises(InvalidState, match="not after the previous decision"):
            await _write(restarted, [Decide(at(10, 40), "skipped-misfire")])
        await _write(restarted, [Decide(at(10, 45), "skipped-misfire")])
        await _write(restarted, [Decide(at(11), "admitted", origin="trigger", run_id="run-9")])
        recovered = await restarted.history.recover("s")
        assert recovered.last_decided_instant == "2026-03-02T10:45:00Z"
        assert recovered.last_trigger_instant == "2026-03-02T11:00:00Z"
    finally:
        await database.close()


async def test_a_history_of_operators_rows_only_has_no_calendar_decision(
    store: PgBackend, pg_url: str
) -> None:
    await _write(store, [Decide(at(9), "admitted", origin="trigger", run_id="run-1")])
    database, restarted = await _open(pg_url)
    try:
        recovered = await restarted.history.recover("s")
        assert (recovered.last_decided_instant, recovered.last_trigger_instant) == (
            None,
            "2026-03-02T09:00:00Z",
        )
        await _write(restarted, [Decide(at(8), "skipped-misfire")])
        [trigger], cursor = await restarted.history.page("s", limit=1)
        assert trigger["origin"] == "trigger" and cursor is not None
        # The page after the trigger's row: no calendar decision before it.
        [calendar], _ = await restarted.history.page("s", limit=1, cursor=cursor)
        assert (calendar["instant"], calendar["origin"]) == ("2026-03-02T08:00:00Z", "schedule")
    finally:
        await database.close()


async def test_occurrence_at_finds_the_row_of_each_origin(store: PgBackend, tmp_path: Path) -> None:
    await _write(store, HISTORY)
    files = _file_store(tmp_path, HISTORY)
    cases = [
        (at(9), "schedule", ("skipped-misfire", 1)),
        (at(9), "backfill", ("completed", 4)),
        (at(10), "schedule", ("skipped-overlap", 2)),
        (at(10), "backfill", ("preflight-rejected", 5)),
        (at(10, 50), "trigger", ("admitted", 3)),
        (at(10, 50), "schedule", None),
        (at(9), "trigger", None),
        (at(11), "schedule", ("admitted", 7)),
        (at(12), "schedule", None),
    ]
    for instant, origin, expected in cases:
        found = await store.history.occurrence_at("s", instant, origin)
        assert (None if found is None else (found["status"], found["seq"])) == expected
        assert found == files.occurrence_at("s", instant, origin), (instant, origin)
        assert found is None or found["origin"] == origin
    assert await store.history.occurrence_at("s", at(9)) == files.occurrence_at("s", at(9))
    with pytest.raises(InvalidInput, match="origin"):
        await store.history.occurrence_at("s", at(9), "manual")
    with pytest.raises(NotFound):
        await store.history.occurrence_at("nope", at(9))


async def test_backfill_decided_is_the_file_stores_in_one_query(
    store: PgBackend, tmp_path: Path
) -> None:
    await _write(store, HISTORY)
    files = _file_store(tmp_path, HISTORY)
    ranges = [
        (at(8), at(12)),
        (at(8), at(11)),
        (at(8, 30), at(10)),
        (at(9), at(9, 1)),
        (at(10), at(11)),
        (at(10, 1), at(10, 59)),
        (at(12), at(13)),
    ]
    for start, end in ranges:
        got = await store.history.backfill_decided("s", start, end)
        assert got == files.backfill_decided("s", start, end), (start, end)
    # Admitted by the calendar (whatever the run became: 08:00 completed,
    # 11:00 still admitted) or decided by a backfill (09:00 admitted, 10:00
    # refused by its preflight); not the calendar's skips (10:40), nor
    # triggers (10:50).
    assert await store.history.backfill_decided("s", at(8), at(12)) == {
        at(8),
        at(9),
        at(10),
        at(11),
    }
    assert await store.history.backfill_decided("s", at(10, 1), at(11)) == frozenset()
    with pytest.raises(NotFound):
        await store.history.backfill_decided("nope", at(8), at(9))
    with pytest.raises(InvalidInput, match="start"):
        await store.history.backfill_decided("s", at(8).replace(tzinfo=None), at(9))


async def test_a_runtime_record_with_a_backfill_round_trips(store: PgBackend) -> None:
    backfill = {
        "start": "2026-03-02T08:00:00Z",
        "end": "2026-03-02T12:00:00Z",
        "overlap": "allow",
        "requested_at": "2026-03-02T10:50:00Z",
        "state": "running",
        "planned": 3,
        "admitted": 1,
        "remaining": ["2026-03-02T10:00:00Z", "2026-03-02T11:00:00Z"],
        "already_admitted": 1,
        "left_to_calendar": 0,
        "ended_at": None,
    }
    batch = store.new_batch()
    staged = store.runtime.stage(
        batch,
        "s",
        watermark=at(11),
        held=None,
        lifecycle_seq=1,
        written_at=at(11, 1),
        backfill=backfill,
    )
    await store.commit(batch)
    loaded = await store.runtime.load("s")
    assert loaded.problem is None and loaded.record == staged
    assert loaded.record["backfill"] == backfill
    # Without one, the record has none.
    batch = store.new_batch()
    store.runtime.stage(batch, "s", watermark=at(12), held=None, lifecycle_seq=1, written_at=at(12))
    await store.commit(batch)
    assert "backfill" not in (await store.runtime.load("s")).record  # type: ignore[operator]
    with pytest.raises(InvalidInput, match="backfill"):
        store.runtime.stage(
            store.new_batch(),
            "s",
            watermark=at(12),
            held=None,
            lifecycle_seq=1,
            written_at=at(12),
            backfill={**backfill, "remaining": "soon"},
        )


async def _at_version_2(url: str) -> None:
    """A database as a server of migration 0002 left it."""
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    try:
        await conn.execute(
            "CREATE TABLE wf_schema_version (version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for migration in MIGRATIONS[:2]:
            async with conn.transaction():
                await conn.execute(migration.sql.encode())
                await conn.execute(
                    "INSERT INTO wf_schema_version (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
        assert await schema_version(conn) == 2
    finally:
        await conn.close()


async def test_a_database_at_0002_with_rows_migrates_to_0003(
    pg_url: str, sql: Sql, tmp_path: Path
) -> None:
    assert LATEST_VERSION >= 3 and MIGRATIONS[2].name == "occurrence_origin"
    await _at_version_2(pg_url)
    # Rows a 0002 server wrote (the file store's rows: the same documents).
    calendar = HISTORY[:5]  # seq 0 to 2
    files = _file_store(tmp_path, calendar)
    lifecycle, loaded = DefinitionStore(tmp_path).read_for_recovery("s")
    assert loaded is not None
    sql.run(
        "INSERT INTO wf_schedules (schedule_id, lifecycle_seq, snapshot) VALUES ('s', %s, %s)",
        (loaded.lifecycle_seq, Jsonb(loaded.snapshot)),
    )
    for record in lifecycle:
        sql.run(
            "INSERT INTO wf_schedule_lifecycle (schedule_id, seq, record) VALUES ('s', %s, %s)",
            (record["seq"], Jsonb(record)),
        )
    for seq, decision, latest in files.rows("s"):
        sql.run(
            "INSERT INTO wf_occurrences (schedule_id, seq, instant, status, decision, latest)"
            " VALUES ('s', %s, %s, %s, %s, %s)",
            (
                seq,
                decision["instant"],
                (latest or decision)["status"],
                Jsonb(decision),
                None if latest is None else Jsonb(latest),
            ),
        )
    database, backend = await _open(pg_url)  # migrates
    try:
        assert sql.rows("SELECT max(version) FROM wf_schema_version") == [(LATEST_VERSION,)]
        assert sql.rows("SELECT origin, count(*) FROM wf_occurrences GROUP BY origin") == [
            ("schedule", 3)
        ]
        [(key,)] = sql.rows(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conname = 'wf_occurrences_one_decision_per_instant'"
        )
        assert key == "UNIQUE (schedule_id, origin, instant)"
        recovered = await backend.history.recover("s")
        assert (recovered.occurrences, recovered.last_decided_instant) == (
            3,
            "2026-03-02T10:00:00Z",
        )
        assert await _all_pages(backend.history, "s", 2) == await _all_pages(files, "s", 100)
        # The migrated history takes operators' rows.
        rest = HISTORY[5:]
        await _write(backend, rest)
        for op in rest:
            _stage(files, None, "s", op)
        assert await _all_pages(backend.history, "s", 3) == await _all_pages(files, "s", 100)
    finally:
        await database.close()


async def test_a_copy_of_a_file_store_keeps_the_origin_of_its_rows(
    tmp_path: Path, pg_url: str, sql: Sql
) -> None:
    root = tmp_path / "store"
    (root / "counters").mkdir(parents=True)
    # The run ids the history names were issued (no run records: the copy
    # checks each table by its own rules).
    await FileRunCounter(root / "counters" / "run_id").repair(5)
    files = _file_store(root, HISTORY)
    report = await copy_store(root, pg_url)
    assert report.tables["wf_occurrences"].rows == len(files.rows("s"))
    assert sql.rows(
        "SELECT origin, count(*) FROM wf_occurrences GROUP BY origin ORDER BY origin"
    ) == [("backfill", 2), ("schedule", 5), ("trigger", 2)]
    database, backend = await _open(pg_url)
    try:
        assert await _all_pages(backend.history, "s", 4) == await _all_pages(files, "s", 100)
        recovered = await backend.history.recover("s")
        assert recovered.last_decided_instant == "2026-03-02T11:00:00Z"
        assert recovered.last_trigger_instant == "2026-03-02T11:20:00Z"
        assert await backend.history.backfill_decided("s", at(8), at(12)) == (
            files.backfill_decided("s", at(8), at(12))
        )
    finally:
        await database.close()
