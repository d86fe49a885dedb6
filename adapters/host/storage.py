"""Crash-safe file primitives for the host's stores.

Every record the host keeps is one JSON file that is only ever replaced whole:
the new content goes to a temporary file in the same directory, is flushed and
fsynced, renamed over the old name, and the directory is fsynced so the rename
itself survives a power loss. A reader therefore sees the old record or the
new one, never a torn mix. Temporary files left by a crash start with `.` and
end in `.tmp`; readers ignore them.

Under a scheduler lock, every write first passes the store's write fence
(`shell.fence`): once the lock file was removed or replaced, a write raises
`core.errors.StoreFenced` before its first byte (a batch is checked once).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, cast

from shell.durable import sync_paths
from shell.fence import check_fence, check_fence_all

__all__ = [
    "SPARE_PREFIX",
    "TEMP_SUFFIX",
    "SparePool",
    "atomic_write_json",
    "atomic_write_many",
    "atomic_write_text",
    "dump_json",
    "ensure_dir",
    "fsync_dir",
    "is_temp_file",
    "read_json",
]

TEMP_SUFFIX = ".tmp"


def dump_json(value: Any, *, compact: bool = False) -> str:
    """Canonical JSON text: sorted keys, no NaN, UTF-8 friendly, trailing newline.

    Indented for people by default; `compact` (no whitespace) is for records
    written on every step, where the indenting encoder costs several times
    the compact one.
    """
    if compact:
        text = json.dumps(
            value, sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ":")
        )
    else:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False, indent=1)
    return text + "\n"


def fsync_dir(path: Path) -> None:
    """Make the directory entries of `path` (creations, renames) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dir(path: Path) -> None:
    """Create `path` (and parents) durably if it does not exist yet."""
    if path.is_dir():
        return
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    path.mkdir(parents=True, exist_ok=True)
    # The new entries live in their parents: fsync each parent, deepest last.
    for created in reversed(missing):
        fsync_dir(created.parent)


def atomic_write_text(path: Path, text: str, *, spares: SparePool | None = None) -> None:
    """Replace `path` with `text` atomically and durably (see module docstring).

    With `spares` (a pool for `path`'s directory), the new content is written
    into a recycled file and swapped in (see `SparePool`).
    """
    directory = path.parent
    if spares is not None:
        _install_many([(path, text.encode("utf-8"))], spares)
        return
    check_fence(path)
    ensure_dir(directory)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp_name, path)
    except BaseException:
        # Never leave a half-written temporary behind on an error we survive.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise
    fsync_dir(directory)


def atomic_write_json(
    path: Path, value: Any, *, spares: SparePool | None = None, compact: bool = False
) -> None:
    """Serialize `value` (canonical JSON) and replace `path` with it atomically."""
    atomic_write_text(path, dump_json(value, compact=compact), spares=spares)


def atomic_write_many(
    items: Sequence[tuple[Path, str]], *, spares: SparePool | None = None
) -> None:
    """Replace each `path` with its `text`, atomically per file and durably,
    with two flushes for the whole batch instead of two per file.

    Every temporary file is written, then one flush makes them all durable
    (`shell.durable.sync_paths`: fsync per file for a few, one `syncfs` for
    many), then each is renamed over its target and the directories are
    fsynced once each. A crash leaves every target wholly old or wholly new
    (any subset may be new); on an error we survive, temporaries are removed
    and the targets not yet renamed keep their old content. With `spares`
    (every target in its directory), recycled files are used (`SparePool`).
    """
    if spares is not None:
        _install_many([(path, text.encode("utf-8")) for path, text in items], spares)
        return
    check_fence_all(path for path, _ in items)
    temps: list[tuple[str, Path]] = []
    directories: dict[Path, None] = {}
    installed = 0
    try:
        for path, text in items:
            directory = path.parent
            if directory not in directories:
                ensure_dir(directory)
                directories[directory] = None
            fd, temp_name = tempfile.mkstemp(
                prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=directory
            )
            temps.append((temp_name, path))
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
        sync_paths([temp for temp, _ in temps])
        for temp_name, path in temps:
            os.replace(temp_name, path)
            installed += 1
    except BaseException:
        for temp_name, _ in temps[installed:]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp_name)
        raise
    for directory in directories:
        fsync_dir(directory)


# --- recycled temporary files --------------------------------------------------------

_AT_FDCWD: Final = -100
_RENAME_EXCHANGE: Final = 2
SPARE_PREFIX: Final = ".spare."


