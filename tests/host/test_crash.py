"""Real crashes: SIGKILL a process mid-run or mid-resume, then restart on the
same store (files, or the same PostgreSQL database: the `host` fixture)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from adapters import build_local_static_workflow_server

from .conftest import HostStore, deploy, sleep_plan

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")


def _spawn(host: HostStore, mode: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    store = str(host.root) if host.url is None else host.url
    return subprocess.Popen(
        [sys.executable, "-m", "tests.host.crash_child", store, mode],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _kill_when(
    child: subprocess.Popen[bytes], host: HostStore, ready: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """Poll the store (not the clock) until `ready(record)` for run-000001,
    then SIGKILL the child."""
    deadline = time.monotonic() + 20  # generous bound for a slow machine, not a wait
    try:
        while time.monotonic() < deadline:
            if child.poll() is not None:
                raise AssertionError(f"child exited early: {child.stderr.read().decode()}")  # type: ignore[union-attr]
            try:
                data: dict[str, Any] = host.record("run-000001") or {}
            except ValueError:  # a file read while it was being written
                data = {}
            except FileNotFoundError:  # a segment the child compacted between listing and read
                data = {}
            except Exception as exc:  # the database before the child migrated it
                if "does not exist" not in str(exc):
                    raise
                data = {}
            if data and ready(data):
                child.send_signal(signal.SIGKILL)
                return data
            time.sleep(0.02)
        raise AssertionError("the child never reached the awaited state")
    finally:
        child.kill()
        child.wait()
        assert child.stderr is not None
        child.stderr.close()


async def test_sigkill_mid_run_is_abandoned_truthfully(host: HostStore) -> None:
    child = _spawn(host, "start")
    seen = _kill_when(child, host, lambda data: data["status"] == "running")
    assert child.returncode == -signal.SIGKILL
    assert (seen["executing"]["kind"], seen["attempt"]) == ("start", 1)

    server = await host.build()
    run = await server.api.inspect_run("run-000001")
    assert run["status"] == "failed"
    assert run["error"]["kind"] == "abandoned"
    assert run["error"]["message"].startswith(
        "abandoned: the process died while this run was executing; "
        "external effects may already have occurred"
    )
    assert run["checkpoint"]["by"] == "recovery"
    assert [(f["run_id"], f["file"], f["finding"]) for f in server.recovery_report] == [
        ("run-000001", host.location("run-000001"), "abandoned")
    ]
    assert host.record("run-000001")["status"] == "failed"  # recovery wrote it
    # The id sequence continues, and the host works on.
    assert await server.api.admit_run("nap.default", {}) == "run-000002"
    assert (await server.api.inspect_run("run-000002"))["status"] == "admitted"


async def test_sigkill_mid_resume_is_failed_closed(host: HostStore) -> None:
    server = await host.build()
    await deploy(server, sleep_plan(30, then_interrupt=True), "gate.default")
    run = await server.api.run_deployment("gate.default", {})
    assert run["status"] == "interrupted"

    host.hand_over()
    child = _spawn(host, "resume")
    seen = _kill_when(child, host, lambda data: data["attempt"] == 2)
    assert (seen["status"], seen["executing"]["kind"]) == ("running", "resume")

    restarted = await host.build()
    run = await restarted.api.inspect_run("run-000001")
    assert run["status"] == "failed"
    assert run["error"]["message"].startswith(
        "ambiguous resume: attempt 2 was marked but left no result; failed closed, not retried"
    )
    assert [(f["run_id"], f["finding"]) for f in restarted.recovery_report] == [
        ("run-000001", "ambiguous-resume")
    ]
    assert await restarted.api.reserve_run_ids(1) == ["run-000002"]


async def test_sigkill_mid_write_leaves_a_temp_file_the_next_start_removes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Files only: a deployment's write is killed after its temp file was
    # flushed and before the rename.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.host.crash_child", str(tmp_path), "stall-save"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().decode()
        assert line.startswith("stalled "), child.stderr.read().decode()  # type: ignore[union-attr]
        child.send_signal(signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()
        for stream in (child.stdout, child.stderr):
            assert stream is not None
            stream.close()
    temp = Path(line.removeprefix("stalled ").strip())
    assert temp.parent == tmp_path / "deployments" and temp.name.endswith(".tmp")
    assert temp.exists()
    # A start spares temp files modified within a second before it (another
    # process's write in flight); the crash is made older than that instead
    # of waiting for it.
    stale = time.time() - 5
    os.utime(temp, (stale, stale))
    caplog.set_level("INFO", logger="adapters.host.server")
    server = build_local_static_workflow_server(tmp_path)
    assert not temp.exists()
    assert [r.getMessage() for r in caplog.records if "temp files" in r.getMessage()] == [
        f"removed temp files of interrupted writes in {temp.parent}: {[temp.name]}"
    ]
    # The write never happened; what came before it is intact.
    assert await server.api.list_deployments() == []
    assert [a["artifact_id"] for a in await server.api.list_artifacts()] == ["nap"]
