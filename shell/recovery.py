"""Startup recovery: the scheduler's stores and the run API, read back into events.

A start (and a rebuild after a failed round) must turn what the lifecycle
log, the runtime record, the history and the run records say into the
events `decide` rebuilds its state from, and must find where they contradict
each other, so that a schedule whose records disagree is blocked instead of
deciding again what was already decided. That is a large job with one
concern of its own, so it lives here and not in the loop of
`shell/service.py`; no scheduling rule lives here either.

It depends on the store ports alone (`shell.store_ports`): a backend that
keeps no startup checkpoint simply never hands it one.

What the service keeps between rounds besides the events (consumed
lifecycle seqs, the schedules whose consumed seq must become durable, the
schedules still without a runtime record, the runtime marks, the checkpoint
entries taken) comes back in a `Recovered` value. A recovery that fails
part-way raises, and `found` still holds what it had found, which the
service keeps, as it did when recovery was part of it. `lifecycle_event`
and `RuntimeMark` are exported because the loop reads the same records
after the start and must read them the same way.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from core.definitions import parse_definition
from core.errors import InvalidDefinition, NotFound, SchedulingError
from core.events import (
    Event,
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
from core.lifecycle import LifecycleRefusal, apply_record
from core.recovery_checks import OpenAdmission, RunClaim, claim_problems, recovered_run
from shell.history_store import HistoryRecovery, OpenOccurrence
from shell.ports import HostApi
from shell.runtime_store import RuntimeLoad
from shell.schedules_api import SchedulesApi, unchecked_run_reads
from shell.startup_checkpoint import CachedSchedule, UnchangedParts
from shell.store_format import (
    ScheduleFiles,
    StoreDamaged,
    StoreProblem,
    parse_instant,
)

__all__ = ["Recovered", "RuntimeMark", "StartupRecovery", "lifecycle_event"]

# The service's logger: recovery was part of the service, and operators'
# filters and the JSON log's logger field name it.
_log = logging.getLogger("shell.service")


# What a runtime record says besides its watermark: (held, waiting, lifecycle_seq).
RuntimeMark = tuple[datetime | None, tuple[datetime, ...], int]


@dataclass(frozen=True, slots=True, kw_only=True)
class Recovered:
    """What one recovery found, for the service to keep."""

    # The events that rebuild every schedule, in schedule order.
    events: tuple[Event, ...]
    # Per schedule, the seq of the last lifecycle record the events carry.
    consumed: Mapping[str, int]
    # Schedules whose consumed seq the next round must make durable.
    consumed_now: frozenset[str]
    # Schedules without a runtime record yet: (id, creation instant).
    unseeded: tuple[tuple[str, str], ...]
    # Per schedule, what its durable runtime record says.
    runtime_marks: Mapping[str, RuntimeMark]
    # The checkpoint entries taken as they were (unchanged files), kept for
    # the next checkpoint.
    reused: Mapping[str, CachedSchedule]


def _runtime_mark(record: Mapping[str, Any]) -> RuntimeMark:
    held = parse_instant(record["held"]) if record.get("held") else None
    waiting = tuple(sorted(parse_instant(text) for text in record.get("waiting", ())))
    return (held, waiting, int(record["lifecycle_seq"]))


def lifecycle_event(schedule_id: str, record: Mapping[str, Any]) -> Event:
    at = parse_instant(record["at"])
    kind = record["kind"]
    if kind == "created":
        return ScheduleCreated(
            definition=parse_definition(record["definition"]), at=at, revision=record["revision"]
        )
    if kind == "updated":
        return ScheduleUpdated(
            definition=parse_definition(record["definition"]), revision=record["revision"], at=at
        )
    if kind == "paused":
        return SchedulePaused(schedule_id=schedule_id, at=at)
    if kind == "resumed":
        return ScheduleResumed(schedule_id=schedule_id, at=at)
    if kind == "deleted":
        return ScheduleDeleted(schedule_id=schedule_id, at=at)
    raise ValueError(f"unknown lifecycle record kind {kind!r}")


def _fold(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The lifecycle fields (`core.lifecycle.LIFECYCLE_FIELDS`, instants as
    text) after `records`, applied by `core.lifecycle`'s rules (the ones the
    definition store checked them with); raises ValueError naming a record
    that does not follow."""
    state: dict[str, Any] | None = None
    for record in records:
        applied = apply_record(state, record)
        if isinstance(applied, LifecycleRefusal):
            raise ValueError(f"{applied.record}: {applied.reason}")
        state = applied
    if state is None:
        raise ValueError("no lifecycle record to fold")
    return state


