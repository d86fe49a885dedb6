"""A model of the shell around `decide`, for the decision tables and the
property tests.

It keeps what a real shell would make durable (definitions with their
lifecycle, runtime records from `PersistRuntime`, the occurrence history, the
run store) and plays the shell's side of the protocol:

- lifecycle changes are written to the definition store, then sent as events;
- `AdmitOccurrence` runs preflight (it fails only when a test asked for it),
  appends the `admitted` row, creates the run and starts it, and answers at
  once with `OccurrenceAdmitted` (or `PreflightFailed`) in a second `decide`
  call at the same `now`;
- a restart rebuilds the state from the stores through `ScheduleRecovered`,
  after the host's own recovery has settled each run (see `host_recovery`).

A crash can cut the execution of a step's commands after any of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

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
from core.occurrences import (
    DECISION_STATUSES,
    TERMINAL_RUN_STATUSES,
    TERMINAL_STATUSES,
    OccurrenceStatus,
    RunStatus,
)
from core.state import SchedulerState, initial_state

__all__ = [
    "ABANDONED",
    "AMBIGUOUS",
    "Row",
    "ShellModel",
    "StoredRun",
    "StoredSchedule",
]

ABANDONED = "abandoned at restart: external effects may already have occurred"
AMBIGUOUS = "resume attempt has no result: failed closed, not retried"


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


@dataclass
class StoredSchedule:
    definition: ScheduleDefinition
    revision: int
    created_at: datetime
    updated_at: datetime | None = None
    resumed_at: datetime | None = None
    paused: bool = False
    deleted: bool = False
    watermark: datetime | None = None
    held: datetime | None = None
    waiting: tuple[datetime, ...] = ()
    blocked: str | None = None


@dataclass
class StoredRun:
    schedule_id: str
    instant: datetime
    run_id: str
    status: RunStatus
    started: bool = False
    # A resume began (running after interrupted) and has not finished.
    resuming: bool = False
    message: str | None = None


@dataclass
class ShellModel:
    capacity: int
    state: SchedulerState = field(init=False)
    schedules: dict[str, StoredSchedule] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    runs: dict[tuple[str, datetime], StoredRun] = field(default_factory=dict)
    run_counter: int = 0
    # Preflight outcomes asked for by a test: (schedule, instant) -> reason.
    rejections: dict[tuple[str, datetime], str] = field(default_factory=dict)
    calls: int = 0

    def __post_init__(self) -> None:
        self.state = initial_state(max_concurrent_runs=self.capacity)

    # --- the protocol -------------------------------------------------------

    def step(
        self, now: datetime, events: Sequence[Event], *, crash_after: int | None = None
    ) -> list[Command]:
        """Write lifecycle changes, call decide, carry out its commands and
        answer admissions at once. `crash_after=k` stops after k commands
        (the process died): the rest is lost and the caller should restart."""
        for event in events:
            self._store_event(event)
        commands = self._decide(now, events)
        out = list(commands)
        acks = self._execute(commands, crash_after)
        while acks and crash_after is None:
            more = self._decide(now, acks)
            out.extend(more)
            acks = self._execute(more, None)
        return out

    def _decide(self, now: datetime, events: Sequence[Event]) -> tuple[Command, ...]:
        self.calls += 1
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

    def _store_event(self, event: Event) -> None:
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

    def _execute(self, commands: Iterable[Command], crash_after: int | None) -> list[Event]:
        acks: list[Event] = []
        for index, command in enumerate(commands):
            if crash_after is not None and index >= crash_after:
                break
            if isinstance(command, RecordOccurrence):
                self.rows.append(
                    Row(
                        schedule_id=command.schedule_id,
                        instant=command.instant,
                        status=command.status,
                        run_id=command.run_id,
                        reason=command.reason,
                        count=command.count,
                        first_instant=command.first_instant,
                        last_instant=command.last_instant,
                    )
                )
                run = self.runs.get((command.schedule_id, command.instant))
                if run is not None and command.status in TERMINAL_RUN_STATUSES:
                    run.status = command.status  # type: ignore[assignment]
                    run.message = command.reason
            elif isinstance(command, AdmitOccurrence):
                key = (command.schedule_id, command.instant)
                reason = self.rejections.pop(key, None)
                if reason is not None:
                    acks.append(
                        PreflightFailed(
                            schedule_id=command.schedule_id,
                            instant=command.instant,
                            reason=reason,
                        )
                    )
                    continue
                run_id = self._new_run(command.schedule_id, command.instant, started=True)
                self.rows.append(
                    Row(command.schedule_id, command.instant, "admitted", run_id=run_id)
                )
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
                s = self.schedules[command.schedule_id]
                s.watermark = command.watermark
                s.held = command.held
                s.waiting = command.waiting
            elif isinstance(command, BlockSchedule):
                self.schedules[command.schedule_id].blocked = command.diagnostic
            else:
                assert isinstance(command, LogWarning), command
        return acks

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
        lost_runs: Iterable[tuple[str, datetime]] = (),
        unstarted: Iterable[tuple[str, datetime]] = (),
        extra: Sequence[Event] = (),
    ) -> list[Command]:
        """A new process: host recovery, then one `ScheduleRecovered` per
        schedule, then `RecordsContradicted` for each named schedule
        (`file, record, reason`). `lost_runs` lost their run entirely (crash
        after the admitted row); `unstarted` were created but never started."""
        for key in lost_runs:
            del self.runs[key]
        for key in unstarted:
            self.runs[key].started = False
            self.runs[key].status = "admitted"
        self.host_recovery()
        self.state = initial_state(max_concurrent_runs=self.capacity)
        events: list[Event] = [self.recovered(sid) for sid in sorted(self.schedules)]
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
        terminal = {r.instant for r in rows if r.status in TERMINAL_STATUSES}
        last_decided = max((r.instant for r in decided), default=None)

        def is_decided(instant: datetime) -> bool:
            return any(
                r.instant == instant
                or (r.first_instant is not None and r.first_instant <= instant <= r.instant)
                for r in decided
            )

        active: list[RecoveredRun] = []
        for r in decided:
            if r.status != "admitted" or r.instant in terminal:
                continue
            run = self.runs.get((schedule_id, r.instant))
            if run is None:
                active.append(RecoveredRun(instant=r.instant, run_id=None, status="admitted"))
            else:
                active.append(
                    RecoveredRun(
                        instant=r.instant,
                        run_id=run.run_id,
                        status=run.status,
                        message=run.message,
                        never_started=not run.started,
                    )
                )
        return ScheduleRecovered(
            definition=s.definition,
            revision=s.revision,
            created_at=s.created_at,
            watermark=s.watermark,
            last_decided_instant=last_decided,
            held=s.held,
            paused=s.paused,
            deleted=s.deleted,
            active_runs=tuple(active),
            blocked_reason=None,
            updated_at=s.updated_at,
            resumed_at=s.resumed_at,
            waiting=tuple(t for t in s.waiting if not is_decided(t)),
        )
