"""The host on PostgreSQL: what only a database does (a real server from
tests/pgserver.py, a fresh database per test, no mocks). The behaviour both
persistences share is tested on both by the other files of this directory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from adapters.host import LocalStaticWorkflowServer, build_postgres_workflow_server
from adapters.host.pg_persistence import PgRuns
from core.errors import (
    AlreadyExists,
    InvalidInput,
    InvalidState,
    NotFound,
    SchedulingError,
    StoreFenced,
    StoreUnavailable,
)
from shell.pg.backend import PgBackend
from shell.pg.database import Database
from shell.schedules_api import SchedulesApi
from tests.pgserver import PostgresServer

from .conftest import (
    APPROVAL_PLAN,
    GREETING_PLAN,
    HostStore,
    TickingClock,
    deploy,
    sleep_plan,
)

SCHEDULE_ORIGIN = {
    "kind": "schedule",
    "schedule_id": "hello-hourly",
    "instant": "2026-03-02T09:00:00Z",
    "revision": 1,
}


class Servers:
    """Servers on one database, each with a database object of its own (as
    separate processes would have), all closed at the end of the test."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.store = HostStore("postgres", root=None, url=url)  # type: ignore[arg-type]
        self._open: list[Database] = []

    async def database(self, **kwargs: Any) -> Database:
        database = Database(self.url, **kwargs)
        await database.open()
        self._open.append(database)
        return database

    async def build(
        self, database: Database | None = None, **kwargs: Any
    ) -> LocalStaticWorkflowServer:
        kwargs.setdefault("clock", TickingClock())
        return await build_postgres_workflow_server(database or await self.database(), **kwargs)

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            cursor = conn.execute(query.encode(), params)
            return cursor.fetchall() if cursor.description else []

    async def close(self) -> None:
        for database in self._open:
            await database.close()


@pytest.fixture
async def servers(pg_url: str) -> AsyncIterator[Servers]:
    opened = Servers(pg_url)
    try:
        yield opened
    finally:
        await opened.close()


# --- building -------------------------------------------------------------------------


async def test_the_server_on_postgres(servers: Servers) -> None:
    database = await servers.database()
    server = await build_postgres_workflow_server(database, clock=TickingClock())
    assert (server.store_root, server.database) == (None, database)
    assert server.api.schedules is None and server.recovery_report == []
    assert server.api.store_health.store_root is None  # no file to probe
    await server.close()
    assert not database.is_open


async def test_schedules_on_the_same_database(servers: Servers) -> None:
    database = await servers.database()
    server = await build_postgres_workflow_server(database, schedules=True)
    schedules = server.api.schedules
    assert isinstance(schedules, SchedulesApi) and isinstance(schedules.backend, PgBackend)
    assert schedules.backend.database is database
    assert schedules.store_health is server.api.store_health
    assert await schedules.list_schedules() == []

    seen: list[LocalStaticWorkflowServer] = []
    other = await build_postgres_workflow_server(
        await servers.database(), schedules=True, schedules_factory=seen.append
    )
    assert seen == [other]


async def test_the_file_server_closes_nothing(tmp_path: Any) -> None:
    from adapters import build_local_static_workflow_server

    server = build_local_static_workflow_server(tmp_path)
    assert server.database is None
    await server.close()
    await deploy(server, GREETING_PLAN, "hello.default")  # still works


def _silenced(servers: Servers, server: LocalStaticWorkflowServer) -> None:
    """What the database sees of a server long silent (a process frozen or
    cut off: it need not be dead)."""
    assert server.database is not None
    servers.sql(
        "UPDATE wf_servers SET heartbeat_at = now() - interval '1 hour' WHERE server_id = %s",
        (server.database.server_id,),
    )


