"""The commit journal: one append and one fsync make a whole group commit durable.

A scheduler wake-up writes to thousands of per-schedule files (a herd of
10,000 admissions appends to 10,000 history logs). Flushing them is the
kernel writing back 10,000 scattered pages: about 0.3-0.6 s here. With a
journal, the group commit (`shell.durable.GroupCommit`) first appends every
write of the batch, as one record, to `<store root>/commit.journal` and
fsyncs that one file; the batch is durable at that point. Only then does it
write the per-schedule files, without flushing them: the journal holds
whatever the kernel has not written back yet. The scheduler's disk holds the
histories' appends in memory until the checkpoint (`shell.write_back`).

A record is `MAGIC | crc32 | length | payload`; its payload lists the
batch's writes, each an *append* (file, offset, bytes: the bytes belong at
that offset) or a *replace* (file, whole new content). Paths are relative to
the store root.

**Replay** (`replay_journal`, run by whoever opens the store for writing,
under the scheduler lock, before any store reads its files) applies every
intact record in order (appends that follow one another in a file written as
one), then checkpoints. Applying is idempotent:

- an append whose bytes already end within the file is skipped; one whose
  offset is at or before the end of the file is written at its offset (a
  torn or lost apply is rewritten whole); one whose offset lies past the end
  of the file would leave a hole, so it is not written and is reported (the
  file lost bytes no record covers: damage, which the stores then report);
- a replace rewrites the file atomically; appends to that file from records
  before its last replace are skipped (their offsets belong to the old file).

A record that is torn or fails its checksum ends the replay: it is the tail
of a commit that never returned (its fsync did not complete), so nothing in
it was acted on and none of its writes was applied.

A **checkpoint** flushes the whole filesystem (`syncfs`, through the disk,
which first writes what it held: every applied write is then durable in its
own file) and empties the journal. It runs after a
replay, at a clean close, after a commit once the journal has grown past
`CHECKPOINT_AT_BYTES` and its oldest record is `CHECKPOINT_AFTER_S` old, or
past `CHECKPOINT_LIMIT_BYTES` (then off the decision's path: the batch is
already durable and acknowledged), and at the running scheduler's quiet
moments once its oldest record is `QUIET_CHECKPOINT_AFTER_S` old, whatever
its size (`checkpoint_if_aged`: the held appends and the history indexes'
headers wait for it). A
crash between the flush and the truncation only replays writes that are
already in place.

Only appends and whole-file replaces made through a journaled batch are
journaled. Until the next checkpoint, another writer may append to a file
the journal only appends to (a replay skips offsets already written), but
must not shorten or replace it, nor write at all to a file the journal holds
a replace for (the replay rewrites it). In this code base, while the
scheduler runs only its batches write histories and runtime logs; torn-tail
repairs and index rebuilds run during recovery, after the replay.
"""

from __future__ import annotations

import logging
import os
import struct
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from shell.disk import OS_DISK, Disk, DiskFile, exists
from shell.durable import (
    JournalEntry,
    fault_point,
    fsync_directory,
    replace_unsynced,
    sync_paths,
    syncfs_available,
)
from shell.fence import check_fence
from shell.store_format import read_file
from shell.write_back import drop_deferred

__all__ = [
    "CHECKPOINT_AFTER_S",
    "CHECKPOINT_AT_BYTES",
    "CHECKPOINT_LIMIT_BYTES",
    "JOURNAL_FILE",
    "QUIET_CHECKPOINT_AFTER_S",
    "CommitJournal",
    "ReplayReport",
    "journal_supported",
    "replay_journal",
]

_log = logging.getLogger(__name__)

JOURNAL_FILE: Final = "commit.journal"
# Past this size, a commit checkpoints after it returns once the journal's
# oldest record is CHECKPOINT_AFTER_S old: by then the kernel has written most
# of those files back on its own (dirty pages expire after 30 s by default),
# so the checkpoint's syncfs finds little to do. Right after a herd it would
# flush everything the herd dirtied, seconds of I/O on a cold filesystem.
# A round of 10,000 every-minute schedules is about 9 MB of records (each
# occurrence's admitted row and run record, and the history row of the
# previous minute's run's end), so at that load this bound, not the quiet
# interval below, sets the pace: a checkpoint every second minute, its
# writes 0.25-0.45 s of CPU (`docs/performance.md`, section 11, fifteenth
# pass), against a replay after a crash bounded to about two rounds.
CHECKPOINT_AT_BYTES: Final = 16 << 20
CHECKPOINT_AFTER_S: Final = 35.0
# At a quiet moment, a checkpoint once the oldest record is this old: the
# scheduler's disk holds the histories' appends until then
# (`shell.write_back`), so each history is written once per interval (an
# every-minute schedule's five occurrences in one write), and a start after a
# crash replays at most this much of the journal (less at a size bound), and
# of each history the rows since its last header, which follows a checkpoint
# (up to about two intervals). The running startup checkpoint, every
# `checkpoint_interval_s` (300 s by default), checkpoints too.
QUIET_CHECKPOINT_AFTER_S: Final = 300.0
# Past this size a commit checkpoints whatever the age: it bounds what a
# replay reads.
CHECKPOINT_LIMIT_BYTES: Final = 64 << 20

