"""`decide`: the scheduling rules, as one pure function.

Theory of operation
===================

`decide(state, now, events)` returns a new state and the commands the shell
must carry out, in order. It reads no clock and changes nothing it is given.
Time moves as a range: each schedule has a *watermark*, the newest instant
already considered, and every call decides the trigger instants in
`(watermark, now]`.

The rules carry the letters of `docs/decision-tables.md`, which states each
one for operators and plays its scenarios through this module; the code
names the letter where it applies a rule (`# rule C: ...`).

One call runs five phases, in order:

1. Clock. `now` is clamped to the newest `now` seen before (rule L).
2. Events, in order. A lifecycle event (created, updated, paused, resumed,
   deleted) carries `at`: the schedule is first settled up to
   `min(at, now)` (lateness still measured against `now`), then the change
   applies (rule K). Run reports (admitted, preflight failed, status
   changed) and capacity changes apply at `now`. Recovery findings rebuild a
   schedule from what the stores said at startup (rules M, O, I).
3. Settle. Every schedule whose due time is `<= now` (found through the due
   index, never by a scan) decides its instants up to `now` (rules A-E).
4. Fill. While execution slots are free, candidates waiting for a slot are
   admitted, oldest instant first across schedules (rule F).
5. Persist. Each schedule whose watermark, held candidate or waiting instants
   changed gets one `PersistRuntime`, after its history rows (rule M); a
   blocked schedule gets none (rule I).

A schedule's decision rows are emitted in instant order (the history refuses
a decision older than the newest one): nothing newer than a waiting instant
is decided before it.

Deciding an instant `t` (`watermark < t <= now`), first rule that applies:

A. Paused or deleted: `t` is consumed with no row (the paused span is never
   replayed: a pause and a resume move the watermark to
   `max(watermark, at)`). Pause and delete record the held candidate and
   waiting instants `superseded`. Deleted schedules admit nothing but track
   their active runs to the end. (Blocked schedules: rule I.)
B. Missed (`now - t > lateness_allowance_s`; exactly equal is on time):
   misfire "skip" records `skipped-misfire`; misfire "latest" makes `t` the
   held candidate, an older held candidate becoming `superseded` (or
   `coalesced` when it was itself missed earlier in this same call).
C. On time, overlap blocks (skip: any active run; parallel: active runs
   `>= max_active_runs`): misfire "skip" records `skipped-overlap`; "latest"
   holds `t` (superseding an older held candidate).
D. On time, no slot free (or an older candidate is queued for one, or an
   older instant of the schedule waits): `t` waits. Under "latest" the
   waiting instant is the held candidate; under "skip" it joins the
   schedule's FIFO of waiting instants, whose oldest is its candidate. A
   waiting instant that is past the allowance when next looked at is decided
   by (B).
E. Otherwise `AdmitOccurrence`: the run counts as active and holds a slot at
   once; the shell preflights it and writes its decision row in command
   order (`admitted`, or `preflight-rejected` with the reason), then answers
   `OccurrenceAdmitted` or `PreflightFailed` (the place and slot are
   released).

The rules around them:

F. Slots and overlap places. A held candidate (misfire "latest") is admitted
   whenever overlap and capacity allow, whatever its age; a newer instant
   replaces it, so there is never a burst. A scheduled run holds a slot from
   admission until it first stops (interrupted or terminal); only a terminal
   status releases its overlap place. Free slots go to the oldest waiting
   instant, whichever schedule it belongs to.
G. One row per catch-up. A run of consecutive missed instants is decided in
   one step: one `skipped-misfire` row with a count, or one `coalesced` row
   for all but the newest; when an on-time instant follows in the same call,
   the newest missed one is part of that `coalesced` row too (the on-time
   instant replaces the whole catch-up).
H. Waiting instants and overlap. Waiting instants reserve no overlap place;
   when an admission fills the schedule's overlap places, the instants still
   waiting are decided by (C) at once (they are newer than the admitted one,
   so the rows stay in order).
I. Blocked. Contradictory records block the schedule (`BlockSchedule`): it
   keeps its active runs (tracked, not started) and held candidate, its
   waiting instants become `superseded`, and it neither advances nor admits
   until a later startup finds the records sound; its instants are then
   decided as downtime, or as missed when a lifecycle change needs them
   decided first. It gets no `PersistRuntime`.
J. Creation never backfills: it sets the watermark to the creation time, so
   a one-shot whose instant is not after its creation never fires.
K. Lifecycle changes land where they were made. An update moves the
   watermark to `max(watermark, at)` and keeps the held candidate and
   waiting instants only while the new policy admits them. A pause or
   delete applied after the moment it was made (replayed at startup)
   decides the instants before it as missed, never as admitted.
L. Clock. A step backwards is logged once (`LogWarning`) and never replays
   anything.
M. Crash repair. `PersistRuntime` follows the rows it depends on, so at
   recovery the effective watermark is the newest of the persisted one, the
   newest decision row, creation, last update and last resume, and a held
   candidate at or before the newest decision row was already decided.
N. Run reports. Every status report of a scheduled run is recorded in
   history; one that cannot be placed (unknown schedule, no active run at
   its instant, another run id) is answered with a `LogWarning` and ignored.
O. Recovered runs. Admitted runs are restarted (`CreateAdmittedRun`,
   `StartRun`), tracked (running), kept without a slot (interrupted) or
   recorded (terminal).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, Final, TypeAlias

from core.bindings import resolve_inputs
from core.calendar import CompiledTrigger, compile_trigger
from core.commands import (
    AdmitOccurrence,
    BlockSchedule,
    Command,
    CreateAdmittedRun,
    LogWarning,
    PersistRuntime,
    RecordOccurrence,
    StartRun,
)
from core.definitions import ScheduleDefinition
from core.due_index import KeyHeap
from core.errors import CoreMisuse
from core.events import (
    CapacityChanged,
    Event,
    OccurrenceAdmitted,
    PreflightFailed,
    RecordsContradicted,
    RecoveredRun,
    RunStatusChanged,
    ScheduleCreated,
    ScheduleDeleted,
    SchedulePaused,
    ScheduleRecovered,
    ScheduleResumed,
    ScheduleUpdated,
)
from core.occurrences import TERMINAL_RUN_STATUSES, OccurrenceStatus, RunStatus
from core.state import (
    NO_RUNS,
    ActiveRun,
    ActiveRuns,
    SchedulerState,
    ScheduleState,
    check_capacity,
)

__all__ = ["decide", "next_wakeup"]

_TICK: Final = timedelta(microseconds=1)
# Rebuild an index once stale entries outnumber live ones by this much.
_COMPACT_SLACK: Final = 64

# rule E: an admission the shell has not answered yet is active and holds a
# slot already, so nothing admitted after it in this call can overbook.
_IN_FLIGHT: Final = ActiveRun(run_id=None, status="admitted", holds_slot=True)

_PAUSED: Final = "schedule paused"
_DELETED: Final = "schedule deleted"
_BLOCKED: Final = "schedule blocked"
_UPDATED: Final = "schedule updated"

_Runtime: TypeAlias = tuple[datetime, datetime | None, tuple[datetime, ...]]


# Calendar answers are pure functions of (trigger, instant), and schedules
# that share a trigger (compiled triggers are shared by value) ask the same
# questions at the same instants: memoize so that ten thousand hourly
# schedules cost one croniter step per hour, not ten thousand.
@lru_cache(maxsize=1 << 16)
def _next_after(trigger: CompiledTrigger, after: datetime) -> datetime | None:
    return trigger.next_after(after)


@lru_cache(maxsize=1 << 12)
def _last_at_or_before(trigger: CompiledTrigger, bound: datetime) -> datetime | None:
    return trigger.last_at_or_before(bound)


@lru_cache(maxsize=1 << 12)
def _count_between(trigger: CompiledTrigger, after: datetime, upto: datetime) -> int:
    return trigger.count_between(after, upto)


class _Work:
    """A mutable copy of one `ScheduleState`, private to one `decide` call.

    Field for field the same as `ScheduleState` (spelt out rather than
    generated: copying is on the hot path); `tests/unit/test_decide_work.py`
    fails when the two drift apart.
    """

    __slots__ = (
        "active",
        "allowance",
        "blocked",
        "created_at",
        "definition",
        "deleted",
        "due",
        "held",
        "latest",
        "limit",
        "next_instant",
        "paused",
        "queued",
        "revision",
        "schedule_id",
        "trigger",
        "waiting",
        "watermark",
    )

    schedule_id: str
    definition: ScheduleDefinition
    revision: int
    trigger: CompiledTrigger
    created_at: datetime
    watermark: datetime
    next_instant: datetime | None
    held: datetime | None
    waiting: tuple[datetime, ...]
    active: ActiveRuns
    paused: bool
    deleted: bool
    blocked: str | None
    due: datetime | None
    queued: datetime | None
    latest: bool
    limit: int
    allowance: timedelta

    @classmethod
    def of(cls, s: ScheduleState) -> _Work:
        w = cls()
        w.schedule_id = s.schedule_id
        w.definition = s.definition
        w.revision = s.revision
        w.trigger = s.trigger
        w.created_at = s.created_at
        w.watermark = s.watermark
        w.next_instant = s.next_instant
        w.held = s.held
        w.waiting = s.waiting
        w.active = s.active
        w.paused = s.paused
        w.deleted = s.deleted
        w.blocked = s.blocked
        w.due = s.due
        w.queued = s.queued
        w.latest = s.latest
        w.limit = s.limit
        w.allowance = s.allowance
        return w

    @classmethod
    def fresh(
        cls,
        definition: ScheduleDefinition,
        revision: int,
        created_at: datetime,
        watermark: datetime,
    ) -> _Work:
        w = cls()
        w.schedule_id = definition.schedule_id
        w.created_at = created_at
        w.watermark = watermark
        w.held = None
        w.waiting = ()
        w.active = NO_RUNS
        w.paused = False
        w.deleted = False
        w.blocked = None
        w.due = None
        w.queued = None
        w.set_definition(definition, revision)
        return w

    def set_definition(self, definition: ScheduleDefinition, revision: int) -> None:
        self.definition = definition
        self.revision = revision
        self.trigger = compile_trigger(definition.trigger)
        self.latest = definition.misfire == "latest"
        self.limit = definition.active_run_limit
        self.allowance = timedelta(seconds=definition.lateness_allowance_s)
        self.next_instant = _next_after(self.trigger, self.watermark)

    def freeze(self) -> ScheduleState:
        return ScheduleState(
            schedule_id=self.schedule_id,
            definition=self.definition,
            revision=self.revision,
            trigger=self.trigger,
            created_at=self.created_at,
            watermark=self.watermark,
            next_instant=self.next_instant,
            held=self.held,
            waiting=self.waiting,
            active=self.active,
            paused=self.paused,
            deleted=self.deleted,
            blocked=self.blocked,
            due=self.due,
            queued=self.queued,
            latest=self.latest,
            limit=self.limit,
            allowance=self.allowance,
        )

    def describe(self) -> str:
        flags = [
            name
            for name, on in (
                ("paused", self.paused),
                ("deleted", self.deleted),
                ("blocked", self.blocked is not None),
            )
            if on
        ]
        active = ", ".join(f"{_iso(t)}={run.status}" for t, run in sorted(self.active.items()))
        return (
            f"revision {self.revision}, {'/'.join(flags) or 'live'}, "
            f"watermark {_iso(self.watermark)}, active runs [{active}]"
        )


_Sched: TypeAlias = _Work | ScheduleState


def _due_of(s: _Sched) -> datetime | None:
    """When the schedule next needs `decide` on its own (None: only events wake it)."""
    # rules A, I: nothing of a paused, deleted or blocked schedule is due.
    if s.paused or s.deleted or s.blocked is not None:
        return None
    due = s.next_instant
    if s.waiting:
        # rule D: wake when the oldest waiting instant turns late, so (B)
        # decides it then rather than at some later event.
        late = s.waiting[0] + s.allowance + _TICK
        if due is None or late < due:
            due = late
    return due


def _candidate(s: _Sched) -> datetime | None:
    """The instant the schedule would admit next if a slot were free, if any."""
    if s.paused or s.deleted or s.blocked is not None or len(s.active) >= s.limit:
        return None
    # rule D: under "latest" the held candidate waits; under "skip" the oldest
    # waiting instant does (the FIFO keeps the rows in instant order).
    if s.latest:
        return s.held
    return s.waiting[0] if s.waiting else None


def _iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _utc(value: object, what: str) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise CoreMisuse(f"{what} must be a timezone-aware datetime, got {value!r}")
    return value if value.tzinfo is UTC else value.astimezone(UTC)


class _Call:
    """One `decide` call: working copies of the schedules it touches, the
    indexes and counters as they evolve, and the commands emitted so far."""

    def __init__(self, state: SchedulerState, now: datetime) -> None:
        self.state = state
        self.capacity = state.max_concurrent_runs
        self.slots = state.slots_in_use
        self.due_index = state.due_index.edit()
        self.due_live = state.due_live
        self.queue = state.slot_queue.edit()
        self.queue_live = state.queue_live
        self.work: dict[str, _Work] = {}
        # Runtime as last persisted (before this call, or earlier in it; None:
        # never persisted).
        self.before: dict[str, _Runtime | None] = {}
        # Held candidates that were themselves missed during this call.
        self.missed_held: dict[str, datetime] = {}
        self.commands: list[Command] = []
        self.clock_behind = False
        last = state.last_now
        # rule L: deciding as of an older `now` would replay decided instants.
        if last is not None and now < last:
            if not state.clock_behind:
                self.commands.append(
                    LogWarning(
                        message=(
                            f"clock stepped back from {_iso(last)} to {_iso(now)}; "
                            f"deciding as of {_iso(last)} until it catches up"
                        )
                    )
                )
            self.clock_behind = True
            now = last
        self.now = now
        # Schedule -> position among this call's events of its last late pause
        # or delete, and the position of the event being applied.
        self.late_stops: dict[str, int] = {}
        self.position = 0

    # --- access -------------------------------------------------------------

    def peek(self, schedule_id: str) -> _Sched | None:
        w = self.work.get(schedule_id)
        return w if w is not None else self.state.schedules.get(schedule_id)

    def get(self, schedule_id: str, event: Event) -> _Work:
        w = self.work.get(schedule_id)
        if w is not None:
            return w
        s = self.state.schedules.get(schedule_id)
        if s is None:
            raise CoreMisuse(
                f"cannot apply {type(event).__name__} {event!r}: schedule {schedule_id!r} "
                f"is unknown to this state ({len(self.state.schedules)} schedules)",
                data={"schedule_id": schedule_id, "event": type(event).__name__},
            )
        return self._adopt(s)

    def _adopt(self, s: ScheduleState) -> _Work:
        w = _Work.of(s)
        self.work[s.schedule_id] = w
        self.before[s.schedule_id] = (s.watermark, s.held, s.waiting)
        return w

    def touch(self, schedule_id: str) -> _Work:
        w = self.work.get(schedule_id)
        return w if w is not None else self._adopt(self.state.schedules[schedule_id])

    def misuse(self, event: Event, w: _Work, detail: str) -> CoreMisuse:
        return CoreMisuse(
            f"cannot apply {type(event).__name__} {event!r} to schedule {w.schedule_id!r} "
            f"({w.describe()}): {detail}",
            data={"schedule_id": w.schedule_id, "event": type(event).__name__},
        )

    def ignore_report(self, event: Event, w: _Work, detail: str) -> None:
        self.commands.append(
            LogWarning(
                message=f"ignored {type(event).__name__} {event!r} for schedule "
                f"{w.schedule_id!r} ({w.describe()}): {detail}"
            )
        )

    # --- commands -----------------------------------------------------------

    def record(
        self,
        schedule_id: str,
        instant: datetime,
        status: OccurrenceStatus,
        *,
        run_id: str | None = None,
        reason: str | None = None,
    ) -> None:
        self.commands.append(
            RecordOccurrence(
                schedule_id=schedule_id,
                instant=instant,
                status=status,
                run_id=run_id,
                reason=reason,
            )
        )

    def record_span(
        self,
        schedule_id: str,
        first: datetime,
        last: datetime,
        count: int,
        status: OccurrenceStatus,
    ) -> None:
        if count == 1:
            self.record(schedule_id, last, status)
            return
        self.commands.append(
            RecordOccurrence(
                schedule_id=schedule_id,
                instant=last,
                status=status,
                count=count,
                first_instant=first,
                last_instant=last,
            )
        )

    def supersede_all(self, w: _Work, reason: str) -> None:
        """Drop the held candidate and waiting instants, oldest row first."""
        # rule A (pause, delete): they cannot run any more, and each needs its
        # row so that no instant goes undecided.
        dropped = sorted((*w.waiting, *((w.held,) if w.held is not None else ())))
        for instant in dropped:
            self.record(w.schedule_id, instant, "superseded", reason=reason)
        w.held = None
        w.waiting = ()

    # --- indexes ------------------------------------------------------------

    def refresh(self, w: _Work) -> None:
        """Enter the schedule's current due time and slot candidate in the indexes."""
        due = _due_of(w)
        if due != w.due:
            if w.due is not None:
                self.due_live -= 1
            if due is not None:
                self.due_index.push((due, w.schedule_id))
                self.due_live += 1
            w.due = due
        cand = _candidate(w)
        if cand is not None and cand != w.queued:
            if w.queued is not None:
                self.queue_live -= 1
            self.queue.push((cand, w.schedule_id))
            self.queue_live += 1
            w.queued = cand

    def slot_free_for(self, instant: datetime, schedule_id: str) -> bool:
        """True when `instant` may take a slot now: one is free and no live
        candidate with an older instant is queued for it."""
        if self.slots >= self.capacity:
            return False
        # rule F: free slots go to the oldest waiting instant across
        # schedules, so a newer on-time instant must not jump the queue.
        mine = (instant, schedule_id)
        while self.queue:
            top = self.queue.peek()
            assert top is not None
            if top >= mine:
                return True
            queued_at, other_id = top
            other = self.peek(other_id)
            assert other is not None  # schedules are never removed
            if other.queued == queued_at:
                if other_id != schedule_id and _candidate(other) == queued_at:
                    return False
                self.touch(other_id).queued = None
                self.queue_live -= 1
            self.queue.pop()
        return True

    # --- deciding instants --------------------------------------------------

    def settle(self, w: _Work, upto: datetime, *, all_missed: bool = False) -> None:
        """Decide the schedule's instants in `(watermark, upto]` as of `self.now`
        (`all_missed`: as missed whatever their age)."""
        # rule A: a paused or deleted schedule's instants are consumed by the
        # watermark moves of pause/resume, never here. rule I: a blocked one
        # does not advance unless a lifecycle change needs its instants.
        if w.paused or w.deleted or (w.blocked is not None and not all_missed):
            return
        now = self.now
        if w.waiting:
            self.expire_waiting(w)
        nxt = w.next_instant
        if nxt is None or nxt > upto:
            return
        trigger = w.trigger
        # rule B: missed means more than the allowance late, as of `now`.
        missed_upto = upto if all_missed else min(upto, now - w.allowance - _TICK)
        if nxt <= missed_upto:
            # rule G: the whole run of missed instants is one step and one
            # row, so a downtime of any length costs the same.
            after = _next_after(trigger, nxt)
            if after is None or after > missed_upto:
                first = last = nxt
                count = 1
            else:
                first = nxt
                found = _last_at_or_before(trigger, missed_upto)
                assert found is not None  # nxt itself is at or before missed_upto
                last = found
                count = _count_between(trigger, w.watermark, missed_upto)
                after = _next_after(trigger, last)
            # Under "latest" a catch-up that reaches an on-time instant in this
            # call ends there: the on-time instant replaces every missed one.
            replaced = after is not None and after <= upto
            self.missed(w, first, last, count, replaced=replaced)
            w.watermark = last
            nxt = after
        while nxt is not None and nxt <= upto:
            self.on_time(w, nxt)
            w.watermark = nxt
            nxt = _next_after(trigger, nxt)
        w.next_instant = nxt

    def expire_waiting(self, w: _Work) -> None:
        # rules D, B: an instant waits for a slot only while it is on time.
        limit = self.now - w.allowance
        keep: list[datetime] = []
        for instant in w.waiting:
            if instant < limit:
                self.record(w.schedule_id, instant, "skipped-misfire")
            else:
                keep.append(instant)
        if len(keep) != len(w.waiting):
            w.waiting = tuple(keep)

    def missed(
        self, w: _Work, first: datetime, last: datetime, count: int, *, replaced: bool
    ) -> None:
        """Decide the missed instants `first..last` (`count` of them);
        `replaced`: an on-time instant follows in this same call."""
        sid = w.schedule_id
        # rule B, misfire "skip".
        if not w.latest:
            self.record_span(sid, first, last, count, "skipped-misfire")
            return
        # rule B, misfire "latest": the newest missed instant takes the place
        # of the held candidate.
        if w.held is not None:
            was_missed = self.missed_held.get(sid) == w.held
            self.record(sid, w.held, "coalesced" if was_missed else "superseded")
            w.held = None
        if replaced:
            # rule G: the newest missed instant was never a candidate anyone
            # waited on: it is coalesced with the rest of the catch-up, in one
            # row.
            self.record_span(sid, first, last, count, "coalesced")
            return
        if count > 1:
            before_last = _last_at_or_before(w.trigger, last - _TICK)
            assert before_last is not None  # count > 1: first < last
            self.record_span(sid, first, before_last, count - 1, "coalesced")
        w.held = last
        self.missed_held[sid] = last

    def on_time(self, w: _Work, instant: datetime) -> None:
        sid = w.schedule_id
        if w.latest:
            # rules C, D under "latest": a newer on-time instant replaces the
            # held one, so there is never a burst.
            if w.held is not None:
                self.record(sid, w.held, "superseded")
                w.held = None
            if len(w.active) < w.limit and self.slot_free_for(instant, sid):
                self.admit(w, instant)  # rule E
            else:
                w.held = instant
            return
        # rule H: waiting instants exist only while the overlap limit is not
        # reached (see `overlap_waiting`), so a skipped instant is never
        # recorded before an older one that still waits.
        if len(w.active) >= w.limit:
            self.record(sid, instant, "skipped-overlap")  # rule C
        elif not w.waiting and self.slot_free_for(instant, sid):
            self.admit(w, instant)  # rule E
        else:
            w.waiting = (*w.waiting, instant)  # rule D

    def overlap_waiting(self, w: _Work, *, reason: str | None = None) -> None:
        """Once the overlap places are taken, the waiting instants cannot run:
        decide them now, oldest first (`skipped-overlap`, or `superseded`
        with `reason` when a change of policy took the places away)."""
        # rule H: a waiting instant reserves no overlap place.
        if w.waiting and len(w.active) >= w.limit:
            for instant in w.waiting:
                if reason is None:
                    self.record(w.schedule_id, instant, "skipped-overlap")
                else:
                    self.record(w.schedule_id, instant, "superseded", reason=reason)
            w.waiting = ()

    def persist(self, w: _Work) -> None:
        # rule M: called from `finish` only, so the runtime record follows
        # every row it depends on.
        runtime: _Runtime = (w.watermark, w.held, w.waiting)
        self.commands.append(
            PersistRuntime(
                schedule_id=w.schedule_id,
                watermark=runtime[0],
                held=runtime[1],
                waiting=runtime[2],
            )
        )
        self.before[w.schedule_id] = runtime

    def admit(self, w: _Work, instant: datetime) -> None:
        definition = w.definition
        self.commands.append(
            AdmitOccurrence(
                schedule_id=w.schedule_id,
                instant=instant,
                revision=w.revision,
                deployment_id=definition.deployment_id,
                inputs=resolve_inputs(definition, w.revision, instant) if definition.inputs else {},
                max_steps=definition.max_steps,
            )
        )
        w.active = w.active.with_run(instant, _IN_FLIGHT)
        self.slots += 1

    def settle_due(self) -> None:
        now = self.now
        while self.due_index:
            top = self.due_index.peek()
            assert top is not None
            due, sid = top
            if due > now:
                return
            self.due_index.pop()
            s = self.peek(sid)
            if s is None or s.due != due:
                continue
            # `s` is the schedule already: adopting it saves a second map lookup.
            w = s if isinstance(s, _Work) else self._adopt(s)
            w.due = None
            self.due_live -= 1
            self.settle(w, now)
            self.refresh(w)

    def fill(self) -> None:
        # rule F: freed slots go to the oldest queued candidate first.
        while self.slots < self.capacity and self.queue:
            instant, sid = self.queue.pop()
            s = self.peek(sid)
            if s is None or s.queued != instant:
                continue
            w = self.touch(sid)
            w.queued = None
            self.queue_live -= 1
            if _candidate(w) != instant:
                continue
            if w.latest:
                w.held = None
            else:
                w.waiting = w.waiting[1:]
            self.admit(w, instant)  # rule E
            self.overlap_waiting(w)  # rule H
            self.refresh(w)

    # --- events -------------------------------------------------------------

    def find_late_stops(self, events: Sequence[Event]) -> None:
        """Note each schedule's last pause or delete that is applied after the
        moment it was made (replayed at startup). Up to it, the schedule's
        instants are decided as missed: an admission would be made now, after
        the pause or delete, whatever the instant (rule K)."""
        for position, event in enumerate(events):
            if isinstance(event, SchedulePaused | ScheduleDeleted):
                at = event.at
                if isinstance(at, datetime) and at.utcoffset() is not None and at < self.now:
                    self.late_stops[event.schedule_id] = position

    def lifecycle_settle(self, w: _Work, at: datetime) -> None:
        # rule I: a blocked schedule holds its instants back; a lifecycle
        # change needs them decided up to the change, and since the block
        # kept them from running they are decided as missed. rule K: so are
        # the instants settled before a late pause or delete (see
        # `find_late_stops`).
        late_stop = self.late_stops.get(w.schedule_id, -1) >= self.position
        self.settle(w, min(at, self.now), all_missed=w.blocked is not None or late_stop)

    def on_created(self, event: ScheduleCreated) -> None:
        definition = event.definition
        sid = definition.schedule_id
        existing = self.peek(sid)
        if existing is not None:
            w = self.touch(sid)
            raise self.misuse(event, w, "the schedule id already exists (ids are never reused)")
        if event.revision < 1:
            raise CoreMisuse(f"cannot apply {event!r}: revision must be >= 1")
        at = _utc(event.at, "ScheduleCreated.at")
        # rule J: the watermark starts at the creation, so nothing before it
        # is ever decided.
        w = _Work.fresh(definition, event.revision, at, at)
        self.work[sid] = w
        self.before[sid] = None
        self.refresh(w)

    def on_updated(self, event: ScheduleUpdated) -> None:
        w = self.get(event.definition.schedule_id, event)
        if w.deleted:
            raise self.misuse(event, w, "a deleted schedule cannot be updated")
        if event.revision <= w.revision:
            raise self.misuse(
                event, w, f"revision {event.revision} does not follow revision {w.revision}"
            )
        at = _utc(event.at, "ScheduleUpdated.at")
        # rule K: the old definition decides up to the update, the new one
        # after it; nothing is backfilled.
        self.lifecycle_settle(w, at)
        w.watermark = max(w.watermark, at)
        w.set_definition(event.definition, event.revision)
        self.conform(w, _UPDATED)
        self.refresh(w)

    def conform(self, w: _Work, reason: str) -> None:
        """Make held/waiting instants fit the (new) misfire and overlap policy."""
        # rule K: they are kept only while the new policy would admit them.
        sid = w.schedule_id
        if w.latest:
            if w.waiting:
                *older, newest = w.waiting
                for instant in older:
                    self.record(sid, instant, "superseded", reason=reason)
                if w.held is not None and w.held > newest:
                    self.record(sid, newest, "superseded", reason=reason)
                else:
                    if w.held is not None:
                        self.record(sid, w.held, "superseded", reason=reason)
                    w.held = newest
                w.waiting = ()
            return
        if w.held is not None:
            self.record(sid, w.held, "superseded", reason=reason)
            w.held = None
        self.overlap_waiting(w, reason=reason)

    def on_paused(self, event: SchedulePaused) -> None:
        w = self.get(event.schedule_id, event)
        if w.deleted:
            raise self.misuse(event, w, "a deleted schedule cannot be paused")
        at = _utc(event.at, "SchedulePaused.at")
        self.lifecycle_settle(w, at)
        # rule A: idempotent; the paused span is consumed by the watermark.
        if not w.paused:
            w.paused = True
            self.supersede_all(w, _PAUSED)
            w.watermark = max(w.watermark, at)
        self.refresh(w)

    def on_resumed(self, event: ScheduleResumed) -> None:
        w = self.get(event.schedule_id, event)
        if w.deleted:
            raise self.misuse(event, w, "a deleted schedule cannot be resumed")
        at = _utc(event.at, "ScheduleResumed.at")
        self.lifecycle_settle(w, at)
        # rule A: resuming starts after the resume; the paused span is never
        # replayed.
        if w.paused:
            w.paused = False
            w.watermark = max(w.watermark, at)
            w.next_instant = _next_after(w.trigger, w.watermark)
        self.refresh(w)

    def on_deleted(self, event: ScheduleDeleted) -> None:
        w = self.get(event.schedule_id, event)
        at = _utc(event.at, "ScheduleDeleted.at")
        self.lifecycle_settle(w, at)
        # rule A: soft; the active runs stay tracked to the end.
        if not w.deleted:
            w.deleted = True
            self.supersede_all(w, _DELETED)
            w.watermark = max(w.watermark, at)
        self.refresh(w)

    def on_admitted(self, event: OccurrenceAdmitted) -> None:
        w = self.get(event.schedule_id, event)
        instant = _utc(event.instant, "OccurrenceAdmitted.instant")
        # rule E: the admission was counted when it was emitted; the answer
        # only names its run.
        run = w.active.get(instant)
        if run is None:
            raise self.misuse(event, w, f"no admission of {_iso(instant)} is in flight")
        if run.run_id is None:
            w.active = w.active.with_run(
                instant, ActiveRun(event.run_id, run.status, run.holds_slot)
            )
        elif run.run_id != event.run_id:
            detail = f"{_iso(instant)} was admitted as run {run.run_id!r}, not {event.run_id!r}"
            raise self.misuse(event, w, detail)

    def on_preflight_failed(self, event: PreflightFailed) -> None:
        w = self.get(event.schedule_id, event)
        instant = _utc(event.instant, "PreflightFailed.instant")
        run = w.active.get(instant)
        if run is None or run.run_id is not None or run.status != "admitted":
            raise self.misuse(event, w, f"no admission of {_iso(instant)} is in flight")
        # rule E: the shell wrote the `preflight-rejected` row in command order
        # when the preflight failed (a later row of this schedule may already follow it),
        # so only the reservation is released here.
        self.release(w, instant, run, remove=True)
        self.refresh(w)

    def on_run_status(self, event: RunStatusChanged) -> None:
        # rule N: a report about a run this state does not track (a run of a
        # schedule blocked by damaged records, or one whose schedule is not
        # loaded) is the world telling us something stale, not the shell
        # breaking the protocol: it is logged and ignored, and the rest of the
        # call stands.
        if event.schedule_id not in self.work and event.schedule_id not in self.state.schedules:
            self.commands.append(
                LogWarning(
                    message=f"ignored {type(event).__name__} {event!r}: schedule "
                    f"{event.schedule_id!r} is unknown to the scheduler"
                )
            )
            return
        w = self.get(event.schedule_id, event)
        instant = _utc(event.instant, "RunStatusChanged.instant")
        status: RunStatus = event.status
        if status == "admitted":
            raise self.misuse(event, w, "admission is reported by OccurrenceAdmitted")
        run = w.active.get(instant)
        if run is None:
            self.ignore_report(event, w, f"no active run is known for {_iso(instant)}")
            return
        if run.run_id is not None and run.run_id != event.run_id:
            detail = f"the run of {_iso(instant)} is {run.run_id!r}, not {event.run_id!r}"
            self.ignore_report(event, w, detail)
            return
        # rule F: a run holds its slot until it first stops; only a terminal
        # status gives back its overlap place.
        if status in TERMINAL_RUN_STATUSES:
            self.release(w, instant, run, remove=True)
        elif status == "interrupted":
            self.release(w, instant, run, remove=False)
            w.active = w.active.with_run(instant, ActiveRun(event.run_id, status, False))
        else:
            w.active = w.active.with_run(instant, ActiveRun(event.run_id, status, run.holds_slot))
        self.record(w.schedule_id, instant, status, run_id=event.run_id, reason=event.message)
        self.refresh(w)

    def release(self, w: _Work, instant: datetime, run: ActiveRun, *, remove: bool) -> None:
        if run.holds_slot:
            self.slots -= 1
        if remove:
            w.active = w.active.without(instant)

    def on_capacity(self, event: CapacityChanged) -> None:
        self.capacity = check_capacity(event.max_concurrent_runs)

    def on_recovered(self, event: ScheduleRecovered) -> None:
        definition = event.definition
        sid = definition.schedule_id
        if self.peek(sid) is not None:
            raise self.misuse(event, self.touch(sid), "the schedule was already recovered")
        if event.revision < 1:
            raise CoreMisuse(f"cannot apply {event!r}: revision must be >= 1")
        created_at = _utc(event.created_at, "ScheduleRecovered.created_at")
        # rule M: a crash may have lost the runtime record after the rows it
        # depends on; every durable mark bounds what was already considered.
        marks = [created_at]
        for value, what in (
            (event.watermark, "watermark"),
            (event.last_decided_instant, "last_decided_instant"),
            (event.updated_at, "updated_at"),
            (event.resumed_at, "resumed_at"),
        ):
            if value is not None:
                marks.append(_utc(value, f"ScheduleRecovered.{what}"))
        last_decided = (
            None
            if event.last_decided_instant is None
            else _utc(event.last_decided_instant, "ScheduleRecovered.last_decided_instant")
        )
        held = None if event.held is None else _utc(event.held, "ScheduleRecovered.held")
        if held is not None and last_decided is not None and held <= last_decided:
            # Decided before the crash (its row is durable, the runtime was not).
            held = None
        runs = sorted(event.active_runs, key=lambda r: _utc(r.instant, "RecoveredRun.instant"))
        run_instants = {_utc(r.instant, "RecoveredRun.instant") for r in runs}
        if len(run_instants) != len(runs):
            raise CoreMisuse(f"cannot apply {event!r}: two recovered runs share an instant")
        waiting = tuple(
            sorted(
                {
                    t
                    for t in (_utc(v, "ScheduleRecovered.waiting") for v in event.waiting)
                    if t not in run_instants and t != held
                }
            )
        )
        marks.extend(waiting)
        marks.extend(run_instants)
        if held is not None:
            marks.append(held)
        w = _Work.fresh(definition, event.revision, created_at, max(marks))
        self.work[sid] = w
        self.before[sid] = (
            None
            if event.watermark is None
            else (_utc(event.watermark, "ScheduleRecovered.watermark"), event.held, event.waiting)
        )
        w.held = held
        w.waiting = waiting
        w.paused = event.paused
        w.deleted = event.deleted
        w.blocked = event.blocked_reason
        for run in runs:
            self.recover_run(event, w, run)
        # rule H: instants left waiting by a crash after an admission that took the
        # last overlap place (its row durable, the runtime record not).
        self.overlap_waiting(w)
        # rules A, K: the recovered definition and flags rule what may wait.
        if w.paused or w.deleted:
            self.supersede_all(w, _PAUSED if not w.deleted else _DELETED)
        else:
            self.conform(w, _UPDATED)
        self.refresh(w)

    def recover_run(self, event: ScheduleRecovered, w: _Work, run: RecoveredRun) -> None:
        instant = _utc(run.instant, "RecoveredRun.instant")
        sid = w.schedule_id
        # rule O: an admitted occurrence is never replayed, only carried on.
        if run.status in TERMINAL_RUN_STATUSES:
            self.record(sid, instant, run.status, run_id=run.run_id, reason=run.message)
            return
        if run.status == "interrupted":
            if run.run_id is None:
                raise self.misuse(event, w, f"interrupted run of {_iso(instant)} has no run id")
            w.active = w.active.with_run(instant, ActiveRun(run.run_id, "interrupted", False))
            return
        if run.run_id is None and run.status != "admitted":
            raise self.misuse(event, w, f"{run.status} run of {_iso(instant)} has no run id")
        if w.blocked is not None:
            # rule I: fail closed; a blocked schedule's runs are tracked, not
            # started.
            w.active = w.active.with_run(instant, ActiveRun(run.run_id, run.status, False))
            return
        if run.run_id is None:
            self.commands.append(CreateAdmittedRun(schedule_id=sid, instant=instant))
        elif run.status == "admitted" and run.never_started:
            self.commands.append(StartRun(schedule_id=sid, instant=instant, run_id=run.run_id))
        w.active = w.active.with_run(instant, ActiveRun(run.run_id, run.status, True))
        self.slots += 1

    def on_contradicted(self, event: RecordsContradicted) -> None:
        w = self.get(event.schedule_id, event)
        parts = [f"{event.file}: {event.record}: {event.reason}", *event.extra]
        diagnostic = "; ".join(parts)
        # rule I: the schedule stops advancing and admitting; its waiting
        # instants cannot wait for a repair of unknown duration.
        if w.blocked is None:
            # The first damage found is the one shown: what it breaks may
            # well be what later contradictions only follow from.
            w.blocked = diagnostic
        for instant in w.waiting:
            self.record(w.schedule_id, instant, "superseded", reason=_BLOCKED)
        w.waiting = ()
        self.commands.append(BlockSchedule(schedule_id=w.schedule_id, diagnostic=diagnostic))
        self.refresh(w)

    # --- finish -------------------------------------------------------------

    def finish(self) -> SchedulerState:
        self.trim_due_top()
        if self.due_index.size > 2 * self.due_live + _COMPACT_SLACK:
            live = {key for key in self.due_index if (s := self.peek(key[1])) and s.due == key[0]}
            self.due_index = KeyHeap.of(live).edit()
            self.due_live = len(live)
        if self.queue.size > 2 * self.queue_live + _COMPACT_SLACK:
            live = {key for key in self.queue if (s := self.peek(key[1])) and s.queued == key[0]}
            self.queue = KeyHeap.of(live).edit()
            self.queue_live = len(live)
        schedules = self.state.schedules
        if self.work:
            evolver = schedules.evolver()
            for sid, w in self.work.items():
                # rule I: a blocked schedule's files stay as they were found: a
                # fresh runtime record would hide the damage from the next
                # start. rule M: persisting here, last, puts the runtime
                # record after every row of the call.
                if w.blocked is None and self.before[sid] != (w.watermark, w.held, w.waiting):
                    self.persist(w)
                evolver[sid] = w.freeze()
            schedules = evolver.persistent()
        return SchedulerState(
            max_concurrent_runs=self.capacity,
            schedules=schedules,
            slots_in_use=self.slots,
            last_now=self.now,
            clock_behind=self.clock_behind,
            due_index=self.due_index.freeze(),
            due_live=self.due_live,
            slot_queue=self.queue.freeze(),
            queue_live=self.queue_live,
        )

    def trim_due_top(self) -> None:
        # Keep the top entry live so `next_wakeup` reads it in O(1).
        while self.due_index:
            top = self.due_index.peek()
            assert top is not None
            s = self.peek(top[1])
            if s is not None and s.due == top[0]:
                return
            self.due_index.pop()


