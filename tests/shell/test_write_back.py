"""The write-back disk: a journaled batch's appends held in memory until the
journal's checkpoint, read by this process as if written (`shell.write_back`)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from shell.disk import OS_DISK, kept_size
from shell.durable import GroupCommit
from shell.file_backend import FileBackend
from shell.journal import JOURNAL_FILE, CommitJournal, journal_supported
from shell.sim.disk import DiskFault, SimFileSystem
from shell.store_format import read_file
from shell.write_back import WriteBackDisk, underlying

pytestmark = pytest.mark.skipif(not journal_supported(), reason="the journal needs syncfs")


def _file(directory: Path, content: bytes = b"first\n") -> str:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "history.jsonl"
    path.write_bytes(content)
    return str(path)


def test_a_held_append_reads_as_written_and_reaches_the_file_at_syncfs(tmp_path: Path) -> None:
    path = _file(tmp_path)
    disk = WriteBackDisk()
    disk.defer_append(path, 6, b"second\n")
    disk.defer_append(path, 13, b"third\n")
    # Not on the disk yet...
    assert Path(path).read_bytes() == b"first\n"
    # ...but every read of this process sees it.
    assert read_file(path, disk=disk) == b"first\nsecond\nthird\n"
    assert disk.stat(path).st_size == 19
    assert kept_size(disk, path) == 19
    file = disk.open(path)
    try:
        assert file.size() == 19
        assert file.read_at(9, 3) == b"st\nsecond"
        assert file.read_at(4, 13) == b"thir"
        assert file.read_at(100, 0) == b"first\nsecond\nthird\n"
        assert file.read(8) == b"first\nse" and file.read(100) == b"cond\nthird\n"
    finally:
        file.close()
    assert disk.held_bytes == 13 and disk.held_files == 1
    assert disk.syncfs(str(tmp_path))
    assert Path(path).read_bytes() == b"first\nsecond\nthird\n"
    assert disk.held_bytes == 0


@pytest.mark.parametrize("derived", [False, True], ids=["append", "derived"])
def test_a_write_that_creates_its_file_is_written_at_once(tmp_path: Path, derived: bool) -> None:
    """The stores ask whether a schedule's history and index exist of the
    directory."""
    path = str(tmp_path / ("history.idx" if derived else "history.jsonl"))
    disk = WriteBackDisk()
    if derived:
        disk.hold_write(path, 0, b"first\n")
    else:
        disk.defer_append(path, 0, b"first\n")
    assert Path(path).read_bytes() == b"first\n"
    assert disk.held_files == 0


def test_held_bytes_read_as_the_file_will_be_once_they_are_written(tmp_path: Path) -> None:
    """A journaled append goes where the file ended at its commit; should one
    go elsewhere, reads still show what the checkpoint will leave."""
    path = _file(tmp_path)
    disk = WriteBackDisk()
    disk.defer_append(path, 6, b"second\n")
    disk.defer_append(path, 3, b"ST\n")
    assert Path(path).read_bytes() == b"first\n"
    assert read_file(path, disk=disk) == b"firST\nsecond\n"
    disk.write_all()
    assert Path(path).read_bytes() == b"firST\nsecond\n"


def test_writing_renaming_removing_and_flushing_a_file_see_its_held_bytes(
    tmp_path: Path,
) -> None:
    disk = WriteBackDisk()
    opened = _file(tmp_path / "a")
    disk.defer_append(opened, 6, b"held\n")
    file = disk.open(opened, write=True)
    try:
        # Opened to write (a torn-tail repair truncates), the file is whole.
        assert file.size() == 11
    finally:
        file.close()

    flushed = _file(tmp_path / "b")
    disk.defer_append(flushed, 6, b"held\n")
    reader = disk.open(flushed)
    try:
        reader.fsync()
    finally:
        reader.close()
    assert Path(flushed).read_bytes() == b"first\nheld\n"

    replaced = _file(tmp_path / "c")
    disk.defer_append(replaced, 6, b"stale\n")
    new = tmp_path / "c" / "new"
    new.write_bytes(b"new\n")
    disk.rename(str(new), replaced)
    assert read_file(replaced, disk=disk) == b"new\n"

    removed = _file(tmp_path / "d")
    disk.defer_append(removed, 6, b"gone\n")
    disk.remove(removed)
    assert not os.path.exists(removed)
    assert disk.held_files == 0


def test_writes_of_a_derived_file_are_held_wherever_they_go(tmp_path: Path) -> None:
    """A history's index: entries rewritten in place, new ones past the end
    (one held open leaves a gap a later write fills), its header at 0."""
    path = str(tmp_path / "history.idx")
    Path(path).write_bytes(b"HEADER--aaaaaaaa")
    disk = WriteBackDisk()
    disk.hold_write(path, 8, b"AAAA")  # an entry rewritten
    disk.hold_write(path, 20, b"cccc")  # past the end, leaving a gap
    disk.hold_write(path, 24, b"dd")  # two writes that extend the last piece
    disk.hold_write(path, 26, b"dd")
    disk.hold_write(path, 0, b"header")  # the header
    assert Path(path).read_bytes() == b"HEADER--aaaaaaaa"
    assert read_file(path, disk=disk) == b"header--AAAAaaaa\0\0\0\0ccccdddd"
    assert disk.stat(path).st_size == 28
    file = disk.open(path)
    try:
        assert file.read_at(4, 12) == b"aaaa"  # the file's own bytes
        assert file.read_at(6, 18) == b"\0\0cccc"
        assert file.read_at(100, 26) == b"dd"
        assert file.read_at(4, 28) == b""
    finally:
        file.close()
    disk.hold_write(path, 16, b"bbbb")  # fills the gap: one piece from 16 on
    assert read_file(path, disk=disk) == b"header--AAAAaaaabbbbccccdddd"
    disk.write_all()
    assert Path(path).read_bytes() == b"header--AAAAaaaabbbbccccdddd"
    assert disk.held_files == 0


def test_a_file_another_program_shortened_refuses_the_held_bytes(tmp_path: Path) -> None:
    """They would leave a hole: refused, and dropped so that the scheduler's
    next size check sees the file as it is (a journal replay reports it)."""
    path = _file(tmp_path)
    disk = WriteBackDisk()
    disk.defer_append(path, 6, b"second\n")
    os.truncate(path, 2)
    with pytest.raises(OSError) as raised:
        disk.write_all()
    assert raised.value.errno == errno.EIO
    assert "changed under the scheduler" in str(raised.value)
    assert Path(path).read_bytes() == b"fi"
    assert disk.stat(path).st_size == 2
    assert disk.held_files == 0


def test_a_failed_write_keeps_the_bytes_held_for_the_next_flush() -> None:
    failing = {"on": True}

    def faults(op: str, path: str, size: int) -> DiskFault | None:
        if failing["on"] and op == "write" and path.endswith("history.jsonl"):
            return DiskFault(errno.ENOSPC)
        return None

    sim = SimFileSystem(faults=faults)
    sim.make_directory("/store", parents=True)
    created = sim.open("/store/history.jsonl", write=True, create=True)
    failing["on"] = False
    created.write_at(b"first\n", 0)
    created.close()
    failing["on"] = True
    disk = WriteBackDisk(sim)
    disk.defer_append("/store/history.jsonl", 6, b"second\n")
    with pytest.raises(OSError) as raised:
        disk.syncfs("/store")
    assert raised.value.errno == errno.ENOSPC
    assert disk.held_files == 1
    assert read_file("/store/history.jsonl", disk=disk) == b"first\nsecond\n"
    failing["on"] = False
    assert disk.syncfs("/store")
    assert read_file("/store/history.jsonl", disk=sim) == b"first\nsecond\n"


def test_a_journaled_batch_holds_its_appends_until_the_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    path = _file(root)
    disk = WriteBackDisk()
    journal = CommitJournal(root, disk=disk)
    journal.open()
    with GroupCommit(journal=journal) as batch:
        batch.append_bytes(path, b"second\n", expect_size=6)
    assert Path(path).read_bytes() == b"first\n"
    assert (root / JOURNAL_FILE).stat().st_size > 0
    # The next batch's size check counts what is held.
    with GroupCommit(journal=journal) as batch:
        batch.append_bytes(path, b"third\n", expect_size=13)
    assert read_file(path, disk=disk) == b"first\nsecond\nthird\n"
    journal.checkpoint()
    assert Path(path).read_bytes() == b"first\nsecond\nthird\n"
    assert (root / JOURNAL_FILE).stat().st_size == 0
    journal.close()


def test_early_and_seldom_appends_of_a_journaled_batch_are_written_at_once(
    tmp_path: Path,
) -> None:
    """An early append's owner appends after it by itself (the run log); a
    seldom one (a runtime record) has little to save and stays current."""
    root = tmp_path / "store"
    early = _file(root / "early")
    seldom = _file(root / "seldom")
    held = _file(root / "held")
    disk = WriteBackDisk()
    journal = CommitJournal(root, disk=disk)
    journal.open()
    with GroupCommit(journal=journal) as batch:
        batch.append_bytes(early, b"early\n", early=True)
        batch.append_bytes(seldom, b"seldom\n", seldom=True)
        batch.append_bytes(held, b"held\n")
    assert Path(early).read_bytes() == b"first\nearly\n"
    assert Path(seldom).read_bytes() == b"first\nseldom\n"
    assert Path(held).read_bytes() == b"first\n"
    assert disk.held_files == 1
    journal.close()
    assert Path(held).read_bytes() == b"first\nheld\n"


def test_a_process_that_dies_holding_appends_loses_none_of_them(tmp_path: Path) -> None:
    """The journal holds them: the next owner's replay writes them."""
    root = tmp_path / "store"
    root.mkdir()
    path = _file(root)
    dead = WriteBackDisk()
    journal = CommitJournal(root, disk=dead)
    journal.open()
    for row in (b"second\n", b"third\n", b"fourth\n"):
        with GroupCommit(journal=journal) as batch:
            batch.append_bytes(path, row)
    journal.close_file()  # the process is gone: nothing more is written
    assert Path(path).read_bytes() == b"first\n"
    successor = CommitJournal(root, disk=WriteBackDisk())
    report = successor.open()
    # Three appends of three records, written as one.
    assert (report.records, report.appends_written) == (3, 3)
    assert report.written == [path]
    assert Path(path).read_bytes() == b"first\nsecond\nthird\nfourth\n"
    successor.close()