_MAGIC: Final = b"WFJ1"
_HEADER: Final = struct.Struct("<4sIQ")  # magic, crc32(payload), len(payload)
_ENTRY: Final = struct.Struct("<cHQI")  # kind, len(path), offset, len(data)
_APPEND: Final = b"A"
_REPLACE: Final = b"R"


@dataclass(slots=True)
class ReplayReport:
    """What a replay found and did."""

    records: int = 0
    appends_written: int = 0
    replaces_written: int = 0
    already_in_place: int = 0
    # Bytes after the last intact record (a commit that never returned).
    torn_bytes: int = 0
    # Writes that could not be applied, each described for the operator.
    problems: list[str] = field(default_factory=list)
    # Files written by the replay (flushed one by one where syncfs is missing).
    written: list[str] = field(default_factory=list)


def _relative(path: str, prefix: str, root: str) -> bytes:
    # Every journaled file lies under the root; slicing off the prefix costs
    # nothing, where `os.path.relpath` took 30 us a path (0.3 s for a herd).
    if path.startswith(prefix):
        return path[len(prefix) :].encode()
    relative = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    if relative.startswith(".."):
        raise ValueError(f"{path} is not under the store root {root}; it cannot be journaled")
    return relative.encode()


def _encode(root: str, entries: Sequence[JournalEntry]) -> bytes:
    parts: list[bytes] = []
    prefix = os.path.join(root, "")
    for kind, path, offset, data in entries:
        relative = _relative(path, prefix, root)
        parts.append(
            _ENTRY.pack(_APPEND if kind == "append" else _REPLACE, len(relative), offset, len(data))
        )
        parts.append(relative)
        parts.append(data)
    payload = b"".join(parts)
    return _HEADER.pack(_MAGIC, zlib.crc32(payload), len(payload)) + payload


def _decode(root: str, payload: bytes) -> list[JournalEntry] | None:
    entries: list[JournalEntry] = []
    position, end = 0, len(payload)
    while position < end:
        if position + _ENTRY.size > end:
            return None
        kind, path_length, offset, data_length = _ENTRY.unpack_from(payload, position)
        position += _ENTRY.size
        stop = position + path_length + data_length
        if kind not in (_APPEND, _REPLACE) or stop > end:
            return None
        relative = payload[position : position + path_length].decode()
        data = payload[position + path_length : stop]
        position = stop
        if os.path.isabs(relative) or ".." in Path(relative).parts:
            return None
        name: Literal["append", "replace"] = "append" if kind == _APPEND else "replace"
        entries.append((name, os.path.join(root, relative), offset, data))
    return entries


def _read_records(path: Path, report: ReplayReport, disk: Disk) -> list[list[JournalEntry]]:
    content = read_file(str(path), disk=disk)
    if content is None:
        return []
    root = str(path.parent)
    records: list[list[JournalEntry]] = []
    position = 0
    while position < len(content):
        header = content[position : position + _HEADER.size]
        if len(header) < _HEADER.size:
            break
        magic, crc, length = _HEADER.unpack(header)
        payload = content[position + _HEADER.size : position + _HEADER.size + length]
        if magic != _MAGIC or len(payload) < length or zlib.crc32(payload) != crc:
            break
        entries = _decode(root, payload)
        if entries is None:
            break
        records.append(entries)
        position += _HEADER.size + length
    report.torn_bytes = len(content) - position
    return records


@dataclass(slots=True)
class _Run:
    """Journaled appends to one file that follow one another from `offset`."""

    offset: int
    end: int
    pieces: list[bytes]


