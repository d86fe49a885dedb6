"""The simulation engine: the real `decide` on a virtual clock, in memory.

Theory of operation. The engine keeps the core's state and three queues of
future happenings: the scenario's timeline (schedule creations and operator
actions, in time order), the simulated runs' status changes (a heap), and the
downtime windows. Time never ticks: after each `decide` call the clock jumps
to the earliest of the core's `next_wakeup`, the next run change, the next
timeline entry and the end of the horizon. A jump that lands inside a
downtime window lands at the window's end instead, so the first call after
an outage sees the whole gap at once, together with every operator action
and run change that happened during it (each carries its own instant).

Commands are carried out the way the service would, without disk or server:
`AdmitOccurrence` runs the preflight (it fails only while the scenario marks
the deployment missing), then gives the occurrence a `run-000001`-style id
and a plan drawn from the schedule's run model; `OccurrenceAdmitted` and the
run's status changes come back to `decide` as events. Everything that
follows from one call at `now` (admissions, zero-length runs, freed slots)
is fed back at the same `now` before the clock moves.

Operator requests (rules P and Q) are delivered like the other actions, at
their instant: a trigger as `ScheduleTriggered`, a backfill as
`BackfillRequested`, a cancellation as `BackfillCancelled`. The service
reads a backfill's `decided` instants from its history when it delivers the
request; the engine keeps, per schedule, the instants that answer that
question (admitted by the calendar, whatever the run became, or by a
backfill) but only those inside the range of a backfill still to come, so
it stays bounded by the scenario's ranges. Admissions of any origin become
runs alike; rows and the summary name the origin.

Rows are settled as described in `output.py` and handed to a sink at once;
the engine keeps only open occurrences (active runs), so memory does not grow
with the horizon.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, Final

from adapters.simulation.output import Row, RowSink, SummaryBuilder, iso
from adapters.simulation.runmodel import RunModel
from adapters.simulation.scenario import OperatorEvent, Scenario, ScenarioSchedule
from core.calendar import CompiledTrigger, compile_trigger
from core.commands import (
    AdmitOccurrence,
    BlockSchedule,
    Command,
    LogWarning,
    PersistRuntime,
    RecordOccurrence,
)
from core.decide import decide, next_wakeup
from core.definitions import CronTrigger, ScheduleDefinition
from core.errors import CoreMisuse
from core.events import (
    BackfillCancelled,
    BackfillRequested,
    Event,
    OccurrenceAdmitted,
    PreflightFailed,
    RunStatusChanged,
    ScheduleCreated,
    ScheduleDeleted,
    SchedulePaused,
    ScheduleResumed,
    ScheduleTriggered,
    ScheduleUpdated,
)
from core.occurrences import TERMINAL_RUN_STATUSES, Origin, RunStatus
from core.operator_actions import backfill_to_payload
from core.state import SchedulerState, initial_state, schedule_view

__all__ = ["RunChangeObserver", "SimulationResult", "header", "simulate"]

# Told of every status change of a simulated run: (schedule_id, instant,
# status, at). The plot uses it to draw interrupted spans, which rows omit.
RunChangeObserver = Callable[[str, datetime, RunStatus, datetime], None]

# Rows the engine writes itself: runs (it follows its own) and preflight
# rejections (the shell's row, as in the service).
_RECORDED_BY_ENGINE: Final = frozenset(
    {"admitted", "running", "interrupted", "completed", "failed", "exhausted", "preflight-rejected"}
)
# A runaway guard: the most `decide` calls at one instant before the engine
# concludes the core keeps asking for attention without progress.
_MAX_CALLS_PER_INSTANT: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class SimulationResult:
    """What a finished simulation reports besides its rows."""

    summary: dict[str, Any]
    decide_calls: int
    warnings: tuple[str, ...]


@dataclass(slots=True)
class _OpenRun:
    schedule_id: str
    instant: datetime
    run_id: str
    start: datetime
    status: RunStatus
    origin: Origin
    local: str
    dst: str | None


@dataclass(frozen=True, slots=True)
class _Timed:
    """A timeline entry: a creation (`schedule`) or an operator action (`event`)."""

    at: datetime
    schedule: ScenarioSchedule | None
    event: OperatorEvent | None


class _Presenter:
    """Turns an instant of a schedule into its local text and DST note, using
    the definition that produced the instant (an update may change the zone)."""

    def __init__(self, scenario: Scenario) -> None:
        self._by_schedule: dict[str, list[tuple[datetime, CompiledTrigger | None]]] = {}
        for schedule in scenario.schedules:
            self._by_schedule[schedule.schedule_id] = [
                (schedule.created_at, _compiled_cron(schedule.definition))
            ]
        for event in scenario.events:
            if event.definition is not None:
                self._by_schedule[event.schedule_id].append(
                    (event.at, _compiled_cron(event.definition))
                )

    def describe(
        self,
        schedule_id: str,
        instant: datetime,
        *,
        as_of: datetime | None = None,
        calendar: bool = True,
    ) -> tuple[str, str | None]:
        """`instant`'s local text and DST note. A calendar instant is told by
        the definition that produced it; with `as_of` (an operator's
        occurrence), by the definition current at that time. `calendar`
        False: the instant is not one of the trigger's (a trigger request),
        so it has no DST note."""
        versions = self._by_schedule[schedule_id]
        trigger = versions[0][1]
        for at, later in versions[1:]:
            # Instants up to an update's time were produced by the older
            # definition; a request at the update's time sees the newer one.
            if (at >= instant) if as_of is None else (at > as_of):
                break
            trigger = later
        if trigger is None:
            return _iso_text(instant), None
        if not calendar:
            return trigger.local(instant).isoformat(), None
        return _describe(trigger, instant)


def _compiled_cron(definition: ScheduleDefinition) -> CompiledTrigger | None:
    trigger = definition.trigger
    return compile_trigger(trigger) if isinstance(trigger, CronTrigger) else None


def _iso_text(instant: datetime) -> str:
    return iso(instant) or ""


# Schedules that share a trigger share its instants: describe each once.
@lru_cache(maxsize=4096)
def _describe(trigger: CompiledTrigger, instant: datetime) -> tuple[str, str | None]:
    return trigger.local(instant).isoformat(), trigger.dst_note(instant)


def header(scenario: Scenario) -> dict[str, Any]:
    """The scenario as the `json` output restates it (for readers of the output)."""
    return {
        "title": scenario.title,
        "description": scenario.description,
        "start": iso(scenario.start),
        "end": iso(scenario.end),
        "max_concurrent_runs": scenario.max_concurrent_runs,
        "schedules": [
            {
                "schedule_id": s.schedule_id,
                "created_at": iso(s.created_at),
                "trigger": s.definition.trigger.model_dump(mode="json"),
                "overlap": s.definition.overlap,
                "max_active_runs": s.definition.max_active_runs,
                "misfire": s.definition.misfire,
                "lateness_allowance_s": s.definition.lateness_allowance_s,
            }
            for s in scenario.schedules
        ],
        "events": [
            {"at": iso(e.at), "action": e.action, "schedule_id": e.schedule_id}
            | ({"revision": e.revision} if e.revision is not None else {})
            | ({"start": iso(e.start), "end": iso(e.end)} if e.action == "backfill" else {})
            | ({"overlap": e.overlap} if e.overlap is not None else {})
            for e in scenario.events
        ],
        "downtime": [{"from": iso(w.start), "to": iso(w.end)} for w in scenario.downtime],
    }


def _timeline(scenario: Scenario) -> list[_Timed]:
    entries = [_Timed(s.created_at, s, None) for s in scenario.schedules]
    entries += [_Timed(e.at, None, e) for e in scenario.events]
    # Stable: a creation precedes actions at the same instant (validation
    # guarantees actions are not before their schedule's creation).
    entries.sort(key=lambda entry: (entry.at, entry.schedule is None))
    return entries


class _DecidedInstants:
    """Per schedule, what the history would answer a backfill request about
    its range (`BackfillRequested.decided`, rule Q): the instants admitted by
    the calendar (a run was created, whatever it became) and those a
    backfill admitted (preflight-rejected ones included).

    Only instants inside the range of a backfill request still to be
    delivered are kept, and a delivered request's range is forgotten, so
    memory is bounded by the scenario's backfill ranges (at most
    `BACKFILL_LIMIT` calendar instants each), never by the horizon.
    """

    __slots__ = ("_kept", "_ranges")

    def __init__(self, events: Iterable[OperatorEvent]) -> None:
        self._ranges: dict[str, list[tuple[datetime, datetime]]] = {}
        for event in events:
            if event.action == "backfill":
                assert event.start is not None and event.end is not None
                self._ranges.setdefault(event.schedule_id, []).append((event.start, event.end))
        self._kept: dict[str, set[datetime]] = {sid: set() for sid in self._ranges}

    def note(self, schedule_id: str, instant: datetime) -> None:
        ranges = self._ranges.get(schedule_id)
        if ranges and _inside(instant, ranges):
            self._kept[schedule_id].add(instant)

    def take(self, schedule_id: str, start: datetime, end: datetime) -> frozenset[datetime]:
        """The decided instants of `[start, end)`, for the request of that
        range being delivered now."""
        kept = self._kept[schedule_id]
        found = frozenset(instant for instant in kept if start <= instant < end)
        ranges = self._ranges[schedule_id]
        ranges.remove((start, end))
        self._kept[schedule_id] = {instant for instant in kept if _inside(instant, ranges)}
        return found


def _inside(instant: datetime, ranges: Sequence[tuple[datetime, datetime]]) -> bool:
    return any(start <= instant < end for start, end in ranges)


class _Engine:
    def __init__(
        self,
        scenario: Scenario,
        sink: RowSink,
        on_progress: Callable[[float], None] | None,
        on_run_change: RunChangeObserver | None = None,
    ) -> None:
        self.scenario = scenario
        self.on_run_change = on_run_change
        self.sink = sink
        self.on_progress = on_progress
        self.presenter = _Presenter(scenario)
        self.models = {s.schedule_id: RunModel(s.run) for s in scenario.schedules}
        self.summary = SummaryBuilder(s.schedule_id for s in scenario.schedules)
        self.state: SchedulerState = initial_state(max_concurrent_runs=scenario.max_concurrent_runs)
        self.open: dict[tuple[str, datetime], _OpenRun] = {}
        self.active_by_schedule: dict[str, int] = dict.fromkeys(self.models, 0)
        self.active_total = 0
        # (time, sequence, schedule_id, instant, status); the sequence keeps
        # changes at one time in the order they were planned.
        self.changes: list[tuple[datetime, int, str, datetime, RunStatus]] = []
        self.sequence = 0
        self.runs_started = 0
        self.calls = 0
        self.warnings: list[str] = []
        self.decided = _DecidedInstants(scenario.events)
        # Schedules whose scenario asks for a backfill (their summary shows it).
        self.backfilled = sorted({e.schedule_id for e in scenario.events if e.action == "backfill"})

    # --- the timeline -------------------------------------------------------

    def to_event(self, entry: _Timed) -> Event:
        if entry.schedule is not None:
            return ScheduleCreated(definition=entry.schedule.definition, at=entry.at, revision=1)
        event = entry.event
        assert event is not None
        sid, at = event.schedule_id, event.at
        if event.action == "pause":
            return SchedulePaused(schedule_id=sid, at=at)
        if event.action == "resume":
            return ScheduleResumed(schedule_id=sid, at=at)
        if event.action == "delete":
            return ScheduleDeleted(schedule_id=sid, at=at)
        if event.action == "trigger":
            return ScheduleTriggered(schedule_id=sid, at=at, overlap=event.overlap)
        if event.action == "backfill":
            assert event.start is not None and event.end is not None
            return BackfillRequested(
                schedule_id=sid,
                at=at,
                start=event.start,
                end=event.end,
                overlap=event.overlap,
                # As the service reads it from the history on delivery.
                decided=self.decided.take(sid, event.start, event.end),
            )
        if event.action == "cancel-backfill":
            return BackfillCancelled(schedule_id=sid, at=at)
        assert event.definition is not None and event.revision is not None
        return ScheduleUpdated(definition=event.definition, revision=event.revision, at=at)

    def check_cancellations(self, events: Sequence[Event]) -> None:
        """Warn of a cancellation that found no running backfill (the API
        refuses it; `decide` ignores it)."""
        for event in events:
            if isinstance(event, BackfillCancelled):
                backfill = schedule_view(self.state, event.schedule_id).backfill
                if (
                    backfill is None
                    or backfill.state != "cancelled"
                    or backfill.ended_at != event.at
                ):
                    self.warnings.append(
                        f"{iso(event.at)}: cancel-backfill of schedule {event.schedule_id}:"
                        " no backfill was running (the API would refuse it)"
                    )

    def describe(self, sid: str, instant: datetime, origin: Origin) -> tuple[str, str | None]:
        """The local text and DST note of an occurrence of `origin`."""
        if origin == "trigger":
            return self.presenter.describe(sid, instant, as_of=instant, calendar=False)
        if origin == "backfill":
            # Planned from the definition current when it was requested.
            backfill = schedule_view(self.state, sid).backfill
            as_of = None if backfill is None else backfill.requested_at
            return self.presenter.describe(sid, instant, as_of=as_of)
        return self.presenter.describe(sid, instant)

    # --- commands ---------------------------------------------------------

    def carry_out(self, commands: Iterable[Command], now: datetime) -> list[Event]:
        feedback: list[Event] = []
        for command in commands:
            if isinstance(command, AdmitOccurrence):
                feedback += self.admit(command, now)
            elif isinstance(command, RecordOccurrence):
                self.record(command)
            elif isinstance(command, PersistRuntime):
                continue  # nothing is durable in a simulation
            elif isinstance(command, LogWarning):
                self.warnings.append(f"{iso(now)}: {command.message}")
            elif isinstance(command, BlockSchedule):
                self.warnings.append(
                    f"{iso(now)}: schedule {command.schedule_id} blocked: {command.diagnostic}"
                )
            else:
                # CreateAdmittedRun and StartRun answer restart recovery,
                # which a simulation never reports.
                raise CoreMisuse(f"simulation cannot carry out {command!r} at {iso(now)}")
        return feedback

    def admit(self, command: AdmitOccurrence, now: datetime) -> list[Event]:
        sid, instant, origin = command.schedule_id, command.instant, command.origin
        local, dst = self.describe(sid, instant, origin)
        if origin == "backfill":
            self.decided.note(sid, instant)  # any backfill row counts (rule Q)
        if self.scenario.deployment_missing(command.deployment_id, now):
            # As in the service, the shell writes the rejected row itself (in
            # command order) and tells decide, which releases the reservation.
            reason = f"deployment {command.deployment_id!r} not found"
            self.emit(
                Row(
                    schedule_id=sid,
                    instant=instant,
                    local_instant=local,
                    status="preflight-rejected",
                    dst=dst,
                    reason=reason,
                    origin=origin,
                )
            )
            return [PreflightFailed(schedule_id=sid, instant=instant, reason=reason)]
        if origin == "schedule":
            self.decided.note(sid, instant)  # admitted, whatever the run becomes
        self.runs_started += 1
        run_id = f"run-{self.runs_started:06d}"
        plan = self.models[sid].next_plan()
        self.open[(sid, instant)] = _OpenRun(
            sid, instant, run_id, now, "admitted", origin, local, dst
        )
        self.active_by_schedule[sid] += 1
        self.active_total += 1
        self.summary.note_active(sid, self.active_by_schedule[sid], self.active_total)
        feedback: list[Event] = [
            OccurrenceAdmitted(schedule_id=sid, instant=instant, run_id=run_id)
        ]
        immediate = True
        for offset, status in plan.changes:
            # Changes at once (the start, a zero-second run) are reported with
            # the admission; later ones wait in the heap for their instant.
            if immediate and offset == 0:
                feedback.append(self.change(sid, instant, status, now))
                continue
            immediate = False
            self.sequence += 1
            at = now + timedelta(seconds=offset)
            heapq.heappush(self.changes, (at, self.sequence, sid, instant, status))
        return feedback

    def record(self, command: RecordOccurrence) -> None:
        if command.status in _RECORDED_BY_ENGINE:
            return
        sid = command.schedule_id
        local, dst = self.describe(sid, command.instant, command.origin)
        grouped = command.count > 1
        self.emit(
            Row(
                schedule_id=sid,
                instant=command.instant,
                local_instant=local,
                status=command.status,
                count=command.count,
                first_instant=command.first_instant if grouped else None,
                last_instant=command.last_instant if grouped else None,
                dst=dst,
                reason=command.reason,
                origin=command.origin,
            )
        )

    def emit(self, row: Row) -> None:
        self.summary.add_row(row)
        self.sink.row(row)

    # --- runs -------------------------------------------------------------

    def due_changes(self, now: datetime) -> list[Event]:
        events: list[Event] = []
        changes = self.changes
        while changes and changes[0][0] <= now:
            at, _, sid, instant, status = heapq.heappop(changes)
            events.append(self.change(sid, instant, status, at))
        return events

    def change(self, sid: str, instant: datetime, status: RunStatus, at: datetime) -> Event:
        """Apply a run's status change at `at`; settle its row when it is final."""
        run = self.open[(sid, instant)]
        run.status = status
        if self.on_run_change is not None:
            self.on_run_change(sid, instant, status, at)
        if status in TERMINAL_RUN_STATUSES:
            del self.open[(sid, instant)]
            self.active_by_schedule[sid] -= 1
            self.active_total -= 1
            self.emit(self.run_row(run, at))
        return RunStatusChanged(schedule_id=sid, instant=instant, run_id=run.run_id, status=status)

    def run_row(self, run: _OpenRun, end: datetime | None) -> Row:
        return Row(
            schedule_id=run.schedule_id,
            instant=run.instant,
            local_instant=run.local,
            status=run.status,
            run_id=run.run_id,
            run_start=run.start,
            run_end=end,
            dst=run.dst,
            origin=run.origin,
        )

    # --- the clock ----------------------------------------------------------

    def run(self) -> SimulationResult:
        scenario = self.scenario
        timeline = _timeline(scenario)
        windows = list(scenario.downtime)
        position = 0
        window = 0
        feedback: list[Event] = []
        now = timeline[0].at
        span = (scenario.end - scenario.start).total_seconds()
        reported = -1.0
        calls_here = 0
        while True:
            while window < len(windows) and windows[window].end <= now:
                window += 1
            if window < len(windows) and windows[window].start <= now:
                now = windows[window].end
                continue
            if now >= scenario.end:
                break
            events = feedback
            while position < len(timeline) and timeline[position].at <= now:
                events.append(self.to_event(timeline[position]))
                position += 1
            events += self.due_changes(now)
            self.state, commands = decide(self.state, now, events)
            self.check_cancellations(events)
            self.calls += 1
            calls_here += 1
            if calls_here > _MAX_CALLS_PER_INSTANT:
                raise CoreMisuse(f"decide made no progress at {iso(now)} after {calls_here} calls")
            feedback = self.carry_out(commands, now)
            if feedback or (self.changes and self.changes[0][0] <= now):
                continue
            upcoming = [scenario.end]
            wake = next_wakeup(self.state)
            if wake is not None:
                upcoming.append(wake)
            if self.changes:
                upcoming.append(self.changes[0][0])
            if position < len(timeline):
                upcoming.append(timeline[position].at)
            later = min(upcoming)
            if later <= now:
                raise CoreMisuse(
                    f"next_wakeup {iso(later)} is not after now {iso(now)} "
                    "although nothing new happened"
                )
            now = later
            calls_here = 0
            if self.on_progress is not None:
                done = (now - scenario.start).total_seconds() / span
                if done - reported >= 0.005:
                    reported = done
                    self.on_progress(min(done, 1.0))
        self.finish()
        if self.on_progress is not None:
            self.on_progress(1.0)
        summary = self.summary.as_dict()
        summary["warnings"] = list(self.warnings)
        self.sink.finish(summary)
        return SimulationResult(summary, self.calls, tuple(self.warnings))

    def finish(self) -> None:
        # Whatever is still open at the end of the horizon is settled as it is.
        for _, run in sorted(self.open.items()):
            self.emit(self.run_row(run, None))
        self.open.clear()
        for sid in self.backfilled:
            backfill = schedule_view(self.state, sid).backfill
            if backfill is not None:
                payload = backfill_to_payload(backfill)
                remaining = payload.pop("remaining")
                payload["remaining"] = len(remaining)
                payload["next"] = remaining[0] if remaining else None
                self.summary.note_backfill(sid, payload)
        for schedule in self.scenario.schedules:
            view = schedule_view(self.state, schedule.schedule_id)
            pending = sorted({*view.waiting, *((view.held,) if view.held else ())})
            for instant in pending:
                local, dst = self.presenter.describe(schedule.schedule_id, instant)
                self.emit(
                    Row(
                        schedule_id=schedule.schedule_id,
                        instant=instant,
                        local_instant=local,
                        status="pending",
                        dst=dst,
                    )
                )


def simulate(
    scenario: Scenario,
    sink: RowSink,
    *,
    on_progress: Callable[[float], None] | None = None,
    on_run_change: RunChangeObserver | None = None,
) -> SimulationResult:
    """Run `scenario` through `decide` on a virtual clock.

    Each occurrence's row goes to `sink` as soon as it is settled, then the
    summary (`sink.finish`). `on_progress` is called with the fraction of the
    horizon done, at most every half percent; `on_run_change` with every
    status change of a run (its admission is `run_start` of its row). Raises CoreMisuse if the core
    breaks its protocol (asks to be woken in the past without progress).
    """
    return _Engine(scenario, sink, on_progress, on_run_change).run()
