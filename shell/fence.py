"""Write fencing: no byte goes under a store root whose scheduler lock was lost.

`SchedulerLock.acquire()` registers a *fence* for its store root: the
identities (device, inode) of the lock file and of the root directory it
locked. Every writer of the store (`shell.durable`'s primitives, the group
commit, the journal, the history index, the host's record files) calls
`check_fence` with the path(s) it is about to write, before writing any of
them. For a path under a registered root, that costs two `stat`s (the lock
file's path and the root's path, compared with the identities taken at
registration); a path under no registered root costs a string comparison, and
a process with no lock (a server on PostgreSQL) pays nothing.

When the lock file was removed or replaced, or the root renamed or replaced,
the fence *trips*: `StoreFenced` is raised, the first time with one ERROR log
line, and from then on without looking at the disk again (sticky: a lock file
put back later does not make the store ours again; only a new `acquire()`
does). A fence that tripped outlives `release()`: the process keeps refusing
writes to that root until it takes the store again (a new lock acquired on
it: a new host server opened on it acquires one), so a run finishing after
the fenced service stopped still writes nothing. `release()` of a
healthy lock and `abandon()` (a simulated crash) remove the fence.

Paths are compared as given, made absolute (no symlink resolution, which
would cost a `stat` per path component): a writer reaching the store through
a symlinked alias of its root is not fenced. The stores all build their paths
from the same root the lock was given.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from core.errors import StoreFenced

__all__ = [
    "Fence",
    "active_fences",
    "check_fence",
    "check_fence_all",
    "clear_fences",
    "register_fence",
    "unregister_fence",
]

_log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class Fence:
    """One store root's fence: what its lock held when it was acquired."""

    store_root: str
    lock_path: str
    lock_identity: tuple[int, int]
    root_identity: tuple[int, int]
    tripped: bool = False
    # `store_root` with a trailing separator: the prefix of every path under it.
    _prefix: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._prefix = self.store_root.rstrip(os.sep) + os.sep

    def covers(self, path: str) -> bool:
        """Is `path` (absolute) the root or under it?"""
        return path.startswith(self._prefix) or path == self.store_root

    def holds(self) -> bool:
        """Do the lock file's path and the root's path still name what was locked?"""
        try:
            lock = os.stat(self.lock_path)
            root = os.stat(self.store_root)
        except FileNotFoundError:
            return False
        return (lock.st_dev, lock.st_ino) == self.lock_identity and (
            root.st_dev,
            root.st_ino,
        ) == self.root_identity

    def error(self, path: str) -> StoreFenced:
        return StoreFenced(
            f"store {self.store_root} is fenced: its scheduler lock {self.lock_path} was"
            f" removed or replaced (or the store root renamed) under this process"
            f" (pid {os.getpid()}), so it writes nothing more to the store (refused: {path});"
            " reads keep working; restart the server to own the store again",
            data={"lock": self.lock_path, "store_root": self.store_root, "pid": os.getpid()},
        )


# Keyed by the absolute store root. Usually empty (no scheduler) or one entry.
_FENCES: dict[str, Fence] = {}


def _absolute(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    # abspath is string work, plus getcwd for a relative path: no stat.
    return text if os.path.isabs(text) and "/." not in text else os.path.abspath(text)


def register_fence(
    store_root: str | os.PathLike[str],
    lock_path: str | os.PathLike[str],
    *,
    lock_fd: int,
    root_fd: int,
) -> Fence:
    """Fence `store_root` on the lock file and root directory open as
    `lock_fd` and `root_fd` (their identities now); replaces an earlier fence
    of that root, tripped or not."""
    lock = os.fstat(lock_fd)
    root = os.fstat(root_fd)
    fence = Fence(
        store_root=_absolute(store_root),
        lock_path=_absolute(lock_path),
        lock_identity=(lock.st_dev, lock.st_ino),
        root_identity=(root.st_dev, root.st_ino),
    )
    _FENCES[fence.store_root] = fence
    return fence


def unregister_fence(fence: Fence, *, keep_tripped: bool = True) -> None:
    """Remove `fence` (if it is still the one registered for its root). A
    tripped fence stays registered unless `keep_tripped` is false."""
    if fence.tripped and keep_tripped:
        return
    if _FENCES.get(fence.store_root) is fence:
        del _FENCES[fence.store_root]


def clear_fences(store_root: str | os.PathLike[str]) -> None:
    """Forget the fence of `store_root`, tripped or not: this process takes
    the store again (nobody else owns it)."""
    _FENCES.pop(_absolute(store_root), None)


def active_fences() -> list[Fence]:
    """The registered fences (for tests and diagnostics)."""
    return list(_FENCES.values())


def check_fence(*paths: str | os.PathLike[str]) -> None:
    """Raise `StoreFenced` if any of `paths` lies under a store root whose
    fence has tripped or trips now. Call it before writing the first byte of
    a write (once per batch for a batch: pass every path of it)."""
    if not _FENCES:
        return
    for path in paths:
        _check_one(_absolute(path))


def check_fence_all(paths: Iterable[str | os.PathLike[str]]) -> None:
    """`check_fence` of an iterable of paths (a group commit's)."""
    if not _FENCES:
        return
    verified: set[int] = set()
    for path in paths:
        absolute = _absolute(path)
        for fence in _FENCES.values():
            if id(fence) not in verified and fence.covers(absolute):
                _verify(fence, absolute)
                verified.add(id(fence))
        if len(verified) == len(_FENCES):
            return


def _check_one(path: str) -> None:
    for fence in _FENCES.values():
        if fence.covers(path):
            _verify(fence, path)


def _verify(fence: Fence, path: str) -> None:
    if fence.tripped:
        raise fence.error(path)
    if fence.holds():
        return
    fence.tripped = True
    _log.error(
        "store %s fenced: scheduler lock %s was removed or replaced (or the store root"
        " renamed) under this process; writes to the store are stopped (refused: %s)",
        fence.store_root,
        fence.lock_path,
        path,
    )
    raise fence.error(path)
