"""The disk port: every system call the file stores make, behind one seam.

The definition, runtime and history stores, the commit journal and the
durable-write primitives (`shell.durable`, `shell.jsonlog`) reach files only
through a `Disk`. Production uses `OS_DISK` (plain `os` calls; it keeps the
descriptors of the files written after every commit open between writes);
the deterministic simulation gives the same stores a simulated disk
(`shell.sim.disk.SimDisk`) that keeps unsynced writes apart from durable
ones and injects the faults a real disk has: torn writes, power cuts that
lose some unsynced writes, a full disk, I/O errors.

The port is deliberately POSIX-shaped (descriptors that read and write at
offsets, rename over a target, fsync of files and directories), so the
stores' durability rules stay the ones a real filesystem enforces: what was
not fsynced may be lost, a rename is atomic, a new entry needs its
directory flushed. Errors are the `OSError`s the `os` module raises
(`FileNotFoundError`, `FileExistsError`, `ENOSPC`, `EIO`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
import time
from collections.abc import Callable
from typing import Final, Protocol

__all__ = [
    "OS_DISK",
    "SYNCFS",
    "Disk",
    "DiskFile",
    "DiskStat",
    "OsDisk",
    "OsFile",
    "exists",
    "is_directory",
    "is_file",
    "kept_size",
    "write_kept",
]


class DiskStat(Protocol):
    """What the stores ask of `stat(2)`: `os.stat_result` is one, so the OS
    disk hands it over as it is (a restart stats every schedule's files:
    copying each result into an object of our own cost a tenth of a second
    at 10,000 schedules)."""

    @property
    def st_size(self) -> int: ...
    @property
    def st_mtime_ns(self) -> int: ...
    @property
    def st_ctime_ns(self) -> int: ...
    @property
    def st_ino(self) -> int: ...
    @property
    def st_dev(self) -> int: ...
    @property
    def st_mode(self) -> int: ...


class DiskFile(Protocol):
    """An open file: reads and writes at offsets, like a descriptor."""

    def read_at(self, size: int, offset: int) -> bytes:
        """Up to `size` bytes at `offset` (fewer at the end of the file)."""
        ...

    def read(self, size: int) -> bytes:
        """Up to `size` bytes at the file's position, which moves past them."""
        ...

    def write_at(self, data: bytes, offset: int) -> None:
        """Write all of `data` at `offset` (not durable before `fsync`)."""
        ...

    def append(self, data: bytes) -> None:
        """Write all of `data` at the end of the file (not durable before `fsync`)."""
        ...

    def size(self) -> int: ...

    def truncate(self, size: int) -> None: ...

    def fsync(self) -> None:
        """Make the file's data durable (not its directory entry)."""
        ...

    def close(self) -> None: ...


class Disk(Protocol):
    """The file system the stores write to (see the module docstring)."""

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
        """Open `path` (read-only unless `write` or `append`); `create` makes
        a missing file, `exclusive` raises `FileExistsError` for an existing
        one, `FileNotFoundError` otherwise when it is missing. `keep` (with
        `write` and `create` only): the disk may keep the descriptor open
        after `close` and hand it out again for the same path, until that
        path is renamed over or removed through the disk; the caller makes no
        such change of the path between its open and its close."""
        ...

    def rename(self, source: str, target: str) -> None:
        """Atomically replace `target` with `source` (`os.replace`)."""
        ...

    def list(self, directory: str) -> list[str]:
        """The names in `directory`, in no particular order."""
        ...

    def stat(self, path: str) -> DiskStat: ...

    def remove(self, path: str) -> None:
        """Unlink a file."""
        ...

    def make_directory(self, path: str, *, parents: bool = False) -> None:
        """`mkdir`; with `parents`, also the missing parents, and an existing
        directory is not an error."""
        ...

    def release_kept(self, directory: str) -> None:
        """Close the descriptors kept open (`open`'s `keep`) of the files
        under `directory`: its store is closed."""
        ...

    def remove_directory(self, path: str) -> None: ...

    def fsync_directory(self, path: str) -> None:
        """Make the entries created, renamed or removed in `path` durable."""
        ...

    def syncfs(self, path: str) -> bool:
        """Flush the whole filesystem holding `path`; False when the disk
        cannot (then the caller fsyncs file by file)."""
        ...

    def can_syncfs(self) -> bool: ...


