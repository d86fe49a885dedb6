"""Batch run creation and launch, group-committed run writes, and the cached
admission checks (the host's side of a scheduler herd), on files and on
PostgreSQL (the `host` fixture); spare files and failing flushes on files
(`build`)."""

from __future__ import annotations

import asyncio
import errno
from typing import Any

import pytest

from adapters.host import LocalStaticWorkflowServer
from adapters.host.capabilities import CAPABILITIES
from adapters.host.schemas import validate_instance
from core.errors import AlreadyExists, InvalidInput, InvalidState, NotFound
from shell.durable import CrashAt, FailWrites, SimulatedCrash, set_fault_injector

from .conftest import GREETING_PLAN, Builder, HostStore, deploy, sleep_plan


def _origin(index: int) -> dict[str, Any]:
    return {
        "kind": "schedule",
        "schedule_id": f"s-{index}",
        "instant": "2026-03-02T09:00:00Z",
        "revision": 1,
    }


def _request(run_id: str, index: int, **changes: Any) -> dict[str, Any]:
    request = {
        "deployment_id": "demo.default",
        "inputs": {"name": f"n{index}"},
        "max_steps": None,
        "origin": _origin(index),
        "run_id": run_id,
    }
    request.update(changes)
    return request


def _stored(host: HostStore, run_id: str) -> dict[str, Any]:
    data: dict[str, Any] | None = host.record(run_id)
    assert data is not None, f"no record of {run_id}"
    return data


async def _admitted_runs(
    host: HostStore, count: int, plan: dict[str, Any] = GREETING_PLAN
) -> tuple[LocalStaticWorkflowServer, list[str]]:
    """A server with `count` runs of `plan` admitted (not launched); a plan
    other than the greeting takes no inputs."""
    server = await host.build()
    if plan is GREETING_PLAN:
        await deploy(server, plan)
        changes: dict[str, Any] = {}
    else:
        await deploy(server, plan, "nap.default")
        changes = {"deployment_id": "nap.default", "inputs": {}}
    ids = await server.api.reserve_run_ids(count)
    await server.api.admit_runs([_request(run_id, i, **changes) for i, run_id in enumerate(ids)])
    return server, ids


