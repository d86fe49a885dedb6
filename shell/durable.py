"""Durable writes: atomic replace, fsync'd append, and group commit.

Every durable write passes through `fault_point` twice ("before:<what>" and
"after:<what>"), so crash tests can install a `FaultInjector` that raises
`SimulatedCrash` at any of them. The default injector does nothing.

Group commit (`GroupCommit`) is how the scheduler makes one wake-up's writes
durable together. Writes come in two ranks: plain appends (history rows) and
*late* writes that depend on them (late appends, such as runtime records, and
atomic replaces). Its ordering guarantee, in the order `commit()` runs:

1. every plain append is written (one `write` per file, records in staging
   order), and every staged replace is written to a temporary file in the
   target's directory;
2. one flush makes all of that durable: `syncfs(2)` once per filesystem when
   the batch touches many files, otherwise `fsync` of each file (and of the
   directory of each newly created file);
3. the late appends are written and the temporary files are renamed over
   their targets;
4. a second flush makes those durable (only when there were any);
5. `on_commit` callbacks run; `commit()` returns.

So no late write reaches the disk before every plain append of its batch is
durable (a runtime record is never ahead of the history rows it depends on),
and when `commit()` returns everything in the batch is durable. A crash before
step 2 completes may leave any subset of the plain appends, each possibly
torn (no trailing newline); readers drop a torn final line. A crash during
steps 3-4 may leave any subset of the late writes; an appended file may end
torn, a replaced one is wholly old or wholly new. Nothing in a batch may be
acted on before `commit()` returns.

A batch given a `journal` (the scheduler's, see `shell.journal`) commits
differently, and more strongly: every write of the batch goes into one
journal record, one fsync makes it durable (`on_durable` callbacks run
then), and only after that are the files written, without a flush. A crash
leaves either none of the batch (the record is torn: nothing was written to
the files yet) or all of it (the next owner's replay writes whatever the
files lack). `sync_also` paths are flushed at the journal's next checkpoint.
`commit()` is `make_durable()` then `complete()`, which a caller may call
apart to act on the durable batch before its files are written (the
scheduler launches a round's runs there): `make_durable` ends with the
journal's fsync and the batch's `early` appends written (`on_early`
callbacks run then, so their owner may write after them), `complete` writes
the other files, or hands their appends to a disk that holds them until the
journal's checkpoint (`shell.write_back`). Without a journal `make_durable`
writes everything.

Disks: every primitive takes a `disk` (`shell.disk.Disk`, the OS unless
told), and a `GroupCommit` writes to its journal's disk, so the same code
runs over the simulated disk of `shell.sim`.

Fencing: every write here first asks `shell.fence.check_fence` (a group
commit once for its whole batch, before its first byte), so nothing is
written under a store root whose scheduler lock was removed or replaced:
the write raises `core.errors.StoreFenced` instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import itertools
import logging
import os
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, Protocol, TypeAlias

from core.errors import StoreFenced
from shell.disk import OS_DISK, SYNCFS, Disk, DiskFile, is_directory, kept_size, write_kept
from shell.fence import check_fence, check_fence_all
from shell.store_format import canonical_json, encode_json_line

__all__ = [
    "AUTO_FSYNC_MAX_FILES",
    "TEMP_IN_FLIGHT_NS",
    "CrashAt",
    "ExpectedSize",
    "FailWrites",
    "FaultInjector",
    "GroupCommit",
    "Journal",
    "JournalEntry",
    "SimulatedCrash",
    "SyncMode",
    "append_data",
    "append_records",
    "atomic_write_bytes",
    "atomic_write_json",
    "fault_point",
    "faults_injected",
    "filesystem_flushes",
    "fsync_directory",
    "get_fault_injector",
    "pwrite_all",
    "remove_stale_temp_files",
    "replace_unsynced",
    "set_fault_injector",
    "sync_paths",
    "syncfs_available",
    "write_all",
]

SyncMode = Literal["auto", "fsync", "syncfs"]

# One write of a journaled batch: ("append", path, offset, bytes) puts the
# bytes at that offset; ("replace", path, 0, bytes) is the file's new content.
JournalEntry: TypeAlias = tuple[Literal["append", "replace"], str, int, bytes]


class Journal(Protocol):
    """Where a journaled batch makes its writes durable (`shell.journal.CommitJournal`)."""

    @property
    def disk(self) -> Disk:
        """The disk of the journal, which is the disk of the batch's files."""
        ...

    @property
    def store_root(self) -> Path:
        """The store whose files the journal's records write."""
        ...

    def write(self, entries: Sequence[JournalEntry]) -> None:
        """Append one record holding `entries`; durable when this returns."""
        ...

    def after_commit(self) -> None:
        """Housekeeping once a batch's files are written (a checkpoint)."""
        ...


