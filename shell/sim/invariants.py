"""The guarantees the simulation checks, against the durable truth.

`InvariantChecker` watches every history line that becomes durable (through
the `SimDisk`) and every run record the run API writes, and keeps its own
naive model of both; it never asks the service what it thinks, except to
compare (`check_settled`). A broken rule is appended to `violations` (the
hooks run inside the service's own calls, so raising there would only be
logged by the service's loop); the driver stops at the first one.

What happened is ordered by the *moment* (`shell.sim.timeline`), the
simulation's own time: after the clock is set back its readings, the
stamps of the records, no longer say what came first.

Checked as rows become durable:

- *once*: calendar decision instants strictly increase (a row for several
  missed instants counts from its first), and so do triggers' among
  themselves; seqs are dense; an instant is admitted at most once, whoever
  admits it (the calendar, a backfill, a trigger); an occurrence gets at
  most one terminal row;
- *never ahead of the clock*: a calendar row is decided once the clock came
  to its instant, and not before the moment the checker's calendar
  (`_Calendar`) took it;
- *admissions* (`admitted` rows): the calendar took the instant (the clock
  came to it while the schedule existed and was neither paused nor
  deleted, under a trigger in force then, past its watermark), no pause or
  delete came between then and the admission, and the snapshot is that
  revision's (deployment, resolved inputs, max steps). A trigger's row
  (rule P) names a durable request, is at the request's moment or just
  after the previous trigger (moved on by microseconds, never onto a
  calendar instant), at the revision in force then, for a schedule not
  deleted, and admitted within the allowance after the request; one not admitted was
  read past the allowance, raced the overlap policy the request did not
  override, or was refused by its preflight. A backfill's admission (rule
  Q) is an instant of the newest request's range, before it, of the
  calendar in force at it, neither after a cancel or delete nor while
  paused. When the whole batch is durable: the schedule's open
  occurrences decided up to each admission are within the active-run limit
  of the revision it was admitted at (a trigger overriding the policy is
  not held to it; a backfill overriding it counts backfill runs only), and
  the occurrences holding an execution slot (admitted or running, never
  interrupted) are within `max_concurrent_runs` (a trigger takes its slot
  without waiting: a batch of triggers only is not held to the bound, and
  one with others is held to it without its own triggers);
- *truth*: a terminal row says what the run store says (status and message),
  or that the run could not be created (and no such run exists).

Checked as runs are written: one run per occurrence, ever; a run is created
only after its `admitted` row is durable, with that row's run id and
origin; the run store's own active runs stay within the limit (those
admitted before the new run, under its admitted revision's limit, with the
overrides above) and its slot-holding runs, triggers' aside, within
`max_concurrent_runs`.

Checked once the service has settled with no fault in the step
(`check_settled`): every open occurrence has its run and says the run's
status; every active run has its open occurrence; no run waits unlaunched;
the service's active runs are exactly the open occurrences; a backfill's
progress says what the history shows (as many admitted as it decided rows
since its request, admitted and remaining adding up to its plan, no
remaining instant decided already, and a done one ended no earlier than its
last row).

Checked at the end (`check_final`), when every run has ended: every
occurrence has exactly one terminal row; every instant the calendar took
is covered by exactly one calendar decision row (none lost, none
invented); every trigger request is decided exactly
once; every run is referenced by its occurrence.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from core.bindings import resolve_inputs
from core.calendar import CompiledTrigger, compile_trigger
from core.definitions import ScheduleDefinition, parse_definition
from core.occurrences import TERMINAL_RUN_STATUSES, TERMINAL_STATUSES
from core.state import SchedulerState, schedule_view
from shell.sim.disk import SimDisk
from shell.sim.host import run_number
from shell.sim.timeline import Timeline
from shell.store_format import format_instant, parse_instant

__all__ = ["COULD_NOT_CREATE", "InvariantChecker"]

# How the service words a terminal row for a run the run API refused to create.
COULD_NOT_CREATE: Final = "the run could not be created"

_ACTIVE: Final = frozenset({"admitted", "running", "interrupted"})
_TICK: Final = timedelta(microseconds=1)
# How far past its request a trigger's instant may be moved (by a microsecond
# per instant it would collide with: far fewer than a thousand).
_TRIGGER_DRIFT: Final = timedelta(milliseconds=1)


@dataclass(slots=True)
class _Occurrence:
    seq: int
    decision: dict[str, Any]
    instant: datetime
    status: str
    run_id: str | None
    terminal_rows: int = 0
    interrupted: bool = False
    # "trigger" or "backfill" for an operator's occurrence, None for the calendar's.
    origin: str | None = None
    # The overlap override of the request that opened it ("allow" or None),
    # once its admission was checked.
    override: str | None = None
    # The moment it was decided (`Timeline.decided_at`), None if the clock
    # never reached its stamp.
    decided: datetime | None = None


@dataclass(slots=True)
class _Track:
    """The naive model of one schedule's history."""

    occurrences: list[_Occurrence] = field(default_factory=list)
    open: dict[int, _Occurrence] = field(default_factory=dict)
    admitted: dict[datetime, _Occurrence] = field(default_factory=dict)
    last_decided: datetime | None = None
    last_trigger: datetime | None = None


