"""Ownership of a store: one scheduler at a time, a dead owner never blocks,
and a service that lost its lock file stops admitting and says so.

The two-process tests fork real processes from the test process (everything
is imported already, so a process costs milliseconds, not an interpreter
start); the owner is killed with SIGKILL, so only the kernel releases its lock.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import signal
import socket
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from adapters import build_local_static_workflow_server
from core.errors import SchedulerUnavailable
from shell import ManualClock, SchedulerServiceConfig, build_scheduler_service
from tests.service.conftest import CONSTANT_PLAN, START, sleep_plan

from .world import ABANDONED_TEXT, World

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork and SIGKILL")

DUE = START + timedelta(minutes=1)


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


async def _own_with_a_run_executing(root: Path, ready: int) -> None:
    world = World(root, ManualClock(START), None)
    await world.build_server()
    await world.deploy("sleeper.default", sleep_plan(30))
    await world.boot()
    await world.schedules.create_schedule(
        schedule_id="napper",
        deployment_id="sleeper.default",
        trigger={"kind": "oneshot", "at": DUE.isoformat()},
    )
    await world.at(DUE)
    [row] = await world.decided("napper")
    assert row["status"] == "running"
    os.write(ready, f"{row['run_id']}\n".encode())
    await asyncio.Event().wait()  # own the store until killed


def _fork_owner(root: Path) -> tuple[int, str]:
    """A process that owns `root` with a run executing; (pid, run id)."""
    return _fork(root, _own_with_a_run_executing)


def _fork(root: Path, own: Callable[[Path, int], Awaitable[None]]) -> tuple[int, str]:
    """A process running `own(root, ready)`, which writes its run id and a
    newline to `ready` once it owns `root`; (pid, run id)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            asyncio.run(own(root, write))
        finally:
            os._exit(3)
    os.close(write)
    try:
        ready, _, _ = select.select([read], [], [], 60)  # a bound for a slow machine
        line = os.read(read, 100).decode() if ready else ""
    finally:
        os.close(read)
    if not line.endswith("\n"):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise AssertionError("the owner process never reported ready")
    return pid, line.strip()


@pytest.fixture
def owner(store_root: Path) -> Iterator[tuple[int, str]]:
    pid, run_id = _fork_owner(store_root)
    try:
        yield pid, run_id
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


async def _start_second(root: Path) -> None:
    """What a second process does with the documented Python API."""
    server = build_local_static_workflow_server(root, schedules=True, clock=lambda: DUE)
    service = build_scheduler_service(
        server, SchedulerServiceConfig(enabled=True), clock=ManualClock(DUE)
    )
    await service.start()
    await service.stop()


def test_a_second_service_fails_naming_the_holder_and_touches_nothing(
    store_root: Path, owner: tuple[int, str]
) -> None:
    pid, run_id = owner
    before = _tree(store_root)
    with pytest.raises(SchedulerUnavailable) as refused:
        asyncio.run(_start_second(store_root))
    message = refused.value.message
    assert f"pid {pid}" in message and f"host {socket.gethostname()}" in message, message
    assert refused.value.data["holder"]["pid"] == pid
    # Above all, its recovery did not declare the owner's executing run abandoned.
    assert _tree(store_root) == before, f"the refused process wrote to the store ({run_id})"


def test_after_kill_9_of_the_owner_a_new_service_starts_and_recovers(
    store_root: Path, owner: tuple[int, str]
) -> None:
    pid, run_id = owner
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL

    async def restart() -> None:
        world = World(store_root, ManualClock(DUE + timedelta(minutes=1)), None)
        try:
            service = await world.boot()
            assert service.running
            holder = world.service._backend.ownership.lock.read_holder()  # type: ignore[union-attr,attr-defined]
            assert holder is not None and holder["pid"] == os.getpid()
            run = await world.api.inspect_run(run_id)
            assert run["status"] == "failed" and ABANDONED_TEXT in run["error"]["message"]
            [row] = await world.decided("napper")
            assert row["status"] == "failed" and ABANDONED_TEXT in row["reason"]
        finally:
            await world.shutdown()

    asyncio.run(restart())


