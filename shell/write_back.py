"""Journaled appends, and the index writes derived from them, held in memory
until the journal's checkpoint.

Once a group commit's record is fsynced in the commit journal
(`shell/journal.py`), the batch is durable: its appends to the schedules'
files only have to be there before the journal is emptied, and whenever this
process reads those files. Writing them right after each commit cost a
`pwrite` and a size check per history per commit, and an index write per
occurrence, on thousands of small files whose inodes and pages the kernel
then handles one by one: at 1,000 every-minute schedules most of the
scheduler's system time and about a tenth of its user time
(`docs/performance.md`, section 11, twelfth and thirteenth passes).

`WriteBackDisk` wraps the store's disk for the scheduler that owns it. A
journaled batch hands it its appends (`defer_append`) instead of writing
them, and the history index its entries (`hold_write`): each file's held
bytes are pieces at their offsets, the appends since the last checkpoint
one piece. Every operation of this process sees them as written:

- a read-only `open` gives a file whose size and reads include the held
  bytes, and `stat` the size with them;
- the disk's size check before a commit (`kept_size`) answers from memory;
- an `open` to write, a write through `write_kept`, a `rename` of the file,
  `fsync` of it: its held bytes are written first; a `rename` over it or its
  removal drops them (the file they belonged to is gone, as a journal replay
  would skip them);
- `syncfs`, which is how the journal checkpoints, writes every held piece
  first (one `pwrite` each), so an emptied journal never held the only copy
  of anything, and a flush counted by `shell.durable.filesystem_flushes`
  (which the index headers wait for) covers the held entries too.

An append goes where the file ended when its batch committed (the size was
checked then), so the bytes before it are the file's own; one at offset 0,
which creates the file, is written at once (the stores ask whether a file
exists). Held appends are written where the journal put them, and refused
with `EIO` when the file is shorter than that, which only a change by
another program makes (a replay refuses the same hole): they are then
dropped from memory, so that the scheduler's next size check sees the file
as it is, fails its commit, and the rebuild's replay reports the damage. A
failed write keeps its bytes held and the journal whole: the checkpoint
raises before emptying it.

A crash loses the held bytes with the process and nothing else: the journal
holds the appends, and the next owner's replay writes them before any store
reads the files; no index header describes held entries (a header follows
a flush, which wrote them), so a load replays those rows. `CommitJournal.open`
drops what is held before it replays, and a scheduler fenced at its stop
drops it unwritten.

Other processes see the files as of the last checkpoint; the ones that open
a store take its lock and replay the journal first, and the rest go through
the scheduler's server (`docs/storage.md`, "Held appends").
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field

from shell.disk import OS_DISK, Disk, DiskFile, DiskStat, OsDisk, kept_size, write_kept
from shell.durable import fault_point, sync_paths, syncfs_available

__all__ = ["WriteBackDisk", "drop_deferred", "hold_write", "underlying"]


@dataclass(slots=True)
class _Held:
    """What is held of one file: `pieces` (offset -> bytes; none overlapping
    or touching another), and its size on the disk when the first was held.
    `journaled`: appends the journal holds, checked when written (a history);
    else writes of a derived file (its index), which nothing depends on."""

    on_disk: int
    journaled: bool
    pieces: dict[int, bytearray] = field(default_factory=dict)
    # Where the last piece ends, and where it starts: most writes extend it.
    end: int = 0
    last: int = -1

    def size(self) -> int:
        return max(self.on_disk, self.end)

    def bytes_held(self) -> int:
        return sum(len(piece) for piece in self.pieces.values())

    def put(self, offset: int, data: bytes) -> None:
        if offset == self.end and self.last >= 0:
            self.pieces[self.last] += data
            self.end += len(data)
            return
        start, stop = offset, offset + len(data)
        merged = [
            at for at, piece in self.pieces.items() if at <= stop and at + len(piece) >= offset
        ]
        for at in merged:
            start = min(start, at)
            stop = max(stop, at + len(self.pieces[at]))
        whole = bytearray(stop - start)
        for at in merged:
            piece = self.pieces.pop(at)
            whole[at - start : at - start + len(piece)] = piece
        whole[offset - start : offset - start + len(data)] = data
        self.pieces[start] = whole
        if stop >= self.end:
            self.end, self.last = stop, start

    def overlaps(self, start: int, stop: int) -> bool:
        """Whether a held piece lies in `[start, stop)`."""
        return any(at < stop and at + len(piece) > start for at, piece in self.pieces.items())

    def read_into(self, buffer: bytearray, offset: int) -> None:
        """Lay the held bytes over `buffer`, which holds the file from `offset`."""
        stop = offset + len(buffer)
        for at, piece in self.pieces.items():
            low, high = max(at, offset), min(at + len(piece), stop)
            if low < high:
                buffer[low - offset : high - offset] = piece[low - at : high - at]


class _HeldStat:
    """A file's `stat` with its held bytes counted in its size."""

    __slots__ = ("_stat", "st_size")

    def __init__(self, status: DiskStat, size: int) -> None:
        self._stat = status
        self.st_size = size

    @property
    def st_mtime_ns(self) -> int:
        return self._stat.st_mtime_ns

    @property
    def st_ctime_ns(self) -> int:
        return self._stat.st_ctime_ns

    @property
    def st_ino(self) -> int:
        return self._stat.st_ino

    @property
    def st_dev(self) -> int:
        return self._stat.st_dev

    @property
    def st_mode(self) -> int:
        return self._stat.st_mode