def _instant_or_none(text: str | None) -> datetime | None:
    return parse_instant(text) if text is not None else None


def _missed_reports(
    schedule_id: str, occurrences: Sequence[Any], runs: Sequence[RecoveredRun]
) -> list[Event]:
    """Status reports the history missed: the process died after the run's
    checkpoint and before its report was recorded (an interruption), or a
    round failed with the report in it (a start or a resume, found when the
    state is rebuilt while the run executes). `decide` keeps a recovered
    running or interrupted run without recording anything, so report them
    again, as the lost round would have."""
    return [
        RunStatusChanged(
            schedule_id=schedule_id,
            instant=run.instant,
            run_id=run.run_id,
            status=run.status,
            message=run.message,
        )
        for occurrence, run in zip(occurrences, runs, strict=True)
        if run.status in ("running", "interrupted")
        and run.run_id is not None
        and occurrence.status != run.status
    ]


class _Inputs(NamedTuple):
    """What a schedule's recovery reads from its files."""

    records: tuple[dict[str, Any], ...]
    runtime: RuntimeLoad
    recovered: HistoryRecovery
    load_problems: tuple[StoreProblem, ...]
    # The block definition.json records, if any.
    stored_block: Mapping[str, Any] | None


def _run_number(run_id: str) -> int | None:
    # Host run ids end in their number (run-000042) and sort by it.
    match = re.search(r"(\d+)$", run_id)
    return int(match.group(1)) if match else None


def _run_file(run_id: str) -> str:
    # The host keeps one record per run under <store_root>/runs (docs/host.md).
    return f"runs/{run_id}.json"


def _claim_problems(
    schedule_id: str, claims: Sequence[RunClaim], recovered: HistoryRecovery
) -> list[StoreProblem]:
    """`core.recovery_checks.claim_problems` on what the history store read,
    each naming the claiming run's record file."""
    if not claims:
        return []  # nothing claims anything: no contradiction (most schedules)
    open_runs = {parse_instant(o.instant): o.run_id for o in recovered.open_occurrences}
    last = recovered.last_decided_instant
    found = claim_problems(
        schedule_id, claims, open_runs, parse_instant(last) if last is not None else None
    )
    return [
        StoreProblem(
            schedule_id=schedule_id,
            file=_run_file(problem.run_id),
            record=problem.record,
            reason=problem.reason,
        )
        for problem in found
    ]