@dataclass(frozen=True, slots=True)
class _Record:
    seq: int
    kind: str
    at: datetime
    # When it was written: the moment its stamp `at` was the clock's reading.
    moment: datetime
    revision: int
    definition: dict[str, Any] | None
    # An operator request's arguments (`triggered`, `backfill`).
    action: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class _Request:
    """A trigger request, the lifecycle before it, and how long after it its
    row was recorded, against the allowance in force then."""

    record: _Record
    fold: _Fold
    late_s: float
    allowance_s: float


@dataclass(slots=True)
class _Fold:
    """A schedule's lifecycle folded over the records before some instant."""

    definition: dict[str, Any]
    revision: int
    paused: bool = False
    deleted: bool = False


class _Calendar:
    """The calendar instants `decide` takes for one schedule, each with the
    moment it took it and the definition in force: the clock's readings and
    the lifecycle records in moment order (a reading before the records of
    its moment), with the watermark as `decide` keeps it. Created at the
    creation's reading; moved on to each instant the clock comes to while
    the schedule is active; by an update, by a pause, a resume or a delete
    that changes the state, and by a backfill request while paused, to its
    reading when that is newer (rules A, J, K, L and Q). So after a step
    back no instant is taken twice, and one the clock passed while the
    schedule was paused is taken when the clock comes to it again after a
    resume.

    Taken forward as readings and records come (`advance`); started again if
    the log lost a record it had taken in (a crash before its flush)."""

    def __init__(self) -> None:
        self.taken: dict[datetime, tuple[datetime, dict[str, Any]]] = {}
        self.definition: dict[str, Any] | None = None
        self.paused = False
        self.deleted = False
        self._watermark: datetime | None = None
        self._readings = 0
        self._records: list[tuple[int, str, datetime]] = []

    def advance(
        self,
        readings: Sequence[tuple[datetime, datetime]],
        records: Sequence[_Record],
        trigger_of: Callable[[dict[str, Any]], CompiledTrigger],
        *,
        final: bool = False,
    ) -> _Calendar:
        """Take in `readings` (every one so far) and `records` (the whole log);
        the records of the last reading's moment wait for the next reading,
        unless `final`. Returns the model to use (self, or a new one)."""
        done = len(self._records)
        if [(r.seq, r.kind, r.at) for r in records[:done]] != self._records:
            return _Calendar().advance(readings, records, trigger_of, final=final)
        taken = done
        for index in range(self._readings, len(readings)):
            moment, reading = readings[index]
            while taken < len(records) and records[taken].moment < moment:
                self._apply(records[taken])
                taken += 1
            self._reach(moment, reading, trigger_of)
        self._readings = len(readings)
        if final:
            while taken < len(records):
                self._apply(records[taken])
                taken += 1
        return self

    def _apply(self, record: _Record) -> None:
        self._records.append((record.seq, record.kind, record.at))
        if record.kind == "created" and record.definition is not None:
            self.definition, self._watermark = record.definition, record.at
            return
        watermark = self._watermark
        if self.definition is None or watermark is None:
            return
        newer = max(watermark, record.at)
        if record.kind == "updated" and record.definition is not None:
            self.definition, self._watermark = record.definition, newer
        elif record.kind == "paused" and not self.paused:
            self.paused, self._watermark = True, newer
        elif record.kind == "resumed" and self.paused:
            self.paused, self._watermark = False, newer
        elif record.kind == "deleted" and not self.deleted:
            self.deleted, self._watermark = True, newer
        elif record.kind == "backfill" and self.paused and not self.deleted:
            # Rule Q: the paused span up to the request is the backfill's.
            self._watermark = newer

    def _reach(
        self,
        moment: datetime,
        reading: datetime,
        trigger_of: Callable[[dict[str, Any]], CompiledTrigger],
    ) -> None:
        definition, watermark = self.definition, self._watermark
        if definition is None or watermark is None or self.paused or self.deleted:
            return
        if reading <= watermark:
            return
        trigger = trigger_of(definition)
        instant = trigger.next_after(watermark)
        while instant is not None and instant <= reading:
            self.taken[instant] = (moment, definition)
            self._watermark = instant
            instant = trigger.next_after(instant)


