"""The scheduler on a real PostgreSQL database: what only a database store has.

Ownership held by the database (a second scheduler refused naming the holder,
a dead holder blocking no one, a deposed one fenced inside its transaction),
the unique key on (schedule, instant), damage named by table and row, and
the database going away under a running scheduler (stopped, restarted, its
sessions terminated): admissions stop, the API answers store_unavailable,
and once the database is back the scheduler resumes by itself, deciding what
it missed by each schedule's misfire policy and admitting nothing twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from core.errors import SchedulerUnavailable, StoreFenced, StoreUnavailable
from shell import ManualClock, SchedulerServiceConfig, build_scheduler_service
from shell.durable import CrashAt, SimulatedCrash, set_fault_injector
from shell.pg.database import Database
from shell.pg.health import StoreWatch
from shell.pg.migrations import LATEST_VERSION
from tests.pgserver import PostgresServer
from tests.reliability.world import World

from .conftest import CONSTANT_PLAN, GATE_PLAN, START, Harness


def hour(h: int, minute: int = 0) -> datetime:
    return START.replace(hour=h, minute=minute)


def _dbname(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


class Sql:
    """Direct reads and writes of the test's database, as an operator's psql."""

    def __init__(self, server: PostgresServer, url: str) -> None:
        self.server = server
        self.dbname = _dbname(url)

    def rows(self, query: str, params: tuple[Any, ...] | None = None) -> list[tuple[Any, ...]]:
        return self.server.query(query, params, dbname=self.dbname)

    def run(self, query: str, params: tuple[Any, ...] | None = None) -> None:
        self.server.execute(query, params, dbname=self.dbname)


@pytest.fixture
async def pg(tmp_path: Path, pg_url: str) -> AsyncIterator[Harness]:
    h = Harness(tmp_path / "store", ManualClock(START), store_url=pg_url)
    yield h
    await h.shutdown()


@pytest.fixture
def sql(pg_server: PostgresServer, pg_url: str) -> Sql:
    return Sql(pg_server, pg_url)


async def _hourly(harness: Harness, schedule_id: str = "hourly", **options: Any) -> None:
    await harness.deploy("report.default", CONSTANT_PLAN)
    await harness.schedules.create_schedule(
        schedule_id=schedule_id,
        deployment_id="report.default",
        trigger={"kind": "cron", "expression": "0 * * * *"},
        inputs={"when": {"$bind": "occurrence.instant"}},
        **options,
    )


async def test_a_second_scheduler_on_the_database_is_refused_naming_the_holder(
    pg: Harness, pg_url: str
) -> None:
    await pg.boot()
    other = Database(pg_url)
    await other.open()
    try:
        from shell.pg.ownership import PgOwnership

        with pytest.raises(SchedulerUnavailable) as refused:
            await PgOwnership(other).acquire()
        holder = refused.value.data["holder"]
        assert holder["pid"] > 0 and holder["host"] and holder["since"]
        assert f"owned by pid {holder['pid']}" in refused.value.message
        assert "stop it first" in refused.value.message
    finally:
        await other.close()


async def test_a_holder_whose_session_died_blocks_no_one(pg: Harness, sql: Sql) -> None:
    await pg.boot()
    await _hourly(pg)
    await World.abandon(pg)  # type: ignore[arg-type]  # the process dies: its session ends
    await pg.boot()
    assert pg.service is not None and pg.service.running
    [(epoch,)] = sql.rows("SELECT epoch FROM wf_scheduler_owner")
    assert epoch == 2  # every taking is a new epoch


def _taken_over(sql: Sql, *, for_s: int = 3600) -> None:
    """What another scheduler's takeover writes: the next epoch, its lease."""
    sql.run(
        "UPDATE wf_scheduler_owner SET epoch = epoch + 1, lease_until = now() + %s *"
        ' interval \'1 second\', holder = \'{"server_id": "elsewhere", "pid": 1,'
        ' "host": "other", "since": "2026-03-02T10:00:00Z"}\'',
        (for_s,),
    )


