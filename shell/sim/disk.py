"""The simulated disk: every byte the stores and the run API made durable.

A simulated process (the real file stores and commit journal, the run API,
the service) keeps its own caches; the disk is what survives the process.
Killing the process means dropping every object but this one, so after a
crash only what reached the disk is seen, and after a power cut only what
was flushed (see `power_cut`).

The stores' files are under `SIM_STORE_ROOT`, in the file stores' layout
(`docs/storage.md`), written by the stores themselves through the disk port.
The simulated run API's run records and run-id counter, the deployments and
the lock holder are kept beside them as plain values.

The file system (`SimFileSystem`, which `SimDisk` is). It implements the
disk port (`shell.disk.Disk`), so the file stores and the commit journal run
on it unchanged. It keeps what readers see apart from what a power cut keeps:
a file's data is durable once fsynced (or after a `syncfs`), a directory
entry (a create, rename or removal) once its directory is fsynced.
`power_cut` loses none, all or some of the rest (per file and per directory
a prefix of the writes survives, the last one possibly torn), as a real disk
may. `faults` decides, per operation, an `ENOSPC` or `EIO`; a failing write
may write part of its bytes first (a torn write). Every injected error says
`[simulated]`. It also notes the history rows written, for the invariant
checker (`take_history_rows`): a row rewritten by a journal replay after a
power cut is not new.
"""

from __future__ import annotations

import builtins
import errno
import itertools
import os
import posixpath
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple, Protocol

from shell.disk import DiskStat
from shell.startup_checkpoint import CHECKPOINT_FILE
from shell.store_format import HISTORY_FILE, SCHEDULES_DIR, ScheduleFiles, encode_json_line

__all__ = [
    "SIMULATED",
    "SIM_STORE_ROOT",
    "DiskFault",
    "DiskFaults",
    "DiskObserver",
    "InjectedWriteError",
    "PowerCut",
    "SimDisk",
    "SimFile",
    "SimFileSystem",
    "SimScheduleFiles",
    "SimStat",
]


@dataclass(slots=True)
class SimScheduleFiles:
    """One schedule's directory. It exists from the create's mkdir on."""

    lifecycle: list[bytes] = field(default_factory=list)
    snapshot: bytes | None = None
    runtime: list[bytes] = field(default_factory=list)
    history: list[bytes] = field(default_factory=list)


class DiskObserver(Protocol):
    def history_durable(self, rows: Mapping[str, Sequence[bytes]], *, complete: bool) -> None:
        """History lines just became durable, per schedule, in order. `complete`
        is False when they are what a fault left of a batch."""
        ...


# --- the file system (`shell.disk.Disk`) ------------------------------------------------

# What every injected error says, so the simulation tells its faults from real errors.
SIMULATED: Final = "[simulated]"

# The root of the simulated store (no such directory exists on the machine).
SIM_STORE_ROOT: Final = Path("/wf-sim")

PowerCut = Literal["none", "all", "some"]

# A logical clock for mtimes and ctimes: far in the past of any wall clock, so
# the service's sweeps and the startup checkpoint's settle rule always find a
# file old (deterministically), and strictly increasing, so every change
# gives a file a new identity.
_EPOCH_NS: Final = 1_000_000_000_000_000_000
_TICK_NS: Final = 1_000
_DIRECTORY_MODE: Final = 0o040755
_FILE_MODE: Final = 0o100644


class SimStat(NamedTuple):
    """A `DiskStat` of the simulated disk (the fields `os.stat_result` has)."""

    st_size: int
    st_mtime_ns: int
    st_ctime_ns: int
    st_ino: int
    st_dev: int
    st_mode: int


class InjectedWriteError(OSError):
    """An I/O error the simulation injected (at a durable write, or the disk's own)."""


@dataclass(frozen=True, slots=True)
class DiskFault:
    """An error the disk raises: `code` (ENOSPC, EIO), after writing the first
    `written` bytes of the write that fails (a torn write)."""

    code: int
    written: int = 0


class DiskFaults(Protocol):
    def __call__(self, op: str, path: str, size: int) -> DiskFault | None:
        """Whether the operation `op` ("write", "fsync", "rename", "mkdir",
        "truncate", "remove", "create", "fsync-dir", "syncfs") on `path`
        (writing `size` bytes) fails."""
        ...


