"""An in-memory scheduler lock with `SchedulerLock`'s behaviour.

The holder lives on the `SimDisk` (as the OS lock lives in the kernel): a
second process is refused with `SchedulerUnavailable` naming the holder, and
a dead process's lock is released by `SimDisk.release_lock_of`, as the kernel
releases a dead process's `flock`. Writing the holder passes the same fault
points as the file lock.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from core.errors import SchedulerUnavailable
from shell.durable import fault_point
from shell.sim.disk import SimDisk
from shell.store_format import LOCK_FILE, format_instant

__all__ = ["MemoryLock"]


class MemoryLock:
    """The lock of one simulated process, named `owner`."""

    def __init__(self, disk: SimDisk, owner: str, *, clock: Callable[[], datetime]) -> None:
        self._disk = disk
        self.owner = owner
        self._clock = clock
        self._held = False

    @property
    def path(self) -> str:
        return f"sim:{LOCK_FILE}"

    def loss(self) -> str:
        return f"scheduler lock {self.path} was removed or replaced under this process"

    async def acquire(self) -> dict[str, Any]:
        """Take the lock; raises `SchedulerUnavailable` naming the holder."""
        holder = self._disk.lock_holder
        if self._held or holder is not None:
            raise SchedulerUnavailable(
                f"simulated store is owned by {holder.get('owner') if holder else self.owner}"
                f" since {holder.get('since') if holder else '?'}; stop it first",
                data={"holder": holder},
            )
        info = {"owner": self.owner, "since": format_instant(self._clock())}
        fault_point(f"before:write:{LOCK_FILE}")
        self._disk.lock_holder = info
        self._held = True
        fault_point(f"after:write:{LOCK_FILE}")
        return dict(info)

    async def verify(self) -> bool:
        holder = self._disk.lock_holder
        return self._held and holder is not None and holder.get("owner") == self.owner

    @property
    def assured(self) -> bool:
        return self._held

    # As the file lock: one process owns the store.
    stands_by = False

    async def campaign(self) -> bool:
        return False

    async def step_down(self) -> None:
        return None

    async def leader(self) -> dict[str, Any] | None:
        holder = self._disk.lock_holder
        return dict(holder) if holder is not None else None

    async def release(self) -> None:
        if self._held:
            self._held = False
            self._disk.release_lock_of(self.owner)
