"""What the scheduler service, recovery and the schedules API need from a store.

A *backend* (`ScheduleBackend`) is one way of keeping schedules: the files
under a store root (`shell.file_backend`, the embedded default) or a
PostgreSQL database (`shell.pg`). The service, recovery and the API see only
these protocols, so a backend is added without touching them.

Reads and writes that may wait on the store are coroutines: a database
answers over the network, and the event loop must go on serving meanwhile.
Staging a row or a runtime record into a batch is not: it checks the row
against what the owner holds in memory and keeps it for the batch's commit,
which is the one wait of a round (`ScheduleBackend.commit`).

Diagnostics name where a record lives (`ScheduleBackend.locate`): a file
relative to the store root, or a table and row; the service and recovery
never build those names themselves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, NamedTuple, Protocol

from core.recovery_checks import CheckedClaims
from shell.definition_store import ChangeKind, LifecycleResult
from shell.history_store import HistoryRecovery, OpenOccurrence
from shell.runtime_store import RuntimeLoad
from shell.store_format import Instant, StoreProblem

__all__ = [
    "BatchPort",
    "DefinitionsPort",
    "HistoryPort",
    "OwnershipPort",
    "RecordPart",
    "RecoveryReader",
    "RuntimePort",
    "ScheduleBackend",
    "ScheduleInputs",
    "StoreUpkeepPort",
    "StoreWatcher",
]

# The parts of a schedule's records a diagnostic can name.
RecordPart = Literal["lifecycle", "definition", "runtime", "history", "history_index"]


class ScheduleInputs(NamedTuple):
    """What a recovery reads of one schedule."""

    # The lifecycle records, oldest first (seq dense from 1).
    records: tuple[dict[str, Any], ...]
    runtime: RuntimeLoad
    recovered: HistoryRecovery
    # Problems the definition's load found (a damaged snapshot, say).
    load_problems: tuple[StoreProblem, ...]
    # The block diagnostic the stored definition carries, if any.
    stored_block: Mapping[str, Any] | None


class BatchPort(Protocol):
    """One round's writes, made durable together by `ScheduleBackend.commit`."""

    @property
    def state(self) -> str:
        """ "open" until committed, then "committed" (or "aborted", "crashed")."""
        ...

    def abort(self) -> None:
        """Drop what was staged (the stores forget it); the batch is closed."""
        ...

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Run `callback` once everything staged is durable."""
        ...

    def on_abort(self, callback: Callable[[], None]) -> None:
        """Run `callback` if the batch is dropped or its commit fails."""
        ...


class DefinitionsPort(Protocol):
    """Schedule definitions and their lifecycle log (see `DefinitionStore`)."""

    async def exists(self, schedule_id: str) -> bool: ...

    async def list_ids(self) -> list[str]: ...

    async def get(self, schedule_id: str) -> dict[str, Any]: ...

    async def records_after(self, schedule_id: str, seq: int) -> tuple[dict[str, Any], ...]: ...

    async def create(
        self, schedule_id: str, definition: Mapping[str, Any], *, at: Instant
    ) -> LifecycleResult: ...

    async def apply_change(
        self,
        schedule_id: str,
        kind: ChangeKind,
        *,
        at: Instant,
        definition: Mapping[str, Any] | None = None,
        expected_revision: int | None = None,
        action: Mapping[str, Any] | None = None,
    ) -> LifecycleResult: ...

    async def set_blocked(
        self, schedule_id: str, blocked: Mapping[str, Any] | None, *, at: Instant | None = None
    ) -> dict[str, Any]: ...


class RuntimePort(Protocol):
    """Per-schedule runtime records (see `RuntimeStore`)."""

    async def load(self, schedule_id: str) -> RuntimeLoad: ...

    def stage(
        self,
        batch: Any,
        schedule_id: str,
        *,
        watermark: Instant,
        held: Instant | None,
        lifecycle_seq: int,
        written_at: Instant,
        waiting: Sequence[Instant] = (),
        backfill: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]: ...


class HistoryPort(Protocol):
    """Occurrence history (see `HistoryStore`). The staging methods check a
    row against the history the owner recovered and keep it for `batch`."""

    async def recover(self, schedule_id: str) -> HistoryRecovery:
        """Take the history of a schedule created after the start as its owner."""
        ...

    def append_decision(
        self,
        schedule_id: str,
        *,
        instant: Instant,
        status: str,
        recorded_at: Instant,
        batch: Any,
        run_id: str | None = None,
        reason: str | None = None,
        count: int = 1,
        first_instant: Instant | None = None,
        last_instant: Instant | None = None,
        revision: int | None = None,
        snapshot: Mapping[str, Any] | None = None,
        origin: str | None = None,
        request: int | None = None,
    ) -> int: ...

    def stage_admitted(
        self,
        schedule_id: str,
        *,
        instant: datetime,
        run_id: str,
        snapshot: Mapping[str, Any],
        recorded_at: datetime,
        batch: Any,
        origin: str | None = None,
        request: int | None = None,
    ) -> int: ...

    def append_transition(
        self,
        schedule_id: str,
        *,
        status: str,
        recorded_at: Instant,
        batch: Any,
        seq: int | None = None,
        instant: Instant | None = None,
        run_id: str | None = None,
        reason: str | None = None,
    ) -> int: ...

    def open_occurrence(self, schedule_id: str, instant: Instant) -> OpenOccurrence | None: ...

    async def page(
        self, schedule_id: str, *, limit: int, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]: ...

    async def occurrence_at(
        self, schedule_id: str, instant: Instant, origin: str = "schedule"
    ) -> dict[str, Any] | None:
        """The page row of the occurrence of `origin` decided at `instant`
        (None: none)."""
        ...

    async def backfill_decided(
        self, schedule_id: str, start: datetime, end: datetime
    ) -> frozenset[datetime]:
        """The instants of `[start, end)` a backfill may not admit: admitted
        by the calendar, or decided by a backfill (rule Q)."""
        ...

    async def length(self, schedule_id: str) -> int:
        """How many occurrences the history holds (the seq the next one gets),
        so a reader can page it newest first. NotFound if there is no schedule."""
        ...

    def locate(self, schedule_id: str, seq: int) -> str:
        """How a diagnostic names the row of occurrence `seq`."""
        ...


class OwnershipPort(Protocol):
    """Exclusive ownership of a store by one scheduler: a lock one process
    holds (`SchedulerLock`, files), or a leadership several servers of one
    store take in turn (`shell.pg.ownership`, a database)."""

    @property
    def path(self) -> str:
        """What the ownership is, for log messages (a lock file, a database)."""
        ...

    @property
    def stands_by(self) -> bool:
        """Whether losing it means standing by to take it again (several
        servers share the store), not being fenced for good."""
        ...

    def loss(self) -> str:
        """What happened, for messages, once `verify` found ownership lost."""
        ...

    async def acquire(self) -> dict[str, Any]:
        """Own the store; raises SchedulerUnavailable naming the holder."""
        ...

    async def verify(self) -> bool:
        """Whether this process still owns the store (False: fenced)."""
        ...

    @property
    def assured(self) -> bool:
        """Whether this process may still act as the owner by what it knows
        without asking the store: held, not found lost, and (a lease) not
        past the time its last renewal is trusted for. What health reports
        between two `verify` calls, which a sleeping loop makes rarely."""
        ...

    async def release(self) -> None: ...

    async def campaign(self) -> bool:
        """Take it if no one holds it now; True if taken (a standby's poll)."""
        ...

    async def step_down(self) -> None:
        """Stop holding it at once, writing nothing (it was lost)."""
        ...

    async def leader(self) -> dict[str, Any] | None:
        """Who holds it, as the store says (holder fields; `epoch` where the
        store keeps one); None when no one ever did."""
        ...


class RecoveryReader(Protocol):
    """One recovery's reads of every schedule (`ScheduleBackend.recovery_reader`)."""

    async def schedule_ids(self) -> list[str]: ...

    async def read(self, schedule_id: str) -> ScheduleInputs | StoreProblem | None:
        """The schedule's records; a problem when no definition can be rebuilt
        (the schedule is blocked as unknown); None when there is nothing to
        recover (gone, or an incomplete create)."""
        ...

    def checked_claims(self) -> CheckedClaims:
        """Once `schedule_ids` has answered: what the last checkpoint says of
        the runs already accounted for (`core.recovery_checks.claims_since`)."""
        ...


class StoreUpkeepPort(Protocol):
    """Work off the rounds' path that a backend needs (see `shell.file_upkeep`)."""

    def publish(self) -> None:
        """Make what the stores cache durable where a start finds it (raises
        OSError: the round fails and the state is rebuilt from the stores)."""
        ...

    def flush_if_aged(self) -> None:
        """At a quiet moment, flush what the stores wrote long enough ago
        that it costs little (never raises for a failed flush: it is tried
        again later)."""
        ...

    def note_runs_checked(self, position: str | None) -> None:
        """Where the host's run records stand, for the next startup checkpoint
        (None: the host cannot say): every run whose record was last written
        before it was checked by this scheduler's start or admitted by this
        scheduler with its row (`core.recovery_checks.claims_since`)."""
        ...

    def write_startup_checkpoint(self, *, examine: Collection[str] | None = None) -> bool:
        """Write what the next start may take instead of reading (with
        `examine`, only those schedules are looked at again); False when it
        could not: a failure costs the next start time, nothing else."""
        ...

    def sweep_temp_files(self, *, older_than_ns: int) -> None:
        """Remove what interrupted writes left before `older_than_ns`."""
        ...


class StoreWatcher(Protocol):
    """What a scheduler hears of a store several servers share
    (`ScheduleBackend.watch`)."""

    def schedule_changed(self, schedule_id: str) -> None:
        """Another server changed the schedule (read its lifecycle records)."""
        ...

    def leadership_released(self) -> None:
        """A leader gave its lease up: a standby campaigns now."""
        ...

    def changes_lost(self) -> None:
        """What others changed meanwhile may have gone unheard (the
        connection that hears it broke): read everything again."""
        ...


class ScheduleBackend(Protocol):
    """One backend's schedule stores, ownership and batches."""

    @property
    def definitions(self) -> DefinitionsPort: ...

    @property
    def runtime(self) -> RuntimePort: ...

    @property
    def history(self) -> HistoryPort: ...

    @property
    def ownership(self) -> OwnershipPort: ...

    @property
    def upkeep(self) -> StoreUpkeepPort | None:
        """Quiet-moment work (None: the backend needs none)."""
        ...

    @property
    def prepares_ahead(self) -> bool:
        """Whether a round may be staged ahead of its instant and committed at
        it: only this process writes the stores (no other server changes what
        the round read meanwhile), and a batch can wait open."""
        ...

    def new_batch(self) -> BatchPort: ...

    async def commit(
        self, batch: BatchPort, then: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Make everything staged in `batch` durable, all or nothing; raises
        when it could not (its durability is then unknown: the stores forget
        what they staged and are read again before their next use).

        `then` runs once the batch is durable, as early as the backend
        allows: on files, before the round's files are written from the
        commit journal (they are durable in it, and nothing reads them until
        this returns); `commit` returns after both, also when `then` raises
        (its error is raised then)."""
        ...

    def locate(self, schedule_id: str, part: RecordPart) -> str:
        """Where a diagnostic says a schedule's `part` lives."""
        ...

    def run_location(self, run_id: str) -> str:
        """Where a diagnostic says a run's record lives."""
        ...

    def is_run_location(self, location: str) -> bool:
        """Whether a diagnostic's location names a run's record."""
        ...

    async def open_owned(self) -> None:
        """After `ownership.acquire`, before anything is read: bring the stores
        to what was last made durable (the file backend replays its journal)."""
        ...

    def recovery_reader(self, *, at_start: bool) -> RecoveryReader:
        """A reader for one recovery; a start's may use what the last clean
        stop left for it (the file backend's startup checkpoint)."""
        ...

    def after_recovery(self) -> None:
        """Once every schedule is recovered: make what recovery repaired
        durable before anything acts on it."""
        ...

    async def quiesce(self) -> int:
        """Return once no store operation of this process is in flight (for
        `SchedulerService.settle`, tests on a manual clock): how many were
        begun so far, so that a caller can tell whether any began since."""
        ...

    async def watch(self, watcher: StoreWatcher) -> Callable[[], None]:
        """Tell `watcher` what other servers of the store change, from now
        on (once this returns, nothing is missed); returns what stops it.
        A store no other server writes has nothing to tell."""
        ...

    async def close_owned(self, *, owned: bool, consistent: bool) -> None:
        """Before `ownership.release`. `owned`: the store is still this
        process's (else nothing is written: it may be another's now);
        `consistent`: the service's state matches the stores, so what a
        start may take instead of reading can be written."""
        ...
