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

1. Clock. A `now` older than the last call's is a step back, logged once
   (rule L); the call decides as of it, on the wall clock.
2. Events, in order. A lifecycle event (created, updated, paused, resumed,
   deleted) carries `at`: the schedule is first settled up to
   `min(at, now)` (lateness still measured against `now`), then the change
   applies (rule K). Run reports (admitted, preflight failed, status
   changed) and capacity changes apply at `now`. Recovery findings rebuild a
   schedule from what the stores said at startup (rules M, O, I).
3. Settle. Every schedule whose due time is `<= now` (found through the due
   index, never by a scan) decides its instants up to `now` (rules A-E).
4. Fill. While execution slots are free, candidates waiting for a slot are
   admitted, oldest instant first across schedules (rule F); then each
   running backfill may admit its next instant (rule Q).
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
   anything: each schedule decides only instants after its watermark, on the
   wall clock. An instant already decided is never decided again; one the
   clock passes again for the first time (a schedule created, updated or
   resumed while behind) is decided when the wall clock reaches it, as a
   restart on a clock behind always did.
M. Crash repair. `PersistRuntime` follows the rows it depends on, so at
   recovery the effective watermark is the newest of the persisted one, the
   newest decision row, creation, last update and last resume, and a held
   candidate at or before the newest decision row was already decided.
N. Run reports. Every status report of a scheduled run is recorded in
   history, except a `running` report followed in the same call by another
   report on the same run: that one says where the run is, and the history
   moves straight to it (a run that starts and stops between two calls
   costs one row, not two). A report that cannot be placed (unknown
   schedule, no active run at its instant, another run id) is answered with
   a `LogWarning` and ignored.
O. Recovered runs. Admitted runs are restarted (`CreateAdmittedRun`,
   `StartRun`), tracked (running), kept without a slot (interrupted) or
   recorded (terminal).
P. Trigger. An operator's request to run the schedule now admits one
   occurrence with origin "trigger" at the request's instant (moved off any
   calendar or occupied instant), under the overlap policy unless it says
   "allow", without waiting for a slot; it never moves the watermark. A
   request read later than the allowance is `skipped-misfire`, one whose
   overlap place was taken since the API checked is `skipped-overlap`.
Q. Backfill. A request to make up `[start, end)` plans the calendar
   instants the scheduler decided without running them (never one admitted
   before, never one the calendar has yet to decide) and admits them oldest
   first with origin "backfill": one per call, into a free slot no queued
   candidate wants, within the overlap places. Progress is in the runtime
   record; pause holds it, delete and cancel end it. A request while paused
   moves the watermark to it: the paused span up to it is the backfill's.
   (`core/operator_actions.py` states both in full.)

Reading guide
=============