class _HeldFile:
    """A file opened to read, whose held bytes read as written."""

    __slots__ = ("_disk", "_file", "_held", "_path", "_position")

    def __init__(self, disk: WriteBackDisk, path: str, file: DiskFile, held: _Held) -> None:
        self._disk = disk
        self._path = path
        self._file = file
        self._held = held
        self._position = 0

    def read_at(self, size: int, offset: int) -> bytes:
        held = self._held
        wanted = min(size, held.size() - offset)
        if wanted <= 0:
            return b""
        on_disk = self._file.read_at(wanted, offset) if offset < held.on_disk else b""
        if len(on_disk) == wanted and not held.overlaps(offset, offset + wanted):
            return on_disk
        buffer = bytearray(on_disk)
        if len(buffer) < wanted:
            # What the file lacks reads as a hole would.
            buffer.extend(bytes(wanted - len(buffer)))
        held.read_into(buffer, offset)
        return bytes(buffer)

    def read(self, size: int) -> bytes:
        data = self.read_at(size, self._position)
        self._position += len(data)
        return data

    def write_at(self, data: bytes, offset: int) -> None:
        raise OSError(errno.EBADF, "opened to read", self._path)

    def append(self, data: bytes) -> None:
        raise OSError(errno.EBADF, "opened to read", self._path)

    def size(self) -> int:
        return self._held.size()

    def truncate(self, size: int) -> None:
        raise OSError(errno.EBADF, "opened to read", self._path)

    def fsync(self) -> None:
        self._disk.write_held(self._path)
        self._file.fsync()

    def close(self) -> None:
        self._file.close()