class StartupRecovery:
    """One recovery of every schedule of a store root. See the module docstring.

    `block_unknown` and `damaged_record` are the service's: a schedule is
    blocked, and damage reported, the same way whether a start or a round
    finds it.
    """

    def __init__(
        self,
        *,
        host: HostApi,
        schedules: SchedulesApi,
        block_unknown: Callable[[str, StoreProblem], None],
        damaged_record: Callable[[str, Mapping[str, Any], str], list[Event]],
        checkpoint: Mapping[str, CachedSchedule] | None = None,
    ) -> None:
        self._host = host
        self._api = schedules
        self._block_unknown = block_unknown
        self._damaged_record = damaged_record
        self._events: list[Event] = []
        self._consumed: dict[str, int] = {}
        self._consumed_now: set[str] = set()
        self._unseeded: list[tuple[str, str]] = []
        self._runtime_marks: dict[str, RuntimeMark] = {}
        # The last checkpoint's entries, taken instead of reading a schedule's
        # files when they have not changed, and those taken, for the next
        # checkpoint.
        self._checkpoint = dict(checkpoint) if checkpoint is not None else {}
        self._reused: dict[str, CachedSchedule] = {}
        self._root = os.fspath(schedules.definitions.store_root)
        # Only a backend with upkeep keeps a checkpoint, and it says what the
        # entries' identities are now.
        self._upkeep = schedules.upkeep
        # Run ids that admitted rows name but no run record holds: their runs
        # are created next, so the run-id counter is moved past them.
        self._orphans: list[str] = []

    @property
    def found(self) -> Recovered:
        """What this recovery has found so far (all of it once `recover` returns)."""
        return Recovered(
            events=tuple(self._events),
            consumed=dict(self._consumed),
            consumed_now=frozenset(self._consumed_now),
            unseeded=tuple(self._unseeded),
            runtime_marks=dict(self._runtime_marks),
            reused=dict(self._reused),
        )

    async def recover(self) -> Recovered:
        """Recover every schedule, in schedule order. Call once."""
        # A checkpointed schedule's files are checked one by one next.
        ids = self._api.definitions.list_ids(present=self._checkpoint.keys())
        claims = await self._run_claims(set(ids))
        for schedule_id in ids:
            self._events.extend(
                await self._recover_schedule(schedule_id, claims.get(schedule_id, []))
            )
        await self._reserve_past(self._orphans)
        return self.found

    async def _reserve_past(self, run_ids: Sequence[str]) -> None:
        """Move the host's run-id counter past `run_ids`, which admitted rows name
        and whose runs are created next. A damaged counter is repaired from the
        run records alone and may have fallen behind them: a new admission must
        never be handed one of these ids."""
        numbered = {_run_number(r): r for r in run_ids}
        wanted = max((n for n in numbered if n is not None), default=None)
        if wanted is None:
            return
        last = _run_number((await self._host.reserve_run_ids(1))[0]) or 0
        if last <= wanted:  # it had not issued `wanted` yet
            _log.warning(
                "the run-id counter was behind %s, which an admitted occurrence holds;"
                " reserving past it",
                numbered[wanted],
            )
        while last < wanted:
            # The host reserves at most 1000 ids per call.
            reserved = await self._host.reserve_run_ids(min(1000, wanted - last))
            last = _run_number(reserved[-1]) or wanted

    async def _run_claims(self, known: set[str]) -> dict[str, list[RunClaim]]:
        """Every run whose origin names a schedule, by schedule, oldest run first."""
        claims: dict[str, list[RunClaim]] = {}
        cursor: str | None = None
        while True:
            page = await self._host.list_runs(cursor=cursor, limit=100)
            for run in page["runs"]:
                origin = run.get("origin")
                if not isinstance(origin, Mapping) or origin.get("kind") != "schedule":
                    continue
                schedule_id = origin.get("schedule_id")
                if schedule_id not in known:
                    _log.warning(
                        "run %s claims schedule %r, which does not exist",
                        run["run_id"],
                        schedule_id,
                    )
                    continue
                claims.setdefault(schedule_id, []).append(
                    RunClaim(run["run_id"], parse_instant(origin["instant"]), run["status"])
                )
            cursor = page["next_cursor"]
            if cursor is None:
                return claims

    def _read_inputs(
        self, schedule_id: str, files: ScheduleFiles, *, full_scan: bool = False
    ) -> _Inputs | None:
        """Read the schedule's files; None when there is nothing to recover
        (the schedule is gone, incomplete, or blocked as unknown here).
        `full_scan`: read the history whole (see `_recover_history`)."""
        definitions = self._api.definitions
        # (Temp files of atomic writes a crash interrupted are never read as
        # the truth; the service sweeps them once the start is over.)
        # The snapshot is a cache of the log, but damage to it blocks all the same;
        # loading as the owner drops a torn final lifecycle line, with a warning.
        try:
            records, found = definitions.read_for_recovery(schedule_id, repair=True)
        except StoreDamaged as exc:
            self._block_unknown(schedule_id, exc.problem)
            return None
        except NotFound:
            return None
        if not records or found is None:
            return None
        loaded = found
        runtime = self._api.runtime.load(schedule_id)
        recovered = self._recover_history(schedule_id, full_scan=full_scan)
        stored = loaded.snapshot.get("blocked") if loaded.snapshot is not None else None
        # Nothing is kept for the next checkpoint: the start must be quick,
        # and the checkpoint reads what it needs (`checkpoint_entries`).
        return _Inputs(records, runtime, recovered, loaded.problems, stored)

    def _recover_history(self, schedule_id: str, *, full_scan: bool) -> HistoryRecovery:
        """The history recovered; with `full_scan` (its log was written other
        than by appending since the last checkpoint described it) every row is
        read, not only those after the index checkpoint: damage written into
        it since is found now, not when a page reads it."""
        history = self._api.history
        if full_scan:
            _log.warning(
                "schedule %s: its history log was rewritten since the last checkpoint"
                " (not only appended to); reading it whole",
                schedule_id,
            )
            return history.recover(schedule_id, full_scan=True)
        return history.recover(schedule_id)

    def _cached_inputs(
        self,
        schedule_id: str,
        entry: CachedSchedule | None,
        unchanged: UnchangedParts | None,
        full_scan: bool,
    ) -> _Inputs | None:
        """The inputs as the last checkpoint recorded them, part by part: the
        lifecycle records if neither the lifecycle log nor the snapshot
        changed since (else None: the schedule is read whole), and the
        runtime record and the history state each from the checkpoint if
        its files did not change, else from the files (a schedule that fired
        since the checkpoint). See `shell/startup_checkpoint.py`."""
        history_store = self._api.history
        if entry is None or unchanged is None or not unchanged.lifecycle:
            return None
        try:
            records, cached_runtime, history = entry.parts()
            if not records:
                return None
            adopted = history_store.adopt_state(schedule_id, history) if unchanged.history else None
        except (ValueError, TypeError) as exc:
            _log.warning(
                "schedule %s: its startup checkpoint entry is unusable (%s); reading its files",
                schedule_id,
                exc,
            )
            return None
        recovered = (
            adopted
            if adopted is not None
            else self._recover_history(schedule_id, full_scan=full_scan)
        )
        if unchanged.runtime:
            runtime = RuntimeLoad(schedule_id=schedule_id, record=cached_runtime)
        else:
            runtime = self._api.runtime.load(schedule_id)
        # The next checkpoint reuses the parts whose files are unchanged.
        self._reused[schedule_id] = entry
        return _Inputs(records, runtime, recovered, (), None)

    async def _recover_schedule(self, schedule_id: str, claims: Sequence[RunClaim]) -> list[Event]:
        files = ScheduleFiles.of(self._root, schedule_id)
        entry = self._checkpoint.pop(schedule_id, None)
        unchanged: UnchangedParts | None = None
        full_scan = False
        if entry is not None and self._upkeep is not None:
            current = self._upkeep.current_identities(schedule_id)
            unchanged = entry.unchanged(current)
            full_scan = unchanged is not None and not unchanged.history
            full_scan = full_scan and entry.history_rewritten(current)
        inputs = self._cached_inputs(schedule_id, entry, unchanged, full_scan) or self._read_inputs(
            schedule_id, files, full_scan=full_scan
        )
        if inputs is None:
            return []
        records, runtime, recovered, load_problems, stored = inputs
        if runtime.record is not None and runtime.problem is None:
            self._runtime_marks[schedule_id] = _runtime_mark(runtime.record)
        problems = [*load_problems, *recovered.problems]
        if runtime.problem is not None:
            problems.append(runtime.problem)
        consumed = runtime.record["lifecycle_seq"] if runtime.record else 0
        if consumed > len(records):
            problems.append(
                StoreProblem(
                    schedule_id=schedule_id,
                    file=files.relative(files.runtime),
                    record=f"lifecycle_seq {consumed}",
                    reason=(
                        f"runtime consumed lifecycle seq {consumed}"
                        f" but the log ends at {len(records)}"
                    ),
                )
            )
            consumed = len(records)
        if consumed == 0 and (recovered.occurrences or runtime.problem is not None):
            # No usable runtime record, yet the history shows the scheduler knew
            # this schedule: fold the whole log so its open runs stay tracked (a
            # replay from creation would decide instants already decided again).
            consumed = len(records)
        if runtime.record is None and runtime.problem is None and recovered.open_occurrences:
            problems.append(
                StoreProblem(
                    schedule_id=schedule_id,
                    file=files.relative(files.runtime),
                    record="whole file",
                    reason="history holds admitted occurrences but the runtime record is missing",
                )
            )
        events: list[Event] = []
        if consumed == 0:
            replay = records
        else:
            try:
                folded = _fold(records[:consumed])
                definition = parse_definition(folded["definition"])
            except (InvalidDefinition, KeyError, ValueError) as exc:
                self._block_unknown(
                    schedule_id,
                    StoreProblem(
                        schedule_id=schedule_id,
                        file=f"schedules/{schedule_id}/lifecycle.jsonl",
                        record="definition",
                        reason=str(exc),
                    ),
                )
                return []
            record = runtime.record or {}
            held = parse_instant(record["held"]) if record.get("held") else None
            waiting = tuple(parse_instant(t) for t in record.get("waiting", ()))
            last_decided = (
                parse_instant(recovered.last_decided_instant)
                if recovered.last_decided_instant
                else None
            )
            active = []
            for occurrence in recovered.open_occurrences:
                run, problem = await self._recovered_run(schedule_id, occurrence, files)
                active.append(run)
                if problem is not None:
                    problems.append(problem)
            problems.extend(_claim_problems(schedule_id, claims, recovered))
            events.append(
                ScheduleRecovered(
                    # Blocked from the start: nothing of it is started or admitted.
                    blocked_reason=problems[0].describe() if problems else None,
                    definition=definition,
                    revision=folded["revision"],
                    created_at=parse_instant(folded["created_at"]),
                    watermark=parse_instant(record["watermark"]) if record else None,
                    last_decided_instant=last_decided,
                    held=held,
                    paused=folded["paused"],
                    deleted=folded["deleted"],
                    active_runs=tuple(active),
                    updated_at=_instant_or_none(folded["updated_at"]),
                    resumed_at=_instant_or_none(folded["resumed_at"]),
                    waiting=tuple(w for w in waiting if last_decided is None or w > last_decided),
                )
            )
            if not problems:
                events.extend(_missed_reports(schedule_id, recovered.open_occurrences, active))
            replay = records[consumed:]
        for record in replay:
            try:
                events.append(lifecycle_event(schedule_id, record))
            except (InvalidDefinition, ValueError, KeyError) as exc:
                events.extend(self._damaged_record(schedule_id, record, str(exc)))
                break
            self._consumed[schedule_id] = record["seq"]
            self._consumed_now.add(schedule_id)
        self._consumed.setdefault(schedule_id, consumed)
        if consumed == 0:
            problems.extend(_claim_problems(schedule_id, claims, recovered))
        for problem in problems:
            if not any(isinstance(e, ScheduleRecovered | ScheduleCreated) for e in events):
                self._block_unknown(schedule_id, problem)
                break
            events.append(
                RecordsContradicted(
                    schedule_id=schedule_id,
                    file=problem.file,
                    record=problem.record,
                    reason=problem.reason,
                )
            )
        if consumed == 0 and replay and not problems:
            self._unseeded.append((schedule_id, replay[0]["at"]))
        if stored is not None and not any(isinstance(e, RecordsContradicted) for e in events):
            events.extend(await self._lift_block(schedule_id, stored, files))
        return events

    async def _lift_block(
        self, schedule_id: str, stored: Mapping[str, Any], files: ScheduleFiles
    ) -> list[Event]:
        """A schedule blocked before is sound at this start: lift the block, and
        say so. Damage inside the history, and a finished run that disagrees
        with its row, are only found by reading them (startup reads the
        history's tail and its open occurrences' runs), so a block naming the
        history, its index or a run record is lifted only after a read of the
        whole history, each finished row checked against its run record,
        finds nothing."""
        file = stored.get("file")
        read_by_pages = ("", files.relative(files.history), files.relative(files.history_index))
        if file in read_by_pages or (isinstance(file, str) and file.startswith("runs/")):
            problem = await self._api.verify_history(schedule_id)
            if problem is not None:
                return [
                    RecordsContradicted(
                        schedule_id=schedule_id,
                        file=problem.file,
                        record=problem.record,
                        reason=problem.reason,
                    )
                ]
        _log.warning(
            "schedule %s: its records are sound at this start; lifting its block (%s: %s: %s)",
            schedule_id,
            stored.get("file"),
            stored.get("record"),
            stored.get("reason"),
        )
        try:
            self._api.definitions.set_blocked(schedule_id, None)
        except SchedulingError as exc:
            _log.error("could not clear the diagnostic of %s: %s", schedule_id, exc)
        return []

    async def _recovered_run(
        self, schedule_id: str, occurrence: OpenOccurrence, files: ScheduleFiles
    ) -> tuple[RecoveredRun, StoreProblem | None]:
        """The open occurrence's run as the run store has it, checked by
        `core.recovery_checks.recovered_run`, and the problem that blocks the
        schedule when the two contradict each other."""
        admission = OpenAdmission(
            instant=parse_instant(occurrence.instant),
            run_id=occurrence.run_id,
            status=occurrence.status,
            seq=occurrence.seq,
        )
        record: Mapping[str, Any] | None = None
        if occurrence.run_id is not None:
            try:
                with unchecked_run_reads():  # checked against the history here
                    record = await self._host.inspect_run(occurrence.run_id)
            except NotFound:
                record = None
            except SchedulingError as exc:
                kept = RecoveredRun(
                    instant=admission.instant,
                    run_id=occurrence.run_id,
                    status=occurrence.status,  # type: ignore[arg-type]
                )
                return kept, StoreProblem(
                    schedule_id=schedule_id,
                    file=_run_file(occurrence.run_id),
                    record="whole file",
                    reason=exc.message,
                )
        verdict = recovered_run(
            schedule_id, admission, record, history_name=files.relative(files.history)
        )
        if verdict.orphan is not None:
            self._orphans.append(verdict.orphan)
        problem = verdict.problem
        if problem is None:
            return verdict.run, None
        file = (
            files.relative(files.history)
            if problem.witness == "history"
            else _run_file(problem.run_id)
        )
        return verdict.run, StoreProblem(
            schedule_id=schedule_id, file=file, record=problem.record, reason=problem.reason
        )