@pytest.mark.expected_errors
async def test_a_deposed_leader_admits_nothing_and_leads_again_once_the_lease_is_free(
    pg: Harness, sql: Sql
) -> None:
    await pg.boot()
    await _hourly(pg)
    await pg.at(hour(10))
    assert pg.service is not None and pg.service.role == "leader"
    before = sql.rows("SELECT count(*), max(seq) FROM wf_occurrences")
    _taken_over(sql)
    await pg.at(hour(11))
    await pg.at(hour(12))
    assert sql.rows("SELECT count(*), max(seq) FROM wf_occurrences") == before
    assert pg.service.role == "standby"
    assert pg.service.leadership["server_id"] == "elsewhere"
    # Any server takes schedule changes, leader or not.
    changed = await pg.schedules.update_schedule(
        schedule_id="hourly", expected_revision=1, lateness_allowance_s=120
    )
    assert changed["revision"] == 2
    # The other leader is gone: its lease lapses, this one takes over and
    # decides what it missed by the schedule's misfire policy.
    sql.run("UPDATE wf_scheduler_owner SET lease_until = now() - interval '1 second'")
    await pg.at(hour(12, 30))
    await pg.at(hour(12, 31))
    assert pg.service.role == "leader"
    [(epoch,)] = sql.rows("SELECT epoch FROM wf_scheduler_owner")
    assert epoch == 3 and pg.service.leadership["epoch"] == 3
    assert await pg.statuses("hourly") == [("10:00", "completed"), ("12:00", "skipped-misfire")]
    [missed] = [r for r in await pg.occurrences("hourly") if r["status"] == "skipped-misfire"]
    assert (missed["count"], missed["first_instant"]) == (2, "2026-03-02T11:00:00Z")
    await pg.at(hour(13))
    assert (await pg.statuses("hourly"))[-1] == ("13:00", "completed")


# A lease short enough to lapse within a test; a loop that never looks on its
# own (the manual clock stands still): what health says between two rounds.
_QUICK_LEASE = {"lease_s": 1.0, "renew_s": 0.2}
_NO_POLL = {"poll_interval_s": 3600}