def count_batches(server: LocalStaticWorkflowServer, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every group of run records the server's run store writes
    together (one flush of files, one transaction)."""
    sizes: list[int] = []
    persistence = server.api._runs._persistence
    real = persistence.write_many

    async def spy(records: Any, **kwargs: Any) -> Any:
        sizes.append(len(records))
        return await real(records, **kwargs)

    monkeypatch.setattr(persistence, "write_many", spy)
    return sizes


async def test_admit_runs_writes_the_good_ones_in_one_batch(
    host: HostStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await host.build()
    batches = count_batches(server, monkeypatch)
    await deploy(server, GREETING_PLAN)
    ids = await server.api.reserve_run_ids(4)
    outcomes = await server.api.admit_runs(
        [
            _request(ids[0], 0),
            _request(ids[1], 1, deployment_id="nope.default"),
            _request(ids[2], 2, inputs={"name": 7}),
            _request(ids[3], 3),
            _request(ids[3], 4),
            _request("run-999999", 5),
            {**_request(ids[2], 6), "run_id": None},
        ]
    )
    assert outcomes[0] == ids[0] and outcomes[3] == ids[3]
    assert isinstance(outcomes[1], NotFound)
    assert isinstance(outcomes[2], InvalidInput)
    assert [p.field for p in outcomes[2].problems] == ["inputs.name"]
    assert isinstance(outcomes[4], AlreadyExists)
    assert isinstance(outcomes[5], InvalidInput)  # never reserved
    assert isinstance(outcomes[6], InvalidInput)  # a batch needs reserved ids
    assert batches == [2]
    for run_id, index in ((ids[0], 0), (ids[3], 3)):
        stored = _stored(host, run_id)
        assert stored["status"] == "admitted" and stored["origin"] == _origin(index)
        assert stored["snapshot"]["inputs"] == {"name": f"n{index}"}
    assert host.record(ids[1]) is None
    # What is stored is what a restarted host reads.
    again = await host.build()
    assert (await again.api.inspect_run(ids[0]))["status"] == "admitted"


async def test_runs_admitted_together_pin_each_its_own_snapshot(host: HostStore) -> None:
    # Runs of one deployment and inputs share one snapshot object in memory:
    # each must still pin its own step budget and inputs.
    server = await host.build()
    await deploy(server, GREETING_PLAN)
    ids = await server.api.reserve_run_ids(5)
    await server.api.admit_runs(
        [
            _request(ids[0], 0, inputs={"name": "same"}),
            _request(ids[1], 1, inputs={"name": "same"}),
            _request(ids[2], 2, inputs={"name": "same"}, max_steps=3),
            _request(ids[3], 3, inputs={"name": "other"}),
            _request(ids[4], 4, inputs={"name": "same"}),
        ]
    )
    snapshots = [_stored(host, run_id)["snapshot"] for run_id in ids]
    assert [s["inputs"]["name"] for s in snapshots] == ["same", "same", "same", "other", "same"]
    assert [s["max_steps"] for s in snapshots] == [None, None, 3, None, None]
    again = await host.build()
    for run_id, snapshot in zip(ids, snapshots, strict=True):
        assert (await again.api.inspect_run(run_id))["snapshot"] == snapshot


async def test_admit_runs_refuses_a_run_that_exists(host: HostStore) -> None:
    server = await host.build()
    await deploy(server, GREETING_PLAN)
    [run_id] = await server.api.reserve_run_ids(1)
    await server.api.admit_run("demo.default", {"name": "a"}, run_id=run_id)
    before = host.snapshot()
    [outcome] = await server.api.admit_runs([_request(run_id, 0)])
    assert isinstance(outcome, AlreadyExists)
    assert host.snapshot() == before


async def test_concurrent_admissions_of_one_reserved_id_admit_it_once(host: HostStore) -> None:
    server = await host.build()
    await deploy(server, GREETING_PLAN)
    ids = await server.api.reserve_run_ids(2)
    single, batch = await asyncio.gather(
        server.api.admit_run("demo.default", {"name": "single"}, run_id=ids[0]),
        server.api.admit_runs([_request(ids[0], 0), _request(ids[1], 1)]),
        return_exceptions=True,
    )
    # The one that took the run's lock first admitted it; the other one was
    # refused for that run (and the batch's other run was admitted).
    assert batch[1] == ids[1]
    outcomes = [single, batch[0]]
    assert sum(outcome == ids[0] for outcome in outcomes) == 1
    assert sum(isinstance(outcome, AlreadyExists) for outcome in outcomes) == 1
    stored = _stored(host, ids[0])["snapshot"]["inputs"]["name"]
    assert stored == ("single" if single == ids[0] else "n0")
    again = await host.build()
    assert again.recovery_report == []
    assert [r["run_id"] for r in (await again.api.list_runs())["runs"]] == ids


async def test_launch_runs_marks_then_runs_each_admitted_run(
    host: HostStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, ids = await _admitted_runs(host, 3)
    seen: list[tuple[str, str]] = []
    server.api.add_run_listener(lambda run_id, status, *_: seen.append((run_id, status)))
    batches = count_batches(server, monkeypatch)
    outcomes = await server.api.launch_runs([ids[0], ids[1], "run-424242", ids[0], ids[2]])
    assert outcomes[0] is None and outcomes[1] is None and outcomes[4] is None
    assert isinstance(outcomes[2], NotFound)
    assert isinstance(outcomes[3], InvalidState)  # named twice: launched once
    # Every executing mark was durable, in one batch, before any run stepped.
    assert batches[0] == 3
    assert seen[:3] == [(ids[0], "running"), (ids[1], "running"), (ids[2], "running")]
    assert await server.api.drain(5) == []
    for index, run_id in enumerate(ids):
        run = await server.api.inspect_run(run_id)
        assert run["status"] == "completed" and run["output"] == {"result": f"hello n{index}"}
    [again] = await server.api.launch_runs([ids[0]])
    assert isinstance(again, InvalidState)


# Greets, then punctuates the greeting: two steps, the second reaching the end.
TWO_STEP_PLAN: dict[str, Any] = {
    **GREETING_PLAN,
    "nodes": [
        *GREETING_PLAN["nodes"],
        {
            "id": "punctuate",
            "kind": "call",
            "capability": "wf.std.format",
            "params": {"template": "{state.greeting}!"},
            "state_key": "greeting",
        },
    ],
    "edges": {"greet": {"ok": "punctuate"}, "punctuate": {"ok": "__end__"}},
}


async def test_concurrent_steps_share_one_flush(
    host: HostStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await host.build()
    batches = count_batches(server, monkeypatch)
    await deploy(server, TWO_STEP_PLAN)
    ids = await server.api.reserve_run_ids(5)
    await server.api.admit_runs([_request(run_id, i) for i, run_id in enumerate(ids)])
    await server.api.launch_runs(ids)
    assert await server.api.drain(5) == []
    # Admissions, marks, then the five first steps together, then the five
    # stops together (each with the step that reached the end: one write).
    assert batches == [5, 5, 5, 5]
    for index, run_id in enumerate(ids):
        stored = _stored(host, run_id)
        assert stored["status"] == "completed"
        assert stored["output"] == {"result": f"hello n{index}!"}
        assert [entry["node"] for entry in stored["trace"]] == ["greet", "punctuate"]


async def test_a_writer_cancelled_before_the_flush_writes_nothing(host: HostStore) -> None:
    server = await host.build()
    await deploy(server, GREETING_PLAN)
    [run_id] = await server.api.reserve_run_ids(1)
    await server.api.admit_run("demo.default", {"name": "a"}, run_id=run_id)
    store = server.api._runs
    record = store.get(run_id).model_copy(update={"updated_at": "2026-03-02T10:00:00Z"})
    writer = asyncio.ensure_future(store.commit(record))
    await asyncio.sleep(0)
    writer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writer
    await asyncio.sleep(0)
    assert _stored(host, run_id)["updated_at"] != "2026-03-02T10:00:00Z"
    assert store.get(run_id).updated_at != "2026-03-02T10:00:00Z"


async def test_a_failed_flush_fails_every_writer_of_the_batch(
    build: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Files (a full disk); tests/host/test_postgres.py stops the database.
    server = build()
    await deploy(server, GREETING_PLAN)
    ids = await server.api.reserve_run_ids(2)
    await server.api.admit_runs([_request(run_id, i) for i, run_id in enumerate(ids)])
    store = server.api._runs
    records = [
        store.get(run_id).model_copy(update={"updated_at": "2026-03-02T10:00:00Z"})
        for run_id in ids
    ]

    # The disk is full when the batch's frames are written.
    set_fault_injector(FailWrites(errno.ENOSPC, points={"before:run:record"}))
    try:
        results = await asyncio.gather(*(store.commit(r) for r in records), return_exceptions=True)
    finally:
        set_fault_injector(None)
    assert all(isinstance(r, OSError) for r in results)
    assert all(store.get(run_id).updated_at != "2026-03-02T10:00:00Z" for run_id in ids)


async def test_a_crash_before_any_record_of_a_batch_leaves_none_written(
    host: HostStore,
) -> None:
    server = await host.build()
    await deploy(server, GREETING_PLAN)
    ids = await server.api.reserve_run_ids(3)
    crash = CrashAt("before:run:admitted", occurrence=3)
    previous = set_fault_injector(crash)
    try:
        with pytest.raises(SimulatedCrash):
            await server.api.admit_runs([_request(run_id, i) for i, run_id in enumerate(ids)])
    finally:
        set_fault_injector(previous)
    assert all(host.record(run_id) is None for run_id in ids)
    assert crash.seen.count("after:run:admitted") == 0


async def test_preflight_hands_out_a_copy(host: HostStore) -> None:
    server = await host.build()
    await deploy(server, GREETING_PLAN, inputs={"name": "x", "punct": "!"})
    merged = await server.api.preflight("demo.default", {})
    merged["name"] = "changed"
    assert (await server.api.get_deployment("demo.default"))["inputs"]["name"] == "x"


def test_a_schema_changed_in_place_is_not_checked_with_a_stale_validator() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert validate_instance("inputs", schema, {"n": 1}) == []
    schema["properties"]["n"]["type"] = "string"
    assert [p.field for p in validate_instance("inputs", schema, {"n": 1})] == ["inputs.n"]


async def test_a_sleeping_run_can_still_be_cancelled_after_a_batch_launch(
    host: HostStore,
) -> None:
    server, ids = await _admitted_runs(host, 2, sleep_plan(30))
    await server.api.launch_runs(ids)
    assert sorted(await server.api.cancel_executing()) == ids
    for run_id in ids:
        assert _stored(host, run_id)["status"] == "running"  # its mark stays


async def test_runs_launched_together_each_store_a_first_attempts_mark_of_one_instant(
    host: HostStore,
) -> None:
    server, ids = await _admitted_runs(host, 3, sleep_plan(30))
    await server.api.launch_runs(ids)
    marks = [_stored(host, run_id)["executing"] for run_id in ids]
    assert marks[0]["kind"] == "start" and marks[0]["attempt"] == 1
    assert marks == [marks[0]] * 3  # one instant for a group written together
    assert sorted(await server.api.cancel_executing()) == ids
    # The next start abandons each attempt from its own record.
    again = await host.build()
    for run_id in ids:
        run = await again.api.inspect_run(run_id)
        assert run["status"] != "running" and run["executing"] is None


async def test_runs_launched_together_that_stop_at_once_write_their_stops_together(
    host: HostStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, ids = await _admitted_runs(host, 4)
    told: list[tuple[str, str]] = []
    server.api.add_run_listener(lambda run_id, status, *_: told.append((run_id, status)))
    batches = count_batches(server, monkeypatch)
    await server.api.launch_runs(ids)
    assert await server.api.drain(5) == []
    # The marks, then the four stops in one write; each listener told after it.
    assert batches == [4, 4]
    assert told == [(run_id, "running") for run_id in ids] + [
        (run_id, "completed") for run_id in ids
    ]
    for index, run_id in enumerate(ids):
        stored = _stored(host, run_id)
        assert stored["status"] == "completed" and stored["executing"] is None
        assert stored["output"] == {"result": f"hello n{index}"}


async def test_a_run_that_waits_goes_on_in_a_task_of_its_own(host: HostStore) -> None:
    server = await host.build()
    await deploy(server, GREETING_PLAN)
    await deploy(server, sleep_plan(30), "nap.default")
    greeted = await server.api.reserve_run_ids(2)
    sleepers = await server.api.reserve_run_ids(2)
    await server.api.admit_runs(
        [_request(run_id, i) for i, run_id in enumerate(greeted)]
        + [
            _request(run_id, i, deployment_id="nap.default", inputs={})
            for i, run_id in enumerate(sleepers)
        ]
    )
    # Interleaved: each sleeper waits, and the run after it still goes on.
    await server.api.launch_runs([greeted[0], sleepers[0], greeted[1], sleepers[1]])
    assert sorted(await server.api.drain(0.5)) == sleepers
    assert [_stored(host, run_id)["status"] for run_id in greeted] == ["completed"] * 2
    executor = server.api._executor
    first, second = (executor.task(run_id) for run_id in sleepers)
    assert first is not None and second is not None and first is not second
    assert sorted(await server.api.cancel_executing()) == sleepers
    for run_id in sleepers:
        assert _stored(host, run_id)["status"] == "running"  # its mark stays


async def test_runs_that_wait_briefly_end_like_the_others(host: HostStore) -> None:
    server, ids = await _admitted_runs(host, 3, sleep_plan(0.01))
    await server.api.launch_runs(ids)
    assert await server.api.drain(5) == []
    for run_id in ids:
        stored = _stored(host, run_id)
        assert stored["status"] == "completed" and stored["output"] == {"slept": 0.01}


class _BrokenFor:
    """`wf.std.format`, except that it raises (a bug, not a CapabilityError)
    for one input name."""

    def __init__(self, real: Any, name: str) -> None:
        self._real = real
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._real, attribute)

    async def run(self, params: Any, scope: Any) -> Any:
        if scope.inputs.get("name") == self._name:
            raise RuntimeError("the capability has a bug")
        return await self._real.run(params, scope)


@pytest.mark.parametrize("together", [True, False], ids=["together", "alone"])
async def test_a_host_error_fails_its_run_and_no_other(
    host: HostStore, monkeypatch: pytest.MonkeyPatch, together: bool
) -> None:
    server, ids = await _admitted_runs(host, 3)
    monkeypatch.setitem(
        CAPABILITIES, "wf.std.format", _BrokenFor(CAPABILITIES["wf.std.format"], "n1")
    )
    if together:
        await server.api.launch_runs(ids)
    else:
        for run_id in ids:
            await server.api.launch_run(run_id)
    assert await server.api.drain(5) == []
    broken = _stored(host, ids[1])
    assert broken["status"] == "failed" and broken["executing"] is None
    assert broken["error"]["kind"] == "host"
    assert "RuntimeError: the capability has a bug" in broken["error"]["message"]
    assert [_stored(host, ids[i])["status"] for i in (0, 2)] == ["completed"] * 2
