"""`wf-rpc-server`'s serve loop in process: start, SIGTERM/SIGINT, drain, exit status 0.

The signal rules (docs/rpc.md, "Starting and stopping"): any number of
SIGTERMs start the drain and never cut it; a SIGINT starts it, and a SIGINT
while it runs cuts it. Runs cut off by the stop say so at the next start.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from adapters.client import App, ServerUnreachable
from adapters.host import build_local_static_workflow_server
from adapters.rpc.config import resolve_settings
from adapters.rpc.server import bind_socket
from adapters.rpc_server_cli import serve
from core.errors import SchedulerUnavailable
from shell.lock import SchedulerLock
from tests.rpc.live import free_port, wait_until

REPO = Path(__file__).resolve().parents[2]

SLOW_PLAN: dict[str, Any] = {
    "name": "slow",
    "input_schema": {"type": "object"},
    "start": "nap",
    "nodes": [
        {"id": "nap", "kind": "call", "capability": "wf.std.sleep", "params": {"seconds": 0.4}}
    ],
    "edges": {"nap": {"ok": "__end__"}},
    "output": {"slept": "state.nap"},
}


async def healthy(app: App) -> Any:
    try:
        return await app.health()
    except ServerUnreachable:
        return None


async def test_sigterm_stops_admission_drains_the_running_run_and_exits_0(tmp_path: Path) -> None:
    port = free_port()
    settings = resolve_settings(
        store_root=Path("store"),
        port=port,
        enable_scheduler=True,
        environ={},
        cwd=tmp_path,
    )
    serving = asyncio.create_task(serve(settings))
    async with App(f"http://127.0.0.1:{port}") as app:
        report = await wait_until(lambda: healthy(app), timeout_s=15)
        leader = report.pop("leader")
        assert report == {
            "status": "ok",
            "schedules": True,
            "scheduler": "running",
            "role": "leader",
            "epoch": None,  # a lock file has no epoch
        }
        assert leader["pid"] == os.getpid() and leader["since"]
        await app.create_artifact_from_plan("slow", 1, SLOW_PLAN)
        await app.save_deployment(
            {"deployment_id": "slow.default", "artifact_id": "slow", "artifact_version": 1}
        )
        run_id = await app.start_run("slow.default")
        assert lock_held(tmp_path / "store")
        # The handlers are installed before the server listens, so this reaches serve().
        os.kill(os.getpid(), signal.SIGTERM)
        assert await asyncio.wait_for(serving, timeout=15) == 0
        assert await healthy(app) is None
    # The server released the store's lock at its exit: another can own it.
    assert not lock_held(tmp_path / "store")
    # The run was drained to completion, not abandoned.
    reopened = build_local_static_workflow_server(tmp_path / "store")
    run = await reopened.api.inspect_run(run_id)
    assert run["status"] == "completed"
    assert run["output"] == {"slept": 0.4}
    assert reopened.recovery_report == []
    await reopened.close()


def sleeping_plan(seconds: float) -> dict[str, Any]:
    plan = json.loads(json.dumps(SLOW_PLAN))
    plan["nodes"][0]["params"]["seconds"] = seconds
    return plan


async def serve_with_a_running_run(
    tmp_path: Path, seconds: float, *, config: dict[str, Any] | None = None
) -> tuple[asyncio.Task[int], str]:
    """Serve on a store under `tmp_path` with the scheduler, start a run of a
    plan that sleeps `seconds`, and return the serving task and the run id."""
    config_path = None
    if config is not None:
        config_path = tmp_path / "server.json"
        config_path.write_text(json.dumps({"server": config}), encoding="utf-8")
    port = free_port()
    settings = resolve_settings(
        config_path=config_path,
        store_root=Path("store"),
        port=port,
        enable_scheduler=True,
        environ={},
        cwd=tmp_path,
    )
    serving = asyncio.create_task(serve(settings))
    async with App(f"http://127.0.0.1:{port}") as app:
        await wait_until(lambda: healthy(app), timeout_s=15)
        await app.create_artifact_from_plan("slow", 1, sleeping_plan(seconds))
        await app.save_deployment(
            {"deployment_id": "slow.default", "artifact_id": "slow", "artifact_version": 1}
        )
        run_id = await app.start_run("slow.default")
        assert (await app.inspect_run(run_id))["status"] == "running"
    return serving, run_id


async def test_a_repeated_sigterm_does_not_cut_the_drain(tmp_path: Path) -> None:
    # `kill %1` on `uv run wf-rpc-server ... &` signals the job's process
    # group: the server gets the shell's SIGTERM and, a moment later, the one
    # uv forwards. Neither may cut the drain.
    serving, run_id = await serve_with_a_running_run(tmp_path, 0.4)
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)
    assert await asyncio.wait_for(serving, timeout=15) == 0
    reopened = build_local_static_workflow_server(tmp_path / "store")
    run = await reopened.api.inspect_run(run_id)
    assert (run["status"], run["output"]) == ("completed", {"slept": 0.4})
    assert reopened.recovery_report == []


async def test_a_hangup_drains_like_sigterm(tmp_path: Path) -> None:
    # The terminal closed or the SSH session dropped: until 2026-12-08 the
    # process died at once, and the next start failed its runs as abandoned.
    # As a terminal leaves it (a test runner under `nohup` would not).
    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        serving, run_id = await serve_with_a_running_run(tmp_path, 0.4)
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGHUP)  # a second one does not cut the drain
        assert await asyncio.wait_for(serving, timeout=15) == 0
    finally:
        signal.signal(signal.SIGHUP, before)
    reopened = build_local_static_workflow_server(tmp_path / "store")
    run = await reopened.api.inspect_run(run_id)
    assert (run["status"], run["output"]) == ("completed", {"slept": 0.4})
    assert reopened.recovery_report == []
    await reopened.close()


async def test_a_hangup_ignored_at_start_stays_ignored(tmp_path: Path) -> None:
    # `nohup wf-rpc-server ... &`: the server is meant to outlive its terminal.
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        port = free_port()
        settings = resolve_settings(store_root=Path("store"), port=port, environ={}, cwd=tmp_path)
        serving = asyncio.create_task(serve(settings))
        async with App(f"http://127.0.0.1:{port}") as app:
            await wait_until(lambda: healthy(app), timeout_s=15)
            os.kill(os.getpid(), signal.SIGHUP)
            await asyncio.sleep(0.2)
            assert not serving.done()
            assert (await app.health())["status"] == "ok"
        os.kill(os.getpid(), signal.SIGTERM)
        assert await asyncio.wait_for(serving, timeout=15) == 0
    finally:
        signal.signal(signal.SIGHUP, before)


async def test_a_second_sigint_cuts_the_drain_and_the_next_start_says_so(
    tmp_path: Path,
) -> None:
    serving, run_id = await serve_with_a_running_run(tmp_path, 600)
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: stop admitting, drain (30 s)
    await asyncio.sleep(0.05)
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C again: stop waiting
    assert await asyncio.wait_for(serving, timeout=15) == 0
    reopened = build_local_static_workflow_server(tmp_path / "store")
    run = await reopened.api.inspect_run(run_id)
    assert (run["status"], run["error"]["kind"]) == ("failed", "abandoned")
    message = run["error"]["message"]
    assert message.startswith(
        "abandoned: the previous server stopped before this run finished"
        " (a second SIGINT cut its drain short, at "
    ), message
    assert "the process died" not in message
    assert "external effects may already have occurred" in message
    assert [f["finding"] for f in reopened.recovery_report] == ["abandoned"]


async def test_a_drain_that_runs_out_of_time_is_disclosed_as_such(tmp_path: Path) -> None:
    serving, run_id = await serve_with_a_running_run(
        tmp_path, 600, config={"scheduler": {"drain_grace_s": 0.2}}
    )
    os.kill(os.getpid(), signal.SIGTERM)
    assert await asyncio.wait_for(serving, timeout=15) == 0
    reopened = build_local_static_workflow_server(tmp_path / "store")
    run = await reopened.api.inspect_run(run_id)
    assert (run["status"], run["error"]["kind"]) == ("failed", "abandoned")
    message = run["error"]["message"]
    assert message.startswith(
        "abandoned: the previous server stopped before this run finished"
        " (its drain grace of 0.2 s ran out, at "
    ), message
    assert "the process died" not in message
    assert "external effects may already have occurred" in message


def lock_held(root: Path) -> bool:
    """Is the store's scheduler lock owned (by anyone, this process included)?"""
    lock = SchedulerLock(root)
    try:
        lock.acquire()
    except SchedulerUnavailable:
        return True
    lock.release()
    return False