class OsFile:
    """A descriptor of the operating system."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read_at(self, size: int, offset: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def read(self, size: int) -> bytes:
        return os.read(self.fd, size)

    def write_at(self, data: bytes, offset: int) -> None:
        # A short write resumes where it stopped.
        view = memoryview(data)
        while view:
            written = os.pwrite(self.fd, view, offset)
            view = view[written:]
            offset += written

    def append(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)

    def fsync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


class _KeptFile(OsFile):
    """A descriptor `OsDisk` keeps open between writes: `close` gives it back."""

    __slots__ = ("_disk", "lent", "path", "reused")

    def __init__(self, fd: int, disk: OsDisk, path: str) -> None:
        super().__init__(fd)
        self._disk = disk
        self.path = path
        # Opens not yet closed: a descriptor dropped while lent is closed
        # when the last of them gives it back, never under its user.
        self.lent = 0
        # Opened again since it was kept or since the last sweep: a file
        # that was not is closed by the next sweep (`OsDisk._sweep`).
        self.reused = False

    def close(self) -> None:
        self._disk.given_back(self)


_O_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)
# Reads leave a file's access time alone. Under `relatime`, Linux's default,
# the first read after a write updates the inode's access time, a journaled
# metadata write: about 10 us per file here, on each of the 20,000 files a
# start after a crash reads at 10,000 changed schedules (their runtime
# records and history indexes). No store reads access times. The flag needs
# the file's owner (or CAP_FOWNER): refused once, reads go without it.
_O_NOATIME: Final = getattr(os, "O_NOATIME", 0)
# Descriptors the process keeps free of kept files (sockets, the run log's
# segments, a start's reads): at least this many, and a quarter of the limit.
_RESERVED_DESCRIPTORS: Final = 2048


# How long a kept file may go without being opened again before a sweep
# closes it for another: longer than a minute-resolution calendar's step.
_SWEEP_EVERY_S: Final = 90.0


def _kept_capacity() -> int:
    """How many descriptors `OsDisk` keeps open: what the process may open
    beyond the reserve (none under a limit of 2,048 or less; servers raise
    theirs at start, `adapters.process_limits`)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return 0
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(0, soft - max(_RESERVED_DESCRIPTORS, soft // 4))


def write_kept(disk: Disk, path: str, data: bytes, offset: int) -> None:
    """Write `data` at `offset` of `path` (created if missing) through a
    descriptor the disk may keep (`Disk.open`'s `keep`); not flushed."""
    if type(disk) is OsDisk:
        if disk.write_if_kept(path, data, offset):
            return
    else:
        # A disk wrapping this one (`shell.write_back`) has the same fast path.
        fast = getattr(disk, "write_if_kept", None)
        if fast is not None and fast(path, data, offset):
            return
    file = disk.open(path, write=True, create=True, keep=True)
    try:
        file.write_at(data, offset)
    finally:
        file.close()


def kept_size(disk: Disk, path: str) -> int | None:
    """The size of `path` through the descriptor the disk keeps for it (no
    walk of the path); None when it keeps none, or keeps one of a file that
    another process renamed a file over or removed (then dropped: the next
    write opens the path)."""
    if type(disk) is OsDisk:
        return disk.size_if_kept(path)
    fast = getattr(disk, "size_if_kept", None)
    return None if fast is None else fast(path)


def _load_syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


# `syncfs(2)` where the platform has it (Linux), else None.
SYNCFS: Final = _load_syncfs()


class OsDisk:
    """The real file system, through `os`. One instance serves all: it keeps
    the descriptors of files opened with `keep` (each schedule's history and
    its index, written after every commit: an `open` and a `close` per file
    per commit otherwise), as many as `_kept_capacity` allows.

    Which ones, once they are more than that: not the least recently used
    (with ten thousand schedules written in turn, that would keep none of
    them long enough to be used again) and not only the first come (a file
    written once, such as a schedule's runtime record at its first firing,
    would hold its place for good while the histories written every minute
    were opened and closed at every write). A file stays kept while it is
    opened again between two sweeps; a sweep, made when an open misses the
    kept files, they are full, and `_SWEEP_EVERY_S` has passed since the
    last, closes those that were not, and the next misses take their
    places. A set of files written in turn more often than that and larger
    than the capacity thus keeps a capacity's worth of them (every kept one
    is opened again between two sweeps), and a sweep costs one pass over
    the kept files every 90 s at most. `monotonic`: the clock of the sweeps."""

    def __init__(self, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._kept: dict[str, _KeptFile] = {}
        self._capacity: int | None = None
        self._read_flags = os.O_RDONLY | _O_NOATIME
        self._monotonic = monotonic
        self._swept_at = monotonic()

    def open(
        self,
        path: str,
        *,
        write: bool = False,
        append: bool = False,
        create: bool = False,
        exclusive: bool = False,
        keep: bool = False,
    ) -> OsFile:
        if keep:
            return self._open_kept(path, write=write, create=create)
        if not (append or write or create or exclusive):
            # Most opens of a start: read-only.
            return OsFile(self._open_to_read(path))
        if append:
            flags = os.O_WRONLY | os.O_APPEND
        elif write:
            # The torn-tail repair reads the file it truncates.
            flags = os.O_RDWR
        else:
            flags = os.O_RDONLY
        if create:
            flags |= os.O_CREAT
        if exclusive:
            flags |= os.O_EXCL
        return OsFile(os.open(path, flags, 0o644))

    def _open_to_read(self, path: str) -> int:
        try:
            return os.open(path, self._read_flags)
        except PermissionError as exc:
            # EPERM is O_NOATIME refused: a file of another user (EACCES,
            # no permission to read, is the caller's to see).
            if exc.errno != errno.EPERM or self._read_flags == os.O_RDONLY:
                raise
            self._read_flags = os.O_RDONLY
            return os.open(path, os.O_RDONLY)

    def _open_kept(self, path: str, *, write: bool, create: bool) -> OsFile:
        if not (write and create):
            raise ValueError("a kept descriptor is opened to write, creating the file")
        kept = self._kept.get(path)
        if kept is None:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            if self._capacity is None:
                self._capacity = _kept_capacity()
            if len(self._kept) >= self._capacity and (
                not self._capacity
                or self._monotonic() - self._swept_at < _SWEEP_EVERY_S
                or not self._sweep()
            ):
                return OsFile(fd)
            kept = self._kept[path] = _KeptFile(fd, self, path)
        else:
            kept.reused = True
        kept.lent += 1
        return kept

    def write_if_kept(self, path: str, data: bytes, offset: int) -> bool:
        """Write `data` at `offset` of `path` if its descriptor is kept, and
        say whether it was (`write_kept` opens it otherwise): a schedule's
        history and index are written three times per occurrence, and a
        descriptor already kept needs neither the lending nor the giving back
        of `open` and `close` (nothing runs between)."""
        kept = self._kept.get(path)
        if kept is None:
            return False
        kept.reused = True
        written = os.pwrite(kept.fd, data, offset)
        if written < len(data):
            kept.write_at(data[written:], offset + written)
        return True

    def size_if_kept(self, path: str) -> int | None:
        """`kept_size` on this disk. A file renamed over or removed by this
        process is dropped when it happens (`rename`, `remove`); one another
        process renamed over or removed has no link left, which its
        descriptor's `fstat` tells (a file someone had linked elsewhere too
        keeps that link: its replacement is not seen)."""
        kept = self._kept.get(path)
        if kept is None:
            return None
        status = os.fstat(kept.fd)
        if status.st_nlink == 0:
            self._drop(path)
            return None
        return status.st_size

    def _sweep(self) -> bool:
        """Close the kept files not opened again since the last sweep (nor in
        use now); True if that made room."""
        self._swept_at = self._monotonic()
        for path, kept in list(self._kept.items()):
            if kept.reused or kept.lent:
                kept.reused = False
            else:
                del self._kept[path]
                os.close(kept.fd)
        return len(self._kept) < (self._capacity or 0)

    def given_back(self, file: _KeptFile) -> None:
        """`file` was closed by its user: kept unless its path was dropped."""
        file.lent -= 1
        if file.lent == 0 and self._kept.get(file.path) is not file:
            os.close(file.fd)

    def _drop(self, path: str) -> None:
        """Forget the kept descriptor of `path` (renamed over or removed: a
        later open must find the new file)."""
        kept = self._kept.pop(path, None)
        if kept is not None and kept.lent == 0:
            os.close(kept.fd)

    def release_kept(self, directory: str) -> None:
        inside = os.path.join(directory, "")
        for path in [p for p in self._kept if p.startswith(inside)]:
            self._drop(path)

    def rename(self, source: str, target: str) -> None:
        self._drop(target)
        self._drop(source)
        os.replace(source, target)

    def remove(self, path: str) -> None:
        self._drop(path)
        os.unlink(path)

    # The `os` functions themselves, not wrappers: a start stats and lists
    # every schedule's files, and a Python frame per call showed in its time.
    list = staticmethod(os.listdir)
    stat = staticmethod(os.stat)

    def make_directory(self, path: str, *, parents: bool = False) -> None:
        if parents:
            os.makedirs(path, exist_ok=True)
        else:
            os.mkdir(path)

    def remove_directory(self, path: str) -> None:
        self.release_kept(path)
        os.rmdir(path)

    def fsync_directory(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | _O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def syncfs(self, path: str) -> bool:
        if SYNCFS is None:
            return False
        fd = os.open(path, os.O_RDONLY | _O_DIRECTORY)
        try:
            if SYNCFS(fd) != 0:
                code = ctypes.get_errno()
                raise OSError(code, f"syncfs failed: {os.strerror(code)}", path)
        finally:
            os.close(fd)
        return True

    def can_syncfs(self) -> bool:
        return SYNCFS is not None


OS_DISK: Final[Disk] = OsDisk()


def exists(disk: Disk, path: str) -> bool:
    """`os.path.exists` on `disk`: any error reads as absent."""
    try:
        disk.stat(path)
    except OSError:
        return False
    return True


def is_directory(disk: Disk, path: str) -> bool:
    """`os.path.isdir` on `disk`: any error reads as absent."""
    try:
        return stat.S_ISDIR(disk.stat(path).st_mode)
    except OSError:
        return False


def is_file(disk: Disk, path: str) -> bool:
    """`os.path.isfile` on `disk`: any error reads as absent."""
    try:
        return stat.S_ISREG(disk.stat(path).st_mode)
    except OSError:
        return False