@dataclass(slots=True)
class _Inode:
    number: int
    data: bytearray
    # What a power cut keeps at least, and the writes since (offset, bytes;
    # a truncate is (size, None)), oldest first.
    synced: bytes = b""
    pending: list[tuple[int, bytes | None]] = field(default_factory=list)
    mtime_ns: int = 0
    ctime_ns: int = 0


class _Directory:
    __slots__ = ("mtime_ns", "number")

    def __init__(self, number: int, mtime_ns: int) -> None:
        self.number = number
        self.mtime_ns = mtime_ns


_Node = _Inode | _Directory


def _replay(base: bytes, writes: Sequence[tuple[int, bytes | None]]) -> bytearray:
    data = bytearray(base)
    for offset, chunk in writes:
        if chunk is None:
            del data[offset:]
            continue
        if len(data) < offset:
            data.extend(b"\0" * (offset - len(data)))
        data[offset : offset + len(chunk)] = chunk
    return data


class SimFile:
    """An open file of a `SimDisk` (`shell.disk.DiskFile`)."""

    __slots__ = ("_append", "_disk", "_inode", "_path", "_position", "_writable")

    def __init__(
        self, disk: SimFileSystem, path: str, inode: _Inode, *, writable: bool, append: bool
    ) -> None:
        self._disk = disk
        self._path = path
        self._inode = inode
        self._writable = writable or append
        self._append = append
        self._position = 0

    def read_at(self, size: int, offset: int) -> bytes:
        return bytes(self._inode.data[offset : offset + size])

    def read(self, size: int) -> bytes:
        chunk = self.read_at(size, self._position)
        self._position += len(chunk)
        return chunk

    def write_at(self, data: bytes, offset: int) -> None:
        self._check_writable()
        self._disk._write_file(self._path, self._inode, offset, bytes(data))

    def append(self, data: bytes) -> None:
        self._check_writable()
        self._disk._write_file(self._path, self._inode, len(self._inode.data), bytes(data))

    def size(self) -> int:
        return len(self._inode.data)

    def truncate(self, size: int) -> None:
        self._check_writable()
        self._disk._truncate(self._path, self._inode, size)

    def fsync(self) -> None:
        self._disk._fsync(self._path, self._inode)

    def close(self) -> None:
        pass

    def _check_writable(self) -> None:
        if not self._writable:
            raise OSError(errno.EBADF, "file not open for writing", self._path)