async def test_a_second_server_leaves_the_runs_of_a_live_one_alone(servers: Servers) -> None:
    first = await servers.build()
    await deploy(first, sleep_plan(30), "nap.default")
    running = await first.api.start_run("nap.default", {})
    assert first.database is not None
    first_id = first.database.server_id
    second = await servers.build()
    assert second.recovery_report == []
    seen = await second.api.inspect_run(running)
    assert (seen["status"], seen["executing"]["server"]) == ("running", first_id)
    # Still alive: a sweep touches nothing.
    assert await second.api.sweep_abandoned(loop_time=1e9) == []
    # Once silent past the silence, the sweep declares it gone and fails the
    # run, saying what may have happened; never retried.
    _silenced(servers, first)
    [finding] = await second.api.sweep_abandoned(loop_time=2e9)
    assert (finding["run_id"], finding["finding"]) == (running, "abandoned")
    failed = await second.api.inspect_run(running)
    assert failed["status"] == "failed" and failed["executing"] is None
    assert f"its server {first_id} was declared gone" in failed["error"]["message"]
    assert "external effects may already have occurred" in failed["error"]["message"]
    assert servers.sql(
        "SELECT gone_at IS NOT NULL FROM wf_servers WHERE server_id = %s", (first_id,)
    ) == [(True,)]
    await first.api.cancel_executing()


async def test_a_server_declared_gone_writes_nothing_to_its_runs(servers: Servers) -> None:
    gone = await servers.build()
    await deploy(gone, GREETING_PLAN, "hello.default")
    await deploy(gone, sleep_plan(30), "nap.default")
    admitted = await gone.api.admit_run("hello.default", {"name": "x"})
    running = await gone.api.start_run("nap.default", {})
    survivor = await servers.build()
    _silenced(servers, gone)
    await survivor.api.sweep_abandoned(loop_time=1e9)
    assert gone.shared is not None and not await gone.shared.registry.beat()
    before = servers.store.snapshot()
    api = gone.api
    # Its runs are the sweep's now: no launch, no stop note is written.
    with pytest.raises(StoreFenced, match="was declared gone"):
        await api.launch_run(admitted)
    assert await api.note_stopped("drain-expired", 1) == []
    assert servers.store.snapshot() == before
    assert (await survivor.api.inspect_run(running))["status"] == "failed"
    assert (await survivor.api.inspect_run(admitted))["status"] == "admitted"
    # What is not a run's is anyone's to write, as on any live server.
    await api.create_artifact_from_plan("late", 1, GREETING_PLAN)
    assert (await survivor.api.get_artifact("late"))["version"] == 1
    await api.cancel_executing()


async def test_a_resume_on_two_servers_at_once_executes_once(servers: Servers) -> None:
    first = await servers.build()
    second = await servers.build()
    await deploy(first, APPROVAL_PLAN, "approval.default")
    run_id = await first.api.start_run("approval.default", {"item": "x"})
    assert await first.api.drain(5) == []
    assert (await second.api.inspect_run(run_id))["status"] == "interrupted"
    outcomes = await asyncio.gather(
        first.api.resume_run(run_id, {"approved": True}),
        second.api.resume_run(run_id, {"approved": True}),
        return_exceptions=True,
    )
    done = [o for o in outcomes if isinstance(o, dict)]
    refused = [o for o in outcomes if isinstance(o, InvalidState)]
    assert len(done) == 1 and len(refused) == 1, outcomes
    assert done[0]["status"] == "completed" and done[0]["attempt"] == 2
    assert "changed by another server" in refused[0].message or "is running" in str(
        refused[0].message
    )
    assert (await first.api.inspect_run(run_id))["status"] == "completed"


# --- run ids ----------------------------------------------------------------------------


async def test_run_ids_come_from_the_sequence(servers: Servers) -> None:
    server = await servers.build()
    await deploy(server, GREETING_PLAN, "hello.default")
    assert await server.api.reserve_run_ids(3) == ["run-000001", "run-000002", "run-000003"]
    assert servers.sql("SELECT last_value, is_called FROM wf_run_number") == [(3, True)]
    assert await server.api.admit_run("hello.default", {"name": "x"}) == "run-000004"
    with pytest.raises(InvalidInput, match="run-000005 was not reserved"):
        await server.api.admit_run("hello.default", {"name": "x"}, run_id="run-000005")