def _load_renameat2() -> Callable[[int, bytes, int, bytes, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    function.restype = ctypes.c_int
    return cast(Callable[[int, bytes, int, bytes, int], int], function)


_renameat2 = _load_renameat2()
_exchange_works = _renameat2 is not None


def _exchange(first: str, second: str) -> bool:
    """Swap two names atomically (`renameat2(RENAME_EXCHANGE)`). False when
    `second` does not exist, or the platform or filesystem cannot swap."""
    global _exchange_works
    if not _exchange_works or _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE):
        code = ctypes.get_errno()
        if code == errno.ENOENT:
            return False
        if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
            _exchange_works = False
            return False
        raise OSError(code, os.strerror(code), first)
    return True


class SparePool:
    """Recycled files for the atomic replaces of one directory.

    Creating a file (a new inode) is by far the dearest part of an atomic
    replace on some filesystems (about a millisecond of system time on the
    benchmark machine, against ~0.1 ms to rewrite and swap an existing one).
    So a replace writes the new content into a *spare* (a file named
    `.spare.<random>.tmp`, which readers ignore as a temporary), makes it
    durable, and swaps it with the target in one atomic
    `renameat2(RENAME_EXCHANGE)`: the target now holds the new content, the
    spare the old one. Once the directory is fsynced (the swap is durable) the
    spare goes back to the pool, to be truncated and rewritten by a later
    replace: never before, or a crash could bring back a target pointing at a
    file already rewritten for another record. A first write of a target
    consumes its spare (plain rename). Where swapping is unavailable, spares
    are simply renamed over their targets, as with plain temporaries.

    One pool per directory and per process; only the owner of the directory
    may use one (it adopts the spares it finds there, see `adopt`).
    """

    def __init__(self, directory: Path, *, keep: int = 16_384) -> None:
        self.directory = directory
        self.keep = keep
        self._free: list[str] = []

    def __len__(self) -> int:
        return len(self._free)

    @staticmethod
    def is_spare(name: str) -> bool:
        return name.startswith(SPARE_PREFIX) and name.endswith(TEMP_SUFFIX)

    def adopt(self, path: Path) -> None:
        """Take over a spare left in the directory by an earlier process (the
        caller owns the directory now); beyond `keep`, it is removed."""
        if len(self._free) < self.keep:
            self._free.append(str(path))
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def take(self) -> str:
        """A spare to rewrite (a new empty one when none is free)."""
        return self._free.pop() if self._free else self.fresh()

    def fresh(self) -> str:
        """A new empty spare."""
        fd, name = tempfile.mkstemp(prefix=SPARE_PREFIX, suffix=TEMP_SUFFIX, dir=self.directory)
        os.close(fd)
        return name

    def give(self, path: str) -> None:
        """Return a spare whose swap is durable."""
        if len(self._free) < self.keep:
            self._free.append(path)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _rewrite(spares: SparePool, data: bytes) -> str:
    spare = spares.take()
    try:
        fd = os.open(spare, os.O_WRONLY)
    except FileNotFoundError:
        # Removed behind our back: start a fresh one.
        spare = spares.fresh()
        fd = os.open(spare, os.O_WRONLY)
    try:
        # Overwrite in place, then cut: an O_TRUNC open would free every block
        # and allocate them again (ten times dearer on the benchmark machine).
        view = memoryview(data)
        offset = 0
        while offset < len(data):
            offset += os.pwrite(fd, view[offset:], offset)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
    return spare


def _install_many(items: Sequence[tuple[Path, bytes]], spares: SparePool) -> None:
    if not items:
        return
    check_fence_all(path for path, _ in items)
    written: list[tuple[str, Path]] = []
    swapped: list[str] = []
    installed = 0
    try:
        ensure_dir(spares.directory)
        for path, data in items:
            if path.parent != spares.directory:
                raise ValueError(f"{path} is not in {spares.directory}")
            written.append((_rewrite(spares, data), path))
        sync_paths([spare for spare, _ in written])
        for spare, path in written:
            if _exchange(spare, str(path)):
                swapped.append(spare)
            else:
                os.replace(spare, path)
            installed += 1
    except BaseException:
        for spare, _ in written[installed:]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(spare)
        raise
    fsync_dir(spares.directory)
    for spare in swapped:
        spares.give(spare)


def read_json(path: Path) -> Any:
    """Parse the JSON file at `path`. Raises OSError or ValueError (bad JSON/UTF-8)."""
    with path.open("r", encoding="utf-8") as handle:
        return json.load(handle)


def is_temp_file(path: Path) -> bool:
    """True for a temporary file of an interrupted atomic write."""
    return path.name.startswith(".") and path.name.endswith(TEMP_SUFFIX)
