"""The guarantees the simulation checks, against the durable truth.

`InvariantChecker` watches every history line that becomes durable (through
the `SimDisk`) and every run record the run API writes, and keeps its own
naive model of both; it never asks the service what it thinks, except to
compare (`check_settled`). A broken rule is appended to `violations` (the
hooks run inside the service's own calls, so raising there would only be
logged by the service's loop); the driver stops at the first one.

Checked as rows become durable:

- *once*: calendar decision instants strictly increase (a row for several
  missed instants counts from its first), and so do triggers' among
  themselves; seqs are dense; an instant is admitted at most once, whoever
  admits it (the calendar, a backfill, a trigger); an occurrence gets at
  most one terminal row;
- *admissions* (`admitted` rows): the schedule existed and was neither paused
  nor deleted at the instant, no pause or delete came between the instant and
  the admission, the instant is a trigger instant of the definition in force
  then, and the snapshot is that definition's (deployment, resolved inputs,
  max steps). A trigger's row (rule P) names a durable request, is at the
  request's moment (moved on by microseconds, never onto a calendar
  instant), at the revision in force then, for a schedule not deleted, and
  admitted within the allowance after the request; one not admitted was
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
occurrence has exactly one terminal row; every trigger instant of every
active span of every schedule is covered by exactly one calendar decision
row (none lost, none invented); every trigger request is decided exactly
once; every run is referenced by its occurrence.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
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


class InvariantChecker:
    """See the module docstring."""

    def __init__(self, disk: SimDisk, *, capacity: int) -> None:
        self._disk = disk
        self.capacity = capacity
        self.violations: list[str] = []
        self._tracks: dict[str, _Track] = {}
        self._runs: dict[str, dict[str, Any]] = {}
        self._active_runs: set[str] = set()
        self._origins: dict[tuple[str, datetime], str] = {}
        self._triggers: dict[str, CompiledTrigger] = {}
        self._definitions: dict[str, ScheduleDefinition] = {}
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
            records.append(
                _Record(
                    raw["seq"],
                    raw["kind"],
                    parse_instant(raw["at"]),
                    raw["revision"],
                    raw.get("definition"),
                    raw.get("action"),
                )
            )
        return records

    @classmethod
    def _fold_before(cls, records: Sequence[_Record], instant: datetime) -> _Fold | None:
        return cls._fold(record for record in records if record.at < instant)

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
            if origin is None:
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
                seq, row, instant, row["status"], row.get("run_id"), origin=origin
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
            self._check_trigger_admission(where, records, occurrence)
        elif occurrence.origin == "backfill":
            self._check_backfill_admission(where, records, occurrence)
        else:
            self._check_calendar_admission(where, records, occurrence)
        self._check_snapshot(where, records, occurrence)

    def _check_calendar_admission(
        self, where: str, records: Sequence[_Record], occurrence: _Occurrence
    ) -> None:
        row = occurrence.decision
        instant = occurrence.instant
        recorded = parse_instant(row["recorded_at"])
        fold = self._fold_before(records, instant)
        if fold is None:
            self._fail(f"{where}: admitted an instant before the schedule was created")
            return
        if fold.deleted or fold.paused:
            state = "deleted" if fold.deleted else "paused"
            self._fail(f"{where}: admitted an instant at which the schedule was {state}")
            return
        for record in records:
            if record.kind in ("paused", "deleted") and instant <= record.at < recorded:
                self._fail(
                    f"{where}: admitted at {row['recorded_at']} although the schedule was"
                    f" {record.kind} at {format_instant(record.at)}"
                )
        if self._trigger(fold.definition).next_after(instant - _TICK) != instant:
            self._fail(f"{where}: not an instant of the trigger in force then")

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
        self, where: str, records: Sequence[_Record], occurrence: _Occurrence
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
        if not request.at <= instant < request.at + _TRIGGER_DRIFT:
            self._fail(f"{where}: not at its request's moment {format_instant(request.at)}")
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
        recorded = parse_instant(row["recorded_at"])
        request = None
        for record in records:
            if record.kind == "backfill" and record.at <= recorded:
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
                and record.at < recorded
            ):
                self._fail(
                    f"{where}: admitted at {row['recorded_at']} after the backfill ended"
                    f" ({record.kind} at {format_instant(record.at)})"
                )
        state = self._fold_before(records, recorded)
        resumed_then = any(r.kind == "resumed" and r.at == recorded for r in records)
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
        rows = [
            occurrence.decision
            for occurrence in track.occurrences
            if occurrence.origin == "backfill"
            and backfill.start <= occurrence.instant < backfill.end
            and parse_instant(occurrence.decision["recorded_at"]) >= backfill.requested_at
        ]
        # A row of an earlier backfill may share its moment with this request
        # (a cancel and a new request in one step): it is counted at most.
        after = sum(parse_instant(r["recorded_at"]) > backfill.requested_at for r in rows)
        if not after <= backfill.admitted <= len(rows):
            self._fail(f"{where}: says {backfill.admitted} admitted; the history shows {len(rows)}")
        decided = {parse_instant(r["instant"]) for r in rows} | {
            o.instant for o in track.occurrences if o.status == "admitted" or o.run_id
        }
        again = [t for t in backfill.remaining if t in decided]
        if again:
            self._fail(f"{where}: {format_instant(again[0])} remains, and was decided already")
        if backfill.state == "done" and rows:
            last = max(parse_instant(r["recorded_at"]) for r in rows)
            if backfill.ended_at is None or backfill.ended_at < last:
                self._fail(
                    f"{where}: done, ended at {backfill.ended_at}, before its last admission"
                    f" at {format_instant(last)}"
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
        """Trigger instants of every span in which the schedule was active; None
        while it is still active (the end of the simulation ends every span)."""
        expected: set[datetime] = set()
        definition: dict[str, Any] | None = None
        paused = deleted = False
        start: datetime | None = None
        for record in self._lifecycle(schedule_id):
            if definition is not None and start is not None and not paused and not deleted:
                trigger = self._trigger(definition)
                instant = trigger.next_after(start)
                while instant is not None and instant <= record.at:
                    expected.add(instant)
                    instant = trigger.next_after(instant)
            if record.kind in ("created", "updated"):
                definition = record.definition
                start = record.at
            elif record.kind == "paused":
                paused = True
            elif record.kind == "resumed":
                paused, start = False, record.at
            elif record.kind == "deleted":
                deleted = True
        if definition is not None and not paused and not deleted:
            self._fail(f"{schedule_id}: still active at the end of the simulation")
            return None
        return expected