class InvariantChecker:
    """See the module docstring."""

    def __init__(self, disk: SimDisk, *, capacity: int, timeline: Timeline) -> None:
        self._disk = disk
        self._timeline = timeline
        self.capacity = capacity
        self.violations: list[str] = []
        self._tracks: dict[str, _Track] = {}
        self._runs: dict[str, dict[str, Any]] = {}
        self._active_runs: set[str] = set()
        self._origins: dict[tuple[str, datetime], str] = {}
        self._triggers: dict[str, CompiledTrigger] = {}
        self._definitions: dict[str, ScheduleDefinition] = {}
        self._calendars: dict[str, _Calendar] = {}
        # Lifecycle records stamped with no reading of the clock, reported once.
        self._unstamped: set[tuple[str, int]] = set()
        self.rows = 0
        self.admissions = 0
        # Decision rows an operator's trigger opened; backfill admissions.
        self.trigger_rows = 0
        self.backfill_admissions = 0

    def _fail(self, message: str) -> None:
        self.violations.append(message)

    # --- lifecycle ---------------------------------------------------------------------

    def _lifecycle(self, schedule_id: str) -> list[_Record]:
        files = self._disk.schedules.get(schedule_id)
        records = []
        for line in files.lifecycle if files is not None else ():
            raw = json.loads(line)
            at = parse_instant(raw["at"])
            moment = self._timeline.moment_of(at)
            if moment is None:
                # A record is stamped when it is written, with the clock's reading.
                if (schedule_id, raw["seq"]) not in self._unstamped:
                    self._unstamped.add((schedule_id, raw["seq"]))
                    self._fail(
                        f"{schedule_id} lifecycle seq {raw['seq']}: stamped {raw['at']},"
                        " a time the clock never showed"
                    )
                moment = self._timeline.reached(at, self._timeline.now) or at
            records.append(
                _Record(
                    raw["seq"],
                    raw["kind"],
                    at,
                    moment,
                    raw["revision"],
                    raw.get("definition"),
                    raw.get("action"),
                )
            )
        return records

    @classmethod
    def _fold_before(cls, records: Sequence[_Record], moment: datetime) -> _Fold | None:
        return cls._fold(record for record in records if record.moment < moment)

    @classmethod
    def _fold_before_seq(cls, records: Sequence[_Record], seq: int) -> _Fold | None:
        """The lifecycle as the records before `seq` leave it: what `decide`
        knows when it applies record `seq` (it applies them in log order)."""
        return cls._fold(record for record in records if record.seq < seq)

    @staticmethod
    def _fold(records: Iterable[_Record]) -> _Fold | None:
        fold: _Fold | None = None
        for record in records:
            if record.kind == "created" and record.definition is not None:
                fold = _Fold(record.definition, record.revision)
            elif fold is None:
                continue
            elif record.kind == "updated" and record.definition is not None:
                fold.definition, fold.revision = record.definition, record.revision
            elif record.kind == "paused":
                fold.paused = True
            elif record.kind == "resumed":
                fold.paused = False
            elif record.kind == "deleted":
                fold.deleted = True
        return fold

    def _calendar(
        self, schedule_id: str, records: Sequence[_Record], *, final: bool = False
    ) -> _Calendar:
        """The schedule's calendar model, taken forward to now."""
        model = self._calendars.get(schedule_id) or _Calendar()
        model = model.advance(self._timeline.readings(), records, self._trigger, final=final)
        self._calendars[schedule_id] = model
        return model

    def _definition(self, payload: Mapping[str, Any]) -> ScheduleDefinition:
        key = json.dumps(payload, sort_keys=True)
        definition = self._definitions.get(key)
        if definition is None:
            definition = self._definitions[key] = parse_definition(payload)
        return definition

    def _trigger(self, payload: Mapping[str, Any]) -> CompiledTrigger:
        key = json.dumps(payload.get("trigger"), sort_keys=True)
        trigger = self._triggers.get(key)
        if trigger is None:
            trigger = self._triggers[key] = compile_trigger(self._definition(payload).trigger)
        return trigger

    def _revision(self, records: Sequence[_Record], revision: int) -> dict[str, Any] | None:
        for record in records:
            if record.revision == revision and record.definition is not None:
                return record.definition
        return None

    # --- history rows (DiskObserver) ------------------------------------------------------

    def history_durable(self, rows: Mapping[str, Sequence[bytes]], *, complete: bool) -> None:
        admitted: list[tuple[str, _Occurrence]] = []
        for schedule_id, lines in rows.items():
            track = self._tracks.setdefault(schedule_id, _Track())
            for line in lines:
                self.rows += 1
                occurrence = self._row(schedule_id, track, json.loads(line), admitted)
                if (
                    occurrence is not None
                    and occurrence.origin == "trigger"
                    and occurrence.status != "admitted"
                ):
                    self._check_trigger_skip(schedule_id, occurrence)
        for schedule_id, occurrence in admitted:
            self._check_admission(schedule_id, occurrence)
        if complete and admitted:
            self._check_limits({schedule_id for schedule_id, _ in admitted}, admitted)

    def _row(
        self,
        schedule_id: str,
        track: _Track,
        row: dict[str, Any],
        admitted: list[tuple[str, _Occurrence]],
    ) -> _Occurrence | None:
        """Take one durable row into the model; the occurrence a decision row
        opens."""
        seq = row["seq"]
        where = f"{schedule_id} seq {seq} ({row.get('instant')})"
        if "update" not in row:
            if seq != len(track.occurrences):
                self._fail(f"{where}: decision row out of sequence ({len(track.occurrences)})")
                return None
            instant = parse_instant(row["instant"])
            origin = row.get("origin")
            first = parse_instant(row["first_instant"]) if row.get("count", 1) > 1 else instant
            now = self._timeline.now
            decided = self._timeline.decided_at(parse_instant(row["recorded_at"]), now)
            if origin is None:
                # Never ahead of the clock: an instant is decided once the
                # clock came to it (now or before a step back).
                if decided is None or self._timeline.reached(instant, decided) is None:
                    self._fail(
                        f"{where}: decided at {row['recorded_at']}, before the clock came to it"
                    )
                else:
                    taken = self._calendar(schedule_id, self._lifecycle(schedule_id)).taken
                    came = taken.get(instant)
                    if came is not None and decided < came[0]:
                        self._fail(
                            f"{where}: decided at {row['recorded_at']}, before the clock came"
                            f" to it at {format_instant(came[0])} (moment) while the schedule"
                            " was active"
                        )
                if track.last_decided is not None and first <= track.last_decided:
                    self._fail(
                        f"{where}: decided again or out of order: not after"
                        f" {format_instant(track.last_decided)}"
                    )
                track.last_decided = instant
            elif origin == "trigger":
                self.trigger_rows += 1
                # A trigger's instant is its own, after the previous trigger's.
                if track.last_trigger is not None and instant <= track.last_trigger:
                    self._fail(
                        f"{where}: a trigger not after the previous one"
                        f" ({format_instant(track.last_trigger)})"
                    )
                track.last_trigger = instant
            occurrence = _Occurrence(
                seq,
                row,
                instant,
                row["status"],
                row.get("run_id"),
                origin=origin,
                decided=decided,
            )
            track.occurrences.append(occurrence)
            if row["status"] == "admitted":
                earlier = track.admitted.get(instant)
                if earlier is not None:
                    self._fail(
                        f"{where}: admitted again ({origin or 'calendar'}); seq {earlier.seq}"
                        f" ({earlier.origin or 'calendar'}) admitted it already"
                    )
                track.open[seq] = occurrence
                track.admitted[instant] = occurrence
                self.backfill_admissions += origin == "backfill"
                admitted.append((schedule_id, occurrence))
                self.admissions += 1
            else:
                occurrence.terminal_rows = 1
            return occurrence
        if seq >= len(track.occurrences):
            self._fail(f"{where}: transition for an undecided seq")
            return None
        occurrence = track.occurrences[seq]
        status = row["status"]
        if occurrence.terminal_rows:
            self._fail(f"{where}: {status} row after the terminal {occurrence.status} row")
            return None
        occurrence.status = status
        occurrence.run_id = row.get("run_id") or occurrence.run_id
        if status == "interrupted":
            occurrence.interrupted = True
        if status in TERMINAL_STATUSES:
            occurrence.terminal_rows = 1
            del track.open[seq]
            self._check_terminal(where, occurrence, row)
        return None

    def _check_terminal(self, where: str, occurrence: _Occurrence, row: Mapping[str, Any]) -> None:
        run = self._runs.get(occurrence.run_id or "")
        reason = row.get("reason")
        if run is None:
            if row["status"] != "failed" or not str(reason).startswith(COULD_NOT_CREATE):
                self._fail(f"{where}: terminal {row['status']} row for a run that does not exist")
            return
        error = run.get("error")
        message = error.get("message") if isinstance(error, Mapping) else None
        if run["status"] != row["status"] or reason != message:
            self._fail(
                f"{where}: history says {row['status']} ({reason!r}) but run"
                f" {run['run_id']} is {run['status']} ({message!r})"
            )

    def _check_admission(self, schedule_id: str, occurrence: _Occurrence) -> None:
        row = occurrence.decision
        where = f"{schedule_id} seq {occurrence.seq} ({row['instant']}, {row.get('origin')})"
        records = self._lifecycle(schedule_id)
        if occurrence.origin == "trigger":
            self._check_trigger_admission(schedule_id, where, records, occurrence)
        elif occurrence.origin == "backfill":
            self._check_backfill_admission(where, records, occurrence)
        else:
            self._check_calendar_admission(schedule_id, where, records, occurrence)
        self._check_snapshot(where, records, occurrence)

    def _check_calendar_admission(
        self, schedule_id: str, where: str, records: Sequence[_Record], occurrence: _Occurrence
    ) -> None:
        row = occurrence.decision
        instant = occurrence.instant
        decided = occurrence.decided
        if decided is None or self._timeline.reached(instant, decided) is None:
            return  # reported as the row was taken in (`_row`)
        taken = self._calendar(schedule_id, records).taken.get(instant)
        if taken is None:
            self._fail(f"{where}: {self._not_taken(records, instant, decided)}")
            return
        # Taken, it may wait (a held candidate) but not past a pause or a delete.
        for record in records:
            if record.kind in ("paused", "deleted") and taken[0] <= record.moment < decided:
                self._fail(
                    f"{where}: admitted at {row['recorded_at']} although the schedule was"
                    f" {record.kind} at {format_instant(record.at)}"
                )

    def _not_taken(self, records: Sequence[_Record], instant: datetime, decided: datetime) -> str:
        """Why `decide` had no business admitting `instant`, as the
        lifecycle stood the last time the clock came to it."""
        came = self._timeline.reached(instant, decided)
        fold = self._fold_before(records, came) if came is not None else None
        if fold is None:
            return "admitted an instant before the schedule was created"
        if fold.deleted or fold.paused:
            state = "deleted" if fold.deleted else "paused"
            return f"admitted an instant at which the schedule was {state}"
        if self._trigger(fold.definition).next_after(instant - _TICK) != instant:
            return "not an instant of the trigger in force then"
        return "admitted an instant its watermark had passed (decided or consumed before)"

    def _trigger_request(
        self, where: str, records: Sequence[_Record], occurrence: _Occurrence
    ) -> _Request | None:
        """The trigger request a trigger's row names and the lifecycle as
        `decide` found it there (None: a violation, reported)."""
        seq = occurrence.decision.get("request")
        request = next((r for r in records if r.seq == seq and r.kind == "triggered"), None)
        if request is None:
            self._fail(f"{where}: names no trigger request (request {seq})")
            return None
        fold = self._fold_before_seq(records, request.seq)
        if fold is None or fold.deleted:
            self._fail(f"{where}: a trigger of a schedule that was deleted or not created")
            return None
        late = parse_instant(occurrence.decision["recorded_at"]) - request.at
        allowance = self._definition(fold.definition).lateness_allowance_s
        return _Request(request, fold, late.total_seconds(), allowance)

    def _check_trigger_skip(self, schedule_id: str, occurrence: _Occurrence) -> None:
        """Rule P: a trigger is recorded missed only when it was read past the
        allowance after it was made, and refused by the overlap policy only
        when the request did not override it (or its preflight refused it)."""
        row = occurrence.decision
        where = f"{schedule_id} seq {occurrence.seq} ({row['instant']}, trigger)"
        found = self._trigger_request(where, self._lifecycle(schedule_id), occurrence)
        if found is None:
            return
        request, late, allowance = found.record, found.late_s, found.allowance_s
        if row["status"] == "skipped-misfire" and late <= allowance:
            self._fail(
                f"{where}: recorded missed {late:g} s after its request (allowance {allowance:g} s)"
            )
        elif (
            row["status"] == "skipped-overlap" and (request.action or {}).get("overlap") == "allow"
        ):
            self._fail(f"{where}: refused by the overlap policy its request overrode")
        elif row["status"] not in ("skipped-misfire", "skipped-overlap", "preflight-rejected"):
            self._fail(f"{where}: a trigger decided {row['status']}")

    def _check_trigger_admission(
        self, schedule_id: str, where: str, records: Sequence[_Record], occurrence: _Occurrence
    ) -> None:
        """Rule P: one run of the definition in force at the request, at the
        request's moment (moved on by microseconds only, never onto a
        calendar instant), never run later than the allowance, never for a
        deleted schedule."""
        row = occurrence.decision
        instant = occurrence.instant
        found = self._trigger_request(where, records, occurrence)
        if found is None:
            return
        request, fold = found.record, found.fold
        occurrence.override = (request.action or {}).get("overlap")
        # Rule P: after the previous trigger, too (far after the request's
        # moment when the clock was set back in between).
        earlier = [
            o.instant
            for o in self._tracks[schedule_id].occurrences[: occurrence.seq]
            if o.origin == "trigger"
        ]
        floor = max(request.at, max(earlier) + _TICK) if earlier else request.at
        if not floor <= instant < floor + _TRIGGER_DRIFT:
            self._fail(
                f"{where}: neither at its request's moment {format_instant(request.at)}"
                " nor just after the previous trigger"
            )
        if row.get("revision") != fold.revision:
            self._fail(
                f"{where}: admitted at revision {row.get('revision')}; the request was made"
                f" at revision {fold.revision}"
            )
        if found.late_s > found.allowance_s:
            self._fail(
                f"{where}: run {found.late_s:g} s after its request, past the allowance"
                f" {found.allowance_s:g} s"
            )
        if self._trigger(fold.definition).next_after(instant - _TICK) == instant:
            self._fail(f"{where}: a trigger took the place of a calendar instant")

    def _check_backfill_admission(
        self, where: str, records: Sequence[_Record], occurrence: _Occurrence
    ) -> None:
        """Rule Q: an instant of the newest backfill request's range, of the
        calendar in force at the request and before it, admitted while that
        backfill was neither cancelled (nor the schedule deleted) nor paused."""
        row = occurrence.decision
        instant = occurrence.instant
        decided = occurrence.decided
        if decided is None:
            self._fail(f"{where}: admitted at {row['recorded_at']}, a time the clock never reached")
            return
        request = None
        for record in records:
            if record.kind == "backfill" and record.moment <= decided:
                request = record
        if request is None or request.action is None:
            self._fail(f"{where}: a backfill admission with no backfill request before it")
            return
        occurrence.override = request.action.get("overlap")
        start, end = parse_instant(request.action["start"]), parse_instant(request.action["end"])
        if not (start <= instant < end and instant < request.at):
            self._fail(
                f"{where}: outside the requested range {request.action['start']}"
                f"..{request.action['end']} (requested at {format_instant(request.at)})"
            )
        fold = self._fold_before_seq(records, request.seq)
        if fold is None:
            self._fail(f"{where}: a backfill of a schedule not created")
            return
        if self._trigger(fold.definition).next_after(instant - _TICK) != instant:
            self._fail(f"{where}: not an instant of the calendar in force at the request")
        for record in records:
            if (
                record.seq > request.seq
                and record.kind in ("backfill-cancelled", "deleted")
                and record.moment < decided
            ):
                self._fail(
                    f"{where}: admitted at {row['recorded_at']} after the backfill ended"
                    f" ({record.kind} at {format_instant(record.at)})"
                )
        state = self._fold_before(records, decided)
        resumed_then = any(r.kind == "resumed" and r.moment == decided for r in records)
        if state is not None and state.paused and not resumed_then:
            self._fail(f"{where}: admitted at {row['recorded_at']} while the schedule was paused")

    def _check_snapshot(
        self, where: str, records: Sequence[_Record], occurrence: _Occurrence
    ) -> None:
        row = occurrence.decision
        instant = occurrence.instant
        payload = self._revision(records, row.get("revision") or 0)
        snapshot = row["snapshot"]
        if payload is None:
            self._fail(f"{where}: admitted at revision {row.get('revision')}, which never existed")
            return
        definition = self._definition(payload)
        expected = {
            "deployment_id": definition.deployment_id,
            "inputs": resolve_inputs(definition, row["revision"], instant),
            "max_steps": definition.max_steps,
            "revision": row["revision"],
        }
        if snapshot != expected:
            self._fail(f"{where}: snapshot {snapshot} is not revision {row['revision']}'s")

    def _check_limits(
        self, schedule_ids: set[str], admitted: Sequence[tuple[str, _Occurrence]]
    ) -> None:
        for schedule_id, occurrence in admitted:
            payload = self._revision(
                self._lifecycle(schedule_id), occurrence.decision.get("revision") or 0
            )
            if payload is None:
                continue
            limit = self._definition(payload).active_run_limit
            allowed = occurrence.override == "allow"
            if allowed and occurrence.origin == "trigger":
                continue  # rule P: the request overrode the overlap policy
            # As of its admission: a batch may admit newer instants after it
            # under an update that raised the limit. A backfill that overrides
            # the policy counts its own runs only (rule Q).
            active = sum(
                seq <= occurrence.seq and (not allowed or other.origin == "backfill")
                for seq, other in self._tracks[schedule_id].open.items()
            )
            if active > limit:
                self._fail(
                    f"{schedule_id}: {active} open occurrences after admitting"
                    f" {occurrence.decision['instant']}; the limit is {limit}"
                )
        # A trigger takes a slot without waiting for one (rule P): a batch that
        # admits only triggers is not held to the bound (the slots may be
        # over it since the bound was lowered), and one that also admits
        # others is held to it without its own triggers, which may have come
        # after them.
        triggers = [occurrence for _, occurrence in admitted if occurrence.origin == "trigger"]
        if len(triggers) == len(admitted):
            return
        holding = sum(
            not occurrence.interrupted and all(occurrence is not t for t in triggers)
            for track in self._tracks.values()
            for occurrence in track.open.values()
        )
        if holding > self.capacity:
            listed = ", ".join(f"{s}@{o.decision['instant']}" for s, o in admitted)
            self._fail(
                f"{holding} occurrences hold an execution slot after admitting {listed};"
                f" max_concurrent_runs is {self.capacity}"
            )

    # --- run records (HostObserver) -----------------------------------------------------------

    def run_written(self, record: Mapping[str, Any], what: str) -> None:
        run_id = record["run_id"]
        origin = record.get("origin")
        if what == "admitted" and isinstance(origin, Mapping):
            self._check_new_run(run_id, origin)
        self._runs[run_id] = dict(record)
        if record["status"] in _ACTIVE:
            self._active_runs.add(run_id)
        else:
            self._active_runs.discard(run_id)

    def _check_new_run(self, run_id: str, origin: Mapping[str, Any]) -> None:
        schedule_id = origin["schedule_id"]
        instant = parse_instant(origin["instant"])
        where = f"run {run_id} of {schedule_id}@{origin['instant']}"
        other = self._origins.setdefault((schedule_id, instant), run_id)
        if other != run_id:
            self._fail(f"{where}: the occurrence was admitted twice (its run is {other})")
        track = self._tracks.get(schedule_id)
        occurrence = track.admitted.get(instant) if track is not None else None
        if occurrence is None or occurrence.decision.get("run_id") != run_id:
            self._fail(f"{where}: created before its admitted row (with this run id) was durable")
        action = origin.get("action")
        if occurrence is not None and occurrence.origin != action:
            self._fail(f"{where}: a run of origin {action} for a {occurrence.origin} occurrence")
        allowed = occurrence is not None and occurrence.override == "allow"
        payload = self._revision(self._lifecycle(schedule_id), origin.get("revision") or 0)
        if payload is not None and not (allowed and action == "trigger"):
            # Judged as of its admission: a run a start creates for an
            # admitted row of before a crash may find runs its schedule
            # admitted since, under a later revision and its own limit.
            limit = self._definition(payload).active_run_limit
            active = 1 + sum(
                self._runs[r]["origin"]["schedule_id"] == schedule_id
                and run_number(r) < run_number(run_id)
                and (not allowed or self._runs[r]["origin"].get("action") == "backfill")
                for r in self._active_runs
            )
            if active > limit:
                self._fail(f"{where}: {active} active runs; the limit is {limit}")
        if action == "trigger":
            return  # rule P: a trigger does not wait for a slot
        # The triggers' runs may hold slots above the bound (rule P); the others
        # stay within it.
        holding = 1 + sum(
            (
                self._runs[r]["status"] == "admitted"
                or (self._runs[r]["status"] == "running" and self._runs[r]["attempt"] == 1)
            )
            and self._runs[r]["origin"].get("action") != "trigger"
            for r in self._active_runs
        )
        if holding > self.capacity:
            self._fail(
                f"{where}: {holding} runs hold an execution slot;"
                f" max_concurrent_runs is {self.capacity}"
            )

    def run_records(self) -> dict[str, dict[str, Any]]:
        """The latest record of every run written so far, by id."""
        return dict(self._runs)

    # --- after a settled step ----------------------------------------------------------------

    def check_settled(self, state: SchedulerState) -> None:
        """The service, its history and the run store agree (see the module docstring)."""
        for run_id in sorted(self._active_runs):
            run = self._runs[run_id]
            origin = run["origin"]
            where = f"run {run_id} of {origin['schedule_id']}@{origin['instant']}"
            if run["status"] == "admitted":
                self._fail(f"{where}: admitted but never launched")
            track = self._tracks.get(origin["schedule_id"])
            occurrence = (
                track.admitted.get(parse_instant(origin["instant"])) if track is not None else None
            )
            if occurrence is None or occurrence.terminal_rows:
                self._fail(f"{where}: {run['status']} but its occurrence is not open")
        for schedule_id, track in sorted(self._tracks.items()):
            known = schedule_id in state.schedules
            view = schedule_view(state, schedule_id).active if known else {}
            for seq, occurrence in sorted(track.open.items()):
                where = f"{schedule_id} seq {seq} ({occurrence.decision['instant']})"
                stored = self._runs.get(occurrence.run_id or "")
                if stored is None:
                    self._fail(f"{where}: admitted but its run {occurrence.run_id} does not exist")
                elif stored["status"] != occurrence.status:
                    self._fail(
                        f"{where}: history says {occurrence.status} but run {stored['run_id']}"
                        f" is {stored['status']}"
                    )
                seen = view.get(occurrence.instant)
                if seen != (occurrence.run_id, occurrence.status):
                    self._fail(f"{where}: the service tracks it as {seen}")
            extra = set(view) - {o.instant for o in track.open.values()}
            if extra:
                listed = ", ".join(format_instant(t) for t in sorted(extra))
                self._fail(f"{schedule_id}: the service tracks runs no history row opens: {listed}")
            if known:
                self._check_backfill_progress(schedule_id, track, state)

    def _check_backfill_progress(
        self, schedule_id: str, track: _Track, state: SchedulerState
    ) -> None:
        """A backfill's progress (rule Q) says what the history shows: as
        many instants admitted as it decided rows since its request, none of
        its remaining instants decided, and a done one ended no earlier than
        its last row."""
        backfill = schedule_view(state, schedule_id).backfill
        if backfill is None:
            return
        where = f"{schedule_id}: backfill requested at {format_instant(backfill.requested_at)}"
        if backfill.admitted + len(backfill.remaining) != backfill.planned:
            self._fail(
                f"{where}: {backfill.admitted} admitted and {len(backfill.remaining)} remaining"
                f" of {backfill.planned} planned"
            )
        now = self._timeline.now
        # The request's stamp is its reading; its end is a round's stamp.
        requested = self._timeline.moment_of(backfill.requested_at)
        if requested is None:
            self._fail(f"{where}: a time the clock never showed")
            return
        rows = [
            occurrence
            for occurrence in track.occurrences
            if occurrence.origin == "backfill"
            and backfill.start <= occurrence.instant < backfill.end
            and occurrence.decided is not None
            and occurrence.decided >= requested
        ]
        # A row of an earlier backfill may share its moment with this request
        # (a cancel and a new request in one step): it is counted at most.
        after = sum(o.decided is not None and o.decided > requested for o in rows)
        if not after <= backfill.admitted <= len(rows):
            self._fail(f"{where}: says {backfill.admitted} admitted; the history shows {len(rows)}")
        decided = {o.instant for o in rows} | {
            o.instant for o in track.occurrences if o.status == "admitted" or o.run_id
        }
        again = [t for t in backfill.remaining if t in decided]
        if again:
            self._fail(f"{where}: {format_instant(again[0])} remains, and was decided already")
        if backfill.state != "done" or not rows:
            return
        ended_at = backfill.ended_at
        ended: datetime | None
        if ended_at == backfill.requested_at:
            if self._timeline.went_behind(backfill.requested_at, requested, now):
                # An end on a clock set back behind the request says the
                # request's time (`Backfill._ended`): no moment to judge it by.
                return
            ended = requested
        else:
            ended = None if ended_at is None else self._timeline.decided_at(ended_at, now)
        # `rows` holds decided occurrences only.
        last = max(rows, key=lambda o: o.decided or requested)
        if ended is None or ended < (last.decided or requested):
            self._fail(
                f"{where}: done, ended at {backfill.ended_at}, before its last admission"
                f" at {last.decision['recorded_at']}"
            )

    # --- at the end -------------------------------------------------------------------------

    def check_final(self) -> None:
        """Every occurrence ended exactly once; every instant was decided exactly once."""
        for schedule_id in sorted(self._disk.schedules):
            track = self._tracks.get(schedule_id, _Track())
            for occurrence in track.occurrences:
                if occurrence.terminal_rows != 1:
                    self._fail(
                        f"{schedule_id} seq {occurrence.seq} ({occurrence.decision['instant']}):"
                        f" {occurrence.terminal_rows} terminal rows (last status"
                        f" {occurrence.status})"
                    )
            self._check_coverage(schedule_id, track)
            self._check_requests(schedule_id, track)
        for run_id in sorted(self._runs):
            run = self._runs[run_id]
            origin = run["origin"]
            if run["status"] not in TERMINAL_RUN_STATUSES:
                self._fail(f"run {run_id}: still {run['status']} at the end")
            owner = self._tracks.get(origin["schedule_id"])
            admitted = (
                owner.admitted.get(parse_instant(origin["instant"])) if owner is not None else None
            )
            if admitted is None or admitted.run_id != run_id:
                self._fail(f"run {run_id}: no admitted occurrence references it")

    def _check_coverage(self, schedule_id: str, track: _Track) -> None:
        expected = self._expected_instants(schedule_id)
        if expected is None:
            return
        covered: dict[datetime, int] = {}
        for occurrence in track.occurrences:
            if occurrence.origin is not None:
                continue  # an operator's occurrence, not the calendar's decision
            row = occurrence.decision
            count = row.get("count", 1)
            if count == 1:
                instants = [occurrence.instant]
            else:
                first = parse_instant(row["first_instant"])
                instants = [t for t in expected if first <= t <= occurrence.instant]
                if len(instants) != count:
                    self._fail(
                        f"{schedule_id} seq {occurrence.seq}: a row for {count} instants"
                        f" spans {len(instants)} trigger instants"
                    )
            for instant in instants:
                covered[instant] = covered.get(instant, 0) + 1
        lost = [t for t in expected if covered.get(t, 0) == 0]
        twice = [t for t, n in covered.items() if n > 1]
        invented = [t for t in covered if t not in expected]
        for what, instants in (("never decided", lost), ("decided twice", twice)):
            if instants:
                listed = ", ".join(format_instant(t) for t in sorted(instants)[:5])
                self._fail(f"{schedule_id}: {len(instants)} instant(s) {what}: {listed}")
        if invented:
            listed = ", ".join(format_instant(t) for t in sorted(invented)[:5])
            self._fail(f"{schedule_id}: rows for instants of no active span: {listed}")

    def _check_requests(self, schedule_id: str, track: _Track) -> None:
        """Every trigger request durable in the lifecycle log was decided once
        (admitted or skipped), and no trigger row names another request."""
        requests = {r.seq for r in self._lifecycle(schedule_id) if r.kind == "triggered"}
        decided: dict[int, int] = {}
        for occurrence in track.occurrences:
            if occurrence.origin == "trigger":
                request = int(occurrence.decision.get("request", -1))
                decided[request] = decided.get(request, 0) + 1
        lost = sorted(requests - set(decided))
        twice = sorted(seq for seq, n in decided.items() if n > 1)
        invented = sorted(seq for seq in decided if seq not in requests)
        for what, seqs in (
            ("never decided", lost),
            ("decided twice", twice),
            ("decided with no such request", invented),
        ):
            if seqs:
                self._fail(f"{schedule_id}: trigger request(s) {what}: {seqs[:5]}")

    def _expected_instants(self, schedule_id: str) -> set[datetime] | None:
        """Trigger instants `decide` took (`_Calendar`): each the clock came to
        while the schedule was active, once; None while it is still active
        (the end of the simulation ends every span)."""
        model = self._calendar(schedule_id, self._lifecycle(schedule_id), final=True)
        if model.definition is not None and not model.paused and not model.deleted:
            self._fail(f"{schedule_id}: still active at the end of the simulation")
            return None
        return set(model.taken)
