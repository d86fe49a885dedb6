"""A model of the shell around `decide`, for the decision tables and the
property tests.

It keeps what a real shell would make durable (definitions with their
lifecycle, runtime records from `PersistRuntime`, the occurrence history, the
run store) and plays the shell's side of the protocol:

- a lifecycle change (create, update, pause, resume, delete) is journaled and
  sent as an event; it counts as delivered once every command of that step
  was carried out. A crash before that leaves it in the journal, and the
  restart replays it with its original `at`, so the catch-up lands where the
  change happened;
- `AdmitOccurrence` runs preflight (it fails only when a test asked for it),
  appends the `admitted` row (or the `preflight-rejected` row with the
  reason), creates the run and starts it, and answers at once with
  `OccurrenceAdmitted` (or `PreflightFailed`) in a second `decide` call at
  the same `now`;
- a restart rebuilds the state from the stores through `ScheduleRecovered`,
  after the host's own recovery has settled each run (`host_recovery`).

A crash can cut the execution of a step's commands after any of them, and
an admission can be cut between its row and its run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

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
from core.decide import decide
from core.definitions import ScheduleDefinition
from core.events import (
    BackfillCancelled,
    BackfillRequested,
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
from core.occurrences import (
    DECISION_STATUSES,
    TERMINAL_RUN_STATUSES,
    TERMINAL_STATUSES,
    OccurrenceStatus,
    RunStatus,
)
from core.operator_actions import Backfill
from core.state import SchedulerState, initial_state

__all__ = [
    "ABANDONED",
    "AMBIGUOUS",
    "LIFECYCLE",
    "Row",
    "ShellModel",
    "StoredRun",
    "StoredSchedule",
]

ABANDONED = "abandoned at restart: external effects may already have occurred"
AMBIGUOUS = "resume attempt has no result: failed closed, not retried"

# Lifecycle changes and operator requests: journaled, replayed after a crash.
LIFECYCLE = (
    ScheduleCreated,
    ScheduleUpdated,
    SchedulePaused,
    ScheduleResumed,
    ScheduleDeleted,
    ScheduleTriggered,
    BackfillRequested,
    BackfillCancelled,
)

# How far an admission got when the process died carrying it out.
Partial = Literal["row", "created"]


@dataclass(frozen=True)
class Row:
    """One history row as the shell appended it."""

    schedule_id: str
    instant: datetime
    status: OccurrenceStatus
    run_id: str | None = None
    reason: str | None = None
    count: int = 1
    first_instant: datetime | None = None
    last_instant: datetime | None = None
    # Who opened the occurrence (transition rows: the open one they move).
    origin: str = "schedule"
    # A trigger row's request (its seq among the schedule's requests).
    request: int | None = None


@dataclass
class StoredSchedule:
    """The definition store's record of one schedule (as delivered to decide)."""

    definition: ScheduleDefinition
    revision: int
    created_at: datetime
    updated_at: datetime | None = None
    resumed_at: datetime | None = None
    paused: bool = False
    deleted: bool = False


@dataclass
class StoredRun:
    schedule_id: str
    instant: datetime
    run_id: str
    status: RunStatus
    started: bool = False
    # A resume began (running after interrupted) and has not finished.
    resuming: bool = False
    interrupted_once: bool = False
    message: str | None = None


Runtime = tuple[datetime, datetime | None, tuple[datetime, ...], Backfill | None]