def test_a_reopened_journal_forgets_what_its_disk_held_and_replays_it(tmp_path: Path) -> None:
    """A rebuild after a failed round reopens the journal: the replay writes
    the held appends, which are then not written a second time."""
    root = tmp_path / "store"
    root.mkdir()
    path = _file(root)
    disk = WriteBackDisk()
    journal = CommitJournal(root, disk=disk)
    journal.open()
    with GroupCommit(journal=journal) as batch:
        batch.append_bytes(path, b"second\n", expect_size=6)
    assert disk.held_files == 1
    journal.open()
    assert disk.held_files == 0
    assert Path(path).read_bytes() == b"first\nsecond\n"
    journal.close()


def test_the_run_logs_disk_is_the_one_a_write_back_disk_wraps() -> None:
    assert underlying(WriteBackDisk(OS_DISK)) is OS_DISK
    assert underlying(OS_DISK) is OS_DISK


async def test_a_fenced_scheduler_writes_nothing_it_held(tmp_path: Path) -> None:
    """The store may be another's: the next owner's replay writes them."""
    root = tmp_path / "store"
    path = _file(root / "schedules" / "s0")
    backend = FileBackend(root)
    disk = backend.disk
    assert isinstance(disk, WriteBackDisk) and backend.journal is not None
    backend.journal.open()
    with backend.new_batch() as batch:
        batch.append_bytes(path, b"held\n")
    assert disk.held_files == 1
    await backend.close_owned(owned=False, consistent=False)
    assert disk.held_files == 0
    assert Path(path).read_bytes() == b"first\n"
    assert (root / JOURNAL_FILE).stat().st_size > 0