async def test_run_ids_are_never_reused_across_restarts_and_a_database_crash(
    servers: Servers, pg_server: PostgresServer
) -> None:
    issued: list[str] = []
    first = await servers.build()
    await deploy(first, GREETING_PLAN, "hello.default")
    await deploy(first, sleep_plan(30), "nap.default")
    issued.append((await first.api.run_deployment("hello.default", {"name": "x"}))["run_id"])
    issued += await first.api.reserve_run_ids(2)  # reserved, never used: never reused
    await first.close()

    second = await servers.build()
    assert second.recovery_report == []
    issued.append(await second.api.admit_run("hello.default", {"name": "y"}))
    assert issued == ["run-000001", "run-000002", "run-000003", "run-000004"]
    issued += await second.api.reserve_run_ids(5)
    executing = await second.api.start_run("nap.default", {})
    issued.append(executing)

    # The database dies (SIGKILL of the postmaster) with a run executing and
    # ids handed out; it comes back by its own crash recovery.
    pg_server.kill()
    pg_server.start()
    await second.api.cancel_executing()  # the process that ran it is gone too
    _silenced(servers, second)  # (in this process, its silence must be made)

    third = await servers.build()
    assert [(f["run_id"], f["file"], f["finding"]) for f in third.recovery_report] == [
        (executing, f"table wf_runs, run_id {executing!r}", "abandoned")
    ]
    run = await third.api.inspect_run(executing)
    assert (run["status"], run["error"]["kind"], run["checkpoint"]["by"]) == (
        "failed",
        "abandoned",
        "recovery",
    )
    # Silent, not known dead (it shares this test's pid): what it says.
    assert second.database is not None
    assert run["error"]["message"].startswith(
        f"abandoned: its server {second.database.server_id} was declared gone from the store"
        " (it stopped proving it is alive) while this run was executing;"
        " external effects may already have occurred (attempt 1; "
    )
    assert servers.sql(
        "SELECT status, record->>'status' FROM wf_runs WHERE run_number = %s",
        (int(executing.removeprefix("run-")),),
    ) == [("failed", "failed")]
    fresh = [
        *await third.api.reserve_run_ids(3),
        await third.api.admit_run("hello.default", {"name": "z"}),
    ]
    highest = max(int(run_id.removeprefix("run-")) for run_id in issued)
    assert all(int(run_id.removeprefix("run-")) > highest for run_id in fresh), (issued, fresh)
    assert len(set(fresh)) == 4


async def test_a_sequence_behind_the_runs_is_repaired(servers: Servers) -> None:
    server = await servers.build()
    await deploy(server, GREETING_PLAN, "hello.default")
    for _ in range(3):
        await server.api.admit_run("hello.default", {"name": "x"})
    servers.sql("SELECT setval('wf_run_number', 1)")
    again = await servers.build()
    assert again.recovery_report == [
        {
            "run_id": None,
            "file": "sequence wf_run_number",
            "finding": "counter-repaired",
            "reason": "sequence wf_run_number (1) is behind the highest run id in table wf_runs"
            " (3); resumed after run id 3",
        }
    ]
    assert await again.api.reserve_run_ids(1) == ["run-000004"]
    assert (await servers.build()).recovery_report == []


# --- rows -------------------------------------------------------------------------------


async def test_rows_hold_the_documents_of_the_files(servers: Servers) -> None:
    server = await servers.build()
    artifact = await server.api.create_artifact_from_plan("hello", 1, GREETING_PLAN, title="Hi")
    deployment = (await deploy(server, GREETING_PLAN, "hello.default", artifact_id="hello2"),)
    del deployment
    manual = await server.api.run_deployment("hello.default", {"name": "x"})
    scheduled = await server.api.admit_run("hello.default", {"name": "y"}, origin=SCHEDULE_ORIGIN)
    [(record,)] = servers.sql(
        "SELECT record FROM wf_artifacts WHERE artifact_id = 'hello' AND version = 1"
    )
    assert record == {"format": 1, **artifact}
    [(record,)] = servers.sql("SELECT record FROM wf_deployments")
    assert record == {"format": 1, **await server.api.get_deployment("hello.default")}
    rows = servers.sql("SELECT run_number, status, schedule_id, record FROM wf_runs ORDER BY 1")
    assert [row[:3] for row in rows] == [(1, "completed", None), (2, "admitted", "hello-hourly")]
    assert rows[0][3] == server.api._runs.get(manual["run_id"]).to_json()
    assert rows[1][3]["origin"] == SCHEDULE_ORIGIN and rows[1][3]["run_id"] == scheduled
    # What the rows hold is what a restarted server serves.
    again = await servers.build()
    assert await again.api.inspect_run(manual["run_id"]) == manual
    assert await again.api.get_artifact("hello", 1) == artifact