async def _role_becomes(harness: Harness, role: str, timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while harness.service is None or harness.service.role != role:
        assert loop.time() < deadline, f"still {harness.service and harness.service.role}"
        await asyncio.sleep(0.02)


@pytest.mark.expected_errors
async def test_a_leader_taken_over_between_rounds_stops_saying_it_leads_at_once(
    tmp_path: Path, pg_url: str, sql: Sql
) -> None:
    """Health tells the truth before the loop's next round: once the renewal
    finds the lease taken, the server says `standby`, not `leader` beside
    the server that leads now."""
    harness = Harness(
        tmp_path / "store", ManualClock(START), store_url=pg_url, pg_options=_QUICK_LEASE
    )
    try:
        await harness.boot(**_NO_POLL)
        assert harness.service is not None and harness.service.role == "leader"
        _taken_over(sql)
        await _role_becomes(harness, "standby")
        assert harness.service.leadership["epoch"] == 1  # as it last knew: no round since
    finally:
        await harness.shutdown()


@pytest.mark.expected_errors
async def test_a_leader_whose_renewals_stall_says_standby_before_its_lease_can_lapse(
    tmp_path: Path, pg_url: str
) -> None:
    """Renewals that stop landing (a database away, a starved task): the
    server stops saying it leads once its last renewal is no longer trusted,
    before the database's lease lapses and a standby may take over."""
    harness = Harness(
        tmp_path / "store", ManualClock(START), store_url=pg_url, pg_options=_QUICK_LEASE
    )
    try:
        await harness.boot(**_NO_POLL)
        service = harness.service
        assert service is not None and service.role == "leader"
        ownership = service._backend.ownership
        renewer = ownership._renewer  # type: ignore[attr-defined]
        renewer.cancel()
        await asyncio.gather(renewer, return_exceptions=True)
        # The trusted time is the lease less its margin: 0.5 s at most here.
        await _role_becomes(harness, "standby", timeout_s=5.0)
        assert ownership.safe_for() == 0  # type: ignore[attr-defined]
    finally:
        await harness.shutdown()


@pytest.mark.expected_errors
async def test_a_write_of_a_deposed_process_is_refused_inside_its_transaction(
    pg: Harness, sql: Sql
) -> None:
    await pg.boot()
    await _hourly(pg)
    assert pg.database is not None
    _taken_over(sql)
    # The lease check before it passes still (nothing renewed since); the
    # fence inside the transaction refuses all the same.
    backend = pg.schedules.backend
    with pytest.raises(StoreFenced, match="another scheduler took over"):
        await backend.definitions.set_blocked(
            "hourly", {"file": "f", "record": "r", "reason": "why"}, at=START
        )
    [(blocked,)] = sql.rows(
        "SELECT snapshot->'blocked' FROM wf_schedules WHERE schedule_id = 'hourly'"
    )
    assert blocked is None


async def test_the_database_refuses_a_second_decision_of_one_instant(pg: Harness, sql: Sql) -> None:
    await pg.boot()
    await _hourly(pg)
    await pg.at(hour(10))
    [(decision,)] = sql.rows("SELECT decision::text FROM wf_occurrences WHERE seq = 0")
    with pytest.raises(psycopg.errors.UniqueViolation, match="one_decision_per_instant"):
        sql.run(
            "INSERT INTO wf_occurrences (schedule_id, seq, instant, status, decision)"
            " VALUES ('hourly', 1, %s, 'skipped-overlap', %s::jsonb)",
            (hour(10), decision),
        )


@pytest.mark.expected_errors
async def test_a_damaged_row_blocks_its_schedule_naming_the_table_and_row(
    pg: Harness, sql: Sql
) -> None:
    await pg.boot()
    await _hourly(pg)
    await pg.at(hour(10))
    await pg.shutdown()
    sql.run(
        "UPDATE wf_occurrences SET decision = jsonb_set(decision, '{status}', '\"nonsense\"')"
        " WHERE schedule_id = 'hourly' AND seq = 0"
    )
    await pg.boot()
    got = await pg.schedules.get_schedule(schedule_id="hourly")
    assert got["state"] == "blocked"
    assert got["blocked"]["file"] == "table wf_occurrences"
    assert got["blocked"]["record"] == "schedule_id 'hourly', seq 0"
    assert "'nonsense' is not a decision status" in got["blocked"]["reason"]
    await pg.at(hour(11))
    assert sql.rows("SELECT count(*) FROM wf_occurrences") == [(1,)]


async def test_opening_a_database_that_is_down_says_so(pg_server: PostgresServer) -> None:
    url = f"postgresql://nobody:secret@127.0.0.1:{_closed_port()}/nowhere"
    with pytest.raises(StoreUnavailable) as refused:
        await Database(url, connect_timeout_s=1).open()
    assert "postgresql://nobody@127.0.0.1" in refused.value.message
    assert "secret" not in refused.value.message
    assert refused.value.data["operation"] == "connect"


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_schema_newer_than_the_code_is_refused(pg_url: str, sql: Sql) -> None:
    database = Database(pg_url)
    await database.open()
    await database.close()
    sql.run(
        "INSERT INTO wf_schema_version (version, name) VALUES (%s, 'from_the_future')",
        (LATEST_VERSION + 1,),
    )
    with pytest.raises(StoreUnavailable, match="newer than this wf-scheduler"):
        await Database(pg_url).open()


async def _until(condition: Any, what: str) -> None:
    """Let the loop run until `condition()` holds (the scheduler's rounds run
    on their own while the database is down: nothing to settle)."""
    # A call waits up to the pool's timeout (5 s) for a connection.
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


@pytest.mark.expected_errors
async def test_the_scheduler_resumes_by_itself_when_the_database_is_back(
    pg: Harness, pg_server: PostgresServer, sql: Sql
) -> None:
    await pg.boot()
    await _hourly(pg, "skipper")
    await _hourly(pg, "latest", misfire="latest")
    await pg.at(hour(10))
    assert pg.service is not None
    health = pg.api.store_health
    pg_server.stop()
    try:
        # The 11:00 round cannot commit: nothing is admitted.
        await pg.clock.set(hour(11))
        await _until(lambda: health.is_failing("scheduler"), "the round fails")
        with pytest.raises(StoreUnavailable):
            await pg.schedules.pause_schedule(schedule_id="skipper")
        report = health.report()
        assert report is not None and report["status"] == "unavailable"
        await pg.clock.set(hour(13))
    finally:
        pg_server.start()
    # Back at 13:30: no restart, the loop rebuilds from the store and decides
    # what it missed by each misfire policy.
    await pg.at(hour(13, 30))
    assert pg.service.running and not health.is_failing("scheduler")
    # The API's failure stays recorded until the store answers its watcher.
    assert pg.database is not None
    assert await StoreWatch(pg.database, health).check()
    assert health.report() is None
    assert await pg.statuses("skipper") == [("10:00", "completed"), ("13:00", "skipped-misfire")]
    [missed] = [r for r in await pg.occurrences("skipper") if r["status"] == "skipped-misfire"]
    assert (missed["count"], missed["first_instant"]) == (3, "2026-03-02T11:00:00Z")
    expected = [("10:00", "completed"), ("12:00", "coalesced"), ("13:00", "completed")]
    await pg.until_runs_ended("latest")
    assert await pg.statuses("latest") == expected
    assert sql.rows(
        "SELECT count(*) FROM wf_occurrences WHERE decision->>'status' = 'admitted'"
    ) == [(3,)]


@pytest.mark.expected_errors
async def test_terminated_sessions_are_replaced_and_nothing_is_admitted_twice(
    pg: Harness, pg_server: PostgresServer, sql: Sql
) -> None:
    await pg.boot()
    await _hourly(pg)
    await pg.at(hour(10))
    assert pg.service is not None
    pg_server.terminate_backends(dbname=sql.dbname)
    await pg.at(hour(11))
    await pg.at(hour(11, 1))
    await pg.at(hour(12))
    assert await pg.statuses("hourly") == [
        ("10:00", "completed"),
        ("11:00", "completed"),
        ("12:00", "completed"),
    ]


async def test_an_interrupted_run_keeps_its_overlap_across_a_restart(pg: Harness) -> None:
    await pg.boot()
    await pg.deploy("gate.default", GATE_PLAN)
    await pg.schedules.create_schedule(
        schedule_id="gated",
        deployment_id="gate.default",
        trigger={"kind": "cron", "expression": "0 * * * *"},
    )
    await pg.at(hour(10))
    await pg.shutdown()
    await pg.boot()
    await pg.at(hour(11))
    assert await pg.statuses("gated") == [("10:00", "interrupted"), ("11:00", "skipped-overlap")]


async def test_a_service_built_on_a_database_is_one_per_store(pg: Harness) -> None:
    await pg.boot()
    assert pg.server is not None
    second = build_scheduler_service(
        pg.server, SchedulerServiceConfig(enabled=True), clock=pg.clock
    )
    with pytest.raises(SchedulerUnavailable, match="owned by pid"):
        await second.start()


async def test_an_admission_and_its_run_record_commit_together(pg: Harness, sql: Sql) -> None:
    await pg.boot()
    await _hourly(pg)
    assert pg.service is not None
    await pg.service.settle()  # its creation consumed, its runtime record written
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: None)
    previous = set_fault_injector(CrashAt("after:commit", occurrence=1))
    try:
        # The process dies the moment the round's transaction committed:
        # before any run is created or launched after it.
        task = pg.service._task
        assert task is not None
        await pg.clock.set(hour(10))
        with pytest.raises(SimulatedCrash):
            await asyncio.wait_for(task, timeout=30)
    finally:
        set_fault_injector(previous)
    await World.abandon(pg)  # type: ignore[arg-type]
    [(status, record_status)] = sql.rows(
        "SELECT o.status, r.status FROM wf_occurrences o"
        " JOIN wf_runs r ON r.record->>'run_id' = o.decision->>'run_id'"
    )
    assert (status, record_status) == ("admitted", "admitted")
    # The next start launches the admitted run: nothing happened before it.
    await pg.boot()
    await pg.at(hour(10, 1))
    assert await pg.statuses("hourly") == [("10:00", "completed")]


class _TerminateAt:
    """A fault injector that terminates the database's sessions once, at `point`."""

    def __init__(self, server: PostgresServer, dbname: str, point: str) -> None:
        self.server, self.dbname, self.point = server, dbname, point
        self.done = False

    def __call__(self, point: str) -> None:
        if point == self.point and not self.done:
            self.done = True
            self.server.terminate_backends(dbname=self.dbname)


@pytest.mark.expected_errors
async def test_sessions_terminated_mid_commit_lose_the_round_and_nothing_else(
    pg: Harness, pg_server: PostgresServer, sql: Sql
) -> None:
    await pg.boot()
    await _hourly(pg)
    assert pg.service is not None
    await pg.service.settle()
    injector = _TerminateAt(pg_server, sql.dbname, "commit:in-transaction")
    previous = set_fault_injector(injector)
    try:
        await pg.at(hour(10))
    finally:
        set_fault_injector(previous)
    assert injector.done
    await pg.at(hour(10).replace(second=30))
    # The round's transaction never committed; the rebuilt scheduler decided
    # 10:00 again, once, on time.
    assert await pg.statuses("hourly") == [("10:00", "completed")]
    assert sql.rows("SELECT count(*) FROM wf_runs") == [(1,)]
