"""Commands: what `decide` tells the shell to do, in the imperative.

Every command is a frozen, keyword-only value. The shell carries them out in
order and makes each durable before acting on anything that depends on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.fast_init import fast_init
from core.occurrences import OccurrenceStatus, Origin
from core.operator_actions import Backfill

__all__ = [
    "AdmitOccurrence",
    "BlockSchedule",
    "Command",
    "CreateAdmittedRun",
    "LogWarning",
    "PersistRuntime",
    "RecordOccurrence",
    "StartRun",
]


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """Base of every command."""


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class RecordOccurrence(Command):
    """Append a history row for `(schedule_id, instant)`.

    A row standing for several missed instants has `count > 1` and gives the
    first and last instant; `instant` is then the last one.
    """

    schedule_id: str
    instant: datetime
    status: OccurrenceStatus
    run_id: str | None = None
    reason: str | None = None
    count: int = 1
    first_instant: datetime | None = None
    last_instant: datetime | None = None
    # A decision row of a trigger or a backfill names its origin (rule P, Q),
    # a trigger's its request (`ScheduleTriggered.request`).
    origin: Origin = "schedule"
    request: int | None = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class AdmitOccurrence(Command):
    """Preflight, then durably record `admitted`, then create and start the run.

    Preflight failure is reported back as `PreflightFailed`; success as
    `OccurrenceAdmitted`. `inputs` are already resolved for this occurrence.
    """

    schedule_id: str
    instant: datetime
    revision: int
    deployment_id: str
    inputs: dict[str, Any]
    max_steps: int | None
    # "trigger" or "backfill" for an operator's occurrence (rules P, Q): its
    # rows and its run name the origin; a trigger's row names its request.
    origin: Origin = "schedule"
    request: int | None = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class CreateAdmittedRun(Command):
    """An admitted occurrence has no run (crash after the row): create it from
    the admitted row's snapshot and start it. No effect can have happened."""

    schedule_id: str
    instant: datetime


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class StartRun(Command):
    """Start executing an admitted run that never started (found at recovery)."""

    schedule_id: str
    instant: datetime
    run_id: str


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class PersistRuntime(Command):
    """Make the schedule's runtime state durable (after the rows it depends on).

    `waiting` lists the on-time instants of a `misfire="skip"` schedule that
    wait for an execution slot (oldest first); they have no history row yet,
    so they must survive a restart (see `ScheduleRecovered.waiting`).
    """

    schedule_id: str
    watermark: datetime
    held: datetime | None
    waiting: tuple[datetime, ...] = ()
    # The schedule's backfill and its progress (rule Q), None when it never
    # had one.
    backfill: Backfill | None = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class BlockSchedule(Command):
    """Persist a diagnostic that blocks the schedule (shown by `get_schedule`)."""

    schedule_id: str
    diagnostic: str


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class LogWarning(Command):
    """Something an operator should see in the log (for example a clock step)."""

    message: str