# Up to this many files, fsync each one: it costs a few journal commits but
# does not flush unrelated dirty data on the same filesystem. Beyond it, one
# syncfs per filesystem is far cheaper than thousands of fsyncs.
AUTO_FSYNC_MAX_FILES: Final = 8

_TEMP_SUFFIX: Final = ".tmp"

_log = logging.getLogger(__name__)


class SimulatedCrash(BaseException):
    """Raised by a fault injector to simulate the process dying at a write.

    A `BaseException`, so that `except Exception` recovery code cannot swallow
    it: like a real crash, it unwinds everything.
    """


class FaultInjector(Protocol):
    """Called with a point name ("before:append:history.jsonl", ...) at every durable write."""

    def __call__(self, point: str) -> None: ...


def _no_fault(point: str) -> None:
    del point


_injector: FaultInjector = _no_fault


def set_fault_injector(injector: FaultInjector | None) -> FaultInjector:
    """Install `injector` (None restores the no-op one); returns the previous one."""
    global _injector
    previous = _injector
    _injector = injector if injector is not None else _no_fault
    return previous


def get_fault_injector() -> FaultInjector:
    return _injector


def fault_point(point: str) -> None:
    """Give the installed fault injector a chance to crash at `point`."""
    # About fifteen points per scheduled run: no call at all without an injector.
    if _injector is not _no_fault:
        _injector(point)


def faults_injected() -> bool:
    """Whether an injector is installed: a loop over a batch's records asks
    once rather than naming a point per record (a path's base name, a
    transition's kind) only for the no-op injector to ignore it."""
    return _injector is not _no_fault


class CrashAt:
    """A fault injector that records every point it sees and raises
    `SimulatedCrash` at the `occurrence`-th time `point` is reached (1-based).
    With `point=None` it only records, which is how a test enumerates points."""

    def __init__(self, point: str | None, *, occurrence: int = 1) -> None:
        self.point = point
        self.occurrence = occurrence
        self.seen: list[str] = []
        self.crashed = False

    def __call__(self, point: str) -> None:
        self.seen.append(point)
        if (
            self.point is not None
            and not self.crashed
            and point == self.point
            and self.seen.count(point) == self.occurrence
        ):
            self.crashed = True
            raise SimulatedCrash(point)


class FailWrites:
    """A fault injector that fails durable writes as a full disk does: while
    `failing`, each `before:` point (or only those named in `points`) raises
    `OSError(code)` (ENOSPC unless told), so the write never starts. Every
    point that failed is kept in `failed`. Set `failing = False` when space
    returns."""

    def __init__(self, code: int = errno.ENOSPC, *, points: Iterable[str] | None = None) -> None:
        self.code = code
        self.points = frozenset(points) if points is not None else None
        self.failing = True
        self.failed: list[str] = []

    def __call__(self, point: str) -> None:
        if not self.failing or not point.startswith("before:"):
            return
        if self.points is not None and point not in self.points:
            return
        self.failed.append(point)
        raise OSError(self.code, f"{os.strerror(self.code)} [injected at {point}]")


