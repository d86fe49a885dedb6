"""The scheduler lock: one owner per store, dead owners never block, fencing."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.errors import SchedulerUnavailable
from shell.file_backend import FileOwnership
from shell.lock import SchedulerLock

REPO = Path(__file__).resolve().parents[2]
SINCE = datetime(2024, 6, 1, 8, 30, tzinfo=UTC)


def _clock() -> datetime:
    return SINCE


def _spawn(store_root: Path) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.shell.lock_child", str(store_root)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], 30)
    assert ready, "child did not take the lock"
    line = child.stdout.readline()
    assert line == f"locked {child.pid}\n"
    return child


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait()


def test_second_owner_is_refused_naming_the_holder_and_a_dead_one_does_not_block(
    store_root: Path, children: list[subprocess.Popen[str]]
) -> None:
    child = _spawn(store_root)
    children.append(child)
    holder = json.loads((store_root / "scheduler.lock").read_bytes())
    with pytest.raises(SchedulerUnavailable) as caught:
        SchedulerLock(store_root).acquire()
    message = caught.value.message
    assert f"owned by pid {child.pid} on host {holder['host']} since {holder['since']}" in message
    assert message.endswith("stop it first")
    assert caught.value.data["holder"] == holder
    assert holder["pid"] == child.pid

    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    # The dead process's file is still there, with its info, and does not block.
    assert json.loads((store_root / "scheduler.lock").read_bytes())["pid"] == child.pid
    lock = SchedulerLock(store_root, clock=_clock)
    assert lock.acquire() == {
        "pid": os.getpid(),
        "host": holder["host"],
        "since": "2024-06-01T08:30:00Z",
    }
    assert json.loads((store_root / "scheduler.lock").read_bytes())["pid"] == os.getpid()
    lock.release()


def test_a_child_cannot_take_a_lock_we_hold(store_root: Path) -> None:
    with SchedulerLock(store_root, clock=_clock):
        result = subprocess.run(
            [sys.executable, "-m", "tests.shell.lock_child", str(store_root)],
            cwd=REPO,
            input="",
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            timeout=60,
        )
    assert result.returncode != 0
    assert f"owned by pid {os.getpid()}" in result.stderr
    assert "since 2024-06-01T08:30:00Z; stop it first" in result.stderr


def test_second_lock_in_the_same_process_is_refused(store_root: Path) -> None:
    first = SchedulerLock(store_root)
    first.acquire()
    with pytest.raises(SchedulerUnavailable, match=f"owned by pid {os.getpid()}"):
        SchedulerLock(store_root).acquire()
    with pytest.raises(SchedulerUnavailable, match=f"owned by pid {os.getpid()}"):
        first.acquire()
    first.release()
    first.release()  # idempotent
    second = SchedulerLock(store_root)
    second.acquire()
    second.release()


def test_release_clears_holder_info(store_root: Path) -> None:
    lock = SchedulerLock(store_root)
    lock.acquire()
    assert lock.held and lock.verify()
    lock.release()
    assert not lock.held and not lock.verify()
    assert (store_root / "scheduler.lock").read_bytes() == b""
    assert lock.read_holder() is None


def test_lock_refused_while_holder_info_is_unwritten(store_root: Path) -> None:
    import fcntl

    path = store_root / "scheduler.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(SchedulerUnavailable, match="holder info not recorded yet") as caught:
            SchedulerLock(store_root).acquire()
        assert caught.value.data == {"holder": None}
    finally:
        os.close(fd)


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_fencing_detects_a_removed_or_replaced_lock_file(store_root: Path, how: str) -> None:
    lock = SchedulerLock(store_root)
    lock.acquire()
    path = store_root / "scheduler.lock"
    path.unlink()
    if how == "replaced":
        path.write_bytes(b'{"pid": 1}\n')
    assert not lock.verify()
    with pytest.raises(SchedulerUnavailable, match="admissions are stopped"):
        lock.ensure_held()
    # Nobody else can take the store while we live: the store root stays locked.
    other = SchedulerLock(store_root)
    with pytest.raises(SchedulerUnavailable, match="was removed or replaced") as caught:
        other.acquire()
    assert f"owned by pid {os.getpid()}" in caught.value.message
    assert caught.value.data["holder"]["pid"] == os.getpid()
    # Once we release, another owner can; we did not clobber the new file.
    replaced = path.read_bytes() if how == "replaced" else None
    lock.release()
    if replaced is not None:
        assert path.read_bytes() == replaced
    other.acquire()
    assert json.loads(path.read_bytes())["pid"] == os.getpid()
    assert other.verify()
    other.release()


def test_a_second_process_is_refused_naming_the_holder_after_its_lock_file_is_removed(
    store_root: Path, children: list[subprocess.Popen[str]]
) -> None:
    child = _spawn(store_root)
    children.append(child)
    (store_root / "scheduler.lock").unlink()
    with pytest.raises(SchedulerUnavailable) as caught:
        SchedulerLock(store_root).acquire()
    assert f"owned by pid {child.pid}" in caught.value.message
    assert caught.value.data["holder"]["pid"] == child.pid
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    with SchedulerLock(store_root) as lock:
        assert lock.verify()


def test_fencing_detects_a_renamed_store_root(tmp_path: Path) -> None:
    root = tmp_path / "store"
    lock = SchedulerLock(root)
    lock.acquire()
    root.rename(tmp_path / "moved")
    root.mkdir()
    assert not lock.verify()
    with pytest.raises(SchedulerUnavailable, match="admissions are stopped"):
        lock.ensure_held()
    lock.release()


def test_creates_the_store_root(tmp_path: Path) -> None:
    root = tmp_path / "new" / "root"
    with SchedulerLock(root) as lock:
        assert lock.verify()
    assert (root / "scheduler.lock").exists()


async def test_a_lent_lock_is_claimed_by_one_service_and_stays_with_its_server(
    store_root: Path,
) -> None:
    server_lock = SchedulerLock(store_root, clock=_clock)
    server_lock.acquire()
    ownership = FileOwnership(server_lock, lent=True)
    holder = await ownership.acquire()
    assert holder["pid"] == os.getpid() and ownership.assured
    # A second service of the same server is refused, naming this process.
    with pytest.raises(SchedulerUnavailable, match=f"owned by pid {os.getpid()}"):
        await ownership.acquire()
    await ownership.release()
    # The service stopped; the server still holds the store.
    assert server_lock.held
    with pytest.raises(SchedulerUnavailable, match=f"owned by pid {os.getpid()}"):
        SchedulerLock(store_root).acquire()
    # A service started again on the same server claims it again.
    assert await ownership.acquire() == holder
    await ownership.release()
    server_lock.release()
    assert not server_lock.held


async def test_a_lent_lock_lost_before_the_service_starts_refuses_the_start(
    store_root: Path,
) -> None:
    server_lock = SchedulerLock(store_root, clock=_clock)
    server_lock.acquire()
    try:
        (store_root / "scheduler.lock").unlink()
        with pytest.raises(SchedulerUnavailable, match="admissions are stopped"):
            await FileOwnership(server_lock, lent=True).acquire()
    finally:
        server_lock.release()  # the tripped fence outlives it: conftest clears it


async def test_a_service_whose_server_let_go_of_the_lock_takes_it_itself(
    store_root: Path,
) -> None:
    server_lock = SchedulerLock(store_root)
    ownership = FileOwnership(server_lock, lent=True)
    await ownership.acquire()
    assert server_lock.held
    await ownership.release()
    assert not server_lock.held
    other = SchedulerLock(store_root)
    other.acquire()
    other.release()
