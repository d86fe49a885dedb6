"""Runs: admission, execution, interrupts, budgets, inspection, listing, listeners,
on files and on PostgreSQL (the `host` and `server` fixtures)."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
from types import MappingProxyType
from typing import Any

import pytest

from adapters.host import LocalStaticWorkflowServer
from core.errors import AlreadyExists, InvalidInput, InvalidState, NotFound

from .conftest import (
    APPROVAL_PLAN,
    GREETING_PLAN,
    Builder,
    HostStore,
    chain_plan,
    deploy,
    sleep_plan,
)

SCHEDULE_ORIGIN = {
    "kind": "schedule",
    "schedule_id": "hello-once",
    "instant": "2026-03-02T09:00:00Z",
    "revision": 2,
}

Events = list[tuple[str, str, dict[str, Any] | None, str | None]]


def _listen(server: LocalStaticWorkflowServer) -> Events:
    events: Events = []
    server.api.add_run_listener(lambda *args: events.append(args))
    return events


async def test_manual_run_completes(server: LocalStaticWorkflowServer) -> None:
    await deploy(server, GREETING_PLAN, "hello.default", inputs={"name": "default"})
    run = await server.api.run_deployment("hello.default", {"name": "world"})
    assert run["run_id"] == "run-000001"
    assert run["status"] == "completed"
    assert run["origin"] == {"kind": "manual"}
    assert run["snapshot"] == {
        "deployment_id": "hello.default",
        "artifact_id": "hello",
        "artifact_version": 1,
        "inputs": {"name": "world"},
        "max_steps": None,
    }
    assert run["output"] == {"result": "hello world"}
    assert (run["attempt"], run["steps"], run["error"], run["executing"]) == (1, 1, None, None)
    assert run["checkpoint"] == {
        "attempt": 1,
        "status": "completed",
        "node": "__end__",
        "state": {"greeting": "hello world"},
        "steps": 1,
        "at": run["checkpoint"]["at"],
        "by": "engine",
    }
    assert [(t["step"], t["node"], t["outcome"]) for t in run["trace"]] == [(1, "greet", "ok")]
    assert run["trace"][0]["capability"] == "wf.std.format"
    assert run == await server.api.inspect_run("run-000001")


async def test_default_inputs_are_merged_under_run_inputs(
    server: LocalStaticWorkflowServer,
) -> None:
    await deploy(server, GREETING_PLAN, "hello.default", inputs={"name": "default", "punct": "!"})
    assert await server.api.preflight("hello.default", None) == {"name": "default", "punct": "!"}
    assert await server.api.preflight("hello.default", {"name": "x"}) == {"name": "x", "punct": "!"}
    run = await server.api.run_deployment("hello.default", {})
    assert run["output"] == {"result": "hello default"}
    assert run["snapshot"]["inputs"] == {"name": "default", "punct": "!"}


async def test_snapshot_is_pinned_at_admission(server: LocalStaticWorkflowServer) -> None:
    await deploy(server, GREETING_PLAN, "hello.default", inputs={"name": "first"})
    run_id = await server.api.admit_run("hello.default", {})
    changed = copy.deepcopy(GREETING_PLAN)
    changed["nodes"][0]["params"]["template"] = "bye {input.name}"
    await server.api.create_artifact_from_plan("hello", 2, changed)
    await server.api.save_deployment(
        {
            "deployment_id": "hello.default",
            "artifact_id": "hello",
            "artifact_version": 2,
            "inputs": {"name": "second"},
        }
    )
    await server.api.delete_deployment("hello.default")
    await server.api.launch_run(run_id)
    assert await server.api.drain(5) == []
    run = await server.api.inspect_run(run_id)
    assert (run["output"], run["snapshot"]["artifact_version"]) == ({"result": "hello first"}, 1)


# --- bad input: typed errors, nothing written ------------------------------------


async def test_unknown_deployment(host: HostStore, server: LocalStaticWorkflowServer) -> None:
    before = host.snapshot()
    for call in (
        server.api.preflight,
        server.api.admit_run,
        server.api.start_run,
        server.api.run_deployment,
    ):
        with pytest.raises(NotFound, match="deployment 'nope' not found"):
            await call("nope", {})
    assert host.snapshot() == before


@pytest.mark.parametrize(
    ("inputs", "problems"),
    [
        ({}, [("inputs.name", "is required")]),
        ({"name": 3}, [("inputs.name", "3 is not of type 'string'")]),
        (
            {"name": 3, "punct": []},
            [("inputs.name", "not of type"), ("inputs.punct", "not of type")],
        ),
        ([1], [("inputs", "must be an object")]),
        ({"name": float("nan")}, [("inputs.name", "is not JSON")]),
    ],
)
async def test_invalid_inputs_change_nothing(
    host: HostStore, server: LocalStaticWorkflowServer, inputs: Any, problems: list[tuple[str, str]]
) -> None:
    await deploy(server, GREETING_PLAN, "hello.default")
    before = host.snapshot()
    for call in (
        server.api.preflight,
        server.api.admit_run,
        server.api.start_run,
        server.api.run_deployment,
    ):
        with pytest.raises(InvalidInput) as caught:
            await call("hello.default", inputs)
        got = [(p.field, p.reason) for p in caught.value.problems]
        assert [f for f, _ in got] == [f for f, _ in problems]
        for (_, reason), (_, fragment) in zip(got, problems, strict=True):
            assert fragment in reason
    assert host.snapshot() == before
    # No id was burnt either: the next run is still the first.
    assert await server.api.admit_run("hello.default", {"name": "ok"}) == "run-000001"


async def test_every_admission_problem_in_one_error(server: LocalStaticWorkflowServer) -> None:
    await deploy(server, GREETING_PLAN, "hello.default")
    with pytest.raises(InvalidInput) as caught:
        await server.api.admit_run(
            "hello.default",
            {"name": 1},
            max_steps=0,
            origin={"kind": "schedule", "schedule_id": "", "instant": "2026-03-02T09:00:00+02:00"},
            run_id="run-1",
        )
    assert [p.field for p in caught.value.problems] == [
        "inputs.name",
        "max_steps",
        "origin.schedule_id",
        "origin.instant",
        "origin.revision",
        "run_id",
    ]


@pytest.mark.parametrize(
    ("origin", "fields"),
    [
        ("manual", ["origin"]),
        ({"kind": "cron"}, ["origin.kind"]),
        ({"kind": "manual", "by": "me"}, ["origin.by"]),
        ({**SCHEDULE_ORIGIN, "extra": 1}, ["origin.extra"]),
        ({**SCHEDULE_ORIGIN, "instant": "2026-03-02T09:00:00"}, ["origin.instant"]),
        ({**SCHEDULE_ORIGIN, "instant": "yesterday"}, ["origin.instant"]),
        ({**SCHEDULE_ORIGIN, "revision": True}, ["origin.revision"]),
        # An action of a type no set can hold was a TypeError, not a problem.
        ({**SCHEDULE_ORIGIN, "action": ["trigger"]}, ["origin.action"]),
        ({**SCHEDULE_ORIGIN, "action": {"kind": "trigger"}}, ["origin.action"]),
    ],
)
async def test_invalid_origin(
    server: LocalStaticWorkflowServer, origin: Any, fields: list[str]
) -> None:
    await deploy(server, GREETING_PLAN, "hello.default")
    with pytest.raises(InvalidInput) as caught:
        await server.api.admit_run("hello.default", {"name": "x"}, origin=origin)
    assert [p.field for p in caught.value.problems] == fields


async def test_unknown_and_malformed_run_ids(server: LocalStaticWorkflowServer) -> None:
    with pytest.raises(NotFound, match="run 'run-000009' not found"):
        await server.api.inspect_run("run-000009")
    with pytest.raises(NotFound):
        await server.api.resume_run("run-000009", {})
    with pytest.raises(NotFound):
        await server.api.launch_run("run-000009")
    for bad in ("run-9", "run-0000009", "../x", 7):
        with pytest.raises(InvalidInput) as caught:
            await server.api.inspect_run(bad)  # type: ignore[arg-type]
        assert [p.field for p in caught.value.problems] == ["run_id"]


# --- admission, reservation, launch ------------------------------------------------


async def test_admitted_run_is_inspected_without_invented_results(
    server: LocalStaticWorkflowServer,
) -> None:
    await deploy(server, GREETING_PLAN, "hello.default")
    run_id = await server.api.admit_run(
        "hello.default", {"name": "x"}, max_steps=4, origin=SCHEDULE_ORIGIN
    )
    run = await server.api.inspect_run(run_id)
    assert run == {
        "run_id": "run-000001",
        "status": "admitted",
        "origin": SCHEDULE_ORIGIN,
        "snapshot": {
            "deployment_id": "hello.default",
            "artifact_id": "hello",
            "artifact_version": 1,
            "inputs": {"name": "x"},
            "max_steps": 4,
        },
        "attempt": 0,
        "steps": 0,
        "executing": None,
        "checkpoint": None,
        "output": None,
        "error": None,
        "interrupt": None,
        "trace": [],
        "created_at": run["created_at"],
        "updated_at": run["created_at"],
    }


async def test_reserved_ids_and_admission_with_them(server: LocalStaticWorkflowServer) -> None:
    await deploy(server, GREETING_PLAN, "hello.default")
    assert await server.api.reserve_run_ids(3) == ["run-000001", "run-000002", "run-000003"]
    assert await server.api.admit_run("hello.default", {"name": "x"}, run_id="run-000002") == (
        "run-000002"
    )
    with pytest.raises(AlreadyExists, match="run run-000002 already exists"):
        await server.api.admit_run("hello.default", {"name": "x"}, run_id="run-000002")
    with pytest.raises(InvalidInput) as caught:
        await server.api.admit_run("hello.default", {"name": "x"}, run_id="run-000004")
    assert [(p.field, p.reason) for p in caught.value.problems] == [
        ("run_id", "run-000004 was not reserved")
    ]
    # Without a run id, admission takes the next fresh one (never a reserved one).
    assert await server.api.admit_run("hello.default", {"name": "x"}) == "run-000004"
    for bad in (0, -1, True, 1.5, 1001):
        with pytest.raises(InvalidInput):
            await server.api.reserve_run_ids(bad)  # type: ignore[arg-type]


async def test_reserving_a_batch_is_one_durable_write(
    build: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = build()  # files: counts their fsyncs
    assert await server.api.reserve_run_ids(1) == ["run-000001"]  # creates the directory
    fsyncs: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        fsyncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    ids = await server.api.reserve_run_ids(50)
    assert (ids[0], ids[-1], len(ids)) == ("run-000002", "run-000051", 50)
    assert len(fsyncs) == 2  # the counter file and its directory: one atomic write
    counter = json.loads((server.store_root / "counters" / "run_id").read_text())
    assert counter == {"last_issued": 51}


async def test_launch_only_an_admitted_run(server: LocalStaticWorkflowServer) -> None:
    await deploy(server, GREETING_PLAN, "hello.default")
    events = _listen(server)
    run_id = await server.api.admit_run("hello.default", {"name": "x"})
    assert events == []  # admission is not a status change
    await server.api.launch_run(run_id)
    with pytest.raises(InvalidState, match="run run-000001 is running; only an admitted run"):
        await server.api.launch_run(run_id)
    assert await server.api.drain(5) == []
    with pytest.raises(InvalidState, match="is completed"):
        await server.api.launch_run(run_id)
    assert [e[1] for e in events] == ["running", "completed"]


async def test_start_run_returns_at_once(
    host: HostStore, server: LocalStaticWorkflowServer
) -> None:
    await deploy(server, sleep_plan(0.05), "nap.default")
    run_id = await server.api.start_run("nap.default", {}, origin=SCHEDULE_ORIGIN)
    run = await server.api.inspect_run(run_id)
    assert run["status"] == "running"
    mark = {"attempt": 1, "kind": "start", "since": run["executing"]["since"]}
    if host.kind == "postgres":
        # Several servers may share a database: the mark names whose run it is.
        mark["server"] = server.database.server_id
    assert run["executing"] == mark
    assert server.api.executing_runs() == [run_id]
    # The executing mark is stored before the first step runs.
    stored = host.record(run_id)
    assert stored is not None
    assert stored["status"] == "running" and stored["executing"]["kind"] == "start"
    assert await server.api.drain(5) == []
    run = await server.api.inspect_run(run_id)
    assert (run["status"], run["output"], run["origin"]) == (
        "completed",
        {"slept": 0.05},
        SCHEDULE_ORIGIN,
    )


# --- interrupts -----------------------------------------------------------------------


async def test_interrupt_then_resume_then_completion(server: LocalStaticWorkflowServer) -> None:
    await deploy(server, APPROVAL_PLAN, "approval.default")
    events = _listen(server)
    run = await server.api.run_deployment("approval.default", {"item": "budget"})
    run_id = run["run_id"]
    assert run["status"] == "interrupted"
    assert run["interrupt"] == {
        "node": "approve",
        "prompt": "Approve the draft?",
        "resume_schema": APPROVAL_PLAN["nodes"][1]["resume_schema"],
    }
    assert run["checkpoint"]["attempt"] == 1
    assert run["checkpoint"]["node"] == "approve"
    assert run["checkpoint"]["state"] == {"draft": "approve budget?"}
    assert (run["output"], run["steps"]) == (None, 2)

    done = await server.api.resume_run(run_id, {"approved": True})
    assert done["status"] == "completed"
    assert done["output"] == {"summary": "approve budget? -> true", "approved": True}
    assert (done["attempt"], done["checkpoint"]["attempt"], done["steps"]) == (2, 2, 3)
    assert done["interrupt"] is None
    assert [(t["step"], t["attempt"], t["node"], t["outcome"]) for t in done["trace"]] == [
        (1, 1, "draft", "ok"),
        (2, 1, "approve", "interrupted"),
        (2, 2, "approve", "resumed"),
        (3, 2, "done", "ok"),
    ]
    assert [(e[0], e[1]) for e in events] == [
        (run_id, "running"),
        (run_id, "interrupted"),
        (run_id, "running"),
        (run_id, "completed"),
    ]
    with pytest.raises(InvalidState, match="is completed; only an interrupted run can be resumed"):
        await server.api.resume_run(run_id, {"approved": True})


async def test_interrupt_can_happen_again_after_a_resume(server: LocalStaticWorkflowServer) -> None:
    plan = copy.deepcopy(APPROVAL_PLAN)
    plan["edges"]["done"] = {"ok": "approve"}  # ask again, forever
    await deploy(server, plan, "loop.default")
    run = await server.api.run_deployment("loop.default", {"item": "x"})
    again = await server.api.resume_run(run["run_id"], {"approved": False})
    assert (again["status"], again["attempt"], again["checkpoint"]["attempt"]) == (
        "interrupted",
        2,
        2,
    )
    third = await server.api.resume_run(run["run_id"], {"approved": True})
    assert (third["status"], third["attempt"]) == ("interrupted", 3)


@pytest.mark.parametrize(
    ("payload", "fields"),
    [
        ({}, ["payload.approved"]),
        ({"approved": "yes"}, ["payload.approved"]),
        ({"approved": True, "note": 1}, ["payload"]),
        ([True], ["payload"]),
        ({"approved": float("nan")}, ["payload.approved"]),
    ],
)
async def test_invalid_resume_payload_changes_nothing(
    host: HostStore, server: LocalStaticWorkflowServer, payload: Any, fields: list[str]
) -> None:
    await deploy(server, APPROVAL_PLAN, "approval.default")
    run = await server.api.run_deployment("approval.default", {"item": "x"})
    before = host.snapshot()
    with pytest.raises(InvalidInput) as caught:
        await server.api.resume_run(run["run_id"], payload)
    assert [p.field for p in caught.value.problems] == fields
    assert host.snapshot() == before
    assert (await server.api.inspect_run(run["run_id"]))["status"] == "interrupted"


async def test_resume_of_a_run_that_is_not_interrupted(
    host: HostStore, server: LocalStaticWorkflowServer
) -> None:
    await deploy(server, GREETING_PLAN, "hello.default")
    admitted = await server.api.admit_run("hello.default", {"name": "x"})
    before = host.snapshot()
    with pytest.raises(InvalidState, match="run run-000001 is admitted"):
        await server.api.resume_run(admitted, {})
    assert host.snapshot() == before


async def test_concurrent_resumes_resume_once(server: LocalStaticWorkflowServer) -> None:
    await deploy(server, APPROVAL_PLAN, "approval.default")
    run = await server.api.run_deployment("approval.default", {"item": "x"})
    results = await asyncio.gather(
        server.api.resume_run(run["run_id"], {"approved": True}),
        server.api.resume_run(run["run_id"], {"approved": False}),
        return_exceptions=True,
    )
    assert isinstance(results[0], dict) and results[0]["status"] == "completed"
    assert isinstance(results[1], InvalidState)
    assert (await server.api.inspect_run(run["run_id"]))["attempt"] == 2


# --- failures -------------------------------------------------------------------------


def _failing_plan(*, handled: bool) -> dict[str, Any]:
    return {
        "name": "failing",
        "input_schema": {"type": "object"},
        "start": "boom",
        "nodes": [
            {
                "id": "boom",
                "kind": "call",
                "capability": "wf.std.fail",
                "params": {"message": "kaput"},
            },
            {
                "id": "recover",
                "kind": "call",
                "capability": "wf.std.format",
                "params": {"template": "recovered from {state.boom.error}"},
            },
        ],
        "edges": {"boom": {"error": "recover"}, "recover": {"ok": "__end__"}}
        if handled
        else {"boom": {}},
        "output": {"text": "state.recover"} if handled else {},
    }


async def test_unhandled_node_error_fails_the_run(server: LocalStaticWorkflowServer) -> None:
    plan = _failing_plan(handled=False)
    plan["nodes"].pop()
    await deploy(server, plan, "failing.default")
    events = _listen(server)
    run = await server.api.run_deployment("failing.default", {})
    assert run["status"] == "failed"
    assert run["error"] == {"kind": "node", "message": "kaput", "node": "boom"}
    assert run["checkpoint"]["status"] == "failed"
    assert [(t["node"], t["outcome"], t.get("message")) for t in run["trace"]] == [
        ("boom", "error", "kaput")
    ]
    assert events[-1] == (run["run_id"], "failed", {"kind": "manual"}, "kaput")


async def test_error_edge_handles_a_failure(server: LocalStaticWorkflowServer) -> None:
    await deploy(server, _failing_plan(handled=True), "failing.default")
    run = await server.api.run_deployment("failing.default", {})
    assert (run["status"], run["output"]) == ("completed", {"text": "recovered from kaput"})
    assert run["checkpoint"]["state"]["boom"] == {"error": "kaput"}


async def test_missing_output_value_fails_the_run(server: LocalStaticWorkflowServer) -> None:
    # The error edge ends the run, so the output path (into an error object) is never set.
    plan = {
        "name": "branchy",
        "input_schema": {"type": "object"},
        "start": "try",
        "nodes": [
            {"id": "try", "kind": "call", "capability": "wf.std.fail", "params": {"message": "no"}},
        ],
        "edges": {"try": {"error": "__end__"}},
        "output": {"x": "state.try.detail"},
    }
    await deploy(server, plan, "branchy.default")
    run = await server.api.run_deployment("branchy.default", {})
    assert run["status"] == "failed"
    assert run["error"] == {
        "kind": "output",
        "message": "output.x: state.try.detail is not set",
        "node": None,
    }
    assert run["checkpoint"]["node"] == "__end__"


async def test_output_schema_violation_fails_the_run(server: LocalStaticWorkflowServer) -> None:
    plan = copy.deepcopy(GREETING_PLAN)
    plan["output_schema"] = {"type": "object", "properties": {"result": {"maxLength": 3}}}
    await deploy(server, plan, "hello.default")
    run = await server.api.run_deployment("hello.default", {"name": "world"})
    assert run["status"] == "failed"
    assert run["output"] is None
    assert run["error"]["kind"] == "output"
    assert run["error"]["message"].startswith("output does not match output_schema: output.result")


# --- budgets --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_steps", "status", "steps", "node"),
    [
        (None, "completed", 5, "__end__"),
        (5, "completed", 5, "__end__"),
        (3, "exhausted", 3, "n3"),
        (1, "exhausted", 1, "n1"),
    ],
)
async def test_budget(
    server: LocalStaticWorkflowServer, max_steps: int | None, status: str, steps: int, node: str
) -> None:
    await deploy(server, chain_plan(5), "chain.default")
    events = _listen(server)
    run = await server.api.run_deployment("chain.default", {}, max_steps=max_steps)
    assert (run["status"], run["steps"], run["checkpoint"]["node"]) == (status, steps, node)
    assert len(run["trace"]) == steps
    if status == "exhausted":
        message = f"step budget exhausted: max_steps={max_steps} used up before node {node!r}"
        assert run["error"] == {"kind": "budget", "message": message, "node": node}
        assert run["output"] is None
        assert events[-1][1:] == ("exhausted", {"kind": "manual"}, message)
        with pytest.raises(InvalidState):
            await server.api.resume_run(run["run_id"], {})


async def test_resume_continues_the_same_budget(server: LocalStaticWorkflowServer) -> None:
    # draft(1) approve(2) | resume | done(3): a budget of 2 leaves nothing for `done`.
    await deploy(server, APPROVAL_PLAN, "approval.default")
    run = await server.api.run_deployment("approval.default", {"item": "x"}, max_steps=2)
    assert (run["status"], run["steps"]) == ("interrupted", 2)
    after = await server.api.resume_run(run["run_id"], {"approved": True})
    assert (after["status"], after["steps"], after["checkpoint"]["node"]) == (
        "exhausted",
        2,
        "done",
    )
    assert after["checkpoint"]["state"]["decision"] == {"approved": True}


async def test_a_loop_without_budget_is_stopped_by_a_budget(
    server: LocalStaticWorkflowServer,
) -> None:
    plan = _failing_plan(handled=False)
    plan["nodes"].pop()
    plan["edges"] = {"boom": {"error": "boom"}}
    await deploy(server, plan, "loop.default")
    run = await server.api.run_deployment("loop.default", {}, max_steps=20)
    assert (run["status"], run["steps"], len(run["trace"])) == ("exhausted", 20, 20)


@pytest.mark.parametrize("max_steps", [0, -3, True, 2.5, "10"])
async def test_invalid_budget(server: LocalStaticWorkflowServer, max_steps: Any) -> None:
    await deploy(server, GREETING_PLAN, "hello.default")
    with pytest.raises(InvalidInput) as caught:
        await server.api.run_deployment("hello.default", {"name": "x"}, max_steps=max_steps)
    assert [p.field for p in caught.value.problems] == ["max_steps"]


# --- listing --------------------------------------------------------------------------


async def test_list_runs_pages_oldest_first(server: LocalStaticWorkflowServer) -> None:
    await deploy(server, APPROVAL_PLAN, "approval.default")
    for _ in range(3):
        await server.api.run_deployment("approval.default", {"item": "x"})
    await server.api.admit_run("approval.default", {})
    await server.api.resume_run("run-000002", {"approved": True})

    page = await server.api.list_runs(limit=2)
    assert [r["run_id"] for r in page["runs"]] == ["run-000001", "run-000002"]
    assert "trace" not in page["runs"][0]
    page2 = await server.api.list_runs(cursor=page["next_cursor"], limit=2)
    assert [r["run_id"] for r in page2["runs"]] == ["run-000003", "run-000004"]
    assert page2["next_cursor"] is None
    everything = await server.api.list_runs()
    assert [(r["run_id"], r["status"]) for r in everything["runs"]] == [
        ("run-000001", "interrupted"),
        ("run-000002", "completed"),
        ("run-000003", "interrupted"),
        ("run-000004", "admitted"),
    ]
    interrupted = await server.api.list_runs(status="interrupted", limit=1)
    assert [r["run_id"] for r in interrupted["runs"]] == ["run-000001"]
    rest = await server.api.list_runs(
        status="interrupted", cursor=interrupted["next_cursor"], limit=1
    )
    assert ([r["run_id"] for r in rest["runs"]], rest["next_cursor"]) == (["run-000003"], None)
    assert (await server.api.list_runs(status="failed")) == {"runs": [], "next_cursor": None}


async def test_run_claims_page_every_run_as_list_runs_does(
    server: LocalStaticWorkflowServer,
) -> None:
    """What a scheduler's start reads of every run: the same runs, pages and
    cursors as `list_runs`, each as its id, status and origin alone."""
    await deploy(server, APPROVAL_PLAN, "approval.default")
    await server.api.run_deployment("approval.default", {"item": "x"})
    await server.api.admit_run("approval.default", {}, origin=SCHEDULE_ORIGIN)
    await server.api.run_deployment("approval.default", {"item": "y"})
    await server.api.resume_run("run-000001", {"approved": True})
    cursor: str | None = None
    pages = []
    while True:
        claims = await server.api.list_run_claims(cursor=cursor, limit=2)
        runs = await server.api.list_runs(cursor=cursor, limit=2)
        assert claims["next_cursor"] == runs["next_cursor"]
        assert claims["runs"] == [
            {"run_id": r["run_id"], "status": r["status"], "origin": r["origin"]}
            for r in runs["runs"]
        ]
        pages.append(claims["runs"])
        cursor = claims["next_cursor"]
        if cursor is None:
            break
    assert [[(r["run_id"], r["status"]) for r in page] for page in pages] == [
        [("run-000001", "completed"), ("run-000002", "admitted")],
        [("run-000003", "interrupted")],
    ]
    assert pages[0][1]["origin"] == SCHEDULE_ORIGIN


@pytest.mark.parametrize(
    ("kwargs", "fields"),
    [
        ({"limit": 0}, ["limit"]),
        ({"limit": 101}, ["limit"]),
        ({"limit": True}, ["limit"]),
        ({"status": "done"}, ["status"]),
        ({"status": "pending", "limit": "5"}, ["status", "limit"]),
        ({"cursor": "not-a-cursor"}, ["cursor"]),
        ({"cursor": ""}, ["cursor"]),
        ({"cursor": "eyJhZnRlciI6LTF9"}, ["cursor"]),  # {"after":-1}
    ],
)
async def test_list_runs_bad_arguments(
    server: LocalStaticWorkflowServer, kwargs: dict[str, Any], fields: list[str]
) -> None:
    with pytest.raises(InvalidInput) as caught:
        await server.api.list_runs(**kwargs)
    assert [p.field for p in caught.value.problems] == fields


# --- listeners, drain, cancellation -------------------------------------------------


async def test_a_failing_listener_does_not_break_the_run(
    server: LocalStaticWorkflowServer, caplog: pytest.LogCaptureFixture
) -> None:
    await deploy(server, GREETING_PLAN, "hello.default")

    def broken(*_: Any) -> None:
        raise RuntimeError("listener bug")

    server.api.add_run_listener(broken)
    events = _listen(server)
    with caplog.at_level(logging.ERROR, logger="adapters.host.executor"):
        run = await server.api.run_deployment("hello.default", {"name": "x"})
    assert run["status"] == "completed"
    assert [e[1] for e in events] == ["running", "completed"]
    assert sum("listener" in r.message for r in caplog.records) == 2


async def test_listener_sees_durable_status(
    host: HostStore, server: LocalStaticWorkflowServer
) -> None:
    await deploy(server, APPROVAL_PLAN, "approval.default")
    seen: list[tuple[str, str]] = []

    def check(run_id: str, status: str, *_: Any) -> None:
        stored = host.record(run_id)
        seen.append((status, "stored" if stored and stored["status"] == status else "missing"))

    server.api.add_run_listener(check)
    run = await server.api.run_deployment("approval.default", {"item": "x"})
    await server.api.resume_run(run["run_id"], {"approved": True})
    assert seen == [
        ("running", "stored"),
        ("interrupted", "stored"),
        ("running", "stored"),
        ("completed", "stored"),
    ]


async def test_drain(server: LocalStaticWorkflowServer) -> None:
    await deploy(server, sleep_plan(0.05), "nap.default")
    assert await server.api.drain(0) == []
    first = await server.api.start_run("nap.default", {})
    second = await server.api.start_run("nap.default", {})
    assert await server.api.drain(0) == [first, second]
    assert await server.api.drain(5) == []
    statuses = [(await server.api.inspect_run(r))["status"] for r in (first, second)]
    assert statuses == ["completed", "completed"]
    with pytest.raises(InvalidInput):
        await server.api.drain(-1)


async def test_cancelled_execution_writes_nothing_and_is_abandoned_on_restart(
    host: HostStore,
) -> None:
    server = await host.build()
    await deploy(server, sleep_plan(60), "nap.default")
    events = _listen(server)
    run_id = await server.api.start_run("nap.default", {})
    await asyncio.sleep(0.01)
    before = host.snapshot()
    assert await server.api.cancel_executing() == [run_id]
    assert host.snapshot() == before
    run = await server.api.inspect_run(run_id)
    assert (run["status"], run["executing"]["attempt"]) == ("running", 1)
    assert [e[1] for e in events] == ["running"]

    restarted = await host.build()
    run = await restarted.api.inspect_run(run_id)
    assert run["status"] == "failed"
    assert run["error"]["message"].startswith(
        "abandoned: the process died while this run was executing; "
        "external effects may already have occurred"
    )
    assert restarted.recovery_report == [
        {
            "run_id": run_id,
            "file": host.location(run_id),
            "finding": "abandoned",
            "reason": run["error"]["message"],
        }
    ]
    # Failed by the load, it is listed once, among the finished runs.
    listed = await restarted.api.list_runs(limit=10)
    assert [r["run_id"] for r in listed["runs"]] == [run_id]
    assert [r["run_id"] for r in (await restarted.api.list_runs(status="failed"))["runs"]] == [
        run_id
    ]


async def test_run_deployment_reports_a_run_cancelled_under_it(
    server: LocalStaticWorkflowServer,
) -> None:
    await deploy(server, sleep_plan(60), "nap.default")
    waiting = asyncio.create_task(server.api.run_deployment("nap.default", {}))
    # Executing (its mark written), however long the store takes to write it.
    for _ in range(1000):
        if server.api.executing_runs():
            break
        await asyncio.sleep(0.005)
    await server.api.cancel_executing()
    run = await waiting
    assert (run["status"], run["executing"]["kind"]) == ("running", "start")


async def test_a_caller_giving_up_does_not_stop_the_run(server: LocalStaticWorkflowServer) -> None:
    await deploy(server, sleep_plan(0.05), "nap.default")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(server.api.run_deployment("nap.default", {}), 0.01)
    assert await server.api.drain(5) == []
    assert (await server.api.inspect_run("run-000001"))["status"] == "completed"


async def test_a_caller_giving_up_between_admission_and_launch_does_not_strand_the_run(
    server: LocalStaticWorkflowServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    await deploy(server, GREETING_PLAN, "hello.default")
    executor = server.api._executor
    real_launch = executor.launch
    admitted, go_on, launched = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def launch_when_told(run_id: str) -> asyncio.Task[None]:
        admitted.set()
        await go_on.wait()
        task = await real_launch(run_id)
        launched.set()
        return task

    monkeypatch.setattr(executor, "launch", launch_when_told)
    caller = asyncio.create_task(server.api.run_deployment("hello.default", {"name": "x"}))
    await admitted.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    go_on.set()
    await asyncio.wait_for(launched.wait(), 5)
    assert await server.api.drain(5) == []
    assert (await server.api.inspect_run("run-000001"))["status"] == "completed"


async def test_run_ids_continue_after_restart(host: HostStore) -> None:
    first = await host.build()
    await deploy(first, GREETING_PLAN, "hello.default")
    await first.api.run_deployment("hello.default", {"name": "x"})
    await first.api.reserve_run_ids(2)  # reserved, never used: still never reused
    second = await host.build()
    run = await second.api.run_deployment("hello.default", {"name": "y"})
    assert run["run_id"] == "run-000004"
    assert [r["run_id"] for r in (await second.api.list_runs())["runs"]] == [
        "run-000001",
        "run-000004",
    ]


async def test_immutable_mappings_from_the_scheduler_are_accepted(
    server: LocalStaticWorkflowServer,
) -> None:
    await deploy(server, GREETING_PLAN, "hello.default")
    inputs = MappingProxyType({"name": "frozen"})
    origin = MappingProxyType(SCHEDULE_ORIGIN)
    assert await server.api.preflight("hello.default", inputs) == {"name": "frozen"}
    run_id = await server.api.admit_run("hello.default", inputs, origin=origin)
    run = await server.api.inspect_run(run_id)
    assert (run["snapshot"]["inputs"], run["origin"]) == ({"name": "frozen"}, SCHEDULE_ORIGIN)


async def test_listeners_cannot_change_the_stored_origin(
    server: LocalStaticWorkflowServer,
) -> None:
    await deploy(server, GREETING_PLAN, "hello.default")
    refused: list[str] = []

    def meddle(run_id: str, status: str, origin: Any, message: str | None) -> None:
        assert origin == SCHEDULE_ORIGIN
        try:
            origin["kind"] = "tampered"
        except TypeError:
            refused.append(status)

    server.api.add_run_listener(meddle)
    run_id = await server.api.start_run("hello.default", {"name": "x"}, origin=SCHEDULE_ORIGIN)
    assert await server.api.drain(float("inf")) == []
    assert refused == ["running", "completed"]
    assert (await server.api.inspect_run(run_id))["origin"] == SCHEDULE_ORIGIN


# One bad and one good value per format docs/plans.md says is asserted.
FORMAT_CASES = [
    ("date-time", "yesterday", "2026-03-02T09:00:00Z"),
    ("date", "2026-02-30", "2026-02-28"),
    ("time", "noon", "09:00:00+01:00"),
    ("email", "nobody", "ops@example.com"),
    ("idn-email", "nobody", "ops@example.com"),
    ("idn-hostname", "-bad-", "example.com"),
    ("ipv4", "300.1.1.1", "192.0.2.1"),
    ("ipv6", "::g", "2001:db8::1"),
    ("regex", "(", "^a+$"),
    ("uuid", "not-a-uuid", "4b6f3c1e-5d0a-4d8e-9a1b-2c3d4e5f6a7b"),
]


def test_the_asserted_formats_are_the_documented_ones() -> None:
    from adapters.host.schemas import ASSERTED_FORMATS

    assert sorted(ASSERTED_FORMATS) == sorted(name for name, _, _ in FORMAT_CASES)


@pytest.mark.parametrize(("name", "bad", "good"), FORMAT_CASES)
async def test_input_formats_are_asserted(
    host: HostStore, server: LocalStaticWorkflowServer, name: str, bad: str, good: str
) -> None:
    plan = copy.deepcopy(GREETING_PLAN)
    plan["input_schema"]["properties"]["when"] = {"type": "string", "format": name}
    await deploy(server, plan, "hello.default")
    before = host.snapshot()
    with pytest.raises(InvalidInput) as caught:
        await server.api.admit_run("hello.default", {"name": "x", "when": bad})
    assert [(p.field, p.reason) for p in caught.value.problems] == [
        ("inputs.when", f"{bad!r} is not a {name!r}")
    ]
    assert host.snapshot() == before
    assert await server.api.admit_run("hello.default", {"name": "x", "when": good})


async def test_a_drain_waits_for_a_run_whose_start_is_in_flight(
    server: LocalStaticWorkflowServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run admitted or being marked executing has no task yet; a drain that
    came then returned at once, and the run executed after it."""
    await deploy(server, GREETING_PLAN, "hello.default")
    runs = server.api._executor._store
    real_put = runs.put
    writing, go_on = asyncio.Event(), asyncio.Event()

    async def put_when_told(record: Any) -> None:
        writing.set()
        await go_on.wait()
        await real_put(record)

    monkeypatch.setattr(runs, "put", put_when_told)
    caller = asyncio.create_task(server.api.run_deployment("hello.default", {"name": "x"}))
    await writing.wait()  # the admission's write, in flight
    drained = asyncio.create_task(server.api.drain(5))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not drained.done()
    go_on.set()
    assert await drained == []
    assert (await server.api.inspect_run("run-000001"))["status"] == "completed"
    assert (await caller)["status"] == "completed"