_Handler: TypeAlias = Callable[[_Call, Any], None]

# The transition table: which handler applies each kind of event.
_HANDLERS: Final[dict[type[Event], _Handler]] = {
    ScheduleCreated: _Call.on_created,
    ScheduleUpdated: _Call.on_updated,
    SchedulePaused: _Call.on_paused,
    ScheduleResumed: _Call.on_resumed,
    ScheduleDeleted: _Call.on_deleted,
    OccurrenceAdmitted: _Call.on_admitted,
    PreflightFailed: _Call.on_preflight_failed,
    RunStatusChanged: _Call.on_run_status,
    CapacityChanged: _Call.on_capacity,
    ScheduleRecovered: _Call.on_recovered,
    RecordsContradicted: _Call.on_contradicted,
}


def decide(
    state: SchedulerState, now: datetime, events: Sequence[Event]
) -> tuple[SchedulerState, tuple[Command, ...]]:
    """Apply `events` (in order) at `now`, decide every instant that is due, and
    fill free execution slots.

    Returns the new state and the commands for the shell, in the order they
    must be carried out. Pure and deterministic: the same arguments always
    give equal results, and `state` and `events` are never changed.

    Raises CoreMisuse when the caller breaks the protocol (a naive `now`, a
    lifecycle or admission event about a schedule or admission the state does
    not know, a revision that does not increase, a duplicate schedule id), and
    InvalidInput for a bad capacity. A failed call changes nothing: the old
    state is still valid. A run's status report that the state cannot place
    (an unknown schedule, no active run at its instant, another run id) is not
    misuse: the world reports what happened to runs, and a stale report is
    answered with a `LogWarning` and ignored.
    """
    if not isinstance(state, SchedulerState):
        raise CoreMisuse(f"decide needs a SchedulerState, got {type(state).__name__}")
    call = _Call(state, _utc(now, "now"))
    call.find_late_stops(events)
    for position, event in enumerate(events):
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise CoreMisuse(f"decide cannot apply {event!r}: not a known event type")
        call.position = position
        handler(call, event)
    call.settle_due()
    call.fill()
    return call.finish(), tuple(call.commands)


def next_wakeup(state: SchedulerState) -> datetime | None:
    """The earliest instant at which `decide` would act without any event: the
    next trigger instant of a live schedule, or the moment an instant waiting
    for a slot stops being on time. None when nothing is ever due on its own.

    O(1) for a state returned by `decide` (its index top is kept live).
    """
    index = state.due_index.edit()
    while index:
        top = index.peek()
        assert top is not None
        s = state.schedules.get(top[1])
        if s is not None and s.due == top[0]:
            return top[0]
        index.pop()
    return None
