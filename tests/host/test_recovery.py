"""Startup recovery of the run store (in-process; test_crash.py kills real processes)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from adapters.host import LocalStaticWorkflowServer
from core.errors import InvalidInput, InvalidState

from .conftest import APPROVAL_PLAN, GREETING_PLAN, Builder, deploy, sleep_plan

ABANDONED = (
    "abandoned: the process died while this run was executing; "
    "external effects may already have occurred"
)


def _record(root: Path, run_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / "runs" / f"{run_id}.json").read_text())
    return data


def _rewrite(root: Path, run_id: str, **changes: Any) -> None:
    path = root / "runs" / f"{run_id}.json"
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


async def _interrupted_sleeper(server: LocalStaticWorkflowServer) -> str:
    await deploy(server, sleep_plan(60, then_interrupt=True), "gate.default")
    run = await server.api.run_deployment("gate.default", {})
    assert run["status"] == "interrupted"
    run_id: str = run["run_id"]
    return run_id


async def test_dead_resume_is_failed_closed(build: Builder, tmp_path: Path) -> None:
    server = await _start_dead_resume(build)
    restarted = build()
    run = await restarted.api.inspect_run("run-000001")
    message = run["error"]["message"]
    assert run["status"] == "failed"
    assert message.startswith(
        "ambiguous resume: attempt 2 was marked but left no result; failed closed, not retried"
    )
    assert "external effects may already have occurred" in message
    assert run["error"]["kind"] == "ambiguous-resume"
    assert (run["attempt"], run["checkpoint"]["attempt"], run["checkpoint"]["by"]) == (
        2,
        2,
        "recovery",
    )
    assert restarted.recovery_report == [
        {
            "run_id": "run-000001",
            "file": str(tmp_path / "runs" / "run-000001.json"),
            "finding": "ambiguous-resume",
            "reason": message,
        }
    ]
    with pytest.raises(InvalidState):
        await restarted.api.resume_run("run-000001", {})
    assert server is not restarted


async def _start_dead_resume(build: Builder) -> LocalStaticWorkflowServer:
    server = build()
    run_id = await _interrupted_sleeper(server)
    resuming = asyncio.create_task(server.api.resume_run(run_id, {}))
    await asyncio.sleep(0.01)
    mark = _record(server.store_root, run_id)
    assert (mark["status"], mark["attempt"], mark["executing"]["kind"]) == ("running", 2, "resume")
    assert mark["checkpoint"]["attempt"] == 1  # the stale checkpoint of the interrupt
    await server.api.cancel_executing()
    await resuming
    return server


async def test_recovery_is_idempotent(build: Builder) -> None:
    await _start_dead_resume(build)
    assert [f["finding"] for f in build().recovery_report] == ["ambiguous-resume"]
    assert build().recovery_report == []


async def test_interrupted_run_stays_resumable_across_restarts(build: Builder) -> None:
    first = build()
    await deploy(first, APPROVAL_PLAN, "approval.default")
    run = await first.api.run_deployment("approval.default", {"item": "x"})
    second = build()
    assert second.recovery_report == []
    assert (await second.api.inspect_run(run["run_id"]))["status"] == "interrupted"
    done = await second.api.resume_run(run["run_id"], {"approved": True})
    assert (done["status"], done["attempt"]) == ("completed", 2)


async def test_admitted_run_stays_admitted_and_launchable(build: Builder) -> None:
    first = build()
    await deploy(first, GREETING_PLAN, "hello.default")
    run_id = await first.api.admit_run("hello.default", {"name": "x"})
    second = build()
    assert second.recovery_report == []
    assert (await second.api.list_runs(status="admitted"))["runs"][0]["run_id"] == run_id
    await second.api.launch_run(run_id)
    assert await second.api.drain(5) == []
    assert (await second.api.inspect_run(run_id))["output"] == {"result": "hello x"}


async def test_terminal_runs_are_left_alone(build: Builder) -> None:
    first = build()
    await deploy(first, GREETING_PLAN, "hello.default")
    run = await first.api.run_deployment("hello.default", {"name": "x"})
    second = build()
    assert second.recovery_report == []
    assert await second.api.inspect_run(run["run_id"]) == run


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "Expecting property name"),
        ("[]", "invalid run record"),
        ('{"format": 1}', "invalid run record: run_id: Field required"),
        (b"\xff\xfe", "codec can't decode"),
    ],
)
async def test_unparseable_record_is_reported_not_dropped(
    build: Builder, tmp_path: Path, content: str | bytes, fragment: str
) -> None:
    first = build()
    await deploy(first, GREETING_PLAN, "hello.default")
    for _ in range(3):
        await first.api.admit_run("hello.default", {"name": "x"})
    path = tmp_path / "runs" / "run-000003.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())

    second = build()  # does not raise
    [finding] = second.recovery_report
    assert (finding["run_id"], finding["file"], finding["finding"]) == (
        "run-000003",
        str(path),
        "unreadable",
    )
    assert fragment in finding["reason"]
    assert path.read_bytes() == (content if isinstance(content, bytes) else content.encode())
    with pytest.raises(InvalidState, match="run run-000003 has a unreadable record"):
        await second.api.inspect_run("run-000003")
    assert [r["run_id"] for r in (await second.api.list_runs())["runs"]] == [
        "run-000001",
        "run-000002",
    ]
    # Its id is taken: the sequence goes on after it.
    assert (await second.api.run_deployment("hello.default", {"name": "y"}))["run_id"] == (
        "run-000004"
    )


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"checkpoint": None}, "status completed without a checkpoint"),
        ({"status": "running"}, "status running without an executing mark"),
        (
            {"status": "admitted"},
            "status admitted, but the record shows execution (attempt, mark, trace)",
        ),
        ({"status": "failed"}, "status failed contradicts its checkpoint status completed"),
        (
            {"attempt": 3},
            "status completed, but its checkpoint is from attempt 1 and the record is at attempt 3",
        ),
    ],
)
async def test_contradictory_record_is_reported(
    build: Builder, tmp_path: Path, changes: dict[str, Any], reason: str
) -> None:
    first = build()
    await deploy(first, GREETING_PLAN, "hello.default")
    await first.api.run_deployment("hello.default", {"name": "x"})
    _rewrite(tmp_path, "run-000001", **changes)
    second = build()
    assert [(f["finding"], f["reason"]) for f in second.recovery_report] == [
        ("contradictory", reason)
    ]
    with pytest.raises(InvalidState, match="contradictory record"):
        await second.api.inspect_run("run-000001")


async def test_record_of_another_run_and_stray_files(build: Builder, tmp_path: Path) -> None:
    first = build()
    await deploy(first, GREETING_PLAN, "hello.default")
    await first.api.run_deployment("hello.default", {"name": "x"})
    runs = tmp_path / "runs"
    (runs / "run-000007.json").write_bytes((runs / "run-000001.json").read_bytes())
    (runs / "notes.txt").write_text("hello")
    (runs / ".run-000001.json.x1y2.tmp").write_text("{torn")  # a crashed write: ignored
    second = build()
    assert [(f["run_id"], Path(f["file"]).name, f["finding"]) for f in second.recovery_report] == [
        (None, "notes.txt", "unreadable"),
        ("run-000007", "run-000007.json", "unreadable"),
        (None, "run_id", "counter-repaired"),
    ]
    assert "record names run 'run-000001'" in second.recovery_report[1]["reason"]
    assert (await second.api.inspect_run("run-000001"))["status"] == "completed"


# --- the counter ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{torn", "counter file unreadable"),
        ('{"last_issued": -4}', "counter file holds no valid last_issued"),
        ('{"last_issued": "5"}', "counter file holds no valid last_issued"),
        ('{"last_issued": 1}', "counter (1) is behind the highest run id on disk (2)"),
        (None, "counter file missing"),
    ],
)
async def test_damaged_counter_never_reuses_an_id(
    build: Builder, tmp_path: Path, content: str | None, reason: str
) -> None:
    first = build()
    await deploy(first, GREETING_PLAN, "hello.default")
    await first.api.run_deployment("hello.default", {"name": "x"})
    await first.api.run_deployment("hello.default", {"name": "x"})
    counter = tmp_path / "counters" / "run_id"
    if content is None:
        counter.unlink()
    else:
        counter.write_text(content)
    second = build()
    [finding] = second.recovery_report
    assert (finding["run_id"], finding["file"], finding["finding"]) == (
        None,
        str(counter),
        "counter-repaired",
    )
    assert finding["reason"].startswith(reason)
    assert finding["reason"].endswith("resumed after run id 2")
    assert json.loads(counter.read_text()) == {"last_issued": 2}
    assert await second.api.reserve_run_ids(1) == ["run-000003"]


async def test_fresh_store_has_an_empty_report(build: Builder, tmp_path: Path) -> None:
    server = build()
    assert server.recovery_report == [] and server.api.recovery_report is server.recovery_report
    assert server.store_root == tmp_path
    assert not (tmp_path / "counters").exists()  # nothing is written until needed


async def test_mark_kind_must_match_its_attempt(build: Builder, tmp_path: Path) -> None:
    server = build()
    await deploy(server, sleep_plan(60), "nap.default")
    run_id = await server.api.start_run("nap.default", {})
    await server.api.cancel_executing()
    record = _record(tmp_path, run_id)
    record["executing"]["kind"] = "resume"
    _rewrite(tmp_path, run_id, executing=record["executing"])
    assert [(f["finding"], f["reason"]) for f in build().recovery_report] == [
        ("contradictory", "a resume mark on attempt 1")
    ]


async def test_a_run_the_stopping_server_gave_up_on_says_so(build: Builder, tmp_path: Path) -> None:
    # A clean stop whose drain ran out of time: the server notes it on the
    # mark, then cancels the run. The next start must not claim a crash.
    server = build()
    await deploy(server, sleep_plan(60), "nap.default")
    run_id = await server.api.start_run("nap.default", {})
    assert "stopped" not in _record(tmp_path, run_id)["executing"]  # no note, no key
    assert await server.api.note_stopped("drain-expired", 30) == [run_id]
    note = _record(tmp_path, run_id)["executing"]["stopped"]
    assert (note["cause"], note["grace_s"]) == ("drain-expired", 30.0)
    assert (await server.api.inspect_run(run_id))["executing"]["stopped"] == note
    await server.api.cancel_executing()

    restarted = build()
    run = await restarted.api.inspect_run(run_id)
    assert (run["status"], run["error"]["kind"]) == ("failed", "abandoned")
    assert run["error"]["message"] == (
        "abandoned: the previous server stopped before this run finished (its drain grace"
        f" of 30 s ran out, at {note['at']}); external effects may already have occurred"
        " (attempt 1; last recorded position: node 'nap' after 0 step(s)); not retried"
    )
    assert [(f["finding"], f["reason"]) for f in restarted.recovery_report] == [
        ("abandoned", run["error"]["message"])
    ]


async def test_the_first_stop_note_stays(build: Builder, tmp_path: Path) -> None:
    server = build()
    await deploy(server, sleep_plan(60), "nap.default")
    run_id = await server.api.start_run("nap.default", {})
    assert await server.api.note_stopped("drain-expired", 0.5) == [run_id]
    first = _record(tmp_path, run_id)["executing"]["stopped"]
    assert await server.api.note_stopped("drain-cut", 0.5) == []
    assert _record(tmp_path, run_id)["executing"]["stopped"] == first
    await server.api.cancel_executing()
    message = (await build().api.inspect_run(run_id))["error"]["message"]
    assert "(its drain grace of 0.5 s ran out, at " in message


async def test_a_noted_run_that_still_finishes_keeps_no_note(build: Builder) -> None:
    server = build()
    await deploy(server, sleep_plan(0.2), "nap.default")
    run_id = await server.api.start_run("nap.default", {})
    assert await server.api.note_stopped("drain-expired", 0) == [run_id]
    assert await server.api.drain(5) == []
    run = await server.api.inspect_run(run_id)
    assert (run["status"], run["executing"]) == ("completed", None)
    assert build().recovery_report == []


async def test_a_resume_cut_by_a_stop_is_failed_closed_saying_so(build: Builder) -> None:
    server = build()
    run_id = await _interrupted_sleeper(server)
    resuming = asyncio.create_task(server.api.resume_run(run_id, {}))  # waits for the run
    await asyncio.sleep(0.01)
    assert await server.api.note_stopped("drain-cut", 30) == [run_id]
    await server.api.cancel_executing()
    await resuming
    run = await build().api.inspect_run(run_id)
    assert (run["status"], run["error"]["kind"]) == ("failed", "ambiguous-resume")
    message = run["error"]["message"]
    assert message.startswith(
        "ambiguous resume: attempt 2 was marked but left no result (the previous server"
        " stopped: a second SIGINT cut its drain short, at "
    )
    assert "failed closed, not retried; external effects may already have occurred" in message


@pytest.mark.parametrize(
    ("cause", "grace_s", "field"),
    [("tired", 30, "cause"), ("drain-cut", -1, "grace_s"), ("drain-cut", float("inf"), "grace_s")],
)
async def test_a_bad_stop_note_is_refused_and_writes_nothing(
    build: Builder, tmp_path: Path, cause: Any, grace_s: Any, field: str
) -> None:
    server = build()
    await deploy(server, sleep_plan(60), "nap.default")
    run_id = await server.api.start_run("nap.default", {})
    before = _record(tmp_path, run_id)
    with pytest.raises(InvalidInput) as refused:
        await server.api.note_stopped(cause, grace_s)
    assert [p.field for p in refused.value.problems] == [field]
    assert _record(tmp_path, run_id) == before
    await server.api.cancel_executing()