class SimFileSystem:
    """The file system part of `SimDisk` (see its docstring)."""

    def __init__(self, *, faults: DiskFaults | None = None) -> None:
        self.faults = faults
        self._numbers = itertools.count(1)
        self._tick = 0
        self._names: dict[str, _Node] = {}
        self._durable_names: dict[str, _Node] = {}
        # Directory -> the entries bound (a node) or unbound (None) in it
        # since its last flush, oldest first.
        self._entry_changes: dict[str, list[tuple[str, _Node | None]]] = {}
        # History logs: the end of the whole lines seen so far, and the rows
        # not yet reported to the observers, per schedule.
        self._history_seen: dict[str, int] = {}
        # Writes of file data so far (a fault injector tells empty commits by it).
        self.writes = 0
        self._unreported: dict[str, list[bytes]] = {}
        root = _Directory(next(self._numbers), self._now())
        self._names["/"] = self._durable_names["/"] = root

    # --- the port ---------------------------------------------------------------------------

    def open(
        self,
        path: str,
        *,
        write: bool = False,
        append: bool = False,
        create: bool = False,
        exclusive: bool = False,
        keep: bool = False,
    ) -> SimFile:
        # `keep` is a descriptor cache of the real disk's; each open here is
        # a fresh file, which is what a kept descriptor must behave like.
        del keep
        path = _normal(path)
        node = self._names.get(path)
        if isinstance(node, _Directory):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        if node is None:
            if not create:
                raise FileNotFoundError(errno.ENOENT, "no such file", path)
            self._parent_of(path)
            self._fault("create", path)
            node = _Inode(next(self._numbers), bytearray(), mtime_ns=self._now())
            node.ctime_ns = node.mtime_ns
            self._bind(path, node)
        elif exclusive:
            raise FileExistsError(errno.EEXIST, "file exists", path)
        return SimFile(self, path, node, writable=write, append=append)

    def rename(self, source: str, target: str) -> None:
        source, target = _normal(source), _normal(target)
        node = self._names.get(source)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", source)
        self._parent_of(target)
        if isinstance(self._names.get(target), _Directory) or isinstance(node, _Directory):
            raise IsADirectoryError(errno.EISDIR, "renaming a directory", target)
        self._fault("rename", target)
        self._unbind(source)
        self._bind(target, node)
        node.ctime_ns = self._now()

    def list(self, directory: str) -> builtins.list[str]:
        directory = _normal(directory)
        node = self._names.get(directory)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "no such directory", directory)
        if not isinstance(node, _Directory):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", directory)
        return [posixpath.basename(p) for p in self._names if _parent(p) == directory]

    def stat(self, path: str) -> DiskStat:
        path = _normal(path)
        node = self._names.get(path)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        if isinstance(node, _Directory):
            return SimStat(0, node.mtime_ns, node.mtime_ns, node.number, 1, _DIRECTORY_MODE)
        return SimStat(len(node.data), node.mtime_ns, node.ctime_ns, node.number, 1, _FILE_MODE)

    def remove(self, path: str) -> None:
        path = _normal(path)
        node = self._names.get(path)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        if isinstance(node, _Directory):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        self._fault("remove", path)
        self._unbind(path)

    def make_directory(self, path: str, *, parents: bool = False) -> None:
        path = _normal(path)
        if parents:
            missing: list[str] = []
            at = path
            while at not in self._names:
                missing.append(at)
                at = _parent(at)
            if not isinstance(self._names[at], _Directory):
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", at)
            for directory in reversed(missing):
                self.make_directory(directory)
            return
        if path in self._names:
            raise FileExistsError(errno.EEXIST, "file exists", path)
        self._parent_of(path)
        self._fault("mkdir", path)
        self._bind(path, _Directory(next(self._numbers), self._now()))

    def release_kept(self, directory: str) -> None:
        """Nothing is kept open here (see `open`)."""
        del directory

    def remove_directory(self, path: str) -> None:
        path = _normal(path)
        if not isinstance(self._names.get(path), _Directory):
            raise FileNotFoundError(errno.ENOENT, "no such directory", path)
        if any(_parent(p) == path for p in self._names if p != "/"):
            raise OSError(errno.ENOTEMPTY, "directory not empty", path)
        self._fault("remove", path)
        self._unbind(path)

    def fsync_directory(self, path: str) -> None:
        path = _normal(path)
        if not isinstance(self._names.get(path), _Directory):
            raise FileNotFoundError(errno.ENOENT, "no such directory", path)
        self._fault("fsync-dir", path)
        self._flush_entries(path)

    def syncfs(self, path: str) -> bool:
        self._fault("syncfs", _normal(path))
        for directory in builtins.list(self._entry_changes):
            self._flush_entries(directory)
        for inode in self._inodes(self._names):
            inode.synced = bytes(inode.data)
            inode.pending.clear()
        return True

    def can_syncfs(self) -> bool:
        return True

    # --- writes (called by `SimFile`) -------------------------------------------------------

    def _write_file(self, path: str, inode: _Inode, offset: int, data: bytes) -> None:
        fault = self._fault_of("write", path, len(data))
        if fault is not None and fault.written:
            self._apply(path, inode, offset, data[: fault.written])
        if fault is not None:
            raise _error(fault.code, path)
        self._apply(path, inode, offset, data)

    def _apply(self, path: str, inode: _Inode, offset: int, data: bytes) -> None:
        self.writes += 1
        if len(inode.data) < offset:
            inode.data.extend(b"\0" * (offset - len(inode.data)))
        inode.data[offset : offset + len(data)] = data
        inode.pending.append((offset, data))
        inode.mtime_ns = inode.ctime_ns = self._now()
        if path.endswith("/" + HISTORY_FILE):
            self._saw_history(path, inode)

    def _truncate(self, path: str, inode: _Inode, size: int) -> None:
        self._fault("truncate", path)
        del inode.data[size:]
        inode.pending.append((size, None))
        inode.mtime_ns = inode.ctime_ns = self._now()

    def _fsync(self, path: str, inode: _Inode) -> None:
        self._fault("fsync", path)
        inode.synced = bytes(inode.data)
        inode.pending.clear()

    # --- faults -------------------------------------------------------------------------------

    def power_cut(self, rng: random.Random, mode: PowerCut = "some") -> None:
        """The machine loses power: of the writes not flushed (file data and
        directory entries), `none` are lost, `all` are, or `some` (per file
        and per directory a prefix of them survives, the last one possibly
        torn). Every open file of the dead process is forgotten."""
        for changes in self._entry_changes.values():
            kept = _kept(len(changes), rng, mode)
            for path, node in changes[:kept]:
                _set_entry(self._durable_names, path, node)
        self._entry_changes.clear()
        names: dict[str, _Node] = {}
        for path in sorted(self._durable_names, key=lambda p: (p.count("/"), p)):
            parent = _parent(path)
            if path == "/" or isinstance(names.get(parent), _Directory):
                names[path] = self._durable_names[path]
        self._durable_names = dict(names)
        self._names = names
        for inode in self._inodes(names):
            writes = inode.pending
            kept = _kept(len(writes), rng, mode)
            survivors = builtins.list(writes[:kept])
            if kept < len(writes) and mode == "some":
                offset, chunk = writes[kept]
                if chunk is not None and len(chunk) > 1:
                    survivors.append((offset, chunk[: rng.randint(1, len(chunk) - 1)]))
            inode.data = _replay(inode.synced, survivors)
            inode.synced = bytes(inode.data)
            inode.pending = []

    def unsynced(self) -> int:
        """How many writes and directory changes a power cut could lose now."""
        return sum(len(c) for c in self._entry_changes.values()) + sum(
            len(i.pending) for i in self._inodes(self._names)
        )

    def _fault(self, op: str, path: str) -> None:
        fault = self._fault_of(op, path, 0)
        if fault is not None:
            raise _error(fault.code, path)

    def _fault_of(self, op: str, path: str, size: int) -> DiskFault | None:
        return self.faults(op, path, size) if self.faults is not None else None

    # --- the history logs, for the invariant checker -------------------------------------

    def _saw_history(self, path: str, inode: _Inode) -> None:
        """Whole history lines past those already seen are new rows (a replay
        rewriting rows a power cut lost is not: they were seen)."""
        end = inode.data.rfind(b"\n") + 1
        seen = self._history_seen.get(path, 0)
        if end <= seen:
            return
        self._history_seen[path] = end
        rows = bytes(inode.data[seen : end - 1]).split(b"\n")
        schedule_id = posixpath.basename(_parent(path))
        self._unreported.setdefault(schedule_id, []).extend(row + b"\n" for row in rows)

    def take_history_rows(self) -> dict[str, builtins.list[bytes]]:
        """The history rows written since the last call, per schedule, in order."""
        rows, self._unreported = self._unreported, {}
        return rows

    # --- inspection -------------------------------------------------------------------------

    def read(self, path: str) -> bytes | None:
        """A file's content as a reader sees it now (None when absent)."""
        node = self._names.get(_normal(path))
        return bytes(node.data) if isinstance(node, _Inode) else None

    def paths(self) -> builtins.list[str]:
        """Every file, sorted."""
        return sorted(p for p, node in self._names.items() if isinstance(node, _Inode))

    # --- helpers ------------------------------------------------------------------------------

    def _now(self) -> int:
        self._tick += 1
        return _EPOCH_NS + self._tick * _TICK_NS

    def _parent_of(self, path: str) -> _Directory:
        parent = self._names.get(_parent(path))
        if not isinstance(parent, _Directory):
            raise FileNotFoundError(errno.ENOENT, "no such directory", _parent(path))
        return parent

    def _bind(self, path: str, node: _Node) -> None:
        self._names[path] = node
        self._changed(path, node)

    def _unbind(self, path: str) -> None:
        del self._names[path]
        self._changed(path, None)

    def _changed(self, path: str, node: _Node | None) -> None:
        parent = _parent(path)
        self._entry_changes.setdefault(parent, []).append((path, node))
        directory = self._names.get(parent)
        if isinstance(directory, _Directory):
            directory.mtime_ns = self._now()

    def _flush_entries(self, directory: str) -> None:
        for path, node in self._entry_changes.pop(directory, ()):
            _set_entry(self._durable_names, path, node)

    @staticmethod
    def _inodes(names: Mapping[str, _Node]) -> builtins.list[_Inode]:
        unique: dict[int, _Inode] = {}
        for node in names.values():
            if isinstance(node, _Inode):
                unique.setdefault(node.number, node)
        return list(unique.values())