# --- low-level helpers ---------------------------------------------------------


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` at the descriptor's position (a short write resumes)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """Write all of `data` at `offset` of the descriptor (a short write resumes)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def fsync_directory(directory: str | os.PathLike[str], *, disk: Disk = OS_DISK) -> None:
    """fsync a directory so that entries created or renamed in it are durable."""
    if disk is not OS_DISK:
        disk.fsync_directory(os.fspath(directory))
        return
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_path(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_on(disk: Disk, path: str) -> None:
    file = disk.open(path)
    try:
        file.fsync()
    finally:
        file.close()


# The OS disk's flushes go through these module names, which tests and
# benchmarks replace to count or skip them.
_syncfs: Final[Callable[[int], int] | None] = SYNCFS


def syncfs_available() -> bool:
    """True when `syncfs(2)` can be called (Linux); otherwise batches fsync per file."""
    return _syncfs is not None


def _syncfs_directory(directory: str) -> None:
    assert _syncfs is not None
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        if _syncfs(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"syncfs failed: {os.strerror(code)}", directory)
    finally:
        os.close(fd)


# Directory -> device, so that a batch over ten thousand schedule directories
# does not stat each of them at every commit. Bounded; cleared when full.
_devices: dict[str, int] = {}
_DEVICE_CACHE_MAX: Final = 1 << 17


def _device_of(directory: str, disk: Disk) -> int | None:
    # The scheduler's disk wraps the OS's (`shell.write_back`): its
    # directories' devices are the OS's, asked at every commit.
    if disk is not OS_DISK and getattr(disk, "inner", None) is not OS_DISK:
        try:
            return disk.stat(directory).st_dev
        except FileNotFoundError:
            return None
    device = _devices.get(directory)
    if device is None:
        try:
            device = os.stat(directory).st_dev
        except FileNotFoundError:
            return None
        if len(_devices) >= _DEVICE_CACHE_MAX:
            _devices.clear()
        _devices[directory] = device
    return device


# (disk, device) -> how many `syncfs` of that filesystem returned. A write
# made before the count moved past a value read after it is durable.
_flushes: dict[tuple[int, int], int] = {}


def filesystem_flushes(path: str | os.PathLike[str], *, disk: Disk = OS_DISK) -> int:
    """How many times `sync_paths` flushed the whole filesystem that holds the
    directory `path` (`syncfs`): read it after a write, and once it has moved
    on, the write is durable (the history index publishes a header only then:
    `shell/history_store.py`)."""
    device = _device_of(os.fspath(path), disk)
    return 0 if device is None else _flushes.get((id(disk), device), 0)


def sync_paths(
    files: Iterable[str | os.PathLike[str]],
    directories: Iterable[str | os.PathLike[str]] = (),
    *,
    mode: SyncMode = "auto",
    disk: Disk = OS_DISK,
) -> None:
    """Make the named files' data and the named directories' entries durable.

    `fsync` flushes each one; `syncfs` flushes each filesystem involved once
    (which covers files and directory entries alike); `auto` picks `fsync` for
    at most `AUTO_FSYNC_MAX_FILES` paths and `syncfs` otherwise. Without
    `syncfs(2)` every mode falls back to `fsync`. Missing files are skipped.
    """
    file_list = [os.fspath(p) for p in dict.fromkeys(os.fspath(p) for p in files)]
    dir_list = [os.fspath(p) for p in dict.fromkeys(os.fspath(p) for p in directories)]
    if not file_list and not dir_list:
        return
    on_os = disk is OS_DISK
    can_syncfs = _syncfs is not None if on_os else disk.can_syncfs()
    use_syncfs = can_syncfs and (
        mode == "syncfs"
        or (mode == "auto" and len(file_list) + len(dir_list) > AUTO_FSYNC_MAX_FILES)
    )
    if use_syncfs:
        # One syncfs per filesystem: group by the device of each path's directory.
        by_device: dict[int, str] = {}
        for path in dict.fromkeys([*dir_list, *(os.path.dirname(f) or "." for f in file_list)]):
            device = _device_of(path, disk)
            if device is not None:
                by_device.setdefault(device, path)
        for device, directory in by_device.items():
            if on_os:
                _syncfs_directory(directory)
            else:
                disk.syncfs(directory)
            key = (id(disk), device)
            _flushes[key] = _flushes.get(key, 0) + 1
        return
    for file in file_list:
        try:
            if on_os:
                _fsync_path(file)
            else:
                _fsync_on(disk, file)
        except FileNotFoundError:
            continue
    for directory in dir_list:
        if on_os:
            fsync_directory(directory)
        else:
            disk.fsync_directory(directory)


def _temp_path(target: str) -> str:
    directory, name = os.path.split(target)
    return os.path.join(directory, f".{name}.{os.getpid()}.{secrets.token_hex(4)}{_TEMP_SUFFIX}")


def _write_temp(target: str, data: bytes, *, sync: bool, disk: Disk) -> str:
    temp = _temp_path(target)
    file = disk.open(temp, write=True, create=True, exclusive=True)
    try:
        file.write_at(data, 0)
        if sync:
            file.fsync()
    except BaseException:
        file.close()
        _unlink_quietly(temp, disk)
        raise
    file.close()
    return temp


def replace_unsynced(path: str, data: bytes, *, disk: Disk = OS_DISK) -> None:
    """Replace `path` with `data` atomically (temp file and rename), with no
    flush: for a write whose content is durable elsewhere (a journal)."""
    check_fence(path)
    _replace_with_temp(path, data, sync=False, disk=disk)


def _replace_with_temp(path: str, data: bytes, *, sync: bool, disk: Disk) -> None:
    """Write `data` to a temp file beside `path` (flushed when `sync`) and
    rename it over `path`; the temp file is removed if the rename fails."""
    temp = _write_temp(path, data, sync=sync, disk=disk)
    try:
        disk.rename(temp, path)
    except BaseException:
        _unlink_quietly(temp, disk)
        raise


def _write_at(path: str, offset: int, data: bytes, disk: Disk, *, keep: bool = True) -> None:
    """Write `data` at `offset` of `path` (created if missing), with no flush.
    The descriptor is kept unless `keep` is false (a schedule's history is
    written at every commit)."""
    if keep:
        write_kept(disk, path, data, offset)
        return
    file = disk.open(path, write=True, create=True)
    try:
        file.write_at(data, offset)
    finally:
        file.close()


def _unlink_quietly(path: str, disk: Disk) -> None:
    with contextlib.suppress(FileNotFoundError):
        disk.remove(path)


# A start removes the temp files last modified this long before it, or
# earlier: a younger one may be another process's write in flight (file
# times tick coarsely); the next start removes it if it stays.
TEMP_IN_FLIGHT_NS: Final = 1_000_000_000


def remove_stale_temp_files(
    directory: str | os.PathLike[str],
    *,
    older_than_ns: int | None = None,
    disk: Disk = OS_DISK,
) -> list[str]:
    """Remove temporary files an interrupted atomic write left in `directory`:
    all of them, or with `older_than_ns` only those last modified before it
    (a wall-clock `time.time_ns()`), which spares the writes other processes
    have in flight.

    Only call this while owning the store, with none of this process's
    writes in flight. Returns the names removed.
    """
    removed: list[str] = []
    try:
        names = disk.list(os.fspath(directory))
    except FileNotFoundError:
        return removed
    for name in names:
        if name.startswith(".") and name.endswith(_TEMP_SUFFIX):
            path = os.path.join(directory, name)
            if older_than_ns is not None:
                try:
                    if disk.stat(path).st_mtime_ns >= older_than_ns:
                        continue
                except FileNotFoundError:
                    continue
            if not removed:
                # Fenced before the first removal, not per directory listed:
                # a start lists every schedule's directory and finds none.
                check_fence(directory)
            _unlink_quietly(path, disk)
            removed.append(name)
    return sorted(removed)


def _json_bytes(obj: Any) -> bytes:
    return canonical_json(obj) + b"\n"


# --- single durable writes ------------------------------------------------------


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, disk: Disk = OS_DISK) -> None:
    """Replace `path` with `data` atomically and durably.

    Temp file in the same directory, write, fsync, `os.replace`, fsync of the
    directory. A crash leaves either the old file or the new one (and possibly
    a stray `.<name>.<pid>.<token>.tmp`, see `remove_stale_temp_files`).
    """
    target = os.fspath(path)
    name = os.path.basename(target)
    check_fence(target)
    fault_point(f"before:replace:{name}")
    _replace_with_temp(target, data, sync=True, disk=disk)
    fsync_directory(os.path.dirname(target) or ".", disk=disk)
    fault_point(f"after:replace:{name}")


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, disk: Disk = OS_DISK) -> None:
    """`atomic_write_bytes` of canonical JSON (sorted keys, compact, ASCII)."""
    atomic_write_bytes(path, _json_bytes(obj), disk=disk)


def _open_append(path: str, disk: Disk) -> tuple[DiskFile, bool]:
    """Open for appending; the flag says whether this call created the file."""
    try:
        return disk.open(path, append=True, create=True, exclusive=True), True
    except FileExistsError:
        return disk.open(path, append=True), False


def _cut_back(file: DiskFile, size: int, target: str) -> None:
    """After an append that failed: the file back to its `size` before it,
    flushed. A write cut short leaves a torn line; an fsync that failed
    leaves the whole record readable from the page cache while nothing says
    it reached the disk, and a reader that took it (the scheduler consuming a
    lifecycle change the caller was told failed) would build on what a power
    cut may take away. Shrinking needs no space; if it fails all the same,
    the caller's error is still the one raised, and a load drops a torn tail."""
    try:
        file.truncate(size)
        file.fsync()
    except OSError as exc:
        _log.error("could not cut %s back after a failed append: %s", target, exc)


def append_records(
    path: str | os.PathLike[str],
    records: Sequence[Mapping[str, Any]],
    *,
    sync: bool = True,
    disk: Disk = OS_DISK,
) -> int:
    """Append `records` as canonical JSON lines in one write; returns the offset
    at which the first of them starts.

    With `sync`, the file (and, if this call created it, its directory) is
    fsynced before returning. The caller must have dropped any torn final line
    first (see `shell.jsonlog.repair_torn_tail`), or the first record would be
    glued to it.
    """
    data = b"".join(encode_json_line(r) for r in records)
    return append_data(path, data, sync=sync, disk=disk)


def append_data(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    sync: bool = True,
    create: bool = True,
    disk: Disk = OS_DISK,
) -> int:
    """Append `data` in one write, between the fence check and the
    `before:append:<name>`/`after:append:<name>` fault points; returns the
    offset at which it starts. With `sync`, as `append_records`. Without
    `create`, a missing file raises `FileNotFoundError` (an append that
    only means something after what the file already holds)."""
    target = os.fspath(path)
    name = os.path.basename(target)
    check_fence(target)
    fault_point(f"before:append:{name}")
    if create:
        file, created = _open_append(target, disk)
    else:
        file, created = disk.open(target, append=True), False
    try:
        offset = file.size()
        try:
            file.append(data)
            if sync:
                file.fsync()
        except OSError:
            _cut_back(file, offset, target)
            raise
    finally:
        file.close()
    if sync and created:
        fsync_directory(os.path.dirname(target) or ".", disk=disk)
    fault_point(f"after:append:{name}")
    return offset


# --- group commit -----------------------------------------------------------------


# A file size the owner of an append expects at commit: known when staged, or
# asked for at commit (an owner that goes on appending to the file itself
# while the batch waits: it names the size once the batch is written).
ExpectedSize: TypeAlias = int | Callable[[], int] | None


class _Append:
    __slots__ = ("chunks", "expect_size")

    def __init__(self, expect_size: ExpectedSize) -> None:
        self.chunks: list[bytes] = []
        self.expect_size = expect_size

    def expected(self) -> int | None:
        """The size the owner expects now; its `OSError` when it cannot say."""
        expect = self.expect_size
        return expect() if callable(expect) else expect


class GroupCommit:
    """Writes of one scheduler wake-up, made durable together by `commit()`.

    Stage appends (`append_records`, `append_bytes`) and atomic replaces
    (`replace_json`, `replace_bytes`) for any number of files, then call
    `commit()`. See the module docstring for the ordering guarantee. A batch
    is single-use. Used as a context manager it commits on a clean exit and
    aborts when the block raises.

    If `commit()` raises, the durability of the batch is unknown: some writes
    may have reached the disk. `on_abort` callbacks run (stores drop their
    staged state and re-read the affected files before their next use); the
    caller must not act on anything in the batch. A `SimulatedCrash` skips all
    clean-up, like a real crash.
    """

    def __init__(
        self,
        *,
        sync: SyncMode = "auto",
        journal: Journal | None = None,
        disk: Disk | None = None,
    ) -> None:
        self._sync_mode: SyncMode = sync
        self._journal = journal
        # A journaled batch's files live on its journal's disk.
        self._disk: Disk = (
            disk if disk is not None else journal.disk if journal is not None else OS_DISK
        )
        self._on_durable: list[Callable[[], None]] = []
        self._on_early: list[Callable[[], None]] = []
        self._early: set[str] = set()
        # Files written now and then: their descriptors are not kept open.
        self._seldom: set[str] = set()
        self._pending_entries: list[JournalEntry] = []
        self._appends: dict[str, _Append] = {}
        self._late_appends: dict[str, _Append] = {}
        self._replaces: dict[str, bytes] = {}
        self._also_sync: dict[str, None] = {}
        self._on_commit: list[Callable[[], None]] = []
        self._on_abort: list[Callable[[], None]] = []
        self._state: Literal["open", "durable", "committed", "aborted", "crashed"] = "open"
        self._writing = False

    @property
    def may_have_written(self) -> bool:
        """Whether a write of the batch may have reached a file: False for a
        batch aborted before its commit began, whose owners can keep what they
        knew before it (nothing of it is on the disk)."""
        return self._writing

    @property
    def state(self) -> str:
        """ "open", "durable" (between `make_durable` and `complete`),
        "committed", "aborted" or "crashed" (a SimulatedCrash)."""
        return self._state

    @property
    def disk(self) -> Disk:
        """The disk the batch's files live on."""
        return self._disk

    @property
    def journal_root(self) -> str | None:
        """The store root of the batch's journal; None for a batch without one
        (its writes are flushed file by file)."""
        return None if self._journal is None else str(self._journal.store_root)

    def __len__(self) -> int:
        return len(self._appends) + len(self._late_appends) + len(self._replaces)

    def _check_open(self) -> None:
        if self._state != "open":
            raise RuntimeError(f"this GroupCommit is {self._state}; start a new one")

    def append_bytes(
        self,
        path: str | os.PathLike[str],
        data: bytes,
        *,
        expect_size: ExpectedSize = None,
        late: bool = False,
        early: bool = False,
        seldom: bool = False,
    ) -> None:
        """Stage raw bytes to append to `path`.

        `expect_size`, given with the first staging for a file, is checked
        against the file's size at commit: a mismatch means the file changed
        under its owner, and the commit fails before writing to it. A
        callable is asked at commit and may raise `OSError` to fail it: in a
        journaled batch before the batch's first byte, without a journal
        before that file's append. A `late`
        append is written only after every plain append is durable. One file
        takes appends of one rank only. An `early` append (a plain one) of a
        journaled batch is written to its file by `make_durable`, right after
        the journal's fsync, so that its owner can append after it (its
        `on_early` callbacks) before `complete` writes the batch's other files.
        `seldom`: a file written now and then (a schedule's runtime record),
        whose descriptor the disk does not keep open after a journaled
        batch's write (`Disk.open`'s `keep`): the places are for the files
        written at every commit.
        """
        self._check_open()
        target = os.fspath(path)
        if early and late:
            raise ValueError("an append is early or late, not both")
        ranked, other = (
            (self._late_appends, self._appends) if late else (self._appends, self._late_appends)
        )
        if target in other or (late and target in self._replaces):
            raise RuntimeError(f"{target} is already staged with another kind of write")
        entry = ranked.get(target)
        if entry is None:
            entry = ranked[target] = _Append(expect_size)
        entry.chunks.append(data)
        if early:
            self._early.add(target)
        if seldom:
            self._seldom.add(target)

    def append_records(
        self,
        path: str | os.PathLike[str],
        records: Sequence[Mapping[str, Any]],
        *,
        late: bool = False,
    ) -> int:
        """Stage `records` as canonical JSON lines; returns the number of bytes staged."""
        data = b"".join(encode_json_line(r) for r in records)
        self.append_bytes(path, data, late=late)
        return len(data)

    def replace_bytes(self, path: str | os.PathLike[str], data: bytes) -> None:
        """Stage an atomic replace of `path`; a later replace of the same path wins."""
        self._check_open()
        target = os.fspath(path)
        if target in self._appends or target in self._late_appends:
            raise RuntimeError(f"{target} is already staged with another kind of write")
        self._replaces[target] = data

    def replace_json(self, path: str | os.PathLike[str], obj: Any) -> None:
        """Stage an atomic replace of `path` with canonical JSON."""
        self.replace_bytes(path, _json_bytes(obj))

    def sync_also(self, path: str | os.PathLike[str]) -> None:
        """Include an already written file in the batch's flush (for derived
        files such as an index that must be durable once the batch is)."""
        self._check_open()
        self._also_sync[os.fspath(path)] = None

    def on_durable(self, callback: Callable[[], None]) -> None:
        """Run `callback` the moment the whole batch is durable: after the
        journal's fsync for a journaled batch (before the files are written),
        otherwise just before the `on_commit` callbacks."""
        self._check_open()
        self._on_durable.append(callback)

    def on_early(self, callback: Callable[[], None]) -> None:
        """Run `callback` once the batch is durable and its `early` appends are
        written (by `make_durable`; without a journal, once everything is
        written and flushed, just before `on_commit`). The owner of an early
        append may then write after it, before the batch's other files are
        written."""
        self._check_open()
        self._on_early.append(callback)

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Run `callback` after everything in the batch is durable and written."""
        self._check_open()
        self._on_commit.append(callback)

    def on_abort(self, callback: Callable[[], None]) -> None:
        """Run `callback` if the batch is aborted or its commit fails."""
        self._check_open()
        self._on_abort.append(callback)

    def abort(self) -> None:
        """Drop everything staged; nothing is written. Runs `on_abort` callbacks."""
        self._check_open()
        self._end("aborted", self._on_abort)

    def commit(self) -> None:
        """Make every staged write durable, in the documented order."""
        self.make_durable()
        self.complete()

    def make_durable(self) -> None:
        """The first part of `commit`: when it returns the batch is durable
        (`on_durable`, then `on_early` callbacks have run) and `complete`
        must follow. For a journaled batch that is the journal's fsync and
        the early appends; its other files are written by `complete`. Without
        a journal the files are the durable copy: everything is written here."""
        self._check_open()
        if self._journal is not None:
            self._make_journaled_durable(self._journal)
            return
        self._commit_files()
        self._state = "durable"
        self._run(self._on_durable)
        self._run(self._on_early)

    def complete(self) -> None:
        """The rest of `commit` after `make_durable`: a journaled batch's
        files written (not the early ones, written already), `on_commit`
        callbacks run, the journal emptied when it can be."""
        if self._state != "durable":
            raise RuntimeError(f"this GroupCommit is {self._state}; complete follows make_durable")
        if self._journal is not None:
            self._complete_journaled(self._journal)
            return
        self._end("committed", self._on_commit)
        fault_point("after:commit")

    def _commit_files(self) -> None:
        """Write and flush a batch without a journal (module docstring steps 1-4)."""
        temps: dict[str, str] = {}
        basename = os.path.basename
        disk = self._disk
        self._writing = True
        try:
            self._check_fence()
            fault_point("before:commit")
            files: list[str] = []
            directories: list[str] = []
            for path, entry in self._appends.items():
                fault_point(f"before:append:{basename(path)}")
                self._write_append(path, entry, directories)
                files.append(path)
                fault_point(f"after:append:{basename(path)}")
            for path, data in self._replaces.items():
                fault_point(f"before:stage:{basename(path)}")
                temps[path] = _write_temp(path, data, sync=False, disk=disk)
                files.append(temps[path])
                fault_point(f"after:stage:{basename(path)}")
            files.extend(p for p in self._also_sync if p not in self._appends)
            fault_point("before:sync")
            sync_paths(files, directories, mode=self._sync_mode, disk=disk)
            fault_point("after:sync")
            late_files: list[str] = []
            late_directories: list[str] = []
            for path, entry in self._late_appends.items():
                fault_point(f"before:append:{basename(path)}")
                self._write_append(path, entry, late_directories)
                late_files.append(path)
                fault_point(f"after:append:{basename(path)}")
            for path, temp in list(temps.items()):
                fault_point(f"before:replace:{basename(path)}")
                disk.rename(temp, path)
                del temps[path]
                fault_point(f"after:replace:{basename(path)}")
            if late_files or self._replaces:
                late_directories.extend(os.path.dirname(p) or "." for p in self._replaces)
                fault_point("before:sync-late")
                sync_paths(late_files, late_directories, mode=self._sync_mode, disk=disk)
                fault_point("after:sync-late")
        except SimulatedCrash:
            self._state = "crashed"
            raise
        except BaseException:
            for temp in temps.values():
                _unlink_quietly(temp, disk)
            self._end("aborted", self._on_abort)
            raise

    def _check_fence(self) -> None:
        """Once per batch, before its first byte: `StoreFenced` if any of its
        paths lies under a fenced store root (a couple of stats, not one
        check per file)."""
        check_fence_all(
            itertools.chain(self._appends, self._late_appends, self._replaces, self._also_sync)
        )

    def _journal_entries(self) -> list[JournalEntry]:
        """Every write of the batch with its offset, checked against what each
        file's owner expected; nothing is written yet."""
        entries: list[JournalEntry] = []
        for ranked in (self._appends, self._late_appends):
            for path, entry in ranked.items():
                # A history is appended to at every commit: its descriptor is
                # kept, and its size asked of it, which also sees a file
                # renamed over it since (then the path is asked).
                size = kept_size(self._disk, path)
                if size is None:
                    try:
                        size = self._disk.stat(path).st_size
                    except FileNotFoundError:
                        directory = os.path.dirname(path) or "."
                        if not is_directory(self._disk, directory):
                            raise
                        size = 0
                expected = entry.expected()
                if expected is not None and size != expected:
                    raise OSError(
                        errno.EIO,
                        f"{path} is {size} bytes but its owner expected {expected};"
                        " it changed under the scheduler",
                    )
                entries.append(("append", path, size, b"".join(entry.chunks)))
        for path, data in self._replaces.items():
            if not is_directory(self._disk, os.path.dirname(path) or "."):
                raise FileNotFoundError(errno.ENOENT, "no such directory", path)
            entries.append(("replace", path, 0, data))
        return entries

    def _make_journaled_durable(self, journal: Journal) -> None:
        self._writing = True
        try:
            self._check_fence()
            fault_point("before:commit")
            entries = self._journal_entries()
            if entries:
                journal.write(entries)
            self._run(self._on_durable)
            early = self._early
            self._apply([e for e in entries if e[1] in early], hold=False)
            self._pending_entries = [e for e in entries if e[1] not in early]
            self._state = "durable"
            self._run(self._on_early)
        except BaseException as exc:
            self._failed(exc)
            raise

    def _complete_journaled(self, journal: Journal) -> None:
        try:
            entries, self._pending_entries = self._pending_entries, []
            self._apply(entries, hold=True)
        except BaseException as exc:
            self._failed(exc)
            raise
        self._end("committed", self._on_commit)
        try:
            journal.after_commit()
        except StoreFenced:
            # The batch is written; only emptying the journal was refused (and
            # said so): the next owner replays it.
            pass
        except OSError as exc:
            # The batch is durable in the journal, which keeps its records
            # until a checkpoint succeeds: the next commit tries again.
            _log.error("commit journal checkpoint failed (retried later): %s", exc)
        fault_point("after:commit")

    def _apply(self, entries: Sequence[JournalEntry], *, hold: bool) -> None:
        """Write journaled `entries` to their files (durable already). With
        `hold`, a disk that holds appends until the journal's checkpoint
        (`shell.write_back`) is given them instead, but for early appends
        (their owner appends after them by itself) and seldom ones (a
        runtime record: little to save, and the file stays current)."""
        injecting = faults_injected()
        defer = getattr(self._disk, "defer_append", None) if hold else None
        for kind, path, offset, data in entries:
            step = "apply" if kind == "append" else "replace"
            if injecting:
                fault_point(f"before:{step}:{os.path.basename(path)}")
            if kind == "append" and defer is not None and path not in self._seldom:
                defer(path, offset, data)
            elif kind == "append":
                _write_at(path, offset, data, self._disk, keep=path not in self._seldom)
            else:
                # Not `replace_unsynced`: the batch passed its fence check.
                _replace_with_temp(path, data, sync=False, disk=self._disk)
            if injecting:
                fault_point(f"after:{step}:{os.path.basename(path)}")

    def _failed(self, exc: BaseException) -> None:
        if isinstance(exc, SimulatedCrash):
            self._state = "crashed"
            return
        # Durable or not, the files may lack part of the batch: the owner
        # replays its journal before it reads them again.
        self._end("aborted", self._on_abort)

    def _end(
        self, state: Literal["committed", "aborted"], callbacks: list[Callable[[], None]]
    ) -> None:
        """Finish the batch: its state, then its callbacks of that ending,
        then everything it staged dropped. Its callbacks are closures of
        their stores, which hold the batch: left in place, every round's batch
        was a reference cycle (a thousand callbacks and their staged bytes at
        a thousand schedules) that only the cyclic collector freed, and each
        young pass scanned it."""
        self._state = state
        self._run(callbacks)
        self._on_durable.clear()
        self._on_early.clear()
        self._on_commit.clear()
        self._on_abort.clear()
        self._appends.clear()
        self._late_appends.clear()
        self._replaces.clear()
        self._also_sync.clear()
        self._pending_entries = []
        self._early.clear()
        self._seldom.clear()

    def _write_append(self, path: str, entry: _Append, directories: list[str]) -> None:
        file, created = _open_append(path, self._disk)
        try:
            expected = entry.expected()
            if expected is not None:
                size = file.size()
                if size != expected:
                    raise OSError(
                        errno.EIO,
                        f"{path} is {size} bytes but its owner expected {expected};"
                        " it changed under the scheduler",
                    )
            file.append(b"".join(entry.chunks))
        finally:
            file.close()
        if created:
            directories.append(os.path.dirname(path) or ".")

    @staticmethod
    def _run(callbacks: list[Callable[[], None]]) -> None:
        for callback in callbacks:
            callback()

    def __enter__(self) -> GroupCommit:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if self._state != "open":
            return
        if exc_type is None:
            self.commit()
        elif not issubclass(exc_type, SimulatedCrash):
            self.abort()