def _apply_append(path: str, run: _Run, report: ReplayReport, disk: Disk) -> None:
    """Write `run` unless the file holds it already (each of its appends
    counts in `report`)."""
    offset, end, pieces = run.offset, run.end, run.pieces
    data = b"".join(pieces)
    try:
        file = disk.open(path, write=True, create=True)
    except FileNotFoundError:
        report.problems.append(f"{path}: its directory is gone; {len(data)} bytes not written")
        return
    try:
        size = file.size()
        if size >= end:
            report.already_in_place += len(pieces)
            return
        if size < offset:
            report.problems.append(
                f"{path} is {size} bytes but a journaled write starts at offset {offset}:"
                " the file lost bytes that no journal record holds; not written"
            )
            return
        file.write_at(data, offset)
        report.appends_written += len(pieces)
        report.written.append(path)
    finally:
        file.close()


def journal_supported(disk: Disk = OS_DISK) -> bool:
    """True where a checkpoint can flush a whole filesystem at once (Linux)."""
    # The OS disk asks `shell.durable`, whose syncfs tests replace.
    return syncfs_available() if disk is OS_DISK else disk.can_syncfs()


def replay_journal(store_root: str | os.PathLike[str], *, disk: Disk = OS_DISK) -> ReplayReport:
    """Apply the journal of `store_root` to its files, flush, and empty it.

    Only the process that owns the store may call it (under the scheduler
    lock), before any store reads the files. Cheap when the journal is empty
    or missing (a clean close leaves it empty).
    """
    root = Path(store_root)
    path = root / JOURNAL_FILE
    report = ReplayReport()
    records = _read_records(path, report, disk)
    if report.torn_bytes:
        _log.warning(
            "commit journal %s ends with %d bytes of a commit that never completed;"
            " they are dropped (nothing in them was acted on)",
            path,
            report.torn_bytes,
        )
    if not records and not report.torn_bytes:
        return report
    check_fence(path)
    last_replace: dict[str, tuple[int, int]] = {}
    for number, entries in enumerate(records):
        for position, (kind, target, _, _) in enumerate(entries):
            if kind == "replace":
                last_replace[target] = (number, position)
    # Appends that follow one another in a file are written as one (a
    # history's rows since the last checkpoint: the scheduler held them,
    # `shell.write_back`).
    runs: dict[str, _Run] = {}
    for number, entries in enumerate(records):
        for position, (kind, target, offset, data) in enumerate(entries):
            replaced = last_replace.get(target)
            if kind == "append":
                if replaced is not None and (number, position) < replaced:
                    continue
                run = runs.get(target)
                if run is not None and run.end == offset:
                    run.pieces.append(data)
                    run.end += len(data)
                    continue
                if run is not None:
                    _apply_append(target, run, report, disk)
                runs[target] = _Run(offset, offset + len(data), [data])
            elif replaced == (number, position):
                try:
                    replace_unsynced(target, data, disk=disk)
                except FileNotFoundError:
                    report.problems.append(f"{target}: its directory is gone; not replaced")
                    continue
                report.replaces_written += 1
                report.written.append(target)
    for target, run in runs.items():
        _apply_append(target, run, report, disk)
    report.records = len(records)
    for problem in report.problems:
        _log.error("commit journal replay: %s", problem)
    _checkpoint(root, path, report.written, disk)
    if report.records:
        _log.warning(
            "commit journal replayed %d commit(s): %d append(s) and %d replace(s) written,"
            " %d already in place",
            report.records,
            report.appends_written,
            report.replaces_written,
            report.already_in_place,
        )
    return report


def _checkpoint(root: Path, path: Path, written: Sequence[str], disk: Disk) -> None:
    # Emptying the journal is a write: a fenced owner leaves it to the next one.
    check_fence(path)
    fault_point("before:checkpoint")
    if journal_supported(disk):
        sync_paths([], [str(root)], mode="syncfs", disk=disk)
    else:
        # Only a replay gets here (a journal is kept only where syncfs exists),
        # and it knows every file it wrote.
        sync_paths(written, {os.path.dirname(p) for p in written}, mode="fsync", disk=disk)
    fault_point("before:journal-truncate")
    try:
        file = disk.open(str(path), write=True)
    except FileNotFoundError:
        return
    try:
        file.truncate(0)
        file.fsync()
    finally:
        file.close()
    fault_point("after:checkpoint")


