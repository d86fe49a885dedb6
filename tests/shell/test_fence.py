"""The write fence (`shell.fence`): once a held scheduler lock's file is
removed or replaced, or its store root replaced, every durable writer of the
store refuses with `StoreFenced` before writing a byte."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core.errors import SchedulerUnavailable, StoreFenced
from shell.durable import (
    GroupCommit,
    append_records,
    atomic_write_bytes,
    atomic_write_json,
    remove_stale_temp_files,
    replace_unsynced,
)
from shell.fence import active_fences, check_fence
from shell.journal import CommitJournal, journal_supported
from shell.jsonlog import repair_torn_tail
from shell.lock import SchedulerLock

Tamper = Callable[[Path], Path]


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _remove(root: Path) -> Path:
    (root / "scheduler.lock").unlink()
    return root


def _replace(root: Path) -> Path:
    fresh = root / "scheduler.lock.new"
    fresh.write_text('{"pid": 1, "host": "elsewhere", "since": "2026-03-02T09:00:00Z"}\n')
    os.replace(fresh, root / "scheduler.lock")
    return root


def _replace_root(root: Path) -> Path:
    # The root renamed away and a copy put in its place: the same paths now
    # name another store (and a copied lock file is another inode).
    moved = root.with_name(root.name + ".moved")
    root.rename(moved)
    shutil.copytree(moved, root)
    return root


@pytest.fixture
def lock(store_root: Path) -> Iterator[SchedulerLock]:
    (store_root / "log.jsonl").write_bytes(b'{"a":1}\n{"b":')  # a torn tail to repair
    (store_root / "state.json").write_bytes(b'{"old":true}\n')
    (store_root / ".state.json.1.0000.tmp").write_bytes(b"stale")
    held = SchedulerLock(store_root)
    held.acquire()
    try:
        yield held
    finally:
        held.release()
        # A test must not leave a tripped fence behind for the next one.
        held.acquire()
        held.release()


def _writers(root: Path, journal: CommitJournal | None) -> dict[str, Callable[[], object]]:
    def group(journaled: bool) -> Callable[[], None]:
        def commit() -> None:
            batch = GroupCommit(journal=journal if journaled else None)
            batch.append_records(root / "log.jsonl", [{"c": 3}])
            batch.append_records(root / "runtime.jsonl", [{"d": 4}], late=True)
            batch.replace_json(root / "state.json", {"new": True})
            batch.commit()

        return commit

    writers: dict[str, Callable[[], object]] = {
        "atomic_write_bytes": lambda: atomic_write_bytes(root / "state.json", b"new\n"),
        "atomic_write_json": lambda: atomic_write_json(root / "new.json", {"x": 1}),
        "append_records": lambda: append_records(root / "log.jsonl", [{"c": 3}]),
        "replace_unsynced": lambda: replace_unsynced(str(root / "state.json"), b"new\n"),
        "group_commit": group(journaled=False),
        "repair_torn_tail": lambda: repair_torn_tail(root / "log.jsonl"),
        "remove_stale_temp_files": lambda: remove_stale_temp_files(root),
        "relative_path": lambda: atomic_write_bytes(os.path.relpath(root / "state.json"), b"new\n"),
    }
    if journal is not None:
        writers["journaled_group_commit"] = group(journaled=True)
        writers["journal_write"] = lambda: journal.write([("append", str(root / "j"), 0, b"x")])
        writers["journal_checkpoint"] = journal.close
    return writers


@pytest.mark.parametrize("tamper", [_remove, _replace, _replace_root])
def test_every_writer_refuses_once_the_lock_is_lost_and_writes_nothing(
    store_root: Path, lock: SchedulerLock, tamper: Tamper
) -> None:
    journal = CommitJournal(store_root) if journal_supported() else None
    if journal is not None:
        journal.open()
        # Something for a checkpoint to empty.
        journal.write([("append", str(store_root / "j"), 0, b"x")])
    tamper(store_root)
    before = _tree(store_root)
    for name, write in _writers(store_root, journal).items():
        with pytest.raises(StoreFenced) as raised:
            write()
        assert _tree(store_root) == before, f"{name} wrote under a fenced store"
        error = raised.value
        assert isinstance(error, SchedulerUnavailable), name
        assert error.code == "store_fenced"
        assert error.data["lock"] == str(store_root / "scheduler.lock")
        assert "fenced" in error.message and "writes nothing more" in error.message
    if journal is not None:
        journal.close_file()
    assert not lock.verify()


def test_the_fence_is_sticky_and_survives_a_release_until_the_store_is_taken_again(
    store_root: Path, lock: SchedulerLock
) -> None:
    target = store_root / "state.json"
    atomic_write_bytes(target, b"while held\n")
    lock_file = store_root / "scheduler.lock"
    saved = lock_file.read_bytes()
    _remove(store_root)
    with pytest.raises(StoreFenced):
        atomic_write_bytes(target, b"fenced\n")
    # Putting a lock file back does not make the store this process's again.
    lock_file.write_bytes(saved)
    with pytest.raises(StoreFenced):
        atomic_write_bytes(target, b"fenced\n")
    assert not lock.verify()
    # A fenced service stops and releases; the runs it leaves still write nothing.
    lock.release()
    with pytest.raises(StoreFenced):
        atomic_write_bytes(target, b"after release\n")
    assert target.read_bytes() == b"while held\n"
    # A new owner (here, this process again) writes.
    lock.acquire()
    atomic_write_bytes(target, b"new owner\n")
    assert target.read_bytes() == b"new owner\n"


def test_a_store_without_a_lock_or_with_a_healthy_one_writes(
    store_root: Path, tmp_path: Path
) -> None:
    assert active_fences() == []
    atomic_write_bytes(store_root / "a.json", b"no lock\n")
    with SchedulerLock(store_root) as held:
        assert held.verify()
        atomic_write_bytes(store_root / "a.json", b"held\n")
        append_records(store_root / "log.jsonl", [{"a": 1}])
        # A path under no fenced root is never looked at.
        other = tmp_path / "elsewhere"
        other.mkdir()
        _remove(store_root)
        atomic_write_bytes(other / "b.json", b"elsewhere\n")
        check_fence(str(store_root) + "-sibling/c.json")
    # A healthy release removes the fence.
    assert active_fences() == []
    atomic_write_bytes(store_root / "a.json", b"released\n")


def test_abandon_removes_the_fence_like_a_dead_process(store_root: Path) -> None:
    held = SchedulerLock(store_root)
    held.acquire()
    _remove(store_root)
    assert not held.verify()
    held.abandon()
    assert active_fences() == []
    atomic_write_bytes(store_root / "a.json", b"next owner\n")