async def _serve_without_a_scheduler(root: Path, ready: int) -> None:
    world = World(root, ManualClock(START), None)
    server = await world.build_server()
    await world.deploy("sleeper.default", sleep_plan(30))
    run_id = await server.api.start_run("sleeper.default", None)
    assert (await server.api.inspect_run(run_id))["status"] == "running"
    os.write(ready, f"{run_id}\n".encode())
    await asyncio.Event().wait()  # serve the store until killed


@pytest.mark.parametrize("second", ["server", "server-and-scheduler"])
def test_a_server_without_a_scheduler_owns_its_store_too(store_root: Path, second: str) -> None:
    """Until 2026-12-08 only a scheduler took the lock: a second server
    started beside one without it recovered the store, failing the first's
    executing run as abandoned while it executed."""
    pid, run_id = _fork(store_root, _serve_without_a_scheduler)
    try:
        before = _tree(store_root)
        with pytest.raises(SchedulerUnavailable) as refused:
            if second == "server":
                build_local_static_workflow_server(store_root, clock=lambda: DUE)
            else:
                asyncio.run(_start_second(store_root))
        assert refused.value.data["holder"]["pid"] == pid
        assert f"pid {pid}" in refused.value.message
        assert _tree(store_root) == before, f"the refused process wrote to the store ({run_id})"
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    # Once the owner is gone, the next server recovers the run it left.
    server = build_local_static_workflow_server(store_root, clock=lambda: DUE)
    run = asyncio.run(server.api.inspect_run(run_id))
    assert run["status"] == "failed" and ABANDONED_TEXT in run["error"]["message"]
    asyncio.run(server.close())


@pytest.mark.parametrize("lock_file", ["removed", "replaced"])
def test_a_second_service_is_refused_while_the_owner_lives_even_without_its_lock_file(
    store_root: Path, owner: tuple[int, str], lock_file: str
) -> None:
    pid, run_id = owner
    if lock_file == "removed":
        _remove(store_root / "scheduler.lock")
    else:
        _replace(store_root / "scheduler.lock")
    before = _tree(store_root)
    with pytest.raises(SchedulerUnavailable) as refused:
        asyncio.run(_start_second(store_root))
    message = refused.value.message
    assert f"pid {pid}" in message and f"host {socket.gethostname()}" in message, message
    assert refused.value.data["holder"]["pid"] == pid
    # Its recovery did not fail the owner's live run as abandoned.
    assert _tree(store_root) == before, f"the refused process wrote to the store ({run_id})"


def _fork_start_paused_in_recovery(root: Path) -> tuple[int, int, int]:
    """A process starting on `root` (the documented Python API) that stops
    in the middle of its recovery, when it stamps the first abandoned run
    it fails, until told to go on. (pid, the pipe it says "recovering" on,
    the pipe that tells it to go on); it exits 0 once its service started."""
    said, say = os.pipe()
    told, tell = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            os.close(said)
            os.close(tell)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            paused = []

            def clock() -> datetime:
                if not paused:
                    paused.append(True)
                    os.write(say, b"recovering\n")
                    os.read(told, 1)
                return DUE

            async def start() -> None:
                server = build_local_static_workflow_server(root, schedules=True, clock=clock)
                service = build_scheduler_service(
                    server, SchedulerServiceConfig(enabled=True), clock=ManualClock(DUE)
                )
                await service.start()
                await service.stop()

            asyncio.run(start())
            code = 0
        finally:
            os._exit(code)
    os.close(say)
    os.close(told)
    return pid, said, tell