def _normal(path: str) -> str:
    return posixpath.normpath(os.fspath(path))


def _parent(path: str) -> str:
    return posixpath.dirname(path) or "/"


def _set_entry(names: dict[str, _Node], path: str, node: _Node | None) -> None:
    if node is None:
        names.pop(path, None)
    else:
        names[path] = node


def _kept(count: int, rng: random.Random, mode: PowerCut) -> int:
    if mode == "none" or not count:
        return count
    if mode == "all":
        return 0
    return rng.randint(0, count)


def _error(code: int, path: str) -> OSError:
    return InjectedWriteError(code, f"{os.strerror(code)} {SIMULATED}", path)


class SimDisk(SimFileSystem):
    """The durable state of one simulated machine (see the module docstring):
    the store root's files, and the records of the simulated run API and
    lock, which are not file stores and are durable as soon as written."""

    def __init__(
        self, *, deployments: Sequence[str] = (), faults: DiskFaults | None = None
    ) -> None:
        super().__init__(faults=faults)
        self.make_directory(str(SIM_STORE_ROOT), parents=True)
        self.syncfs("/")
        self.runs: dict[str, bytes] = {}
        self.run_counter = 0
        self.deployments: set[str] = set(deployments)
        self.lock_holder: dict[str, Any] | None = None
        self.observers: list[DiskObserver] = []

    # --- the history rows, for the observers --------------------------------------------

    def report_history(self, *, complete: bool) -> None:
        """Tell the observers the history rows written since the last report.
        `complete` when they are a whole group commit's (its `after:commit`)."""
        rows = self.take_history_rows()
        if rows:
            for observer in self.observers:
                observer.history_durable(rows, complete=complete)

    # --- the lock ---------------------------------------------------------------------

    def release_lock_of(self, owner: str) -> None:
        """The kernel releases a dead process's lock."""
        if self.lock_holder is not None and self.lock_holder.get("owner") == owner:
            self.lock_holder = None

    # --- inspection ---------------------------------------------------------------------

    @property
    def schedules(self) -> dict[str, SimScheduleFiles]:
        """Each schedule directory's files as lines, as readers see them now."""
        root = f"{SIM_STORE_ROOT}/{SCHEDULES_DIR}"
        try:
            names = sorted(self.list(root))
        except FileNotFoundError:
            return {}
        return {name: self.schedule_files(name) for name in names}

    def schedule_files(self, schedule_id: str) -> SimScheduleFiles:
        files = ScheduleFiles.of(SIM_STORE_ROOT, schedule_id)
        return SimScheduleFiles(
            lifecycle=_lines(self.read(files.lifecycle)),
            snapshot=self.read(files.definition),
            runtime=_lines(self.read(files.runtime)),
            history=_lines(self.read(files.history)),
        )

    def dump(self) -> bytes:
        """Every durable byte, in a fixed order: two runs of one seed must
        produce the same dump. Left out: temp files (their names are random)
        and the startup checkpoint (it holds the wall-clock time it was
        written at); both are caches of the rest."""
        parts: list[bytes] = []
        prefix = f"{SIM_STORE_ROOT}/"
        for path in self.paths():
            name = posixpath.basename(path)
            if name.endswith(".tmp") or name == CHECKPOINT_FILE:
                continue
            parts.append(f"== {path.removeprefix(prefix)}\n".encode())
            parts.append(self.read(path) or b"")
        parts.append(b"== runs\n")
        parts.extend(self.runs[run_id] for run_id in sorted(self.runs))
        parts.append(
            encode_json_line(
                {"run_counter": self.run_counter, "deployments": sorted(self.deployments)}
            )
        )
        return b"".join(parts)


def _lines(data: bytes | None) -> list[bytes]:
    """The whole lines of a log (a torn final piece is not a record)."""
    if not data:
        return []
    end = data.rfind(b"\n") + 1
    return [line + b"\n" for line in data[: end - 1].split(b"\n")] if end else []