async def test_unreadable_and_contradictory_rows_are_findings(servers: Servers) -> None:
    server = await servers.build()
    await deploy(server, GREETING_PLAN, "hello.default")
    await server.api.create_artifact_from_plan("hello", 2, GREETING_PLAN)
    await deploy(server, GREETING_PLAN, "other.default", artifact_id="hello3")
    for _ in range(3):
        await server.api.run_deployment("hello.default", {"name": "x"})
    servers.sql("UPDATE wf_artifacts SET record = '\"torn\"' WHERE version = 2")
    servers.sql(
        "UPDATE wf_deployments SET record = jsonb_set(record, '{deployment_id}', '\"x\"')"
        " WHERE deployment_id = 'other.default'"
    )
    servers.sql(
        "INSERT INTO wf_runs SELECT 7, status, schedule_id, record FROM wf_runs"
        " WHERE run_number = 1"
    )
    servers.sql("UPDATE wf_runs SET status = 'running' WHERE run_number = 2")
    servers.sql("UPDATE wf_runs SET schedule_id = 'ghost' WHERE run_number = 3")
    before = servers.sql("SELECT md5(string_agg(t::text, '|' ORDER BY run_number)) FROM wf_runs t")

    again = await servers.build()
    found = [(f["run_id"], f["file"], f["finding"], f["reason"]) for f in again.recovery_report]
    assert found == [
        (
            None,
            "table wf_artifacts, artifact_id 'hello', version 2",
            "unreadable-artifact",
            "not a JSON object",
        ),
        (
            None,
            "table wf_deployments, deployment_id 'other.default'",
            "unreadable-deployment",
            "deployment id does not match the row's key",
        ),
        (
            "run-000002",
            "table wf_runs, run_id 'run-000002'",
            "contradictory",
            "column status says 'running', the record says 'completed'",
        ),
        (
            "run-000003",
            "table wf_runs, run_id 'run-000003'",
            "contradictory",
            "column schedule_id says 'ghost', the record's origin says None",
        ),
        (
            "run-000007",
            "table wf_runs, run_id 'run-000007'",
            "unreadable",
            "record names run 'run-000001', row is run-000007",
        ),
        (
            None,
            "sequence wf_run_number",
            "counter-repaired",
            "sequence wf_run_number (3) is behind the highest run id in table wf_runs (7);"
            " resumed after run id 7",
        ),
    ]
    # Left in place, unusable, not listed; their ids are taken.
    assert (
        servers.sql("SELECT md5(string_agg(t::text, '|' ORDER BY run_number)) FROM wf_runs t")
        == before
    )
    with pytest.raises(InvalidState, match="contradictory record"):
        await again.api.inspect_run("run-000002")
    with pytest.raises(NotFound):
        await again.api.get_artifact("hello", 2)
    assert [r["run_id"] for r in (await again.api.list_runs())["runs"]] == ["run-000001"]
    assert await again.api.admit_run("hello.default", {"name": "z"}) == "run-000008"


# --- nothing written by a refused call ------------------------------------------------