Top to bottom: `decide` and `next_wakeup`, the entry points; `_Decider`, one
call's work, its methods in the order of the five phases (the event
handlers, then settling with the instant rules A-E, filling slots, and
finishing with the runtime records), then the helpers those share (drafts
of schedules, history rows, indexes); `_HANDLERS`, the table from event type
to handler; `_ScheduleDraft`, the mutable copy of a `ScheduleState` a call
works on, and the index keys derived from a schedule; last, small helpers
(memoized calendar questions, time checks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from operator import attrgetter
from typing import Any, Final, TypeAlias

from pyrsistent import PMap, pset

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
from core.errors import CoreMisuse, InvalidInput
from core.events import (
    BackfillCancelled,
    BackfillRequested,
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
    ScheduleTriggered,
    ScheduleUpdated,
)
from core.occurrences import TERMINAL_RUN_STATUSES, OccurrenceStatus, Origin, RunStatus
from core.operator_actions import (
    Backfill,
    calendar_instants,
    check_overlap_override,
    overlap_refusal,
    plan_backfill,
    trigger_instant,
)
from core.state import (
    NO_RUNS,
    ActiveRun,
    ActiveRuns,
    SchedulerState,
    ScheduleState,
    check_capacity,
)

__all__ = ["decide", "next_due", "next_wakeup"]


def decide(
    state: SchedulerState, now: datetime, events: Sequence[Event]
) -> tuple[SchedulerState, tuple[Command, ...]]:
    """Apply `events` (in order, but every `ScheduleRecovered` first) at
    `now`, decide every instant that is due, and fill free execution slots.

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
    decider = _Decider(state, _checked_utc(now, "now"))  # phase 1: clock
    decider.find_late_stops(events)
    superseded = _superseded_running_reports(events)
    for position in _recoveries_first(events):  # phase 2: events
        event = events[position]
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise CoreMisuse(f"decide cannot apply {event!r}: not a known event type")
        if position in superseded:
            continue
        decider.event_position = position
        handler(decider, event)
    decider.settle_due()  # phase 3
    decider.fill_slots()  # phase 4
    decider.advance_backfills()
    return decider.finish(), tuple(decider.commands)  # phase 5: persist


def _schedule_in(schedules: PMap[str, ScheduleState], schedule_id: str) -> ScheduleState | None:
    """`schedules.get(schedule_id)` at half its cost: a pyrsistent map's `get`
    is `Mapping.get` in Python around its `__getitem__`, and `decide` looks a
    schedule up several times per occurrence."""
    try:
        return schedules[schedule_id]
    except KeyError:
        return None


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
        schedule = _schedule_in(state.schedules, top[1])
        if schedule is not None and schedule.due == top[0]:
            return top[0]
        index.pop()
    return None


def next_due(state: SchedulerState, schedule_id: str) -> datetime | None:
    """When `decide` next acts on `schedule_id` without any event: its next
    trigger instant, or the moment its oldest waiting instant turns late.
    None when only an event can wake it (paused, deleted, blocked, no more
    instants) or the state does not know it."""
    schedule = state.schedules.get(schedule_id)
    return None if schedule is None else schedule.due


def _recoveries_first(events: Sequence[Event]) -> Sequence[int]:
    """The positions of `events` in the order phase 2 applies them: every
    `ScheduleRecovered` first, then the rest, each in the order given (rule
    O). A lifecycle change replayed after one schedule's recovery decides
    that schedule's instants up to the change (rule K), and what it admits
    must count the slots held by the runs of every schedule the call
    recovers, not only of those recovered before it."""
    recovered = [p for p, event in enumerate(events) if type(event) is ScheduleRecovered]
    if not recovered or recovered[-1] == len(recovered) - 1:
        return range(len(events))
    first = set(recovered)
    return [*recovered, *(p for p in range(len(events)) if p not in first)]


def _superseded_running_reports(events: Sequence[Event]) -> frozenset[int]:
    """Positions of `running` reports that a later report on the same run in
    the same call supersedes (rule N): the later one is what the history must
    say, and a run that started and stopped between two calls costs one row."""
    running: dict[tuple[str, datetime, str], int] = {}
    superseded: list[int] = []
    for position, event in enumerate(events):
        if type(event) is not RunStatusChanged:
            continue
        key = (event.schedule_id, event.instant, event.run_id)
        earlier = running.pop(key, None)
        if earlier is not None:
            superseded.append(earlier)
        if event.status == "running":
            running[key] = position
    return frozenset(superseded)


_ONE_MICROSECOND: Final = timedelta(microseconds=1)
_NO_TIME: Final = timedelta(0)
# Queued after every candidate (rule Q: a backfill takes a slot only when no
# scheduled instant waits for one); "" names no schedule.
_AFTER_EVERY_INSTANT: Final = datetime.max.replace(tzinfo=UTC)
# Rebuild an index once stale entries outnumber live ones by this much.
_COMPACT_SLACK: Final = 64

# rule E: an admission the shell has not answered yet is active and holds a
# slot already, so nothing admitted after it in this call can overbook.
_IN_FLIGHT: Final[dict[Origin, ActiveRun]] = {
    origin: ActiveRun(run_id=None, status="admitted", holds_slot=True, origin=origin)
    for origin in ("schedule", "trigger", "backfill")
}

_REASON_PAUSED: Final = "schedule paused"
_REASON_DELETED: Final = "schedule deleted"
_REASON_BLOCKED: Final = "schedule blocked"
_REASON_UPDATED: Final = "schedule updated"

_RuntimeRecord: TypeAlias = tuple[datetime, datetime | None, tuple[datetime, ...], Backfill | None]


class _Decider:
    """One `decide` call: working copies of the schedules it touches, the
    indexes and counters as they evolve, and the commands emitted so far.

    `decide` drives it through the five phases of the theory of operation;
    the methods below come in that order.
    """

    # --- phase 1: start the call, note a step back (rule L) -------------------

    def __init__(self, state: SchedulerState, now: datetime) -> None:
        self.given_state = state
        self.capacity = state.max_concurrent_runs
        self.slots_in_use = state.slots_in_use
        self.due_index = state.due_index.edit()
        self.due_live = state.due_live
        self.slot_queue = state.slot_queue.edit()
        self.queue_live = state.queue_live
        self.backfilling = set(state.backfilling)
        self.drafts: dict[str, _ScheduleDraft] = {}
        # Runtime as last persisted (before this call, or earlier in it; None:
        # never persisted).
        self.persisted: dict[str, _RuntimeRecord | None] = {}
        # Held candidates that were themselves missed during this call.
        self.missed_held: dict[str, datetime] = {}
        self.commands: list[Command] = []
        last = state.last_now
        # rule L: the watermarks alone keep a step back from replaying
        # anything. Deciding as of the newest time seen instead (as this call
        # once did) decided the instants of a schedule created while behind
        # as missed, before the wall clock reached them.
        if last is not None and now < last:
            self.commands.append(
                LogWarning(
                    message=(
                        f"clock stepped back from {_iso(last)} to {_iso(now)}; instants"
                        " decided already are not decided again"
                    )
                )
            )
        self.now = now
        # Schedule -> position among this call's events of its last late pause
        # or delete, and the position of the event being applied.
        self.late_stops: dict[str, int] = {}
        self.event_position = 0

    # --- phase 2: events, in order (rules K, A, E, N, F, M, O, I) -------------

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

    def settle_before_change(self, draft: _ScheduleDraft, at: datetime) -> None:
        # rule I: a blocked schedule holds its instants back; a lifecycle
        # change needs them decided up to the change, and since the block
        # kept them from running they are decided as missed. rule K: so are
        # the instants settled before a late pause or delete (see
        # `find_late_stops`).
        late_stop = self.late_stops.get(draft.schedule_id, -1) >= self.event_position
        self.settle(draft, min(at, self.now), all_missed=draft.blocked is not None or late_stop)

    def on_created(self, event: ScheduleCreated) -> None:
        definition = event.definition
        schedule_id = definition.schedule_id
        existing = self.current(schedule_id)
        if existing is not None:
            draft = self.draft(schedule_id)
            raise self.misuse(event, draft, "the schedule id already exists (ids are never reused)")
        if event.revision < 1:
            raise CoreMisuse(f"cannot apply {event!r}: revision must be >= 1")
        at = _checked_utc(event.at, "ScheduleCreated.at")
        # rule J: the watermark starts at the creation, so nothing before it
        # is ever decided.
        draft = _ScheduleDraft.fresh(definition, event.revision, at, at)
        self.drafts[schedule_id] = draft
        self.persisted[schedule_id] = None
        self.reindex(draft)

    def on_updated(self, event: ScheduleUpdated) -> None:
        draft = self.draft_for_event(event.definition.schedule_id, event)
        if draft.deleted:
            raise self.misuse(event, draft, "a deleted schedule cannot be updated")
        if event.revision <= draft.revision:
            raise self.misuse(
                event, draft, f"revision {event.revision} does not follow revision {draft.revision}"
            )
        at = _checked_utc(event.at, "ScheduleUpdated.at")
        # rule K: the old definition decides up to the update, the new one
        # after it; nothing is backfilled.
        self.settle_before_change(draft, at)
        draft.watermark = max(draft.watermark, at)
        draft.set_definition(event.definition, event.revision)
        self.conform_to_policy(draft, _REASON_UPDATED)
        self.reindex(draft)

    def conform_to_policy(self, draft: _ScheduleDraft, reason: str) -> None:
        """Make held/waiting instants fit the (new) misfire and overlap policy."""
        # rule K: they are kept only while the new policy would admit them.
        schedule_id = draft.schedule_id
        if draft.latest:
            if draft.waiting:
                *older, newest = draft.waiting
                for instant in older:
                    self.record(schedule_id, instant, "superseded", reason=reason)
                if draft.held is not None and draft.held > newest:
                    self.record(schedule_id, newest, "superseded", reason=reason)
                else:
                    if draft.held is not None:
                        self.record(schedule_id, draft.held, "superseded", reason=reason)
                    draft.held = newest
                draft.waiting = ()
            return
        if draft.held is not None:
            self.record(schedule_id, draft.held, "superseded", reason=reason)
            draft.held = None
        self.decide_waiting_when_overlap_full(draft, reason=reason)

    def on_paused(self, event: SchedulePaused) -> None:
        draft = self.draft_for_event(event.schedule_id, event)
        if draft.deleted:
            raise self.misuse(event, draft, "a deleted schedule cannot be paused")
        at = _checked_utc(event.at, "SchedulePaused.at")
        self.settle_before_change(draft, at)
        # rule A: idempotent; the paused span is consumed by the watermark.
        if not draft.paused:
            draft.paused = True
            self.supersede_all(draft, _REASON_PAUSED)
            draft.watermark = max(draft.watermark, at)
        self.reindex(draft)

    def on_resumed(self, event: ScheduleResumed) -> None:
        draft = self.draft_for_event(event.schedule_id, event)
        if draft.deleted:
            raise self.misuse(event, draft, "a deleted schedule cannot be resumed")
        at = _checked_utc(event.at, "ScheduleResumed.at")
        self.settle_before_change(draft, at)
        # rule A: resuming starts after the resume; the paused span is never
        # replayed.
        if draft.paused:
            draft.paused = False
            draft.watermark = max(draft.watermark, at)
            draft.next_instant = _next_after(draft.trigger, draft.watermark)
        self.reindex(draft)

    def on_deleted(self, event: ScheduleDeleted) -> None:
        draft = self.draft_for_event(event.schedule_id, event)
        at = _checked_utc(event.at, "ScheduleDeleted.at")
        self.settle_before_change(draft, at)
        # rule A: soft; the active runs stay tracked to the end.
        if not draft.deleted:
            draft.deleted = True
            self.supersede_all(draft, _REASON_DELETED)
            draft.watermark = max(draft.watermark, at)
            # rule Q: a deleted schedule admits nothing, its backfill included.
            self.end_backfill(draft, at)
        self.reindex(draft)

    def on_triggered(self, event: ScheduleTriggered) -> None:
        draft = self.draft_for_event(event.schedule_id, event)
        if draft.deleted:
            raise self.misuse(event, draft, "a deleted schedule cannot be triggered")
        at = _checked_utc(event.at, "ScheduleTriggered.at")
        overlap = self.checked_override(event, draft, event.overlap)
        request = event.request
        known = draft.last_trigger_request
        if request is not None and known is not None and request <= known:
            # rule P: a request delivered again after a crash whose row is
            # durable (requests are decided in log order): decided already.
            return
        if draft.blocked is not None:
            # rule I: a blocked schedule admits nothing; its runtime record is
            # not written, so the request is delivered again at the next start.
            self.ignore_report(event, draft, "the schedule is blocked")
            return
        self.settle_before_change(draft, at)
        taken = {*draft.active, *draft.waiting, *((draft.held,) if draft.held else ())}
        instant = trigger_instant(draft.trigger, at, after=draft.last_trigger, taken=taken)
        draft.last_trigger = instant
        if request is not None:
            draft.last_trigger_request = request
        schedule_id = draft.schedule_id
        # rule P with rule L: a request stamped before a step back is as old
        # as the clock says: no age.
        late = max(self.now - at, _NO_TIME)
        refusal = overlap_refusal(len(draft.active), draft.limit, overlap)
        if late > draft.allowance:
            # rule P with rule K: a request read after the schedule's allowance
            # (the scheduler was down) is decided as missed, never run late.
            reason = f"the trigger was read {late.total_seconds():g} s after it was made"
            self.record(
                schedule_id,
                instant,
                "skipped-misfire",
                reason=reason,
                origin="trigger",
                request=request,
            )
        elif refusal is not None:
            # The API refuses this before writing the request; a place taken in
            # between is recorded, so the request is accounted for.
            self.record(
                schedule_id,
                instant,
                "skipped-overlap",
                reason=refusal,
                origin="trigger",
                request=request,
            )
        else:
            # rule P: no waiting for a slot, but the run holds one from now on.
            self.admit(draft, instant, "trigger", request)
            self.decide_waiting_when_overlap_full(draft)  # rule H
        self.reindex(draft)

    def on_backfill_requested(self, event: BackfillRequested) -> None:
        draft = self.draft_for_event(event.schedule_id, event)
        if draft.deleted:
            raise self.misuse(event, draft, "a deleted schedule cannot be backfilled")
        at = _checked_utc(event.at, "BackfillRequested.at")
        start = _checked_utc(event.start, "BackfillRequested.start")
        end = _checked_utc(event.end, "BackfillRequested.end")
        overlap = self.checked_override(event, draft, event.overlap)
        if draft.blocked is not None:
            self.ignore_report(event, draft, "the schedule is blocked")  # as rule P
            return
        running = draft.backfill
        if running is not None and running.state == "running":
            if running.requested_at == at and running.start == start and running.end == end:
                return  # rule Q: this very request, replayed after a crash
            # The API refuses a second backfill; one that raced it is logged.
            self.ignore_report(event, draft, "a backfill of this schedule is still running")
            return
        self.settle_before_change(draft, at)
        try:
            instants = calendar_instants(draft.trigger, start, end)
        except InvalidInput as refused:
            self.ignore_report(event, draft, str(refused))
            return
        pending = {*draft.active, *draft.waiting, *((draft.held,) if draft.held else ())}
        paused_until = min(at, self.now) if draft.paused else None
        plan = plan_backfill(
            instants,
            watermark=draft.watermark,
            pending=pending,
            admitted=event.decided,
            paused_until=paused_until,
        )
        if paused_until is not None:
            # rules Q, A, L: the paused span up to the request is the
            # backfill's, and the watermark passes it now: a resume on a
            # clock set back behind the request must not give its instants
            # to the calendar too.
            draft.watermark = max(draft.watermark, paused_until)
        # rule Q: the plan is fixed at the request; progress is durable in
        # the runtime record.
        draft.backfill = Backfill(
            start=start,
            end=end,
            overlap=overlap,
            requested_at=at,
            state="running" if plan.instants else "done",
            planned=len(plan.instants),
            admitted=0,
            remaining=plan.instants,
            already_admitted=plan.already_admitted,
            left_to_calendar=plan.left_to_calendar,
            ended_at=None if plan.instants else at,
        )
        if plan.instants:
            self.backfilling.add(draft.schedule_id)

    def on_backfill_cancelled(self, event: BackfillCancelled) -> None:
        draft = self.draft_for_event(event.schedule_id, event)
        at = _checked_utc(event.at, "BackfillCancelled.at")
        # rule Q: admitted runs go on; nothing more is admitted.
        self.end_backfill(draft, at)

    def end_backfill(self, draft: _ScheduleDraft, at: datetime) -> None:
        if draft.backfill is not None and draft.backfill.state == "running":
            draft.backfill = draft.backfill.cancelled(at)
        self.backfilling.discard(draft.schedule_id)

    def checked_override(self, event: Event, draft: _ScheduleDraft, overlap: object) -> str | None:
        try:
            return check_overlap_override(overlap)
        except InvalidInput as bad:
            raise self.misuse(event, draft, str(bad)) from None

    def on_admitted(self, event: OccurrenceAdmitted) -> None:
        draft = self.draft_for_event(event.schedule_id, event)
        instant = _checked_utc(event.instant, "OccurrenceAdmitted.instant")
        # rule E: the admission was counted when it was emitted; the answer
        # only names its run.
        run = draft.active.get(instant)
        if run is None:
            raise self.misuse(event, draft, f"no admission of {_iso(instant)} is in flight")
        if run.run_id is None:
            draft.active = draft.active.with_run(
                instant, ActiveRun(event.run_id, run.status, run.holds_slot, run.origin)
            )
        elif run.run_id != event.run_id:
            detail = f"{_iso(instant)} was admitted as run {run.run_id!r}, not {event.run_id!r}"
            raise self.misuse(event, draft, detail)

    def on_preflight_failed(self, event: PreflightFailed) -> None:
        draft = self.draft_for_event(event.schedule_id, event)
        instant = _checked_utc(event.instant, "PreflightFailed.instant")
        run = draft.active.get(instant)
        if run is None or run.run_id is not None or run.status != "admitted":
            raise self.misuse(event, draft, f"no admission of {_iso(instant)} is in flight")
        # rule E: the shell wrote the `preflight-rejected` row in command order
        # when the preflight failed (a later row of this schedule may already follow it),
        # so only the reservation is released here.
        self.release_run(draft, instant, run, remove=True)
        self.reindex(draft)

    def on_run_status(self, event: RunStatusChanged) -> None:
        # rule N: a report about a run this state does not track (a run of a
        # schedule blocked by damaged records, or one whose schedule is not
        # loaded) is the world telling us something stale, not the shell
        # breaking the protocol: it is logged and ignored, and the rest of the
        # call stands.
        if self.current(event.schedule_id) is None:
            self.commands.append(
                LogWarning(
                    message=f"ignored {type(event).__name__} {event!r}: schedule "
                    f"{event.schedule_id!r} is unknown to the scheduler"
                )
            )
            return
        draft = self.draft_for_event(event.schedule_id, event)
        instant = _checked_utc(event.instant, "RunStatusChanged.instant")
        status: RunStatus = event.status
        if status == "admitted":
            raise self.misuse(event, draft, "admission is reported by OccurrenceAdmitted")
        run = draft.active.get(instant)
        if run is None:
            self.ignore_report(event, draft, f"no active run is known for {_iso(instant)}")
            return
        if run.run_id is not None and run.run_id != event.run_id:
            detail = f"the run of {_iso(instant)} is {run.run_id!r}, not {event.run_id!r}"
            self.ignore_report(event, draft, detail)
            return
        # rule F: a run holds its slot until it first stops; only a terminal
        # status gives back its overlap place.
        if status in TERMINAL_RUN_STATUSES:
            self.release_run(draft, instant, run, remove=True)
        elif status == "interrupted":
            self.release_run(draft, instant, run, remove=False)
            draft.active = draft.active.with_run(
                instant, ActiveRun(event.run_id, status, False, run.origin)
            )
        else:
            draft.active = draft.active.with_run(
                instant, ActiveRun(event.run_id, status, run.holds_slot, run.origin)
            )
        self.record(draft.schedule_id, instant, status, run_id=event.run_id, reason=event.message)
        self.reindex(draft)

    def release_run(
        self, draft: _ScheduleDraft, instant: datetime, run: ActiveRun, *, remove: bool
    ) -> None:
        if run.holds_slot:
            self.slots_in_use -= 1
        if remove:
            draft.active = draft.active.without(instant)

    def on_capacity(self, event: CapacityChanged) -> None:
        self.capacity = check_capacity(event.max_concurrent_runs)

    def on_recovered(self, event: ScheduleRecovered) -> None:
        definition = event.definition
        schedule_id = definition.schedule_id
        # `current`, without the exception a persistent map's `get` raises
        # and catches for every schedule a start recovers.
        if schedule_id in self.drafts or schedule_id in self.given_state.schedules:
            raise self.misuse(event, self.draft(schedule_id), "the schedule was already recovered")
        if event.revision < 1:
            raise CoreMisuse(f"cannot apply {event!r}: revision must be >= 1")
        created_at = _checked_utc(event.created_at, "ScheduleRecovered.created_at")
        # rule M: a crash may have lost the runtime record after the rows it
        # depends on; every durable mark bounds what was already considered.
        marks = [created_at]
        for value, field_name in (
            (event.watermark, "ScheduleRecovered.watermark"),
            (event.last_decided_instant, "ScheduleRecovered.last_decided_instant"),
            (event.updated_at, "ScheduleRecovered.updated_at"),
            (event.resumed_at, "ScheduleRecovered.resumed_at"),
        ):
            if value is not None:
                marks.append(_checked_utc(value, field_name))
        last_decided = (
            None
            if event.last_decided_instant is None
            else _checked_utc(event.last_decided_instant, "ScheduleRecovered.last_decided_instant")
        )
        held = None if event.held is None else _checked_utc(event.held, "ScheduleRecovered.held")
        if held is not None and last_decided is not None and held <= last_decided:
            # Decided before the crash (its row is durable, the runtime was not).
            held = None
        # (Most schedules recover with no open run and nothing waiting: the
        # branches below build nothing for them.)
        runs: list[RecoveredRun] = []
        run_instants: set[datetime] = set()
        if event.active_runs:
            runs = sorted(
                event.active_runs,
                key=lambda recovered: _checked_utc(recovered.instant, "RecoveredRun.instant"),
            )
            all_run_instants = {_checked_utc(run.instant, "RecoveredRun.instant") for run in runs}
            if len(all_run_instants) != len(runs):
                raise CoreMisuse(f"cannot apply {event!r}: two recovered runs share an instant")
            # rules P, Q: an operator's occurrence is not a calendar decision: a
            # trigger's instant lies ahead of the watermark, a backfill's behind it.
            run_instants = {
                _checked_utc(run.instant, "RecoveredRun.instant")
                for run in runs
                if run.origin == "schedule"
            }
        waiting: tuple[datetime, ...] = ()
        if event.waiting:
            waiting = tuple(
                sorted(
                    {
                        instant
                        for instant in (
                            _checked_utc(value, "ScheduleRecovered.waiting")
                            for value in event.waiting
                        )
                        if instant not in run_instants and instant != held
                    }
                )
            )
        if held in run_instants:
            # Admitted before the crash (its run is durable, the runtime record
            # was not), even where no decision row names it (rule M).
            held = None
        marks.extend(waiting)
        marks.extend(run_instants)
        if held is not None:
            marks.append(held)
        draft = _ScheduleDraft.fresh(definition, event.revision, created_at, max(marks))
        self.drafts[schedule_id] = draft
        self.persisted[schedule_id] = (
            None
            if event.watermark is None
            else (
                _checked_utc(event.watermark, "ScheduleRecovered.watermark"),
                event.held,
                event.waiting,
                event.backfill,
            )
        )
        draft.held = held
        draft.waiting = waiting
        draft.paused = event.paused
        draft.deleted = event.deleted
        draft.blocked = event.blocked_reason
        triggers = [
            _checked_utc(run.instant, "RecoveredRun.instant")
            for run in runs
            if run.origin == "trigger"
        ]
        if event.last_trigger is not None:
            triggers.append(_checked_utc(event.last_trigger, "ScheduleRecovered.last_trigger"))
        draft.last_trigger = max(triggers, default=None)
        draft.last_trigger_request = event.last_trigger_request
        if event.backfill is not None:
            # rule M for rule Q: what the history shows decided is not admitted again.
            draft.backfill = event.backfill.without(event.backfill_decided, self.now)
            if draft.backfill.state == "running" and not draft.deleted:
                self.backfilling.add(schedule_id)
            elif draft.deleted:
                self.end_backfill(draft, draft.backfill.requested_at)
        for run in runs:
            self.recover_run(event, draft, run)
        # rule H: instants left waiting by a crash after an admission that took the
        # last overlap place (its row durable, the runtime record not).
        self.decide_waiting_when_overlap_full(draft)
        # rules A, K: the recovered definition and flags rule what may wait.
        if draft.paused or draft.deleted:
            self.supersede_all(draft, _REASON_PAUSED if not draft.deleted else _REASON_DELETED)
        else:
            self.conform_to_policy(draft, _REASON_UPDATED)
        self.reindex(draft)

    def recover_run(
        self, event: ScheduleRecovered, draft: _ScheduleDraft, run: RecoveredRun
    ) -> None:
        instant = _checked_utc(run.instant, "RecoveredRun.instant")
        schedule_id = draft.schedule_id
        # rule O: an admitted occurrence is never replayed, only carried on.
        if run.status in TERMINAL_RUN_STATUSES:
            self.record(schedule_id, instant, run.status, run_id=run.run_id, reason=run.message)
            return
        if run.status == "interrupted":
            if run.run_id is None:
                raise self.misuse(event, draft, f"interrupted run of {_iso(instant)} has no run id")
            draft.active = draft.active.with_run(
                instant, ActiveRun(run.run_id, "interrupted", False, run.origin)
            )
            return
        if run.run_id is None and run.status != "admitted":
            raise self.misuse(event, draft, f"{run.status} run of {_iso(instant)} has no run id")
        if draft.blocked is not None:
            # rule I: fail closed; a blocked schedule's runs are tracked, not
            # started.
            draft.active = draft.active.with_run(
                instant, ActiveRun(run.run_id, run.status, False, run.origin)
            )
            return
        if run.run_id is None:
            self.commands.append(CreateAdmittedRun(schedule_id=schedule_id, instant=instant))
        elif run.status == "admitted" and run.never_started:
            self.commands.append(
                StartRun(schedule_id=schedule_id, instant=instant, run_id=run.run_id)
            )
        draft.active = draft.active.with_run(
            instant, ActiveRun(run.run_id, run.status, True, run.origin)
        )
        self.slots_in_use += 1

    def on_contradicted(self, event: RecordsContradicted) -> None:
        draft = self.draft_for_event(event.schedule_id, event)
        parts = [f"{event.file}: {event.record}: {event.reason}", *event.extra]
        diagnostic = "; ".join(parts)
        # rule I: the schedule stops advancing and admitting; its waiting
        # instants cannot wait for a repair of unknown duration.
        if draft.blocked is None:
            # The first damage found is the one shown: what it breaks may
            # well be what later contradictions only follow from.
            draft.blocked = diagnostic
        for instant in draft.waiting:
            self.record(draft.schedule_id, instant, "superseded", reason=_REASON_BLOCKED)
        draft.waiting = ()
        self.commands.append(BlockSchedule(schedule_id=draft.schedule_id, diagnostic=diagnostic))
        self.reindex(draft)

    # --- phase 3: settle, deciding each instant (rules A-E, G, H) -------------

    def settle_due(self) -> None:
        now = self.now
        while self.due_index:
            top = self.due_index.peek()
            assert top is not None
            due, schedule_id = top
            if due > now:
                return
            self.due_index.pop()
            schedule = self.current(schedule_id)
            if schedule is None or schedule.due != due:
                continue
            # `schedule` was looked up already: drafting it directly saves a second
            # map lookup.
            draft = (
                schedule if isinstance(schedule, _ScheduleDraft) else self._start_draft(schedule)
            )
            draft.due = None
            self.due_live -= 1
            self.settle(draft, now)
            self.reindex(draft)

    def settle(self, draft: _ScheduleDraft, upto: datetime, *, all_missed: bool = False) -> None:
        """Decide the schedule's instants in `(watermark, upto]` as of `self.now`
        (`all_missed`: as missed whatever their age)."""
        # rule A: a paused or deleted schedule's instants are consumed by the
        # watermark moves of pause/resume, never here. rule I: a blocked one
        # does not advance unless a lifecycle change needs its instants.
        if draft.paused or draft.deleted or (draft.blocked is not None and not all_missed):
            return
        now = self.now
        if draft.waiting:
            # Under `all_missed` the waiting instants too: each is older than
            # any instant decided below, and a history's decisions only move
            # forward.
            self.expire_waiting(draft, every=all_missed)
        next_instant = draft.next_instant
        if next_instant is None or next_instant > upto:
            return
        trigger = draft.trigger
        # rule B: missed means more than the allowance late, as of `now`.
        missed_upto = upto if all_missed else min(upto, now - draft.allowance - _ONE_MICROSECOND)
        if next_instant <= missed_upto:
            # rule G: the whole run of missed instants is one step and one
            # row, so a downtime of any length costs the same.
            after_missed = _next_after(trigger, next_instant)
            if after_missed is None or after_missed > missed_upto:
                first = last = next_instant
                count = 1
            else:
                first = next_instant
                found = _last_at_or_before(trigger, missed_upto)
                assert found is not None  # next_instant itself is at or before missed_upto
                last = found
                count = _count_between(trigger, draft.watermark, missed_upto)
                after_missed = _next_after(trigger, last)
            # Under "latest" a catch-up that reaches an on-time instant in this
            # call ends there: the on-time instant replaces every missed one.
            replaced = after_missed is not None and after_missed <= upto
            self.decide_missed(draft, first, last, count, replaced=replaced)
            draft.watermark = last
            next_instant = after_missed
        while next_instant is not None and next_instant <= upto:
            self.decide_on_time(draft, next_instant)
            draft.watermark = next_instant
            next_instant = _next_after(trigger, next_instant)
        draft.next_instant = next_instant

    def expire_waiting(self, draft: _ScheduleDraft, *, every: bool = False) -> None:
        # rules D, B: an instant waits for a slot only while it is on time
        # (`every`: none waits on, as `settle`'s `all_missed` decides).
        oldest_on_time = self.now - draft.allowance
        keep: list[datetime] = []
        for instant in draft.waiting:
            if every or instant < oldest_on_time:
                self.record(draft.schedule_id, instant, "skipped-misfire")
            else:
                keep.append(instant)
        if len(keep) != len(draft.waiting):
            draft.waiting = tuple(keep)

    def decide_missed(
        self, draft: _ScheduleDraft, first: datetime, last: datetime, count: int, *, replaced: bool
    ) -> None:
        """Decide the missed instants `first..last` (`count` of them);
        `replaced`: an on-time instant follows in this same call."""
        schedule_id = draft.schedule_id
        # rule B, misfire "skip".
        if not draft.latest:
            self.record_span(schedule_id, first, last, count, "skipped-misfire")
            return
        # rule B, misfire "latest": the newest missed instant takes the place
        # of the held candidate.
        if draft.held is not None:
            was_missed = self.missed_held.get(schedule_id) == draft.held
            self.record(schedule_id, draft.held, "coalesced" if was_missed else "superseded")
            draft.held = None
        if draft.blocked is not None:
            # rule I: a blocked schedule cannot take a new held candidate: its
            # runtime record stays as found, so the next start would not know
            # the instant was held (and under another definition, that it was
            # ever an instant). What the block held back is recorded missed.
            self.record_span(schedule_id, first, last, count, "skipped-misfire")
            return
        if replaced:
            # rule G: the newest missed instant was never a candidate anyone
            # waited on: it is coalesced with the rest of the catch-up, in one
            # row.
            self.record_span(schedule_id, first, last, count, "coalesced")
            return
        if count > 1:
            before_last = _last_at_or_before(draft.trigger, last - _ONE_MICROSECOND)
            assert before_last is not None  # count > 1: first < last
            self.record_span(schedule_id, first, before_last, count - 1, "coalesced")
        draft.held = last
        self.missed_held[schedule_id] = last

    def decide_on_time(self, draft: _ScheduleDraft, instant: datetime) -> None:
        schedule_id = draft.schedule_id
        if draft.latest:
            # rules C, D under "latest": a newer on-time instant replaces the
            # held one, so there is never a burst.
            if draft.held is not None:
                self.record(schedule_id, draft.held, "superseded")
                draft.held = None
            if len(draft.active) < draft.limit and self.slot_free_for(instant, schedule_id):
                self.admit(draft, instant)  # rule E
            else:
                draft.held = instant
            return
        # rule H: waiting instants exist only while the overlap limit is not
        # reached (see `decide_waiting_when_overlap_full`), so a skipped instant is never
        # recorded before an older one that still waits.
        if len(draft.active) >= draft.limit:
            self.record(schedule_id, instant, "skipped-overlap")  # rule C
        elif not draft.waiting and self.slot_free_for(instant, schedule_id):
            self.admit(draft, instant)  # rule E
        else:
            draft.waiting = (*draft.waiting, instant)  # rule D

    def decide_waiting_when_overlap_full(
        self, draft: _ScheduleDraft, *, reason: str | None = None
    ) -> None:
        """Once the overlap places are taken, the waiting instants cannot run:
        decide them now, oldest first (`skipped-overlap`, or `superseded`
        with `reason` when a change of policy took the places away)."""
        # rule H: a waiting instant reserves no overlap place.
        if draft.waiting and len(draft.active) >= draft.limit:
            for instant in draft.waiting:
                if reason is None:
                    self.record(draft.schedule_id, instant, "skipped-overlap")
                else:
                    self.record(draft.schedule_id, instant, "superseded", reason=reason)
            draft.waiting = ()

    def admit(
        self,
        draft: _ScheduleDraft,
        instant: datetime,
        origin: Origin = "schedule",
        request: int | None = None,
    ) -> None:
        definition = draft.definition
        self.commands.append(
            AdmitOccurrence(
                schedule_id=draft.schedule_id,
                instant=instant,
                revision=draft.revision,
                deployment_id=definition.deployment_id,
                inputs=resolve_inputs(definition, draft.revision, instant)
                if definition.inputs
                else {},
                max_steps=definition.max_steps,
                origin=origin,
                request=request,
            )
        )
        draft.active = draft.active.with_run(instant, _IN_FLIGHT[origin])
        self.slots_in_use += 1

    # --- phase 4: fill free slots, oldest first (rule F) ----------------------

    def fill_slots(self) -> None:
        # rule F: freed slots go to the oldest queued candidate first.
        while self.slots_in_use < self.capacity and self.slot_queue:
            instant, schedule_id = self.slot_queue.pop()
            schedule = self.current(schedule_id)
            if schedule is None or schedule.queued != instant:
                continue
            draft = self.draft(schedule_id)
            draft.queued = None
            self.queue_live -= 1
            if _slot_candidate(draft) != instant:
                continue
            if draft.latest:
                draft.held = None
            else:
                draft.waiting = draft.waiting[1:]
            self.admit(draft, instant)  # rule E
            self.decide_waiting_when_overlap_full(draft)  # rule H
            self.reindex(draft)

    def advance_backfills(self) -> None:
        """Admit the next instant of each running backfill that has room
        (rule Q): at most one per schedule per call, only into a slot left
        free once the queued candidates had theirs, within the overlap
        places."""
        for schedule_id in sorted(self.backfilling):
            draft = self.draft(schedule_id)
            backfill = draft.backfill
            if backfill is None or backfill.state != "running" or not backfill.remaining:
                self.backfilling.discard(schedule_id)
                continue
            if draft.paused or draft.blocked is not None:
                continue  # rule Q: it waits for the resume (or the repair)
            if self.slots_in_use >= self.capacity or self.live_candidate_waits():
                return  # no slot for anyone this call
            if backfill.overlap == "allow":
                active = sum(1 for run in draft.active.values() if run.origin == "backfill")
            else:
                active = len(draft.active)
            if active >= draft.limit:
                continue
            instant = backfill.remaining[0]
            self.admit(draft, instant, "backfill")
            draft.backfill = backfill.admitting(self.now)
            if draft.backfill.state != "running":
                self.backfilling.discard(schedule_id)
            self.decide_waiting_when_overlap_full(draft)  # rule H
            self.reindex(draft)

    def live_candidate_waits(self) -> bool:
        """True when a scheduled instant still waits for a slot (it goes first):
        a slot is free but not for an instant after every queued one."""
        return not self.slot_free_for(_AFTER_EVERY_INSTANT, "")

    def slot_free_for(self, instant: datetime, schedule_id: str) -> bool:
        """True when `instant` may take a slot now: one is free and no live
        candidate with an older instant is queued for it."""
        if self.slots_in_use >= self.capacity:
            return False
        # rule F: free slots go to the oldest waiting instant across
        # schedules, so a newer on-time instant must not jump the queue.
        own_key = (instant, schedule_id)
        while self.slot_queue:
            top = self.slot_queue.peek()
            assert top is not None
            if top >= own_key:
                return True
            queued_at, other_id = top
            other = self.current(other_id)
            assert other is not None  # schedules are never removed
            if other.queued == queued_at:
                if other_id != schedule_id and _slot_candidate(other) == queued_at:
                    return False
                self.draft(other_id).queued = None
                self.queue_live -= 1
            self.slot_queue.pop()
        return True

    # --- phase 5: finish and persist (rules M, I) -----------------------------

    def finish(self) -> SchedulerState:
        self.trim_due_top()
        if self.due_index.size > 2 * self.due_live + _COMPACT_SLACK:
            live = {
                key
                for key in self.due_index
                if (schedule := self.current(key[1])) and schedule.due == key[0]
            }
            self.due_index = KeyHeap.of(live).edit()
            self.due_live = len(live)
        if self.slot_queue.size > 2 * self.queue_live + _COMPACT_SLACK:
            live = {
                key
                for key in self.slot_queue
                if (schedule := self.current(key[1])) and schedule.queued == key[0]
            }
            self.slot_queue = KeyHeap.of(live).edit()
            self.queue_live = len(live)
        schedules = self.given_state.schedules
        if self.drafts:
            evolver = schedules.evolver()
            for schedule_id, draft in self.drafts.items():
                # rule I: a blocked schedule's files stay as they were found: a
                # fresh runtime record would hide the damage from the next
                # start. rule M: persisting here, last, puts the runtime
                # record after every row of the call.
                if draft.blocked is None and self.persisted[schedule_id] != (
                    draft.watermark,
                    draft.held,
                    draft.waiting,
                    draft.backfill,
                ):
                    self.persist(draft)
                evolver[schedule_id] = draft.freeze()
            schedules = evolver.persistent()
        return SchedulerState(
            max_concurrent_runs=self.capacity,
            schedules=schedules,
            slots_in_use=self.slots_in_use,
            last_now=self.now,
            due_index=self.due_index.freeze(),
            due_live=self.due_live,
            slot_queue=self.slot_queue.freeze(),
            queue_live=self.queue_live,
            backfilling=pset(self.backfilling),
        )

    def persist(self, draft: _ScheduleDraft) -> None:
        # rule M: called from `finish` only, so the runtime record follows
        # every row it depends on.
        runtime: _RuntimeRecord = (draft.watermark, draft.held, draft.waiting, draft.backfill)
        self.commands.append(
            PersistRuntime(
                schedule_id=draft.schedule_id,
                watermark=runtime[0],
                held=runtime[1],
                waiting=runtime[2],
                backfill=runtime[3],
            )
        )
        self.persisted[draft.schedule_id] = runtime

    def trim_due_top(self) -> None:
        # Keep the top entry live so `next_wakeup` reads it in O(1).
        while self.due_index:
            top = self.due_index.peek()
            assert top is not None
            schedule = self.current(top[1])
            if schedule is not None and schedule.due == top[0]:
                return
            self.due_index.pop()

    # --- schedules: drafts, misuse, ignored reports ---------------------------

    def current(self, schedule_id: str) -> _DraftOrState | None:
        draft = self.drafts.get(schedule_id)
        return draft if draft is not None else _schedule_in(self.given_state.schedules, schedule_id)

    def draft_for_event(self, schedule_id: str, event: Event) -> _ScheduleDraft:
        draft = self.drafts.get(schedule_id)
        if draft is not None:
            return draft
        schedule = _schedule_in(self.given_state.schedules, schedule_id)
        if schedule is None:
            raise CoreMisuse(
                f"cannot apply {type(event).__name__} {event!r}: schedule {schedule_id!r} "
                f"is unknown to this state ({len(self.given_state.schedules)} schedules)",
                data={"schedule_id": schedule_id, "event": type(event).__name__},
            )
        return self._start_draft(schedule)

    def _start_draft(self, schedule: ScheduleState) -> _ScheduleDraft:
        draft = _ScheduleDraft.of(schedule)
        self.drafts[schedule.schedule_id] = draft
        self.persisted[schedule.schedule_id] = (
            schedule.watermark,
            schedule.held,
            schedule.waiting,
            schedule.backfill,
        )
        return draft

    def draft(self, schedule_id: str) -> _ScheduleDraft:
        draft = self.drafts.get(schedule_id)
        return (
            draft
            if draft is not None
            else self._start_draft(self.given_state.schedules[schedule_id])
        )

    def misuse(self, event: Event, draft: _ScheduleDraft, detail: str) -> CoreMisuse:
        return CoreMisuse(
            f"cannot apply {type(event).__name__} {event!r} to schedule {draft.schedule_id!r} "
            f"({draft.describe()}): {detail}",
            data={"schedule_id": draft.schedule_id, "event": type(event).__name__},
        )

    def ignore_report(self, event: Event, draft: _ScheduleDraft, detail: str) -> None:
        self.commands.append(
            LogWarning(
                message=f"ignored {type(event).__name__} {event!r} for schedule "
                f"{draft.schedule_id!r} ({draft.describe()}): {detail}"
            )
        )

    # --- history rows ---------------------------------------------------------

    def record(
        self,
        schedule_id: str,
        instant: datetime,
        status: OccurrenceStatus,
        *,
        run_id: str | None = None,
        reason: str | None = None,
        origin: Origin = "schedule",
        request: int | None = None,
    ) -> None:
        self.commands.append(
            RecordOccurrence(
                schedule_id=schedule_id,
                instant=instant,
                status=status,
                run_id=run_id,
                reason=reason,
                origin=origin,
                request=request,
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

    def supersede_all(self, draft: _ScheduleDraft, reason: str) -> None:
        """Drop the held candidate and waiting instants, oldest row first."""
        # rule A (pause, delete): they cannot run any more, and each needs its
        # row so that no instant goes undecided.
        dropped = sorted((*draft.waiting, *((draft.held,) if draft.held is not None else ())))
        for instant in dropped:
            self.record(draft.schedule_id, instant, "superseded", reason=reason)
        draft.held = None
        draft.waiting = ()

    # --- indexes --------------------------------------------------------------

    def reindex(self, draft: _ScheduleDraft) -> None:
        """Enter the schedule's current due time and slot candidate in the indexes."""
        due = _due_time(draft)
        if due != draft.due:
            if draft.due is not None:
                self.due_live -= 1
            if due is not None:
                self.due_index.push((due, draft.schedule_id))
                self.due_live += 1
            draft.due = due
        candidate = _slot_candidate(draft)
        if candidate is not None and candidate != draft.queued:
            if draft.queued is not None:
                self.queue_live -= 1
            self.slot_queue.push((candidate, draft.schedule_id))
            self.queue_live += 1
            draft.queued = candidate


_Handler: TypeAlias = Callable[[_Decider, Any], None]


# The transition table: which handler applies each kind of event.
_HANDLERS: Final[dict[type[Event], _Handler]] = {
    ScheduleCreated: _Decider.on_created,
    ScheduleUpdated: _Decider.on_updated,
    SchedulePaused: _Decider.on_paused,
    ScheduleResumed: _Decider.on_resumed,
    ScheduleDeleted: _Decider.on_deleted,
    ScheduleTriggered: _Decider.on_triggered,
    BackfillRequested: _Decider.on_backfill_requested,
    BackfillCancelled: _Decider.on_backfill_cancelled,
    OccurrenceAdmitted: _Decider.on_admitted,
    PreflightFailed: _Decider.on_preflight_failed,
    RunStatusChanged: _Decider.on_run_status,
    CapacityChanged: _Decider.on_capacity,
    ScheduleRecovered: _Decider.on_recovered,
    RecordsContradicted: _Decider.on_contradicted,
}


class _ScheduleDraft:
    """A mutable copy of one `ScheduleState`, private to one `decide` call.

    Field for field the same as `ScheduleState` (`of` spells the copy out,
    `freeze` reads the draft by the state's field names: both are on the hot
    path); `tests/unit/test_decide_work.py` fails when the two drift apart.
    """

    __slots__ = (
        "active",
        "allowance",
        "backfill",
        "blocked",
        "created_at",
        "definition",
        "deleted",
        "due",
        "held",
        "last_trigger",
        "last_trigger_request",
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
    backfill: Backfill | None
    last_trigger: datetime | None
    last_trigger_request: int | None

    @classmethod
    def of(cls, schedule: ScheduleState) -> _ScheduleDraft:
        draft = cls()
        draft.schedule_id = schedule.schedule_id
        draft.definition = schedule.definition
        draft.revision = schedule.revision
        draft.trigger = schedule.trigger
        draft.created_at = schedule.created_at
        draft.watermark = schedule.watermark
        draft.next_instant = schedule.next_instant
        draft.held = schedule.held
        draft.waiting = schedule.waiting
        draft.active = schedule.active
        draft.paused = schedule.paused
        draft.deleted = schedule.deleted
        draft.blocked = schedule.blocked
        draft.due = schedule.due
        draft.queued = schedule.queued
        draft.latest = schedule.latest
        draft.limit = schedule.limit
        draft.allowance = schedule.allowance
        draft.backfill = schedule.backfill
        draft.last_trigger = schedule.last_trigger
        draft.last_trigger_request = schedule.last_trigger_request
        return draft

    @classmethod
    def fresh(
        cls,
        definition: ScheduleDefinition,
        revision: int,
        created_at: datetime,
        watermark: datetime,
    ) -> _ScheduleDraft:
        draft = cls()
        draft.schedule_id = definition.schedule_id
        draft.created_at = created_at
        draft.watermark = watermark
        draft.held = None
        draft.waiting = ()
        draft.active = NO_RUNS
        draft.paused = False
        draft.deleted = False
        draft.blocked = None
        draft.due = None
        draft.queued = None
        draft.backfill = None
        draft.last_trigger = None
        draft.last_trigger_request = None
        draft.set_definition(definition, revision)
        return draft

    def set_definition(self, definition: ScheduleDefinition, revision: int) -> None:
        self.definition = definition
        self.revision = revision
        self.trigger = compile_trigger(definition.trigger)
        self.latest = definition.misfire == "latest"
        self.limit = definition.active_run_limit
        self.allowance = timedelta(seconds=definition.lateness_allowance_s)
        self.next_instant = _next_after(self.trigger, self.watermark)

    def freeze(self) -> ScheduleState:
        # Every field in order, by position: `ScheduleState`'s `fast_init`
        # sets them through the slots' descriptors (two schedules frozen per
        # occurrence, 21 fields each).
        return ScheduleState(*_draft_fields(self))

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
        active = ", ".join(
            f"{_iso(instant)}={run.status}" for instant, run in sorted(self.active.items())
        )
        return (
            f"revision {self.revision}, {'/'.join(flags) or 'live'}, "
            f"watermark {_iso(self.watermark)}, active runs [{active}]"
        )


_DraftOrState: TypeAlias = _ScheduleDraft | ScheduleState

# What `_ScheduleDraft.freeze` reads, field for field in `ScheduleState`'s order.
_draft_fields: Final = attrgetter(*(f.name for f in fields(ScheduleState)))


def _due_time(schedule: _DraftOrState) -> datetime | None:
    """When the schedule next needs `decide` on its own (None: only events wake it)."""
    # rules A, I: nothing of a paused, deleted or blocked schedule is due.
    if schedule.paused or schedule.deleted or schedule.blocked is not None:
        return None
    due = schedule.next_instant
    if schedule.waiting:
        # rule D: wake when the oldest waiting instant turns late, so (B)
        # decides it then rather than at some later event.
        late = schedule.waiting[0] + schedule.allowance + _ONE_MICROSECOND
        if due is None or late < due:
            due = late
    return due


def _slot_candidate(schedule: _DraftOrState) -> datetime | None:
    """The instant the schedule would admit next if a slot were free, if any."""
    if (
        schedule.paused
        or schedule.deleted
        or schedule.blocked is not None
        or len(schedule.active) >= schedule.limit
    ):
        return None
    # rule D: under "latest" the held candidate waits; under "skip" the oldest
    # waiting instant does (the FIFO keeps the rows in instant order).
    if schedule.latest:
        return schedule.held
    return schedule.waiting[0] if schedule.waiting else None


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


def _iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _checked_utc(value: object, name: str) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise CoreMisuse(f"{name} must be a timezone-aware datetime, got {value!r}")
    return value if value.tzinfo is UTC else value.astimezone(UTC)
