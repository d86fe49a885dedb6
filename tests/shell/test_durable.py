"""Atomic writes, fsync'd appends and group commit, including simulated crashes."""

from __future__ import annotations

import errno
import gc
import json
import os
import weakref
from pathlib import Path

import pytest

from shell import durable
from shell.durable import (
    CrashAt,
    GroupCommit,
    SimulatedCrash,
    append_records,
    atomic_write_bytes,
    atomic_write_json,
    remove_stale_temp_files,
    set_fault_injector,
    sync_paths,
)
from shell.journal import CommitJournal
from shell.sim.disk import DiskFault, SimFileSystem
from shell.store_format import read_file


def _names(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def test_atomic_write_json_writes_canonical_json_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    atomic_write_json(target, {"b": 1, "a": [1, 2]})
    assert target.read_bytes() == b'{"a":[1,2],"b":1}\n'
    atomic_write_json(target, {"c": None})
    assert json.loads(target.read_bytes()) == {"c": None}
    assert _names(tmp_path) == ["a.json"]


def test_atomic_write_crash_before_replace_keeps_old_content(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    atomic_write_bytes(target, b"old\n")
    set_fault_injector(CrashAt("after:replace:a.json"))
    with pytest.raises(SimulatedCrash):
        atomic_write_bytes(target, b"new\n")
    assert target.read_bytes() == b"new\n"
    set_fault_injector(CrashAt("before:replace:a.json"))
    with pytest.raises(SimulatedCrash):
        atomic_write_bytes(target, b"newer\n")
    assert target.read_bytes() == b"new\n"


def test_atomic_write_refuses_nan(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        atomic_write_json(tmp_path / "a.json", {"x": float("nan")})
    assert _names(tmp_path) == []


def test_append_records_writes_lines_and_returns_start_offset(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    first = append_records(log, [{"seq": 0, "b": "x"}, {"seq": 1}])
    second = append_records(log, [{"seq": 2}], sync=False)
    data = log.read_bytes()
    assert first == 0
    assert second == len(b'{"b":"x","seq":0}\n{"seq":1}\n')
    assert data.split(b"\n") == [b'{"b":"x","seq":0}', b'{"seq":1}', b'{"seq":2}', b""]


def _failing_disk(op: str, code: int, written: int = 0) -> tuple[SimFileSystem, dict[str, bool]]:
    """A simulated disk holding `/log/a.jsonl` (one record, flushed) whose
    next `op` on it fails with `code` while `failing["on"]`."""
    failing = {"on": False}

    def faults(fault_op: str, path: str, size: int) -> DiskFault | None:
        if failing["on"] and fault_op == op and path.endswith("a.jsonl"):
            return DiskFault(code, written)
        return None

    sim = SimFileSystem(faults=faults)
    sim.make_directory("/log", parents=True)
    append_records("/log/a.jsonl", [{"seq": 1}], disk=sim)
    failing["on"] = True
    return sim, failing


@pytest.mark.parametrize(
    ("op", "code", "written"),
    [("fsync", errno.EIO, 0), ("write", errno.ENOSPC, 5)],
    ids=["fsync-failed", "write-cut-short"],
)
def test_an_append_that_failed_is_taken_back_off_the_file(op: str, code: int, written: int) -> None:
    # An fsync that failed leaves the record readable from the page cache with
    # nothing saying it reached the disk; a write cut short leaves a torn line.
    # Neither may be read as a record.
    sim, failing = _failing_disk(op, code, written)
    with pytest.raises(OSError) as raised:
        append_records("/log/a.jsonl", [{"seq": 2}], disk=sim)
    assert raised.value.errno == code
    assert read_file("/log/a.jsonl", disk=sim) == b'{"seq":1}\n'
    failing["on"] = False
    assert append_records("/log/a.jsonl", [{"seq": 2}], disk=sim) == len(b'{"seq":1}\n')
    assert read_file("/log/a.jsonl", disk=sim) == b'{"seq":1}\n{"seq":2}\n'


def test_append_records_escapes_non_ascii_so_lines_stay_lines(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    append_records(log, [{"text": "line\u2028sep\nnewline é"}])
    data = log.read_bytes()
    assert data.count(b"\n") == 1
    assert json.loads(data)["text"] == "line\u2028sep\nnewline é"


def test_group_commit_makes_appends_and_replaces_visible(tmp_path: Path) -> None:
    seen: list[str] = []
    batch = GroupCommit()
    batch.append_records(tmp_path / "a.jsonl", [{"n": 1}])
    batch.append_records(tmp_path / "b.jsonl", [{"n": 2}])
    batch.append_records(tmp_path / "a.jsonl", [{"n": 3}])
    batch.replace_json(tmp_path / "r.json", {"v": 1})
    batch.replace_json(tmp_path / "r.json", {"v": 2})
    batch.on_commit(lambda: seen.append("committed"))
    batch.on_abort(lambda: seen.append("aborted"))
    assert not (tmp_path / "a.jsonl").exists()
    batch.commit()
    assert (tmp_path / "a.jsonl").read_bytes() == b'{"n":1}\n{"n":3}\n'
    assert (tmp_path / "b.jsonl").read_bytes() == b'{"n":2}\n'
    assert json.loads((tmp_path / "r.json").read_bytes()) == {"v": 2}
    assert seen == ["committed"]
    assert batch.state == "committed"
    assert _names(tmp_path) == ["a.jsonl", "b.jsonl", "r.json"]
    with pytest.raises(RuntimeError):
        batch.append_records(tmp_path / "a.jsonl", [{"n": 4}])
    with pytest.raises(RuntimeError):
        batch.commit()


def test_group_commit_crash_before_renames_leaves_appends_and_old_targets(tmp_path: Path) -> None:
    atomic_write_json(tmp_path / "r.json", {"v": "old"})
    batch = GroupCommit()
    batch.append_records(tmp_path / "a.jsonl", [{"n": 1}])
    batch.replace_json(tmp_path / "r.json", {"v": "new"})
    set_fault_injector(CrashAt("before:replace:r.json"))
    with pytest.raises(SimulatedCrash):
        batch.commit()
    assert batch.state == "crashed"
    # The ordering guarantee: appends are durable before any replace is visible.
    assert (tmp_path / "a.jsonl").read_bytes() == b'{"n":1}\n'
    assert json.loads((tmp_path / "r.json").read_bytes()) == {"v": "old"}
    # Like a real crash, the temp file stays until the owner cleans up.
    stale = [n for n in _names(tmp_path) if n.endswith(".tmp")]
    assert len(stale) == 1
    assert remove_stale_temp_files(tmp_path) == stale
    assert _names(tmp_path) == ["a.jsonl", "r.json"]


def test_group_commit_failure_runs_abort_callbacks_and_removes_temps(tmp_path: Path) -> None:
    seen: list[str] = []
    (tmp_path / "a.jsonl").write_bytes(b'{"n":0}\n')
    batch = GroupCommit()
    batch.replace_json(tmp_path / "r.json", {"v": 1})
    batch.append_bytes(tmp_path / "a.jsonl", b'{"n":1}\n', expect_size=999)
    batch.on_commit(lambda: seen.append("committed"))
    batch.on_abort(lambda: seen.append("aborted"))
    with pytest.raises(OSError, match="changed under the scheduler"):
        batch.commit()
    assert seen == ["aborted"]
    assert batch.state == "aborted"
    assert (tmp_path / "a.jsonl").read_bytes() == b'{"n":0}\n'
    assert _names(tmp_path) == ["a.jsonl"]


def test_group_commit_context_manager_commits_or_aborts(tmp_path: Path) -> None:
    with GroupCommit() as batch:
        batch.append_records(tmp_path / "a.jsonl", [{"n": 1}])
    assert batch.state == "committed"
    with pytest.raises(KeyError), GroupCommit() as failing:
        failing.append_records(tmp_path / "a.jsonl", [{"n": 2}])
        raise KeyError("boom")
    assert failing.state == "aborted"
    assert (tmp_path / "a.jsonl").read_bytes() == b'{"n":1}\n'


def test_group_commit_names_every_fault_point_in_order(tmp_path: Path) -> None:
    recorder = CrashAt(None)
    set_fault_injector(recorder)
    batch = GroupCommit()
    batch.append_records(tmp_path / "a.jsonl", [{"n": 1}])
    batch.replace_json(tmp_path / "r.json", {"v": 1})
    batch.commit()
    assert recorder.seen == [
        "before:commit",
        "before:append:a.jsonl",
        "after:append:a.jsonl",
        "before:stage:r.json",
        "after:stage:r.json",
        "before:sync",
        "after:sync",
        "before:replace:r.json",
        "after:replace:r.json",
        "before:sync-late",
        "after:sync-late",
        "after:commit",
    ]


def test_late_appends_wait_for_the_plain_ones(tmp_path: Path) -> None:
    recorder = CrashAt(None)
    set_fault_injector(recorder)
    batch = GroupCommit()
    batch.append_records(tmp_path / "runtime.jsonl", [{"w": 1}], late=True)
    batch.append_records(tmp_path / "history.jsonl", [{"n": 1}])
    with pytest.raises(RuntimeError, match="another kind of write"):
        batch.append_records(tmp_path / "history.jsonl", [{"n": 2}], late=True)
    with pytest.raises(RuntimeError, match="another kind of write"):
        batch.replace_json(tmp_path / "runtime.jsonl", {})
    batch.commit()
    assert recorder.seen == [
        "before:commit",
        "before:append:history.jsonl",
        "after:append:history.jsonl",
        "before:sync",
        "after:sync",
        "before:append:runtime.jsonl",
        "after:append:runtime.jsonl",
        "before:sync-late",
        "after:sync-late",
        "after:commit",
    ]


def test_crash_before_the_first_flush_writes_no_late_append(tmp_path: Path) -> None:
    batch = GroupCommit()
    batch.append_records(tmp_path / "runtime.jsonl", [{"w": 1}], late=True)
    batch.append_records(tmp_path / "history.jsonl", [{"n": 1}])
    set_fault_injector(CrashAt("before:sync"))
    with pytest.raises(SimulatedCrash):
        batch.commit()
    assert (tmp_path / "history.jsonl").exists()
    assert not (tmp_path / "runtime.jsonl").exists()


@pytest.mark.skipif(not durable.syncfs_available(), reason="syncfs(2) is Linux-only")
def test_many_files_are_flushed_with_one_syncfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: dict[str, int] = {"syncfs": 0, "fsync": 0, "fsync_dir": 0}
    real_syncfs = durable._syncfs_directory
    real_fsync = durable._fsync_path
    real_fsync_dir = durable.fsync_directory

    def count_syncfs(directory: str) -> None:
        calls["syncfs"] += 1
        real_syncfs(directory)

    def count_fsync(path: str | os.PathLike[str]) -> None:
        calls["fsync"] += 1
        real_fsync(path)

    def count_fsync_dir(path: str | os.PathLike[str]) -> None:
        calls["fsync_dir"] += 1
        real_fsync_dir(path)

    monkeypatch.setattr(durable, "_syncfs_directory", count_syncfs)
    monkeypatch.setattr(durable, "_fsync_path", count_fsync)
    monkeypatch.setattr(durable, "fsync_directory", count_fsync_dir)
    batch = GroupCommit()
    for i in range(50):
        batch.append_records(tmp_path / f"h{i}.jsonl", [{"n": i}])
        batch.replace_json(tmp_path / f"r{i}.json", {"n": i})
    batch.commit()
    # One syncfs for 100 files' data; the renames all live in one directory,
    # so one fsync of it makes them durable. No per-file fsync.
    assert calls == {"syncfs": 1, "fsync": 0, "fsync_dir": 1}
    assert all((tmp_path / f"r{i}.json").exists() for i in range(50))


def test_small_batches_fsync_each_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flushed: list[str] = []
    real_fsync = durable._fsync_path

    def record(path: str | os.PathLike[str]) -> None:
        flushed.append(os.path.basename(path))
        real_fsync(path)

    monkeypatch.setattr(durable, "_fsync_path", record)
    monkeypatch.setattr(durable, "_syncfs", None)
    (tmp_path / "a.jsonl").write_bytes(b"")
    batch = GroupCommit(sync="syncfs")  # falls back to fsync without syncfs(2)
    batch.append_records(tmp_path / "a.jsonl", [{"n": 1}])
    batch.commit()
    assert flushed == ["a.jsonl"]


def test_sync_paths_skips_missing_files(tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"x")
    sync_paths([tmp_path / "x", tmp_path / "missing"], [tmp_path], mode="fsync")
    sync_paths([tmp_path / "x", tmp_path / "missing"], [tmp_path], mode="syncfs")


def _listen(batch: GroupCommit, heard: list[str]) -> None:
    """Callbacks that hold the batch, as a store's closures do (their cell
    outlives this call)."""
    batch.on_durable(lambda: heard.append(f"durable {batch.journal_root}"))
    batch.on_commit(lambda: heard.append(f"committed {batch.journal_root}"))
    batch.on_abort(lambda: heard.append(f"aborted {batch.journal_root}"))


@pytest.mark.parametrize("journaled", [False, True], ids=["files", "journal"])
@pytest.mark.parametrize("ending", ["commit", "abort", "failed commit"])
def test_a_finished_batch_is_freed_without_the_cyclic_collector(
    tmp_path: Path, journaled: bool, ending: str
) -> None:
    """Stores register callbacks that close over the batch: a finished batch
    drops them, so that it (and the bytes it staged) is freed as soon as its
    last user lets go, not at some later pass of the cyclic collector."""
    journal = CommitJournal(tmp_path) if journaled else None
    if journal is not None:
        journal.open()
    target = tmp_path / ("missing" if ending == "failed commit" else ".") / "log.jsonl"
    collector_was_on = gc.isenabled()
    gc.disable()
    try:
        batch = GroupCommit(journal=journal)
        batch.append_records(target, [{"n": 1}])
        heard: list[str] = []
        _listen(batch, heard)
        if ending == "abort":
            batch.abort()
        elif ending == "failed commit":
            with pytest.raises(FileNotFoundError):
                batch.commit()
        else:
            batch.commit()
        root = str(tmp_path) if journaled else None
        expected = ["durable", "committed"] if ending == "commit" else ["aborted"]
        assert heard == [f"{what} {root}" for what in expected]
        gone = weakref.ref(batch)
        del batch
        assert gone() is None
    finally:
        if collector_was_on:
            gc.enable()
        if journal is not None:
            journal.close()