async def test_a_refused_call_changes_no_row(servers: Servers) -> None:
    server = await servers.build()
    await deploy(server, GREETING_PLAN, "hello.default")
    await deploy(server, APPROVAL_PLAN, "approval.default")
    await deploy(server, sleep_plan(0.01, then_interrupt=True), "gate.default")
    interrupted = (await server.api.run_deployment("approval.default", {"item": "x"}))["run_id"]
    gated = (await server.api.run_deployment("gate.default", {}))["run_id"]
    admitted = await server.api.admit_run("hello.default", {"name": "x"})
    [reserved] = await server.api.reserve_run_ids(1)
    api = server.api
    refused: dict[str, Any] = {
        "artifact id": lambda: api.create_artifact_from_plan("bad id!", 1, GREETING_PLAN),
        "plan": lambda: api.create_artifact_from_plan("x", 1, {**GREETING_PLAN, "start": "no"}),
        "other content": lambda: api.create_artifact_from_plan("hello", 1, APPROVAL_PLAN),
        "field": lambda: api.save_deployment({"deployment_id": "d", "colour": "blue"}),
        "no artifact": lambda: api.save_deployment(
            {"deployment_id": "d", "artifact_id": "no", "artifact_version": 1}
        ),
        "NUL in a deployment": lambda: api.save_deployment(
            {
                "deployment_id": "d",
                "artifact_id": "hello",
                "artifact_version": 1,
                "inputs": {"name": "a\x00b"},
            }
        ),
        "unknown deployment": lambda: api.delete_deployment("nope"),
        "inputs": lambda: api.admit_run("hello.default", {"name": 3}),
        "NUL in inputs": lambda: api.admit_run("hello.default", {"name": "a\x00b"}),
        "NUL in a start": lambda: api.start_run("hello.default", {"name": "a\x00b"}),
        "unreserved": lambda: api.admit_run("hello.default", {}, run_id="run-000999"),
        "taken": lambda: api.admit_run("hello.default", {"name": "x"}, run_id=admitted),
        "launch": lambda: api.launch_run(interrupted),
        "payload": lambda: api.resume_run(interrupted, {"approved": "yes"}),
        "NUL in a payload": lambda: api.resume_run(gated, {"note": ["a\x00b"]}),
        "resume": lambda: api.resume_run(admitted, {}),
        "note": lambda: api.note_stopped("tired", 1),
        "count": lambda: api.reserve_run_ids(0),
        "cursor": lambda: api.list_runs(cursor="nope"),
    }
    before = servers.store.snapshot()
    for what, call in refused.items():
        with pytest.raises(SchedulingError) as caught:
            await call()
        assert servers.store.snapshot() == before, what
        if what.startswith("NUL"):
            assert isinstance(caught.value, InvalidInput), what
            [problem] = caught.value.problems
            assert "NUL character (U+0000), which PostgreSQL cannot store" in problem.reason
            assert problem.field in ("inputs.name", "payload.note.0"), what
    # In a batch, each request is refused alone, with what the single call
    # would have raised; nothing is written for it.
    outcomes = await api.admit_runs(
        [
            {"deployment_id": "hello.default", "inputs": {"name": "a\x00b"}, "run_id": reserved},
            {"deployment_id": "hello.default", "inputs": {"name": "x"}, "run_id": admitted},
        ]
    )
    assert [type(outcome) for outcome in outcomes] == [InvalidInput, AlreadyExists]
    assert isinstance(outcomes[0], InvalidInput)
    assert [(p.field, p.reason) for p in outcomes[0].problems] == [
        ("inputs.name", "holds a NUL character (U+0000), which PostgreSQL cannot store")
    ]
    assert servers.store.snapshot() == before


# --- a database that is down, a store that was taken over ----------------------------