@dataclass
class ShellModel:
    capacity: int
    state: SchedulerState = field(init=False)
    schedules: dict[str, StoredSchedule] = field(default_factory=dict)
    runtime: dict[str, Runtime] = field(default_factory=dict)
    blocked: dict[str, str] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    runs: dict[tuple[str, datetime], StoredRun] = field(default_factory=dict)
    run_counter: int = 0
    # Lifecycle events sent but not yet delivered (a crash replays them).
    journal: list[Event] = field(default_factory=list)
    # Lifecycle events decide has seen for good, in order.
    delivered: list[Event] = field(default_factory=list)
    # Preflight outcomes asked for by a test: (schedule, instant) -> reason,
    # or schedule -> reason for its next admission.
    rejections: dict[tuple[str, datetime], str] = field(default_factory=dict)
    reject_next: dict[str, str] = field(default_factory=dict)
    # Called around every decide call (the property tests check purity there).
    observer: Callable[[SchedulerState, datetime, Sequence[Event]], None] | None = None
    # Admissions carried out since the last call of `take_admissions`.
    admissions: list[tuple[str, datetime]] = field(default_factory=list)
    # The last seq given to a trigger request (the lifecycle log numbers them).
    request_seq: int = 0
    # By `id` of a lifecycle event: its schedule's watermark when decide last
    # took it. A clock stepped back stamps a change before instants decided
    # already, and a change lands after them (rule L).
    watermarks_before: dict[int, datetime] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.state = initial_state(max_concurrent_runs=self.capacity)

    # --- the protocol -------------------------------------------------------

    def step(
        self,
        now: datetime,
        events: Sequence[Event],
        *,
        crash_after: int | None = None,
        partial: Partial | None = None,
    ) -> list[Command]:
        """Send events, call decide, carry out its commands and answer
        admissions at once. `crash_after=k` stops after k commands (the
        process died; `partial` says how far the k+1-th got if it was an
        admission); the caller should restart next."""
        events = [self.with_history(self.numbered(e)) for e in events]
        self.journal.extend(e for e in events if isinstance(e, LIFECYCLE))
        commands = self._decide(now, events)
        out = list(commands)
        acks = self._execute(commands, crash_after, partial)
        if crash_after is not None:
            return out
        for event in self.journal:
            self._deliver(event)
        self.journal = []
        while acks:
            more = self._decide(now, acks)
            out.extend(more)
            acks = self._execute(more, None, None)
        return out

    def numbered(self, event: Event) -> Event:
        """A trigger request as its lifecycle record delivers it: with its
        seq (a replayed one keeps the seq it was given)."""
        if not isinstance(event, ScheduleTriggered) or event.request is not None:
            return event
        self.request_seq += 1
        return replace(event, request=self.request_seq)

    def with_history(self, event: Event) -> Event:
        """A backfill request with the instants of its range the history
        shows decided, read as the shell delivers it (replays included)."""
        if not isinstance(event, BackfillRequested):
            return event
        return replace(
            event, decided=self.backfill_decided(event.schedule_id, event.start, event.end)
        )

    def backfill_decided(
        self, schedule_id: str, start: datetime, end: datetime
    ) -> frozenset[datetime]:
        return frozenset(
            r.instant
            for r in self.rows
            if r.schedule_id == schedule_id
            and start <= r.instant < end
            and r.status in DECISION_STATUSES
            and (r.origin == "backfill" or (r.origin == "schedule" and r.status == "admitted"))
        )

    def _origin_of_open(self, schedule_id: str, instant: datetime) -> str:
        """The origin of the open (admitted, not terminal) occurrence at `instant`."""
        origin = "schedule"
        for r in self.rows:
            if r.schedule_id != schedule_id or r.instant != instant:
                continue
            if r.status == "admitted":
                origin = r.origin
        return origin

    def _decide(self, now: datetime, events: Sequence[Event]) -> tuple[Command, ...]:
        if self.observer is not None:
            self.observer(self.state, now, events)
        for event in events:
            if isinstance(event, SchedulePaused | ScheduleDeleted | ScheduleUpdated):
                sid = (
                    event.definition.schedule_id
                    if isinstance(event, ScheduleUpdated)
                    else event.schedule_id
                )
                known = self.state.schedules.get(sid)
                if known is not None:
                    self.watermarks_before[id(event)] = known.watermark
        self.state, commands = decide(self.state, now, events)
        return commands

    def report(
        self, schedule_id: str, instant: datetime, status: RunStatus, message: str | None = None
    ) -> RunStatusChanged:
        """The host changed a run's status: update the run store and return the event."""
        run = self.runs[(schedule_id, instant)]
        if status == "running" and run.status == "interrupted":
            run.resuming = True
        if status != "running":
            run.resuming = False
        if status == "interrupted":
            run.interrupted_once = True
        run.status = status
        run.started = True
        run.message = message
        return RunStatusChanged(
            schedule_id=schedule_id,
            instant=instant,
            run_id=run.run_id,
            status=status,
            message=message,
        )

    def _deliver(self, event: Event) -> None:
        self.delivered.append(event)
        if isinstance(event, ScheduleCreated):
            self.schedules[event.definition.schedule_id] = StoredSchedule(
                definition=event.definition, revision=event.revision, created_at=event.at
            )
        elif isinstance(event, ScheduleUpdated):
            s = self.schedules[event.definition.schedule_id]
            s.definition = event.definition
            s.revision = event.revision
            s.updated_at = event.at
        elif isinstance(event, SchedulePaused):
            self.schedules[event.schedule_id].paused = True
        elif isinstance(event, ScheduleResumed):
            s = self.schedules[event.schedule_id]
            if s.paused:
                s.paused = False
                s.resumed_at = event.at
        elif isinstance(event, ScheduleDeleted):
            self.schedules[event.schedule_id].deleted = True

    def _execute(
        self, commands: Iterable[Command], crash_after: int | None, partial: Partial | None
    ) -> list[Event]:
        acks: list[Event] = []
        for index, command in enumerate(commands):
            if crash_after is not None and index >= crash_after:
                if index == crash_after and partial and isinstance(command, AdmitOccurrence):
                    self._admit(command, started=False, with_run=partial == "created")
                break
            if isinstance(command, RecordOccurrence):
                origin = command.origin
                if command.status not in DECISION_STATUSES:
                    origin = self._origin_of_open(command.schedule_id, command.instant)
                self._append_row(
                    Row(
                        schedule_id=command.schedule_id,
                        instant=command.instant,
                        status=command.status,
                        run_id=command.run_id,
                        reason=command.reason,
                        count=command.count,
                        first_instant=command.first_instant,
                        last_instant=command.last_instant,
                        origin=origin,
                        request=command.request,
                    )
                )
            elif isinstance(command, AdmitOccurrence):
                key = (command.schedule_id, command.instant)
                reason = self.rejections.pop(key, None) or self.reject_next.pop(
                    command.schedule_id, None
                )
                if reason is not None:
                    # The decision row goes in command order, in place of `admitted`.
                    self._append_row(
                        Row(
                            command.schedule_id,
                            command.instant,
                            "preflight-rejected",
                            reason=reason,
                            origin=command.origin,
                            request=command.request,
                        )
                    )
                    acks.append(
                        PreflightFailed(
                            schedule_id=command.schedule_id,
                            instant=command.instant,
                            reason=reason,
                        )
                    )
                    continue
                run_id = self._admit(command, started=True, with_run=True)
                assert run_id is not None
                acks.append(
                    OccurrenceAdmitted(
                        schedule_id=command.schedule_id, instant=command.instant, run_id=run_id
                    )
                )
            elif isinstance(command, CreateAdmittedRun):
                self._new_run(command.schedule_id, command.instant, started=True)
            elif isinstance(command, StartRun):
                self.runs[(command.schedule_id, command.instant)].started = True
            elif isinstance(command, PersistRuntime):
                self.runtime[command.schedule_id] = (
                    command.watermark,
                    command.held,
                    command.waiting,
                    command.backfill,
                )
            elif isinstance(command, BlockSchedule):
                self.blocked[command.schedule_id] = command.diagnostic
            else:
                assert isinstance(command, LogWarning), command
        return acks

    def _append_row(self, row: Row) -> None:
        # As the history stores refuse it: a calendar decision (from its first
        # instant, for a row of several) only after the schedule's last one.
        if row.status in DECISION_STATUSES and row.origin == "schedule":
            first = row.first_instant or row.instant
            last = max(
                (
                    r.last_instant or r.instant
                    for r in self.rows
                    if r.schedule_id == row.schedule_id
                    and r.origin == "schedule"
                    and r.status in DECISION_STATUSES
                ),
                default=None,
            )
            assert last is None or first > last, (
                f"{row.schedule_id}: decision for {first} is not after the last, {last}"
            )
        self.rows.append(row)

    def _admit(self, command: AdmitOccurrence, *, started: bool, with_run: bool) -> str | None:
        self.admissions.append((command.schedule_id, command.instant))
        run_id = None
        if with_run:
            run_id = self._new_run(command.schedule_id, command.instant, started=started)
        self._append_row(
            Row(
                command.schedule_id,
                command.instant,
                "admitted",
                run_id=run_id,
                origin=command.origin,
                request=command.request,
            )
        )
        return run_id

    def _new_run(self, schedule_id: str, instant: datetime, *, started: bool) -> str:
        self.run_counter += 1
        run_id = f"run-{self.run_counter}"
        self.runs[(schedule_id, instant)] = StoredRun(
            schedule_id=schedule_id,
            instant=instant,
            run_id=run_id,
            status="admitted",
            started=started,
        )
        return run_id

    def take_admissions(self) -> list[tuple[str, datetime]]:
        taken, self.admissions = self.admissions, []
        return taken

    # --- restart ------------------------------------------------------------

    def host_recovery(self) -> None:
        """What the host does to its run store at startup, before the scheduler
        recovers: an executing run was abandoned, a resume without its result
        is ambiguous; both fail closed. Interrupted runs stay interrupted."""
        for run in self.runs.values():
            if run.status in TERMINAL_RUN_STATUSES or run.status == "interrupted":
                continue
            if run.resuming:
                run.status, run.message = "failed", AMBIGUOUS
            elif run.started:
                run.status, run.message = "failed", ABANDONED
            run.resuming = False

    def restart(
        self,
        now: datetime,
        *,
        contradicted: Mapping[str, tuple[str, str, str]] | None = None,
        extra: Sequence[Event] = (),
    ) -> list[Command]:
        """A new process: host recovery, then one `ScheduleRecovered` per
        stored schedule, the journaled lifecycle changes decide never saw for
        good, a `RecordsContradicted` for each named schedule (`file, record,
        reason`), and `extra`."""
        self.host_recovery()
        self.state = initial_state(max_concurrent_runs=self.capacity)
        events: list[Event] = [self.recovered(sid) for sid in sorted(self.schedules)]
        replay, self.journal = self.journal, []
        events.extend(replay)
        for sid, (file, record, reason) in sorted((contradicted or {}).items()):
            events.append(
                RecordsContradicted(schedule_id=sid, file=file, record=record, reason=reason)
            )
        events.extend(extra)
        return self.step(now, events)

    def recovered(self, schedule_id: str) -> ScheduleRecovered:
        s = self.schedules[schedule_id]
        rows = [r for r in self.rows if r.schedule_id == schedule_id]
        decided = [r for r in rows if r.status in DECISION_STATUSES]
        terminal = {(r.origin, r.instant) for r in rows if r.status in TERMINAL_STATUSES}
        calendar = [r for r in decided if r.origin == "schedule"]
        last_decided = max((r.instant for r in calendar), default=None)
        triggers = [r for r in decided if r.origin == "trigger"]
        last_trigger = max((r.instant for r in triggers), default=None)
        last_request = max((r.request for r in triggers if r.request is not None), default=None)

        def is_decided(instant: datetime) -> bool:
            return any(
                r.instant == instant
                or (r.first_instant is not None and r.first_instant <= instant <= r.instant)
                for r in calendar
            )

        active: list[RecoveredRun] = []
        for r in decided:
            if r.status != "admitted" or (r.origin, r.instant) in terminal:
                continue
            run = self.runs.get((schedule_id, r.instant))
            if run is None:
                active.append(
                    RecoveredRun(
                        instant=r.instant,
                        run_id=None,
                        status="admitted",
                        origin=r.origin,  # type: ignore[arg-type]
                    )
                )
            else:
                active.append(
                    RecoveredRun(
                        instant=r.instant,
                        run_id=run.run_id,
                        status=run.status,
                        message=run.message,
                        never_started=not run.started,
                        origin=r.origin,  # type: ignore[arg-type]
                    )
                )
        watermark, held, waiting, backfill = self.runtime.get(schedule_id, (None, None, (), None))
        backfill_decided: frozenset[datetime] = frozenset()
        if backfill is not None and backfill.state == "running":
            backfill_decided = self.backfill_decided(schedule_id, backfill.start, backfill.end)
        return ScheduleRecovered(
            definition=s.definition,
            revision=s.revision,
            created_at=s.created_at,
            watermark=watermark,
            last_decided_instant=last_decided,
            held=held,
            paused=s.paused,
            deleted=s.deleted,
            active_runs=tuple(active),
            blocked_reason=None,
            updated_at=s.updated_at,
            resumed_at=s.resumed_at,
            waiting=tuple(t for t in waiting if not is_decided(t)),
            backfill=backfill,
            backfill_decided=backfill_decided,
            last_trigger=last_trigger,
            last_trigger_request=last_request,
        )
