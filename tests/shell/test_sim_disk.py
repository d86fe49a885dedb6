"""The simulated disk (`shell.sim.disk.SimDisk`): the file stores run on it
unchanged, and it loses, tears and refuses writes the way a real disk does."""

from __future__ import annotations

import errno
import random
from datetime import UTC, datetime

import pytest

from shell.definition_store import DefinitionStore
from shell.durable import GroupCommit, append_records, atomic_write_bytes
from shell.history_store import HistoryStore
from shell.journal import CommitJournal
from shell.runtime_store import RuntimeStore
from shell.sim.disk import SIM_STORE_ROOT, SIMULATED, DiskFault, SimDisk
from shell.store_format import ScheduleFiles

T0 = datetime(2024, 1, 1, tzinfo=UTC)
ROOT = str(SIM_STORE_ROOT)


def _disk() -> SimDisk:
    disk = SimDisk()
    disk.make_directory(ROOT, parents=True)
    disk.syncfs(ROOT)
    return disk


def _write(disk: SimDisk, path: str, data: bytes, *, sync: bool) -> None:
    file = disk.open(path, append=True, create=True)
    file.append(data)
    if sync:
        file.fsync()
    file.close()


def test_a_power_cut_keeps_what_was_flushed_and_loses_all_or_none_of_the_rest() -> None:
    for mode, expected in (("all", b"synced\n"), ("none", b"synced\nlater\n")):
        disk = _disk()
        _write(disk, f"{ROOT}/log", b"synced\n", sync=True)
        disk.fsync_directory(ROOT)
        _write(disk, f"{ROOT}/log", b"later\n", sync=False)
        disk.power_cut(random.Random(1), mode)  # type: ignore[arg-type]
        assert disk.read(f"{ROOT}/log") == expected


def test_a_power_cut_that_loses_some_writes_keeps_a_prefix_possibly_torn() -> None:
    outcomes = set()
    for seed in range(40):
        disk = _disk()
        _write(disk, f"{ROOT}/log", b"", sync=True)
        disk.fsync_directory(ROOT)
        for line in (b"one\n", b"two\n", b"three\n"):
            _write(disk, f"{ROOT}/log", line, sync=False)
        disk.power_cut(random.Random(seed), "some")
        data = disk.read(f"{ROOT}/log")
        assert data is not None and b"one\ntwo\nthree\n".startswith(data)
        outcomes.add(data)
    assert any(not data.endswith(b"\n") and data for data in outcomes)  # a torn write
    assert b"one\ntwo\nthree\n" in outcomes


def test_a_new_entry_needs_its_directory_flushed() -> None:
    disk = _disk()
    _write(disk, f"{ROOT}/lost", b"data\n", sync=True)
    disk.power_cut(random.Random(0), "all")
    assert disk.read(f"{ROOT}/lost") is None
    atomic_write_bytes(f"{ROOT}/kept", b"data\n", disk=disk)
    disk.power_cut(random.Random(0), "all")
    assert disk.read(f"{ROOT}/kept") == b"data\n"
    assert disk.list(ROOT) == ["kept"]


def test_a_rename_is_atomic_old_or_new() -> None:
    seen = set()
    for seed in range(20):
        disk = _disk()
        atomic_write_bytes(f"{ROOT}/state", b"old\n", disk=disk)
        temp = f"{ROOT}/.state.tmp"
        _write(disk, temp, b"new\n", sync=True)
        disk.rename(temp, f"{ROOT}/state")
        disk.power_cut(random.Random(seed), "some")
        seen.add(disk.read(f"{ROOT}/state"))
    assert seen <= {b"old\n", b"new\n"} and len(seen) == 2


def test_a_full_disk_tears_the_write_it_refuses() -> None:
    disk = _disk()
    disk.faults = lambda op, path, size: DiskFault(errno.ENOSPC, 3) if op == "write" else None
    with pytest.raises(OSError) as failed:
        _write(disk, f"{ROOT}/log.jsonl", b'{"a":1}\n', sync=True)
    assert failed.value.errno == errno.ENOSPC and SIMULATED in str(failed.value)
    assert disk.read(f"{ROOT}/log.jsonl") == b'{"a'


def test_an_append_the_full_disk_tore_is_cut_back_off_the_file() -> None:
    disk = _disk()
    append_records(f"{ROOT}/log.jsonl", [{"a": 0}], disk=disk)
    disk.faults = lambda op, path, size: DiskFault(errno.ENOSPC, 3) if op == "write" else None
    with pytest.raises(OSError, match="simulated"):
        append_records(f"{ROOT}/log.jsonl", [{"a": 1}], disk=disk)
    assert disk.read(f"{ROOT}/log.jsonl") == b'{"a":0}\n'
    disk.power_cut(random.Random(1), "all")
    assert disk.read(f"{ROOT}/log.jsonl") == b'{"a":0}\n'


def test_an_io_error_of_fsync_leaves_the_write_unsynced() -> None:
    disk = _disk()
    disk.faults = lambda op, path, size: DiskFault(errno.EIO) if op == "fsync" else None
    with pytest.raises(OSError, match="simulated"):
        _write(disk, f"{ROOT}/log", b"x\n", sync=True)
    assert disk.unsynced() > 0


def test_a_failed_create_leaves_no_directory_on_the_simulated_disk() -> None:
    disk = _disk()
    definitions = DefinitionStore(ROOT, disk=disk)
    disk.faults = lambda op, path, size: (
        DiskFault(errno.ENOSPC) if op == "write" and path.endswith("lifecycle.jsonl") else None
    )
    with pytest.raises(OSError):
        definitions.create("s", {"x": 1}, at=T0)
    assert not definitions.exists("s")
    disk.faults = None
    definitions.create("s", {"x": 1}, at=T0)
    assert definitions.get("s")["revision"] == 1


def test_the_file_stores_and_the_journal_survive_a_power_cut_on_the_simulated_disk() -> None:
    disk = _disk()
    definitions = DefinitionStore(ROOT, disk=disk)
    definitions.create("s", {"x": 1}, at=T0)
    journal = CommitJournal(ROOT, disk=disk)
    journal.open()
    history, runtime = HistoryStore(ROOT, disk=disk), RuntimeStore(ROOT, disk=disk)
    history.recover("s")
    runtime.load("s")
    batch = GroupCommit(journal=journal)
    history.append_decision("s", instant=T0, status="skipped-misfire", recorded_at=T0, batch=batch)
    batch.commit()
    files = ScheduleFiles.of(ROOT, "s")
    assert disk.take_history_rows() == {"s": [disk.read(files.history)]}
    # The files were written without a flush: the cut loses them, the journal
    # (flushed before they were written) gives them back.
    disk.power_cut(random.Random(0), "all")
    assert disk.read(files.history) is None
    CommitJournal(ROOT, disk=disk).open()
    rows, _ = HistoryStore(ROOT, disk=disk).page("s", limit=10)
    assert [row["status"] for row in rows] == ["skipped-misfire"]
    assert DefinitionStore(ROOT, disk=disk).get("s")["revision"] == 1
    # Rows the replay rewrote were seen already.
    assert disk.take_history_rows() == {}