class WriteBackDisk:
    """`Disk` that holds a journaled batch's appends, and the writes of the
    files derived from them, until a flush (see the module docstring). Only
    the scheduler that owns the store uses one: held bytes are this
    process's."""

    def __init__(self, inner: Disk = OS_DISK) -> None:
        self.inner = inner
        self._held: dict[str, _Held] = {}

    @property
    def held_bytes(self) -> int:
        """Bytes held and not written to their files yet."""
        return sum(held.bytes_held() for held in self._held.values())

    @property
    def held_files(self) -> int:
        return len(self._held)

    # --- holding and writing -----------------------------------------------------------

    def defer_append(self, path: str, offset: int, data: bytes) -> None:
        """Hold `data`, which belongs at `offset` of `path` and is durable in
        the journal: the file's end when the batch committed (its size
        checked then), so reads take everything before it from the file.
        Written now when it creates the file (offset 0)."""
        held = self._held.get(path)
        if held is None:
            if offset == 0:
                write_kept(self.inner, path, data, offset)
                return
            held = self._held[path] = _Held(offset, journaled=True)
        held.put(offset, data)

    def hold_write(self, path: str, offset: int, data: bytes) -> None:
        """Hold a write of a file derived from the journaled ones (a history's
        index), which must only reach the disk before the next flush. An
        existing file only: one to create is written now."""
        held = self._held.get(path)
        if held is None:
            try:
                size = self._size_on_disk(path)
            except FileNotFoundError:
                write_kept(self.inner, path, data, offset)
                return
            held = self._held[path] = _Held(size, journaled=False)
        held.put(offset, data)

    def _size_on_disk(self, path: str) -> int:
        size = kept_size(self.inner, path)
        return self.inner.stat(path).st_size if size is None else size

    def write_held(self, path: str) -> None:
        """Write what is held for `path` (nothing when nothing is)."""
        held = self._held.pop(path, None)
        if held is None:
            return
        if held.journaled:
            size = self._size_on_disk(path)
            first = min(held.pieces)
            if size < first:
                # Dropped: the next size check of the scheduler sees the file
                # as it is and fails its commit (module docstring).
                raise OSError(
                    errno.EIO,
                    f"{path} is {size} bytes, shorter than the {first} its journaled"
                    " appends follow: it changed under the scheduler; the journal's replay"
                    " reports it",
                )
        name = os.path.basename(path)
        try:
            fault_point(f"before:write-back:{name}")
            for offset, piece in sorted(held.pieces.items()):
                write_kept(self.inner, path, bytes(piece), offset)
        except BaseException:
            self._held[path] = held
            raise
        fault_point(f"after:write-back:{name}")

    def write_all(self) -> None:
        """Write every held piece; the first error is raised once all were tried."""
        failure: OSError | None = None
        for path in list(self._held):
            try:
                self.write_held(path)
            except OSError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def drop_held(self) -> None:
        """Forget every held piece: the journal that holds them is left for a
        replay, which writes them (and the derived files are rebuilt from
        them)."""
        self._held.clear()

    def _drop_under(self, directory: str) -> None:
        inside = os.path.join(directory, "")
        for path in [p for p in self._held if p.startswith(inside)]:
            del self._held[path]

    # --- the disk -------------------------------------------------------------------------

    def open(
        self,
        path: str,
        *,
        write: bool = False,
        append: bool = False,
        create: bool = False,
        exclusive: bool = False,
        keep: bool = False,
    ) -> DiskFile:
        held = self._held.get(path) if self._held else None
        if held is None:
            return self.inner.open(
                path, write=write, append=append, create=create, exclusive=exclusive, keep=keep
            )
        if write or append or create or exclusive or keep:
            self.write_held(path)
            return self.inner.open(
                path, write=write, append=append, create=create, exclusive=exclusive, keep=keep
            )
        return _HeldFile(self, path, self.inner.open(path), held)

    def write_if_kept(self, path: str, data: bytes, offset: int) -> bool:
        """`write_kept`'s fast path (see `OsDisk.write_if_kept`)."""
        if self._held:
            self.write_held(path)
        inner = self.inner
        return type(inner) is OsDisk and inner.write_if_kept(path, data, offset)

    def size_if_kept(self, path: str) -> int | None:
        """`kept_size`'s fast path: a held file's size from memory."""
        held = self._held.get(path) if self._held else None
        if held is not None:
            return held.size()
        inner = self.inner
        return inner.size_if_kept(path) if type(inner) is OsDisk else None

    def rename(self, source: str, target: str) -> None:
        self.write_held(source)
        self._held.pop(target, None)
        self.inner.rename(source, target)

    def list(self, directory: str) -> list[str]:
        return self.inner.list(directory)

    def stat(self, path: str) -> DiskStat:
        status = self.inner.stat(path)
        held = self._held.get(path) if self._held else None
        return status if held is None else _HeldStat(status, held.size())

    def remove(self, path: str) -> None:
        self._held.pop(path, None)
        self.inner.remove(path)

    def make_directory(self, path: str, *, parents: bool = False) -> None:
        self.inner.make_directory(path, parents=parents)

    def release_kept(self, directory: str) -> None:
        self.inner.release_kept(directory)

    def remove_directory(self, path: str) -> None:
        self._drop_under(path)
        self.inner.remove_directory(path)

    def fsync_directory(self, path: str) -> None:
        self.inner.fsync_directory(path)

    def syncfs(self, path: str) -> bool:
        if not self.can_syncfs():
            return False
        self.write_all()
        if self.inner is OS_DISK:
            # Through `shell.durable`, whose flush tests replace.
            sync_paths([], [path], mode="syncfs")
            return True
        return self.inner.syncfs(path)

    def can_syncfs(self) -> bool:
        return syncfs_available() if self.inner is OS_DISK else self.inner.can_syncfs()


def hold_write(disk: Disk, path: str, data: bytes, offset: int) -> None:
    """`write_kept`, held until the next flush when `disk` holds writes."""
    if type(disk) is WriteBackDisk:
        disk.hold_write(path, offset, data)
    else:
        write_kept(disk, path, data, offset)


def drop_deferred(disk: Disk) -> None:
    """Forget what `disk` holds, if it is a `WriteBackDisk`."""
    if isinstance(disk, WriteBackDisk):
        disk.drop_held()


def underlying(disk: Disk) -> Disk:
    """The disk a `WriteBackDisk` wraps; any other disk itself."""
    return disk.inner if isinstance(disk, WriteBackDisk) else disk
