"""Startup recovery of the run store (in-process; test_crash.py kills real
processes), on files and on PostgreSQL (the `host` fixture); the tests of
files themselves (bytes that are no JSON, stray files, the counter file) use
`build`."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from adapters.host import LocalStaticWorkflowServer
from adapters.host.run_log import LOG_DIR
from core.errors import InvalidInput, InvalidState
from tests import run_log_files

from .conftest import APPROVAL_PLAN, GREETING_PLAN, Builder, HostStore, deploy, sleep_plan

ABANDONED = (
    "abandoned: the process died while this run was executing; "
    "external effects may already have occurred"
)


def _record(host: HostStore, run_id: str) -> dict[str, Any]:
    record = host.record(run_id)
    assert record is not None, f"no record of {run_id}"
    return record


async def _interrupted_sleeper(server: LocalStaticWorkflowServer) -> str:
    await deploy(server, sleep_plan(60, then_interrupt=True), "gate.default")
    run = await server.api.run_deployment("gate.default", {})
    assert run["status"] == "interrupted"
    run_id: str = run["run_id"]
    return run_id


async def test_dead_resume_is_failed_closed(host: HostStore) -> None:
    server = await _start_dead_resume(host)
    restarted = await host.build()
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
            "file": host.location("run-000001"),
            "finding": "ambiguous-resume",
            "reason": message,
        }
    ]
    with pytest.raises(InvalidState):
        await restarted.api.resume_run("run-000001", {})
    assert server is not restarted


async def _start_dead_resume(host: HostStore) -> LocalStaticWorkflowServer:
    server = await host.build()
    run_id = await _interrupted_sleeper(server)
    resuming = asyncio.create_task(server.api.resume_run(run_id, {}))
    await _until_executing(server, run_id)
    mark = _record(host, run_id)
    assert (mark["status"], mark["attempt"], mark["executing"]["kind"]) == ("running", 2, "resume")
    assert mark["checkpoint"]["attempt"] == 1  # the stale checkpoint of the interrupt
    await server.api.cancel_executing()
    await resuming
    return server


async def _until_executing(server: LocalStaticWorkflowServer, run_id: str) -> None:
    """Poll (briefly) until the run is executing in this process."""
    for _ in range(500):
        if run_id in server.api.executing_runs():
            return
        await asyncio.sleep(0.002)
    raise AssertionError(f"{run_id} never started executing")


async def test_recovery_is_idempotent(host: HostStore) -> None:
    await _start_dead_resume(host)
    assert [f["finding"] for f in (await host.build()).recovery_report] == ["ambiguous-resume"]
    before = host.snapshot()
    assert (await host.build()).recovery_report == []
    assert host.snapshot() == before


async def test_interrupted_run_stays_resumable_across_restarts(host: HostStore) -> None:
    first = await host.build()
    await deploy(first, APPROVAL_PLAN, "approval.default")
    run = await first.api.run_deployment("approval.default", {"item": "x"})
    second = await host.build()
    assert second.recovery_report == []
    assert (await second.api.inspect_run(run["run_id"]))["status"] == "interrupted"
    done = await second.api.resume_run(run["run_id"], {"approved": True})
    assert (done["status"], done["attempt"]) == ("completed", 2)


async def test_admitted_run_stays_admitted_and_launchable(host: HostStore) -> None:
    first = await host.build()
    await deploy(first, GREETING_PLAN, "hello.default")
    run_id = await first.api.admit_run("hello.default", {"name": "x"})
    second = await host.build()
    assert second.recovery_report == []
    assert (await second.api.list_runs(status="admitted"))["runs"][0]["run_id"] == run_id
    await second.api.launch_run(run_id)
    assert await second.api.drain(5) == []
    assert (await second.api.inspect_run(run_id))["output"] == {"result": "hello x"}


async def test_terminal_runs_are_left_alone(host: HostStore) -> None:
    first = await host.build()
    await deploy(first, GREETING_PLAN, "hello.default")
    run = await first.api.run_deployment("hello.default", {"name": "x"})
    second = await host.build()
    assert second.recovery_report == []
    assert await second.api.inspect_run(run["run_id"]) == run


async def _three_admitted(server: LocalStaticWorkflowServer) -> None:
    await deploy(server, GREETING_PLAN, "hello.default")
    for _ in range(3):
        await server.api.admit_run("hello.default", {"name": "x"})


async def _check_unreadable_third(
    second: LocalStaticWorkflowServer, location: str, fragment: str
) -> None:
    [finding] = second.recovery_report
    assert (finding["run_id"], finding["file"], finding["finding"]) == (
        "run-000003",
        location,
        "unreadable",
    )
    assert fragment in finding["reason"]
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
    ("document", "fragment"),
    [
        ([], "invalid run record"),
        ({"format": 1}, "invalid run record: run_id: Field required"),
        ({"format": 1, "run_id": "run-000003", "status": "admitted"}, "snapshot: Field required"),
    ],
)
async def test_unparseable_record_is_reported_not_dropped(
    host: HostStore, document: Any, fragment: str
) -> None:
    await _three_admitted(await host.build())
    host.write_record("run-000003", document)

    second = await host.build()  # does not raise
    assert host.record("run-000003") == document  # left in place
    await _check_unreadable_third(second, host.location("run-000003"), fragment)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "Expecting property name"),
        (b"\xff\xfe", "codec can't decode"),
    ],
)
async def test_a_file_that_is_no_json_is_reported_not_dropped(
    build: Builder, tmp_path: Path, content: str | bytes, fragment: str
) -> None:
    await _three_admitted(build())
    raw = content if isinstance(content, bytes) else content.encode()
    run_log_files.append_payload(tmp_path, "run-000003", raw)
    before = run_log_files.last_frame(tmp_path, "run-000003")

    second = build()  # does not raise
    assert run_log_files.last_frame(tmp_path, "run-000003") == before  # left in place
    await _check_unreadable_third(second, f"{tmp_path / LOG_DIR} (run-000003)", fragment)


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
    host: HostStore, changes: dict[str, Any], reason: str
) -> None:
    first = await host.build()
    await deploy(first, GREETING_PLAN, "hello.default")
    await first.api.run_deployment("hello.default", {"name": "x"})
    host.rewrite("run-000001", **changes)
    second = await host.build()
    assert [(f["finding"], f["reason"]) for f in second.recovery_report] == [
        ("contradictory", reason)
    ]
    with pytest.raises(InvalidState, match="contradictory record"):
        await second.api.inspect_run("run-000001")


async def test_record_of_another_run_and_stray_files(build: Builder, tmp_path: Path) -> None:
    # Files only; tests/host/test_postgres.py has a row naming another run.
    first = build()
    await deploy(first, GREETING_PLAN, "hello.default")
    await first.api.run_deployment("hello.default", {"name": "x"})
    record = run_log_files.read_record(tmp_path, "run-000001")
    run_log_files.append_document(tmp_path, "run-000007", record)
    (tmp_path / LOG_DIR / "notes.txt").write_text("hello")
    # An older store's directory of run files is still read.
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "run-000008.json").write_text(json.dumps({**record, "run_id": "run-000009"}))
    (runs / "notes.txt").write_text("hello")
    (runs / ".run-000001.json.x1y2.tmp").write_text("{torn")  # a crashed write: ignored
    second = build()
    assert [(f["run_id"], Path(f["file"]).name, f["finding"]) for f in second.recovery_report] == [
        (None, "notes.txt", "unreadable"),
        (None, "notes.txt", "unreadable"),
        ("run-000008", "run-000008.json", "unreadable"),
        ("run-000007", "run-log (run-000007)", "unreadable"),
        (None, "run_id", "counter-repaired"),
    ]
    assert "record names run 'run-000009'" in second.recovery_report[2]["reason"]
    assert "record names run 'run-000001'" in second.recovery_report[3]["reason"]
    assert (await second.api.inspect_run("run-000001"))["status"] == "completed"


async def test_a_start_removes_the_temp_files_of_interrupted_writes(
    build: Builder, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Files only: tests/host/test_crash.py leaves one with a real SIGKILL.
    first = build()
    await deploy(first, GREETING_PLAN, "hello.default")
    await first.api.run_deployment("hello.default", {"name": "x"})
    [artifact] = [p for p in (tmp_path / "artifacts").iterdir()]
    stale = [
        artifact / ".1.json.a1b2.tmp",
        tmp_path / "deployments" / ".hello.default.json.c3d4.tmp",
        tmp_path / "counters" / ".run_id.e5f6.tmp",
        tmp_path / ".run-log.index.g7h8.tmp",
    ]
    # Modified within the second before the start: maybe another process's
    # write in flight. And dot files that are no temp file.
    young = tmp_path / "deployments" / ".other.json.i9j0.tmp"
    kept = [young, tmp_path / "deployments" / ".keep", artifact / ".notes.tmp.txt"]
    long_ago = time.time() - 60
    for path in stale:
        path.write_text("{torn")
        os.utime(path, (long_ago, long_ago))
    for path in kept:
        path.write_text("{torn")
    caplog.set_level("INFO", logger="adapters.host.server")
    second = build()
    assert [p for p in stale if p.exists()] == []
    assert [p for p in kept if p.exists()] == kept
    said = sorted(r.getMessage() for r in caplog.records if "temp files" in r.getMessage())
    assert said == sorted(
        f"removed temp files of interrupted writes in {p.parent}: {[p.name]}" for p in stale
    )
    assert second.recovery_report == []
    assert [d["deployment_id"] for d in await second.api.list_deployments()] == ["hello.default"]
    assert (await second.api.inspect_run("run-000001"))["status"] == "completed"


async def test_a_start_that_cannot_sweep_says_so_and_serves(
    build: Builder, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = build()
    await deploy(first, GREETING_PLAN, "hello.default")
    # A directory named as a temp file: removing it fails.
    odd = tmp_path / "deployments" / ".hello.default.json.k1l2.tmp"
    odd.mkdir()
    long_ago = time.time() - 60
    os.utime(odd, (long_ago, long_ago))
    second = build()
    [warning] = [r for r in caplog.records if "sweep" in r.getMessage()]
    assert warning.levelname == "WARNING"
    assert warning.getMessage().startswith("could not sweep temp files of interrupted writes: ")
    assert odd.name in warning.getMessage()
    assert [d["deployment_id"] for d in await second.api.list_deployments()] == ["hello.default"]


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


async def test_fresh_store_has_an_empty_report(host: HostStore) -> None:
    server = await host.build()
    assert server.recovery_report == [] and server.api.recovery_report is server.recovery_report
    # Nothing is written until needed.
    stored = host.snapshot()
    if host.kind == "files":
        assert server.store_root == host.root and server.database is None
        assert stored == {}
    else:
        assert server.store_root is None and server.database is not None
        assert stored.pop("wf_run_number") == (1, False)  # never called
        assert {table: count for table, (count, _) in stored.items()} == {
            "wf_artifacts": 0,
            "wf_deployments": 0,
            "wf_runs": 0,
        }


async def test_mark_kind_must_match_its_attempt(host: HostStore) -> None:
    server = await host.build()
    await deploy(server, sleep_plan(60), "nap.default")
    run_id = await server.api.start_run("nap.default", {})
    await server.api.cancel_executing()
    record = _record(host, run_id)
    record["executing"]["kind"] = "resume"
    host.rewrite(run_id, executing=record["executing"])
    assert [(f["finding"], f["reason"]) for f in (await host.build()).recovery_report] == [
        ("contradictory", "a resume mark on attempt 1")
    ]


async def test_a_run_the_stopping_server_gave_up_on_says_so(host: HostStore) -> None:
    # A clean stop whose drain ran out of time: the server notes it on the
    # mark, then cancels the run. The next start must not claim a crash.
    server = await host.build()
    await deploy(server, sleep_plan(60), "nap.default")
    run_id = await server.api.start_run("nap.default", {})
    assert "stopped" not in _record(host, run_id)["executing"]  # no note, no key
    assert await server.api.note_stopped("drain-expired", 30) == [run_id]
    note = _record(host, run_id)["executing"]["stopped"]
    assert (note["cause"], note["grace_s"]) == ("drain-expired", 30.0)
    assert (await server.api.inspect_run(run_id))["executing"]["stopped"] == note
    await server.api.cancel_executing()

    restarted = await host.build()
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


async def test_the_first_stop_note_stays(host: HostStore) -> None:
    server = await host.build()
    await deploy(server, sleep_plan(60), "nap.default")
    run_id = await server.api.start_run("nap.default", {})
    assert await server.api.note_stopped("drain-expired", 0.5) == [run_id]
    first = _record(host, run_id)["executing"]["stopped"]
    assert await server.api.note_stopped("drain-cut", 0.5) == []
    assert _record(host, run_id)["executing"]["stopped"] == first
    await server.api.cancel_executing()
    message = (await (await host.build()).api.inspect_run(run_id))["error"]["message"]
    assert "(its drain grace of 0.5 s ran out, at " in message


async def test_a_noted_run_that_still_finishes_keeps_no_note(host: HostStore) -> None:
    server = await host.build()
    await deploy(server, sleep_plan(0.2), "nap.default")
    run_id = await server.api.start_run("nap.default", {})
    assert await server.api.note_stopped("drain-expired", 0) == [run_id]
    assert await server.api.drain(5) == []
    run = await server.api.inspect_run(run_id)
    assert (run["status"], run["executing"]) == ("completed", None)
    assert (await host.build()).recovery_report == []


async def test_a_resume_cut_by_a_stop_is_failed_closed_saying_so(host: HostStore) -> None:
    server = await host.build()
    run_id = await _interrupted_sleeper(server)
    resuming = asyncio.create_task(server.api.resume_run(run_id, {}))  # waits for the run
    await _until_executing(server, run_id)
    assert await server.api.note_stopped("drain-cut", 30) == [run_id]
    await server.api.cancel_executing()
    await resuming
    run = await (await host.build()).api.inspect_run(run_id)
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
    host: HostStore, cause: Any, grace_s: Any, field: str
) -> None:
    server = await host.build()
    await deploy(server, sleep_plan(60), "nap.default")
    await server.api.start_run("nap.default", {})
    before = host.snapshot()
    with pytest.raises(InvalidInput) as refused:
        await server.api.note_stopped(cause, grace_s)
    assert [p.field for p in refused.value.problems] == [field]
    assert host.snapshot() == before
    await server.api.cancel_executing()
