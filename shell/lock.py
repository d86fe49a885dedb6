"""Exclusive ownership of a store: `<store_root>/scheduler.lock`.

The owner holds an `flock(LOCK_EX)` on the lock file for its whole life,
with the file descriptor kept open: a host server on the store from its
build to its close (its scheduler service, if any, runs under it), or
`wf-store copy` while it copies. The kernel releases the lock when the
process dies, however it dies, so a lock file left by a dead process never
blocks a new owner. After locking, the holder writes `{"pid", "host",
"since"}` into the file so that a refused second owner can name it.

Ownership also holds an `flock(LOCK_EX)` on the store root directory itself,
taken first. A directory that holds the store cannot be removed, and
unlinking or replacing `scheduler.lock` does not touch the directory's lock,
so a second service is refused for as long as the first lives, even when its
lock file is gone (it is then named from `/proc/locks`).

Fencing: `verify()` checks that the paths still name the file and the
directory we locked. If an operator (or a cleanup script) removed or
replaced the lock file, or renamed the store root, the service stops
admitting, and says so; it keeps the directory lock until it stops, so no
second service can take the store meanwhile. A held lock also registers a
write fence on its store root (`shell.fence`): once the lock file or the root
no longer names what was locked, every writer of the store refuses to write
(`StoreFenced`), not only the scheduler's admissions.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.errors import SchedulerUnavailable
from shell.durable import fault_point, fsync_directory
from shell.fence import Fence, register_fence, unregister_fence
from shell.store_format import LOCK_FILE, format_instant

__all__ = ["SchedulerLock"]


def _utc_now() -> datetime:
    return datetime.now(UTC)


class SchedulerLock:
    """The scheduler lock of one store root. Not reentrant; one per service."""

    def __init__(
        self,
        store_root: str | os.PathLike[str],
        *,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.store_root = Path(store_root)
        self.path = self.store_root / LOCK_FILE
        self._clock = clock
        self._fd: int | None = None
        self._root_fd: int | None = None
        self._fence: Fence | None = None
        self.holder: dict[str, Any] | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> dict[str, Any]:
        """Take the lock and record this process as its holder; returns the
        holder info.

        Raises `SchedulerUnavailable` naming the holder (pid, host, since)
        when another live process holds it, or when this object already holds
        it.
        """
        if self._fd is not None:
            # Held here already (a second service of the same backend): the
            # refusal names the holder, this process, as for any other.
            raise self._refusal()
        self.store_root.mkdir(parents=True, exist_ok=True)
        root_fd = self._lock_root()
        try:
            holder = self._lock_file()
        except BaseException:
            os.close(root_fd)
            raise
        self._root_fd = root_fd
        assert self._fd is not None
        self._fence = register_fence(self.store_root, self.path, lock_fd=self._fd, root_fd=root_fd)
        return holder

    def _lock_root(self) -> int:
        """The locked store root directory (its fd), or the refusal."""
        root_fd = os.open(self.store_root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(root_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(root_fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise self._refusal(root_locked=True) from None
        return root_fd

    def _lock_file(self) -> dict[str, Any]:
        while True:
            created = not self.path.exists()
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                raise self._refusal() from None
            # The file may have been unlinked or replaced between our open and
            # our flock; then we hold a lock nobody else can see. Try again.
            if self._same_file(fd):
                break
            os.close(fd)
        try:
            holder = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "since": format_instant(self._clock()),
            }
            data = json.dumps(holder, sort_keys=True).encode() + b"\n"
            fault_point("before:write:scheduler.lock")
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
            os.fsync(fd)
            if created:
                fsync_directory(self.store_root)
            fault_point("after:write:scheduler.lock")
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.holder = holder
        return holder

    def _same_file(self, fd: int) -> bool:
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (mine.st_dev, mine.st_ino) == (on_disk.st_dev, on_disk.st_ino)

    def read_holder(self) -> dict[str, Any] | None:
        """The holder info recorded in the lock file (None if absent or unreadable)."""
        try:
            info = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return None
        return info if isinstance(info, dict) else None

    def _root_locker(self) -> int | None:
        """The pid holding the flock on the store root, from `/proc/locks`
        (None where that is unavailable or names nobody)."""
        try:
            info = os.stat(self.store_root)
            lines = Path("/proc/locks").read_text().splitlines()
        except OSError:
            return None
        inode = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
        for line in lines:
            fields = line.split()
            # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters have "->".
            if "->" in fields[:2] or len(fields) < 6 or fields[1] != "FLOCK":
                continue
            if fields[5] == inode and fields[4].isdigit():
                return int(fields[4])
        return None

    def _refusal(self, *, root_locked: bool = False) -> SchedulerUnavailable:
        """The error that refuses this store to a second owner, naming its holder."""
        holder = self.read_holder()
        locker = self._root_locker() if root_locked else None
        if locker is not None and (holder is None or holder.get("pid") != locker):
            # The lock file was removed or replaced under a live owner: the
            # kernel still names it (flock is local, so it is on this host).
            holder = {"pid": locker, "host": socket.gethostname(), "since": None}
            return SchedulerUnavailable(
                f"store {self.store_root} is owned by pid {locker}"
                f" on host {holder['host']} (its lock file {self.path} was removed or"
                f" replaced){_what_to_do(holder)}",
                data={"holder": holder},
            )
        if holder is None:
            # Locked, but the holder has not written its info yet (or it is damaged).
            return SchedulerUnavailable(
                f"store {self.store_root} is owned by another process"
                " (holder info not recorded yet); stop it first",
                data={"holder": None},
            )
        return SchedulerUnavailable(
            f"store {self.store_root} is owned by pid {holder.get('pid')}"
            f" on host {holder.get('host')} since {holder.get('since')}{_what_to_do(holder)}",
            data={"holder": holder},
        )

    def verify(self) -> bool:
        """True while we hold the lock and the path still names the locked file.

        False after `release()`, when the lock file was removed or replaced
        under us, or when the store root path no longer names the directory
        we locked (it was renamed or replaced); from the first False on (while
        held), always False, and the store's write fence is tripped.
        """
        if self._fd is None or self._root_fd is None:
            return False
        fence = self._fence
        if fence is not None and fence.tripped:
            # Sticky: a lock file put back does not make the store ours again.
            return False
        if fence is None:
            return self._same_file(self._fd) and self._root_is_ours(self._root_fd)
        # The identities the fence took of these descriptors at the
        # acquisition: two `stat`s, not four, at every wake-up.
        if fence.holds():
            return True
        # Every writer of the store refuses from now on; the caller says so.
        fence.tripped = True
        return False

    def _root_is_ours(self, root_fd: int) -> bool:
        try:
            on_disk = os.stat(self.store_root)
        except FileNotFoundError:
            return False
        mine = os.fstat(root_fd)
        return (mine.st_dev, mine.st_ino) == (on_disk.st_dev, on_disk.st_ino)

    def ensure_held(self) -> None:
        """Raise `SchedulerUnavailable` unless `verify()` holds: call it before
        every admission so a fenced-off service stops admitting."""
        if not self.verify():
            raise SchedulerUnavailable(
                f"scheduler lock {self.path} is not held by this process (pid {os.getpid()}):"
                " it was released, removed or replaced; admissions are stopped",
                data={"lock": str(self.path), "pid": os.getpid()},
            )

    def release(self) -> None:
        """Release the lock (idempotent). Clears the holder info first, but only
        in a file that is still ours."""
        fd, root_fd = self._fd, self._root_fd
        if fd is None:
            return
        self._fd = self._root_fd = None
        self.holder = None
        if self._fence is not None:
            # A tripped fence stays: the store is not this process's to write.
            unregister_fence(self._fence)
            self._fence = None
        try:
            if self._same_file(fd):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
            # Last: until now no other process may take the store.
            if root_fd is not None:
                os.close(root_fd)

    def abandon(self) -> None:
        """Close both descriptors without touching the file, as the kernel does
        when the holder dies (crash tests simulate a dead process with it)."""
        if self._fence is not None:
            # A dead process fences nothing: the test's next owner writes freely.
            unregister_fence(self._fence, keep_tripped=False)
            self._fence = None
        for fd in (self._fd, self._root_fd):
            if fd is not None:
                os.close(fd)
        self._fd = self._root_fd = None
        self.holder = None

    def __enter__(self) -> SchedulerLock:
        self.acquire()
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


def _what_to_do(holder: dict[str, Any]) -> str:
    """The end of a refusal: another process is to be stopped; this one
    (a server built again in a notebook, say, or a test) holds the store
    through a server it has not closed."""
    if holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
        return (
            " (this process: a server opened on the store and not closed holds it;"
            " `await server.close()` it first)"
        )
    return "; stop it first"