class CommitJournal:
    """The journal of one store root, owned by its scheduler (see the module
    docstring). `open()` replays and then takes appends; `close()` checkpoints.

    Its checkpoint needs `syncfs(2)` (Linux); elsewhere the scheduler commits
    without a journal (`journal_supported()`).
    """

    def __init__(
        self,
        store_root: str | os.PathLike[str],
        *,
        checkpoint_at_bytes: int = CHECKPOINT_AT_BYTES,
        checkpoint_after_s: float = CHECKPOINT_AFTER_S,
        quiet_checkpoint_after_s: float = QUIET_CHECKPOINT_AFTER_S,
        checkpoint_limit_bytes: int = CHECKPOINT_LIMIT_BYTES,
        monotonic: Callable[[], float] = time.monotonic,
        disk: Disk = OS_DISK,
    ) -> None:
        self.store_root = Path(store_root)
        self._disk = disk
        self.path = self.store_root / JOURNAL_FILE
        self._root_text = str(self.store_root)
        self._checkpoint_at = checkpoint_at_bytes
        self._checkpoint_after = checkpoint_after_s
        self._quiet_checkpoint_after = quiet_checkpoint_after_s
        self._checkpoint_limit = max(checkpoint_limit_bytes, checkpoint_at_bytes)
        self._monotonic = monotonic
        self._fd: DiskFile | None = None
        self._size = 0
        # When the oldest record since the last checkpoint was written.
        self._oldest: float | None = None

    @property
    def disk(self) -> Disk:
        """The disk of the journal and of the files its batches write."""
        return self._disk

    @property
    def size(self) -> int:
        """Bytes of records written since the last checkpoint."""
        return self._size

    def open(self) -> ReplayReport:
        """Replay what a previous owner left, then open for appends."""
        self.close_file()
        # What the disk held of the records (`shell.write_back`) is written by
        # the replay, with the rest of them.
        drop_deferred(self._disk)
        report = replay_journal(self.store_root, disk=self._disk)
        path = str(self.path)
        created = not exists(self._disk, path)
        self._fd = self._disk.open(path, append=True, create=True)
        if created:
            fsync_directory(self.store_root, disk=self._disk)
        self._size = self._fd.size()
        return report

    def write(self, entries: Sequence[JournalEntry]) -> None:
        """Append one record holding `entries` and make it durable."""
        if self._fd is None:
            raise RuntimeError(f"commit journal {self.path} is not open")
        record = _encode(self._root_text, entries)
        check_fence(self.path)
        fault_point(f"before:append:{JOURNAL_FILE}")
        try:
            self._fd.append(record)
            self._fd.fsync()
        except OSError:
            self._cut_back()
            raise
        self._size += len(record)
        if self._oldest is None:
            self._oldest = self._monotonic()
        fault_point(f"after:append:{JOURNAL_FILE}")

    def _cut_back(self) -> None:
        """After a failed write (a full disk writes part of a record): cut the
        journal back to its last whole record. A torn record ends a replay, so
        left in place it would hide every record appended after it once the
        disk has room again. Shrinking needs no space; if it fails all the
        same, the journal is closed and the next `open()` (the scheduler's
        rebuild after the failed round) replays and cuts it."""
        assert self._fd is not None
        try:
            self._fd.truncate(self._size)
            self._fd.fsync()
        except OSError as exc:
            _log.error("could not cut %s back after a failed write: %s", self.path, exc)
            self.close_file()

    def after_commit(self) -> None:
        """Checkpoint once the journal is past its size bound and its oldest
        record has aged (or past its hard limit)."""
        if self._size >= self._checkpoint_limit or (
            self._size >= self._checkpoint_at
            and self._oldest is not None
            and self._monotonic() - self._oldest >= self._checkpoint_after
        ):
            self.checkpoint()

    def checkpoint_if_aged(self) -> bool:
        """Checkpoint once the oldest record has aged `quiet_checkpoint_after_s`,
        whatever the journal's size; True if it did. For a quiet moment: the
        held appends are written (one write per history for the interval's
        rows), and the history indexes' headers, which wait for a flush of
        the filesystem, go out at the next commit (a start after a crash then
        replays about an interval of rows, not all since the last checkpoint
        of another kind)."""
        if self._oldest is None or self._monotonic() - self._oldest < self._quiet_checkpoint_after:
            return False
        self.checkpoint()
        return True

    def checkpoint(self) -> None:
        """Make every applied write durable in its own file and empty the journal."""
        if self._fd is None or self._size == 0:
            return
        _checkpoint(self.store_root, self.path, (), self._disk)
        self._size = 0
        self._oldest = None

    def close(self) -> None:
        """Checkpoint and close (a clean stop leaves an empty journal)."""
        if self._fd is None:
            return
        try:
            self.checkpoint()
        finally:
            self.close_file()

    def close_file(self) -> None:
        """Close without a checkpoint (the next `open()` replays)."""
        if self._fd is not None:
            self._fd.close()
            self._fd = None
            self._size = 0
            self._oldest = None
