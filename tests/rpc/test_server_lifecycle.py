"""`wf-rpc-server`'s serve loop in process: start, SIGTERM, drain, exit status 0."""

from __future__ import annotations

import asyncio
import os
import signal
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
        assert report == {"status": "ok", "schedules": True, "scheduler": "running"}
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
    # The run was drained to completion, not abandoned.
    reopened = build_local_static_workflow_server(tmp_path / "store")
    run = await reopened.api.inspect_run(run_id)
    assert run["status"] == "completed"
    assert run["output"] == {"slept": 0.4}
    assert reopened.recovery_report == []
    # The scheduler released its lock: a new scheduler can own the store.
    assert not lock_held(tmp_path / "store")


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
