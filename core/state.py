"""The scheduler's state: immutable values that `decide` maps to new values.

A `SchedulerState` holds one `ScheduleState` per schedule ever created (deleted
ones included: their runs are tracked to the end and their ids are never
reused), the execution-slot bound and count, the last `now` seen (a step
back is one older than it), and two persistent indexes that keep `decide` from scanning
every schedule:

- the due index: `(due instant, schedule_id)` for every schedule that will
  need attention on its own (its next trigger instant, or the moment a
  waiting instant stops being on time);
- the slot queue: `(candidate instant, schedule_id)` for schedules whose
  candidate waits for a free execution slot, oldest instant first.

Both indexes use lazy deletion. An index entry is live only while it matches
the schedule's `due` (respectively `queued`) field; anything else is stale
and is dropped when it reaches the top.

Every value here is frozen: records are slotted frozen dataclasses, mappings
are pyrsistent `PMap`s (a schedule's few active runs live in a small tuple
mapping), and the indexes are persistent heaps. Reading a state
never changes it, and `decide` never changes the state it is given.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final, TypeVar, overload

from pyrsistent import PMap, PSet, pmap, pset

from core.calendar import CompiledTrigger
from core.definitions import ScheduleDefinition
from core.due_index import KeyHeap
from core.errors import CoreMisuse, InvalidInput, Problem
from core.fast_init import fast_init
from core.occurrences import Origin, RunStatus
from core.operator_actions import Backfill

__all__ = [
    "NO_RUNS",
    "ActiveRun",
    "ActiveRuns",
    "ScheduleState",
    "ScheduleView",
    "SchedulerState",
    "check_capacity",
    "initial_state",
    "schedule_ids",
    "schedule_view",
    "slots_in_use",
]


@fast_init
@dataclass(frozen=True, slots=True)
class ActiveRun:
    """A run admitted from a schedule that has not reached a terminal status.

    `run_id` is None while the admission is in flight (the shell has not yet
    reported `OccurrenceAdmitted`) or when recovery found an admitted row
    without its run. `holds_slot` is True from admission until the run first
    stops (interrupted or terminal); a run resumed after an interrupt never
    takes a slot again.
    """

    run_id: str | None
    status: RunStatus
    holds_slot: bool
    # Who opened the occurrence: the calendar, a trigger or a backfill.
    origin: Origin = "schedule"


_T = TypeVar("_T")


class ActiveRuns(Mapping[datetime, ActiveRun]):
    """A schedule's active runs by occurrence instant: an immutable mapping.

    A schedule has at most `max_active_runs` active runs (usually one), so a
    sorted tuple is both the smallest and the fastest representation; every
    change returns a new value.
    """

    __slots__ = ("_items",)

    def __init__(self, items: tuple[tuple[datetime, ActiveRun], ...] = ()) -> None:
        self._items = items

    def __getitem__(self, instant: datetime) -> ActiveRun:
        for key, run in self._items:
            if key == instant:
                return run
        raise KeyError(instant)

    @overload
    def get(self, instant: datetime, /) -> ActiveRun | None: ...
    @overload
    def get(self, instant: datetime, /, default: ActiveRun | _T) -> ActiveRun | _T: ...

    def get(self, instant: datetime, /, default: object = None) -> object:
        # Not `Mapping.get`, which raises and catches a `KeyError` for a
        # missing instant: every run report of a scheduled run looks here.
        for key, run in self._items:
            if key == instant:
                return run
        return default

    def __contains__(self, instant: object) -> bool:
        return any(key == instant for key, _ in self._items)

    def __iter__(self) -> Iterator[datetime]:
        return (key for key, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ActiveRuns):
            return self._items == other._items
        return Mapping.__eq__(self, other)

    def __hash__(self) -> int:
        return hash(self._items)

    def __repr__(self) -> str:
        return f"ActiveRuns({dict(self._items)!r})"

    def __reduce__(self) -> tuple[type[ActiveRuns], tuple[tuple[tuple[datetime, ActiveRun], ...]]]:
        return (ActiveRuns, (self._items,))

    def with_run(self, instant: datetime, run: ActiveRun) -> ActiveRuns:
        """These runs with `run` at `instant` (added or replaced)."""
        items = [item for item in self._items if item[0] != instant]
        items.append((instant, run))
        items.sort(key=_first)
        return ActiveRuns(tuple(items))

    def without(self, instant: datetime) -> ActiveRuns:
        """These runs without the one at `instant`."""
        return ActiveRuns(tuple(item for item in self._items if item[0] != instant))


def _first(item: tuple[datetime, ActiveRun]) -> datetime:
    return item[0]


NO_RUNS: Final = ActiveRuns()


@fast_init
@dataclass(frozen=True, slots=True)
class ScheduleState:
    """Everything `decide` knows about one schedule."""

    schedule_id: str
    definition: ScheduleDefinition
    revision: int
    # Compiled once per definition; rebuilt from `definition` after a restart.
    trigger: CompiledTrigger = field(compare=False, repr=False)
    created_at: datetime
    # Every trigger instant <= watermark has been decided, is held, or waits.
    watermark: datetime
    # The first trigger instant after the watermark (None: no more instants).
    next_instant: datetime | None
    # misfire="latest": the one unadmitted instant kept for later admission.
    held: datetime | None
    # misfire="skip": on-time instants waiting for a slot, oldest first; only
    # while an overlap place is free (they have no history row yet, so no
    # newer instant of the schedule is recorded before them).
    waiting: tuple[datetime, ...]
    active: ActiveRuns
    paused: bool
    deleted: bool
    # The diagnostic of contradictory records; a blocked schedule neither
    # advances nor admits anything until an operator repairs its records.
    blocked: str | None
    # The due-index and slot-queue entries this schedule considers live.
    due: datetime | None
    queued: datetime | None
    # Read from `definition` once: the hot path needs them for every instant.
    latest: bool
    limit: int
    allowance: timedelta
    # The schedule's backfill (rule Q): running, or the last one ended.
    backfill: Backfill | None = None
    # The instant of the newest trigger decided (rule P), None before any,
    # and the lifecycle seq of its request (None: not known).
    last_trigger: datetime | None = None
    last_trigger_request: int | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class SchedulerState:
    """The whole scheduler: every schedule plus the slot bound and indexes."""

    max_concurrent_runs: int
    schedules: PMap[str, ScheduleState]
    # Scheduled runs that hold an execution slot (admitted or running, first run).
    slots_in_use: int
    # The `now` of the last `decide` call (an older one is a step back).
    last_now: datetime | None
    due_index: KeyHeap
    due_live: int
    slot_queue: KeyHeap
    queue_live: int
    # Schedules with a running backfill (rule Q): few, so each call looks at
    # every one of them.
    backfilling: PSet[str] = field(default_factory=pset)


@dataclass(frozen=True, slots=True)
class ScheduleView:
    """A read-only summary of one schedule, for the shell and the simulator.

    `active` maps each active run's instant to `(run_id, status)`; `waiting`
    lists on-time instants waiting for a slot (the shell shows them, and the
    held candidate, as `pending`).
    """

    schedule_id: str
    revision: int
    definition: ScheduleDefinition
    created_at: datetime
    watermark: datetime
    next_instant: datetime | None
    held: datetime | None
    waiting: tuple[datetime, ...]
    active: Mapping[datetime, tuple[str | None, RunStatus]]
    paused: bool
    deleted: bool
    blocked: str | None
    backfill: Backfill | None = None
    last_trigger: datetime | None = None


def initial_state(*, max_concurrent_runs: int) -> SchedulerState:
    """An empty scheduler with `max_concurrent_runs` execution slots.

    Raises InvalidInput when the bound is not an integer >= 1.
    """
    check_capacity(max_concurrent_runs)
    return SchedulerState(
        max_concurrent_runs=max_concurrent_runs,
        schedules=pmap(),
        slots_in_use=0,
        last_now=None,
        due_index=KeyHeap(),
        due_live=0,
        slot_queue=KeyHeap(),
        queue_live=0,
    )


def check_capacity(value: object) -> int:
    """`value` if it is a valid slot bound (an int >= 1); InvalidInput otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput.from_problems(
            "scheduler capacity",
            [
                Problem(
                    field="max_concurrent_runs",
                    reason=f"must be an integer >= 1, got {value!r}",
                )
            ],
        )
    return value


def schedule_view(state: SchedulerState, schedule_id: str) -> ScheduleView:
    """What the state holds for `schedule_id`. Raises CoreMisuse if it is unknown."""
    sched = state.schedules.get(schedule_id)
    if sched is None:
        raise CoreMisuse(
            f"schedule_view: schedule {schedule_id!r} is unknown to this state "
            f"({len(state.schedules)} schedules)"
        )
    return ScheduleView(
        schedule_id=sched.schedule_id,
        revision=sched.revision,
        definition=sched.definition,
        created_at=sched.created_at,
        watermark=sched.watermark,
        next_instant=sched.next_instant,
        held=sched.held,
        waiting=sched.waiting,
        active={instant: (run.run_id, run.status) for instant, run in sorted(sched.active.items())},
        paused=sched.paused,
        deleted=sched.deleted,
        blocked=sched.blocked,
        backfill=sched.backfill,
        last_trigger=sched.last_trigger,
    )


def schedule_ids(state: SchedulerState) -> tuple[str, ...]:
    """Every schedule id the state knows (deleted ones included), sorted."""
    return tuple(sorted(state.schedules))


def slots_in_use(state: SchedulerState) -> int:
    """How many scheduled runs hold an execution slot right now."""
    return state.slots_in_use