async def test_busy_port_is_a_runtime_failure(tmp_path: Path) -> None:
    taken = bind_socket("127.0.0.1", 0)
    try:
        settings = resolve_settings(
            store_root=Path("store"),
            port=taken.getsockname()[1],
            environ={},
            cwd=tmp_path,
        )
        assert await serve(settings) == 1
        # Nothing was created: the port is bound before the store is touched.
        assert not (tmp_path / "store").exists()
    finally:
        taken.close()


async def test_refuses_a_store_another_scheduler_owns_before_recovery(tmp_path: Path) -> None:
    root = tmp_path / "store"
    other = SchedulerLock(root)
    other.acquire()
    try:
        for enabled in (True, False):
            settings = resolve_settings(
                store_root=root,
                port=free_port(),
                enable_scheduler=enabled,
                environ={},
                cwd=tmp_path,
            )
            with pytest.raises(SchedulerUnavailable) as caught:
                await serve(settings)
            assert f"pid {os.getpid()}" in caught.value.message
        # The host was never opened, so its recovery never ran.
        assert sorted(p.name for p in root.iterdir()) == ["scheduler.lock"]
    finally:
        other.release()


@pytest.mark.parametrize("second_scheduler", [False, True], ids=["plain", "with-scheduler"])
async def test_a_second_server_on_a_store_served_without_a_scheduler_exits_1(
    tmp_path: Path, second_scheduler: bool
) -> None:
    # Until 2026-12-08 a server without a scheduler held no lock: a second
    # one started, and its recovery failed the first's executing run.
    port = free_port()
    settings = resolve_settings(store_root=Path("store"), port=port, environ={}, cwd=tmp_path)
    serving = asyncio.create_task(serve(settings))
    try:
        async with App(f"http://127.0.0.1:{port}") as app:
            await wait_until(lambda: healthy(app), timeout_s=15)
            await app.create_artifact_from_plan("slow", 1, sleeping_plan(30))
            await app.save_deployment(
                {"deployment_id": "slow.default", "artifact_id": "slow", "artifact_version": 1}
            )
            run_id = await app.start_run("slow.default")
            args = ["--store-root", "store", "--port", str(free_port())]
            done = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "adapters.rpc_server_cli", *args]
                + (["--enable-scheduler"] if second_scheduler else []),
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                check=False,
            )
            assert done.returncode == 1, done.stderr
            assert f"is owned by pid {os.getpid()}" in done.stderr
            assert "stop it first" in done.stderr
            assert (await app.inspect_run(run_id))["status"] == "running"
    finally:
        os.kill(os.getpid(), signal.SIGINT)  # stop admitting, drain
        await asyncio.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)  # stop waiting for the run
        assert await asyncio.wait_for(serving, timeout=15) == 0