def test_a_second_start_during_a_starts_recovery_is_refused_and_writes_nothing(
    store_root: Path, owner: tuple[int, str]
) -> None:
    """Two starts at once: the second one's probe comes while the first
    recovers. Were it let through, it would fail the abandoned run, start its
    scheduler, and the first would fail it again and be refused only then."""
    dead, run_id = owner
    os.kill(dead, signal.SIGKILL)
    os.waitpid(dead, 0)
    pid, said, tell = _fork_start_paused_in_recovery(store_root)
    try:
        ready, _, _ = select.select([said], [], [], 60)  # a bound for a slow machine
        assert ready and os.read(said, 100) == b"recovering\n", "the first start never recovered"
        before = _tree(store_root)
        with pytest.raises(SchedulerUnavailable) as refused:
            asyncio.run(_start_second(store_root))
        assert refused.value.data["holder"]["pid"] == pid, refused.value.message
        assert _tree(store_root) == before, "the refused start wrote to the store"
    finally:
        os.write(tell, b"g")
        _, status = os.waitpid(pid, 0)
        os.close(said)
        os.close(tell)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the first start failed"

    async def inspect() -> dict[str, Any]:
        server = build_local_static_workflow_server(store_root)
        try:
            return await server.api.inspect_run(run_id)
        finally:
            await server.close()

    run = asyncio.run(inspect())
    assert run["status"] == "failed" and ABANDONED_TEXT in run["error"]["message"]


# --- fencing -----------------------------------------------------------------------------


def _remove(lock: Path) -> None:
    lock.unlink()


def _replace(lock: Path) -> None:
    fresh = lock.with_name("scheduler.lock.new")
    fresh.write_text('{"pid": 1, "host": "elsewhere", "since": "2026-03-02T09:00:00Z"}\n')
    os.replace(fresh, lock)


@pytest.mark.expected_errors
@pytest.mark.parametrize("tamper", [_remove, _replace], ids=["removed", "replaced"])
async def test_a_fenced_service_stops_admitting_and_says_so(
    store_root: Path, tamper: object, caplog: pytest.LogCaptureFixture
) -> None:
    assert callable(tamper)
    world = World(store_root, ManualClock(START), None)
    await world.boot()
    await world.deploy("report.default", CONSTANT_PLAN)
    await world.schedules.create_schedule(
        schedule_id="hourly",
        deployment_id="report.default",
        trigger={"kind": "cron", "expression": "0 * * * *"},
        inputs={"when": "now"},
    )
    await world.at(START.replace(hour=10, minute=0))
    assert [r["status"] for r in await world.decided("hourly")] == ["completed"]

    tamper(store_root / "scheduler.lock")
    caplog.clear()
    before = _tree(store_root)
    for h in (11, 12):
        await world.at(START.replace(hour=h, minute=0))
    # Nothing admitted, nothing written, and the operator is told once.
    assert _tree(store_root) == before
    fenced = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(fenced) == 1, [r.getMessage() for r in fenced]
    assert "removed or replaced" in fenced[0].getMessage()
    assert "admissions are stopped" in fenced[0].getMessage()
    # Its schedules API refuses changes too: another process may own the store now.
    with pytest.raises(SchedulerUnavailable):
        await world.schedules.pause_schedule(schedule_id="hourly")
    assert _tree(store_root) == before

    # No new owner while the fenced one lives (it still holds the store root's lock).
    refused = World(store_root, world.clock, None)
    with pytest.raises(SchedulerUnavailable, match=f"owned by pid {os.getpid()}"):
        await refused.boot()
    assert _tree(store_root) == before
    await world.shutdown()
    assert _tree(store_root) == before, "the fenced service wrote when it stopped"

    # Once it stopped, a new owner takes the store and decides what it did not.
    successor = World(store_root, world.clock, None)
    try:
        await successor.boot()
        rows = await successor.decided("hourly")
        assert [(r["instant"][11:16], r["status"]) for r in rows] == [
            ("10:00", "completed"),
            ("11:00", "skipped-misfire"),
            ("12:00", "completed"),
        ]
    finally:
        await successor.shutdown()
        await world.shutdown()
