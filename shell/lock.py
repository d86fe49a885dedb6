"""Exclusive ownership of a store: `<store_root>/scheduler.lock`.

The service holds an `flock(LOCK_EX)` on the lock file for its whole life,
with the file descriptor kept open. The kernel releases the lock when the
process dies, however it dies, so a lock file left by a dead process never
blocks a new service. After locking, the holder writes `{"pid", "host",
"since"}` into the file so that a refused second service can name it.

Fencing: `verify()` checks that the path still names the file we locked. If
an operator (or a cleanup script) removed or replaced it, another service
could lock the new file while we still run; the service must then stop
admitting, and says so.
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
            raise SchedulerUnavailable(
                f"scheduler store {self.store_root} is already owned by this lock object",
                data={"holder": self.holder},
            )
        self.store_root.mkdir(parents=True, exist_ok=True)
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

    def _refusal(self) -> SchedulerUnavailable:
        holder = self.read_holder()
        if holder is None:
            # Locked, but the holder has not written its info yet (or it is damaged).
            return SchedulerUnavailable(
                f"scheduler store {self.store_root} is owned by another process"
                " (holder info not recorded yet); stop it first",
                data={"holder": None},
            )
        return SchedulerUnavailable(
            f"scheduler store {self.store_root} is owned by pid {holder.get('pid')}"
            f" on host {holder.get('host')} since {holder.get('since')}; stop it first",
            data={"holder": holder},
        )

    def verify(self) -> bool:
        """True while we hold the lock and the path still names the locked file.

        False after `release()`, or when the lock file was removed or replaced
        under us (then another process may own the store).
        """
        return self._fd is not None and self._same_file(self._fd)

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
        fd = self._fd
        if fd is None:
            return
        self._fd = None
        self.holder = None
        try:
            if self._same_file(fd):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> SchedulerLock:
        self.acquire()
        return self

    def __exit__(self, *_: object) -> None:
        self.release()
