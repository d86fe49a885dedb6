"""A state machine drives decide through the shell model with random clock
steps, run outcomes, pauses, resumes, edits, deletes, capacity changes,
preflight failures, crashes and restarts, and checks after every step:

- every trigger instant of a live span (after creation, outside paused spans,
  before deletion) that is at or below the watermark ends in exactly one
  terminal row, or is still open (held, waiting for a slot, or an active run);
  no instant ever gets two decision rows or two terminal rows;
- no row names an instant outside a live span (nothing before a creation,
  update or resume watermark, nothing inside a paused span, is decided);
- a schedule that admitted never has more active runs than its limit, and
  slot-holding scheduled runs never exceed `max_concurrent_runs`;
- the state's structural invariants (one held candidate at most, indexes
  consistent, everything due settled);
- decide never mutates its inputs and the same inputs give the same outputs.

Every event is stamped by the machine's clock, stepped back or not, as the
shell stamps it with its own: a schedule created, edited or resumed while the
clock is behind (rule L).

Operators trigger schedules and backfill past ranges (cancelling some) in
between: no instant of a schedule is ever admitted twice, whatever opened
it; a backfill only admits calendar instants; every trigger and backfill
occurrence is decided once and ends once; only a trigger may go beyond the
slot bound, and only a request with `overlap="allow"` beyond a schedule's
overlap limit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from core.calendar import CompiledTrigger, compile_trigger
from core.decide import decide
from core.errors import SchedulingError
from core.events import (
    BackfillCancelled,
    BackfillRequested,
    CapacityChanged,
    Event,
    ScheduleCreated,
    ScheduleDeleted,
    SchedulePaused,
    ScheduleResumed,
    ScheduleTriggered,
    ScheduleUpdated,
)
from core.occurrences import DECISION_STATUSES, TERMINAL_STATUSES
from core.state import SchedulerState, schedule_view
from tests.property.invariants import check_state, describe_state
from tests.property.shell_model import Row, ShellModel
from tests.property.strategies import BASE, clock_steps, definitions

_TICK = timedelta(microseconds=1)
NEXT_STATUS = {
    "admitted": ("running", "completed", "failed", "interrupted"),
    "running": ("interrupted", "completed", "failed", "exhausted", "running"),
    "interrupted": ("running", "completed", "failed"),
}


@dataclass
class Span:
    start: datetime
    end: datetime | None
    trigger: CompiledTrigger

    def holds(self, instant: datetime) -> bool:
        return self.start < instant and (self.end is None or instant <= self.end)


def spans(
    delivered: Sequence[Event], watermarks_before: Mapping[int, datetime]
) -> dict[str, list[Span]]:
    """The live spans of every schedule, from the lifecycle decide has seen.
    A span ends where its change landed: at the change, or after the
    instants decided before it when a clock stepped back stamped the change
    earlier (`ShellModel.watermarks_before`)."""
    result: dict[str, list[Span]] = {}
    triggers: dict[str, CompiledTrigger] = {}
    paused: set[str] = set()
    deleted: set[str] = set()
    for event in delivered:
        if isinstance(event, ScheduleCreated):
            sid = event.definition.schedule_id
            triggers[sid] = compile_trigger(event.definition.trigger)
            result[sid] = [Span(event.at, None, triggers[sid])]
            continue
        sid = (
            event.definition.schedule_id
            if isinstance(event, ScheduleUpdated)
            else event.schedule_id
        )  # type: ignore[attr-defined]
        live = result[sid]
        is_open = live and live[-1].end is None
        landed = max(event.at, watermarks_before.get(id(event), event.at))  # type: ignore[attr-defined]
        if isinstance(event, ScheduleUpdated):
            triggers[sid] = compile_trigger(event.definition.trigger)
            if is_open:
                live[-1].end = max(landed, live[-1].start)
                live.append(Span(live[-1].end, None, triggers[sid]))
        elif isinstance(event, SchedulePaused) and sid not in paused:
            paused.add(sid)
            if is_open:
                live[-1].end = max(landed, live[-1].start)
        elif isinstance(event, ScheduleResumed) and sid in paused:
            paused.discard(sid)
            if sid not in deleted:
                live.append(Span(max(event.at, live[-1].end or event.at), None, triggers[sid]))
        elif isinstance(event, ScheduleDeleted) and sid not in deleted:
            deleted.add(sid)
            if is_open:
                live[-1].end = max(landed, live[-1].start)
    return result


class HistoryChecker:
    """Checks the model's history against the live spans, incrementally."""

    def __init__(self, model: ShellModel) -> None:
        self.model = model
        self.seen = 0
        self.decisions: Counter[tuple[str, datetime]] = Counter()
        self.terminals: Counter[tuple[str, datetime]] = Counter()
        # Operators' occurrences, by (origin, schedule, instant).
        self.operator_decisions: Counter[tuple[str, str, datetime]] = Counter()
        self.operator_terminals: Counter[tuple[str, str, datetime]] = Counter()
        # Admissions by (schedule, instant), whatever opened them.
        self.admissions: Counter[tuple[str, datetime]] = Counter()
        # Every trigger a schedule ever had (a backfill plans its instants).
        self.triggers: dict[str, list[CompiledTrigger]] = {}
        self.checked: dict[str, datetime] = {}
        self.open: set[tuple[str, datetime]] = set()

    def check(self) -> None:
        live = spans(self.model.delivered, self.model.watermarks_before)
        for sid, sid_spans in live.items():
            self.triggers[sid] = [span.trigger for span in sid_spans]
        rows = self.model.rows
        for row in rows[self.seen :]:
            if row.status == "admitted":
                self.admissions[(row.schedule_id, row.instant)] += 1
                assert self.admissions[(row.schedule_id, row.instant)] == 1, (
                    f"admitted twice: {row}"
                )
            if row.origin == "schedule":
                self._row(row, live.get(row.schedule_id, []))
            else:
                self._operator_row(row)
        self.seen = len(rows)
        state = self.model.state
        for key in sorted(self.open):
            if self.terminals[key] == 1:
                self.open.discard(key)
            else:
                assert self._is_open(state, *key), f"{key} was open and vanished"
        for sid, sid_spans in live.items():
            if sid not in state.schedules:
                continue
            watermark = state.schedules[sid].watermark
            since = self.checked.get(sid)
            for span in sid_spans:
                start = span.start if since is None else max(span.start, since)
                upto = watermark if span.end is None else min(span.end, watermark)
                instant = span.trigger.next_after(start)
                while instant is not None and instant <= upto:
                    key = (sid, instant)
                    if self.terminals[key] != 1:
                        assert self._is_open(state, sid, instant), (
                            f"{sid} {instant} <= watermark {watermark} is undecided\n"
                            + describe_state(state)
                        )
                        self.open.add(key)
                    instant = span.trigger.next_after(instant)
            self.checked[sid] = max(watermark, since or watermark)

    def _row(self, row: Row, sid_spans: list[Span]) -> None:
        span = next((s for s in sid_spans if s.holds(row.instant)), None)
        assert span is not None, f"row outside every live span: {row}"
        if row.count == 1:
            instants = [row.instant]
        else:
            assert row.first_instant is not None and row.last_instant == row.instant
            assert span.holds(row.first_instant), row
            instants = []
            instant = span.trigger.next_after(row.first_instant - _TICK)
            while instant is not None and instant <= row.instant:
                instants.append(instant)
                instant = span.trigger.next_after(instant)
            assert len(instants) == row.count, (row, instants)
        for instant in instants:
            assert span.trigger.next_after(instant - _TICK) == instant, f"not an instant: {row}"
            key = (row.schedule_id, instant)
            if row.status in DECISION_STATUSES:
                self.decisions[key] += 1
                assert self.decisions[key] == 1, f"decided twice: {row}"
            elif row.status != "pending":
                assert self.decisions[key] == 1, f"run row without admission: {row}"
            if row.status in TERMINAL_STATUSES:
                self.terminals[key] += 1
                assert self.terminals[key] == 1, f"two terminal rows: {row}"

    def _operator_row(self, row: Row) -> None:
        key = (row.origin, row.schedule_id, row.instant)
        if row.status in DECISION_STATUSES:
            self.operator_decisions[key] += 1
            assert self.operator_decisions[key] == 1, f"decided twice: {row}"
            assert row.count == 1, row
        else:
            assert self.operator_decisions[key] == 1, f"run row without admission: {row}"
        if row.status in TERMINAL_STATUSES:
            self.operator_terminals[key] += 1
            assert self.operator_terminals[key] == 1, f"two terminal rows: {row}"
        if row.origin == "backfill":
            assert any(
                trigger.next_after(row.instant - _TICK) == row.instant
                for trigger in self.triggers.get(row.schedule_id, [])
            ), f"a backfill admitted what is not a calendar instant: {row}"

    def _is_open(self, state: SchedulerState, sid: str, instant: datetime) -> bool:
        s = state.schedules[sid]
        if s.held == instant or instant in s.waiting:
            return self.decisions[(sid, instant)] == 0
        if instant in s.active:
            return self.decisions[(sid, instant)] == 1
        return False


class DecideMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.model = ShellModel(capacity=2, observer=self.observe)
        self.clock = BASE
        self.checker = HistoryChecker(self.model)
        self.counter = 0
        # Schedules an operator's request with overlap="allow" was sent to.
        self.allowed: set[str] = set()

    # --- purity ---------------------------------------------------------------

    def observe(self, state: SchedulerState, now: datetime, events: Sequence[Event]) -> None:
        before = (repr(state), repr(events))
        try:
            first = decide(state, now, events)
        except SchedulingError as error:
            raise AssertionError(f"the model sent something decide refused: {error}") from error
        second = decide(state, now, events)
        assert first == second, "the same inputs gave different outputs"
        assert (repr(state), repr(events)) == before, "decide mutated its inputs"

    # --- helpers ------------------------------------------------------------------

    def live_ids(self) -> list[str]:
        return sorted(sid for sid, s in self.model.schedules.items() if not s.deleted)

    def step(self, events: Sequence[Event] = ()) -> None:
        self.model.step(self.clock, events)

    # --- rules --------------------------------------------------------------------

    @initialize(capacity=st.integers(1, 3))
    def start(self, capacity: int) -> None:
        self.model.capacity = capacity
        self.model.step(self.clock, [CapacityChanged(max_concurrent_runs=capacity)])

    @precondition(lambda self: len(self.model.schedules) < 4)
    @rule(data=st.data())
    def create(self, data: st.DataObject) -> None:
        self.counter += 1
        definition = data.draw(definitions(f"s{self.counter}", self.clock))
        self.step([ScheduleCreated(definition=definition, at=self.clock)])

    @rule(delta=clock_steps)
    def advance(self, delta: timedelta) -> None:
        self.clock += delta
        self.step()

    # A few seconds of drift, and NTP correcting a clock that ran fast by
    # most of an hour or more: instants the clock passes again, and (for a
    # schedule created, edited or resumed then) instants it reaches first.
    @rule(
        delta=st.sampled_from(
            [timedelta(seconds=5), timedelta(minutes=3), timedelta(minutes=40), timedelta(hours=2)]
        )
    )
    def clock_steps_back(self, delta: timedelta) -> None:
        self.clock -= delta
        self.step()

    @rule(data=st.data())
    def run_progress(self, data: st.DataObject) -> None:
        active = [
            (sid, instant, run.status)
            for sid, s in sorted(self.model.state.schedules.items())
            for instant, run in s.active.items()
            if (sid, instant) in self.model.runs
        ]
        if not active:
            return
        sid, instant, status = data.draw(st.sampled_from(active))
        target = data.draw(st.sampled_from(NEXT_STATUS[status]))
        self.step([self.model.report(sid, instant, target, f"went {target}")])  # type: ignore[arg-type]

    @rule(data=st.data(), kind=st.sampled_from(["pause", "resume", "delete", "update"]))
    def lifecycle(self, data: st.DataObject, kind: str) -> None:
        ids = self.live_ids()
        if not ids:
            return
        sid = data.draw(st.sampled_from(ids))
        event: Event
        if kind == "pause":
            event = SchedulePaused(schedule_id=sid, at=self.clock)
        elif kind == "resume":
            event = ScheduleResumed(schedule_id=sid, at=self.clock)
        elif kind == "delete":
            event = ScheduleDeleted(schedule_id=sid, at=self.clock)
        else:
            stored = self.model.schedules[sid]
            event = ScheduleUpdated(
                definition=data.draw(definitions(sid, self.clock)),
                revision=stored.revision + 1,
                at=self.clock,
            )
        self.step([event])

    @rule(data=st.data(), allow=st.booleans())
    def trigger(self, data: st.DataObject, allow: bool) -> None:
        ids = self.live_ids()
        if not ids:
            return
        sid = data.draw(st.sampled_from(ids))
        if allow:
            self.allowed.add(sid)
        self.step(
            [ScheduleTriggered(schedule_id=sid, at=self.clock, overlap="allow" if allow else None)]
        )

    @rule(
        data=st.data(),
        back=st.sampled_from([timedelta(hours=1), timedelta(hours=6), timedelta(days=1)]),
        allow=st.booleans(),
    )
    def backfill(self, data: st.DataObject, back: timedelta, allow: bool) -> None:
        ids = self.live_ids()
        if not ids:
            return
        sid = data.draw(st.sampled_from(ids))
        running = self.model.state.schedules[sid].backfill
        if running is not None and running.state == "running":
            return  # the API refuses a second one
        if allow:
            self.allowed.add(sid)
        start = self.clock - back - timedelta(hours=2)
        self.step(
            [
                BackfillRequested(
                    schedule_id=sid,
                    at=self.clock,
                    start=start,
                    end=self.clock,
                    overlap="allow" if allow else None,
                )
            ]
        )

    @rule(data=st.data())
    def cancel_backfill(self, data: st.DataObject) -> None:
        ids = self.live_ids()
        if ids:
            sid = data.draw(st.sampled_from(ids))
            self.step([BackfillCancelled(schedule_id=sid, at=self.clock)])

    @rule(capacity=st.integers(1, 3))
    def capacity(self, capacity: int) -> None:
        self.model.capacity = capacity
        self.step([CapacityChanged(max_concurrent_runs=capacity)])

    @rule(data=st.data())
    def preflight_fails_next(self, data: st.DataObject) -> None:
        ids = self.live_ids()
        if ids:
            self.model.reject_next[data.draw(st.sampled_from(ids))] = "deployment is gone"

    @rule(
        data=st.data(),
        delta=clock_steps,
        crash_after=st.none() | st.integers(0, 6),
        partial=st.sampled_from([None, "row", "created"]),
        pause_first=st.booleans(),
        corrupt=st.booleans(),
    )
    def restart(
        self,
        data: st.DataObject,
        delta: timedelta,
        crash_after: int | None,
        partial: str | None,
        pause_first: bool,
        corrupt: bool,
    ) -> None:
        ids = self.live_ids()
        if crash_after is not None:
            # The process dies while carrying out a step's commands.
            self.clock += delta
            events: list[Event] = []
            if pause_first and ids:
                events.append(
                    SchedulePaused(schedule_id=data.draw(st.sampled_from(ids)), at=self.clock)
                )
            self.model.step(self.clock, events, crash_after=crash_after, partial=partial)  # type: ignore[arg-type]
        self.clock += timedelta(minutes=2)
        contradicted = {}
        if corrupt and ids:
            contradicted[data.draw(st.sampled_from(ids))] = ("history.jsonl", "line 9", "backwards")
        self.model.restart(self.clock, contradicted=contradicted)

    # --- checks -------------------------------------------------------------------

    @invariant()
    def state_is_valid(self) -> None:
        check_state(self.model.state)

    @invariant()
    def history_is_exactly_once(self) -> None:
        self.checker.check()

    @invariant()
    def limits_hold_when_admitting(self) -> None:
        admitted = self.model.take_admissions()
        if not admitted:
            return
        terminal = {
            (r.origin, r.schedule_id, r.instant)
            for r in self.model.rows
            if r.status in TERMINAL_STATUSES
        }
        origin_of = {
            (r.schedule_id, r.instant): r.origin for r in self.model.rows if r.status == "admitted"
        }
        if all(origin_of.get(key) == "trigger" for key in admitted):
            # A trigger starts whatever the slots hold (rule P): the bound is
            # what other admissions wait for, even once capacity was lowered
            # below what already runs.
            return
        # Only a trigger may start with every slot taken (rule P).
        holding = [
            run
            for key, run in self.model.runs.items()
            if (origin_of.get(key, "schedule"), *key) not in terminal
            and origin_of.get(key) != "trigger"
            and run.status in ("admitted", "running")
            and not run.interrupted_once
        ]
        assert len(holding) <= self.model.capacity, (len(holding), self.model.capacity)
        state = self.model.state
        for sid in {sid for sid, _ in admitted}:
            active = [
                (r.origin, r.instant)
                for r in self.model.rows
                if r.schedule_id == sid
                and r.status == "admitted"
                and (r.origin, sid, r.instant) not in terminal
            ]
            limit = state.schedules[sid].limit
            backfill_runs = [instant for origin, instant in active if origin == "backfill"]
            assert len(backfill_runs) <= limit, (sid, active, limit)
            if sid in self.allowed:
                continue  # an operator overrode the overlap policy
            assert len(active) <= limit, (sid, active, limit)
            assert len(schedule_view(state, sid).active) <= limit


TestDecideMachine = DecideMachine.TestCase
TestDecideMachine.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
