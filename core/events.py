"""Events: past-tense facts the shell feeds to `decide`.

Every event is a frozen, keyword-only value. Lifecycle events carry `at`, the
instant the operator's change was made durable; `decide` first settles the
schedule's calendar up to `at` and only then applies the change, so events
replayed after downtime land exactly where they happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from core.definitions import ScheduleDefinition
from core.fast_init import fast_init
from core.occurrences import Origin, RunStatus
from core.operator_actions import Backfill

__all__ = [
    "BackfillCancelled",
    "BackfillRequested",
    "CapacityChanged",
    "Event",
    "OccurrenceAdmitted",
    "PreflightFailed",
    "RecordsContradicted",
    "RecoveredRun",
    "RunStatusChanged",
    "ScheduleCreated",
    "ScheduleDeleted",
    "SchedulePaused",
    "ScheduleRecovered",
    "ScheduleResumed",
    "ScheduleTriggered",
    "ScheduleUpdated",
]


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of every event."""


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleCreated(Event):
    """A new schedule was made durable at `at` (its creation watermark)."""

    definition: ScheduleDefinition
    at: datetime
    revision: int = 1


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleUpdated(Event):
    """An accepted update produced `definition` at `revision`."""

    definition: ScheduleDefinition
    revision: int
    at: datetime


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulePaused(Event):
    schedule_id: str
    at: datetime


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleResumed(Event):
    schedule_id: str
    at: datetime


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleDeleted(Event):
    schedule_id: str
    at: datetime


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleTriggered(Event):
    """An operator asked at `at` for one run of the schedule now (rule P).

    `overlap` "allow" bypasses the schedule's overlap policy for this run."""

    schedule_id: str
    at: datetime
    overlap: str | None = None
    # The request's seq in the schedule's lifecycle log: its row names it, so
    # a request delivered again after a crash is known decided.
    request: int | None = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class BackfillRequested(Event):
    """An operator asked at `at` to make up the calendar instants of
    `[start, end)` (rule Q). `decided` holds the instants of the range the
    history shows admitted (by any origin) or decided by a backfill: the
    shell reads them when it delivers the request, so a request replayed
    after a crash sees what it already admitted."""

    schedule_id: str
    at: datetime
    start: datetime
    end: datetime
    overlap: str | None = None
    decided: frozenset[datetime] = frozenset()


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class BackfillCancelled(Event):
    """An operator cancelled the schedule's running backfill at `at`."""

    schedule_id: str
    at: datetime


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class PreflightFailed(Event):
    """The shell's preflight of an `AdmitOccurrence` failed; nothing was admitted."""

    schedule_id: str
    instant: datetime
    reason: str


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class OccurrenceAdmitted(Event):
    """The admitted row is durable and the run `run_id` exists in the run store."""

    schedule_id: str
    instant: datetime
    run_id: str


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class RunStatusChanged(Event):
    """A scheduled run reached `status` (running, interrupted or a terminal one).
    Reported for resumes made through the API too."""

    schedule_id: str
    instant: datetime
    run_id: str
    status: RunStatus
    message: str | None = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityChanged(Event):
    """The execution-slot bound (`max_concurrent_runs`) changed."""

    max_concurrent_runs: int


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveredRun:
    """An admitted occurrence found at startup that is not yet terminal in history.

    `run_id` is None when the crash came between the admitted row and the run's
    creation; `status` is the run store's status (after the host's own recovery,
    which fails abandoned runs and ambiguous resumes closed); `message` is the
    run's diagnostic when it has one.
    """

    instant: datetime
    run_id: str | None
    status: RunStatus
    message: str | None = None
    # True when the run was admitted but never executed: it may still be started.
    never_started: bool = False
    # Who opened the occurrence (its decision row's origin).
    origin: Origin = "schedule"


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleRecovered(Event):
    """What the stores say about one schedule at startup.

    `watermark` is the persisted runtime watermark (None if the runtime record
    was never written); `last_decided_instant` the newest instant with a
    decision row in history. `decide` takes the newest of these, the creation
    instant, and the last update/resume instant as the effective watermark.
    """

    definition: ScheduleDefinition
    revision: int
    created_at: datetime
    watermark: datetime | None
    last_decided_instant: datetime | None
    held: datetime | None
    paused: bool
    deleted: bool
    active_runs: tuple[RecoveredRun, ...] = ()
    blocked_reason: str | None = None
    updated_at: datetime | None = None
    resumed_at: datetime | None = None
    # The persisted `PersistRuntime.waiting` instants that still have no
    # decision row in history (the shell drops those it finds decided).
    waiting: tuple[datetime, ...] = ()
    # The persisted backfill, and the instants of its range the history
    # shows admitted or decided by a backfill (a crash may have lost the
    # runtime record after their rows: they are not admitted again).
    backfill: Backfill | None = None
    backfill_decided: frozenset[datetime] = frozenset()
    # The newest trigger row's instant (the next trigger comes after it) and
    # the lifecycle seq of its request: a request replayed after a crash
    # whose seq is not after it was decided already.
    last_trigger: datetime | None = None
    last_trigger_request: int | None = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class RecordsContradicted(Event):
    """A store record could not be parsed or contradicts another one.

    The schedule is blocked: no admissions, overlap is not cleared.
    """

    schedule_id: str
    file: str
    record: str
    reason: str
    extra: tuple[str, ...] = field(default=())
