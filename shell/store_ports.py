"""What the scheduler service and the schedules API need from their stores and lock.

The file-backed classes (`DefinitionStore`, `RuntimeStore`, `HistoryStore`,
`SchedulerLock`) are the implementations a server uses; the deterministic
simulation (`shell.sim`) runs the same file stores over a simulated disk,
with an in-memory lock of the same behaviour. These protocols are the seam:
`SchedulesApi` and `SchedulerService` accept any object that fits them.

Only the methods the service and the API call are listed; see the file-backed
classes for the full contracts (errors, idempotence, staging in a batch).
`StoreUpkeepPort` is the work a backend may need done off the rounds' path
(the file backend's startup checkpoint and temp-file sweep); a backend with
none leaves it out (`SchedulesApi.upkeep` is None), so that the service never
needs to know which backend it runs on.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Container, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from shell.definition_store import ChangeKind, DefinitionLoad, LifecycleResult
from shell.durable import GroupCommit
from shell.history_store import HistoryRecovery, OpenOccurrence
from shell.runtime_store import RuntimeLoad
from shell.startup_checkpoint import CachedSchedule
from shell.store_format import Instant

__all__ = ["DefinitionsPort", "HistoryPort", "LockPort", "RuntimePort", "StoreUpkeepPort"]


class DefinitionsPort(Protocol):
    """Schedule definitions and their lifecycle log (see `DefinitionStore`)."""

    @property
    def store_root(self) -> Path:
        """The root that diagnostics name files under."""
        ...

    def exists(self, schedule_id: str) -> bool: ...

    def list_ids(self, *, present: Container[str] = ()) -> list[str]:
        """`present`: ids the caller checks itself, listed even if incomplete."""
        ...

    def load(self, schedule_id: str, *, repair: bool = False) -> DefinitionLoad: ...

    def read_for_recovery(
        self, schedule_id: str, *, repair: bool = False
    ) -> tuple[tuple[dict[str, Any], ...], DefinitionLoad | None]:
        """`records_after(schedule_id, 0)`, then `load` (None if no record)."""
        ...

    def get(self, schedule_id: str) -> dict[str, Any]: ...

    def records_after(self, schedule_id: str, seq: int) -> tuple[dict[str, Any], ...]: ...

    def create(
        self, schedule_id: str, definition: Mapping[str, Any], *, at: Instant
    ) -> LifecycleResult: ...

    def apply_change(
        self,
        schedule_id: str,
        kind: ChangeKind,
        *,
        at: Instant,
        definition: Mapping[str, Any] | None = None,
        expected_revision: int | None = None,
    ) -> LifecycleResult: ...

    def set_blocked(
        self, schedule_id: str, blocked: Mapping[str, Any] | None, *, at: Instant | None = None
    ) -> dict[str, Any]: ...


class RuntimePort(Protocol):
    """Per-schedule runtime records (see `RuntimeStore`)."""

    def load(self, schedule_id: str) -> RuntimeLoad: ...

    def stage(
        self,
        batch: GroupCommit,
        schedule_id: str,
        *,
        watermark: Instant,
        held: Instant | None,
        lifecycle_seq: int,
        written_at: Instant,
        waiting: Sequence[Instant] = (),
    ) -> dict[str, Any]: ...


class HistoryPort(Protocol):
    """Occurrence history (see `HistoryStore`)."""

    def recover(self, schedule_id: str, *, full_scan: bool = False) -> HistoryRecovery:
        """`full_scan`: read every row, not only those after an index checkpoint."""
        ...

    def adopt_state(self, schedule_id: str, exported: Sequence[Any]) -> HistoryRecovery | None:
        """A startup checkpoint's history state taken as recovered (None: a
        backend that cannot, so the history is recovered instead)."""
        ...

    def sync_recovered(self) -> None: ...

    def close(self) -> None: ...

    def append_decision(
        self,
        schedule_id: str,
        *,
        instant: Instant,
        status: str,
        recorded_at: Instant,
        run_id: str | None = None,
        reason: str | None = None,
        count: int = 1,
        first_instant: Instant | None = None,
        last_instant: Instant | None = None,
        revision: int | None = None,
        snapshot: Mapping[str, Any] | None = None,
        batch: GroupCommit | None = None,
    ) -> int: ...

    def stage_admitted(
        self,
        schedule_id: str,
        *,
        instant: datetime,
        run_id: str,
        snapshot: Mapping[str, Any],
        recorded_at: datetime,
        batch: GroupCommit,
    ) -> int: ...

    def append_transition(
        self,
        schedule_id: str,
        *,
        status: str,
        recorded_at: Instant,
        seq: int | None = None,
        instant: Instant | None = None,
        run_id: str | None = None,
        reason: str | None = None,
        batch: GroupCommit | None = None,
    ) -> int: ...

    def open_occurrence(self, schedule_id: str, instant: Instant) -> OpenOccurrence | None: ...

    def page(
        self, schedule_id: str, *, limit: int, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]: ...


class LockPort(Protocol):
    """Exclusive ownership of a store (see `SchedulerLock`)."""

    @property
    def path(self) -> os.PathLike[str] | str:
        """What the lock is, for log messages."""
        ...

    def acquire(self) -> dict[str, Any]: ...

    def verify(self) -> bool: ...

    def release(self) -> None: ...


class StoreUpkeepPort(Protocol):
    """Work off the rounds' path that a backend needs (see `shell.file_upkeep`)."""

    def take_startup_checkpoint(self) -> dict[str, CachedSchedule]:
        """The last checkpoint's entries, consumed: a start calls it once."""
        ...

    def current_identities(self, schedule_id: str) -> str:
        """What a checkpoint entry of this schedule is compared with: its
        stored parts' identities now."""
        ...

    def publish(self) -> None:
        """Make what the stores cache durable where a start finds it."""
        ...

    def write_startup_checkpoint(
        self, captured: Mapping[str, CachedSchedule], *, examine: Collection[str] | None = None
    ) -> dict[str, CachedSchedule]:
        """Write the next checkpoint and return its entries; raises OSError or
        SchedulingError (a failure costs the next start time, nothing else)."""
        ...

    def sweep_temp_files(self, *, older_than_ns: int) -> None:
        """Remove what interrupted writes left before `older_than_ns`."""
        ...