async def test_a_database_that_is_down_is_store_unavailable_until_it_is_back(
    servers: Servers, pg_server: PostgresServer
) -> None:
    # A short wait for a connection: the calls below answer within it.
    database = await servers.database(connect_timeout_s=0.3)
    server = await servers.build(database)
    await deploy(server, APPROVAL_PLAN, "approval.default")
    interrupted = (await server.api.run_deployment("approval.default", {"item": "x"}))["run_id"]
    api = server.api
    pg_server.stop()
    try:
        before = [await api.list_artifacts(), await api.inspect_run(interrupted)]
        for call in (
            lambda: api.create_artifact_from_plan("later", 1, GREETING_PLAN),
            lambda: api.save_deployment(
                {"deployment_id": "later", "artifact_id": "approval", "artifact_version": 1}
            ),
            lambda: api.delete_deployment("approval.default"),
            lambda: api.start_run("approval.default", {}),
            lambda: api.run_deployment("approval.default", {}),
            lambda: api.resume_run(interrupted, {"approved": True}),
        ):
            with pytest.raises(StoreUnavailable) as caught:
                await call()
            assert caught.value.data["store"] == database.display
            assert "is unavailable" in caught.value.message
        # The scheduler's methods raise it too (the round fails and is retried).
        with pytest.raises(StoreUnavailable):
            await api.reserve_run_ids(2)
        report = api.store_health.report()
        assert report is not None and report["failing"] == ["api"]
        assert report["failures"] == 6
        # Reads answer from the caches; nothing changed in them.
        assert [await api.list_artifacts(), await api.inspect_run(interrupted)] == before
    finally:
        pg_server.start()
    # The same server, not rebuilt, works again: the pool replaces its connections.
    await api.create_artifact_from_plan("later", 1, GREETING_PLAN)
    assert api.store_health.report() is None
    done = await api.resume_run(interrupted, {"approved": True})
    assert (done["status"], done["attempt"]) == ("completed", 2)
    assert await api.reserve_run_ids(1) == ["run-000002"]
    again = await servers.build()
    assert again.recovery_report == []
    assert (await again.api.inspect_run(interrupted))["status"] == "completed"


async def test_a_group_of_run_records_is_one_transaction(servers: Servers) -> None:
    server = await servers.build()
    await deploy(server, GREETING_PLAN, "hello.default")
    ids = await server.api.reserve_run_ids(3)
    requests = [
        {"deployment_id": "hello.default", "inputs": {"name": f"n{i}"}, "run_id": run_id}
        for i, run_id in enumerate(ids)
    ]
    [(first_xid,)] = servers.sql("SELECT txid_current()")
    assert await server.api.admit_runs(requests) == ids
    # The three rows were inserted by one transaction.
    rows = servers.sql("SELECT DISTINCT xmin::text FROM wf_runs")
    assert len(rows) == 1 and int(rows[0][0]) > first_xid
    await server.api.launch_runs(ids)
    assert await server.api.drain(5) == []
    assert servers.sql("SELECT DISTINCT status FROM wf_runs") == [("completed",)]
    assert len(servers.sql("SELECT DISTINCT xmin::text FROM wf_runs")) == 1


async def test_a_run_written_behind_the_cache_is_refused_by_the_primary_key(
    servers: Servers,
) -> None:
    server = await servers.build()
    await deploy(server, GREETING_PLAN, "hello.default")
    [reserved] = await server.api.reserve_run_ids(1)
    # Another process (which one-server-per-store forbids) wrote it meanwhile.
    other = await servers.build()
    await other.api.admit_run("hello.default", {"name": "other"}, run_id=reserved)
    with pytest.raises(AlreadyExists, match=f"run {reserved} already exists"):
        await server.api.admit_run("hello.default", {"name": "mine"}, run_id=reserved)
    [(name,)] = servers.sql("SELECT record #>> '{snapshot,inputs,name}' FROM wf_runs")
    assert name == "other"


async def test_a_value_the_database_refuses_at_the_write_is_invalid_input(
    servers: Servers,
) -> None:
    # The stores check what PostgreSQL cannot hold before writing (above);
    # should a value still reach the database, its refusal is no driver error.
    server = await servers.build()
    await deploy(server, GREETING_PLAN, "hello.default")
    run_id = await server.api.admit_run("hello.default", {"name": "x"})
    record = server.api._runs.get(run_id)
    damaged = record.model_copy(
        update={"snapshot": record.snapshot.model_copy(update={"inputs": {"name": "\x00"}})}
    )
    before = servers.store.snapshot()
    persistence = PgRuns(server.database)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput) as caught:
        await persistence.write(damaged, created=False)
    assert [p.field for p in caught.value.problems] == ["record"]
    assert "PostgreSQL cannot store it: unsupported Unicode escape sequence" in str(caught.value)
    assert servers.store.snapshot() == before
