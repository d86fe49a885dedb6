"""Startup recovery: the scheduler's stores and the run API, read back into events.

A start (and a rebuild after a failed round) must turn what the lifecycle
log, the runtime record, the history and the run records say into the
events `decide` rebuilds its state from, and must find where they contradict
each other, so that a schedule whose records disagree is blocked instead of
deciding again what was already decided. That is a large job with one
concern of its own, so it lives here and not in the loop of
`shell/service.py`; no scheduling rule lives here either.

It depends on the store ports alone (`shell.store_ports`): the backend's
recovery reader says what each schedule's records are (the file backend
takes unchanged files from its startup checkpoint), and its `locate` names
where a contradiction was found.

What the service keeps between rounds besides the events (consumed
lifecycle seqs, the schedules whose consumed seq must become durable, the
schedules still without a runtime record, the runtime marks) comes back in
a `Recovered` value. A recovery that fails
part-way raises, and `found` still holds what it had found, which the
service keeps, as it did when recovery was part of it. `lifecycle_event`
and `RuntimeMark` are exported because the loop reads the same records
after the start and must read them the same way.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from core.definitions import parse_definition
from core.errors import InvalidDefinition, InvalidInput, NotFound, SchedulingError
from core.events import (
    BackfillCancelled,
    BackfillRequested,
    Event,
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
from core.lifecycle import OPERATOR_KINDS, LifecycleRefusal, apply_record
from core.operator_actions import Backfill, backfill_from_payload, check_overlap_override
from core.recovery_checks import (
    CheckedClaims,
    OpenAdmission,
    RunClaim,
    claim_problems,
    claimed_origin,
    claims_since,
    recovered_run,
)
from shell.history_store import HistoryRecovery, OpenOccurrence
from shell.ports import ClaimListingHost, HostApi
from shell.schedules_api import SchedulesApi, unchecked_run_reads
from shell.store_format import StoreProblem, parse_instant
from shell.store_ports import HistoryPort, ScheduleBackend, ScheduleInputs

__all__ = ["Recovered", "RuntimeMark", "StartupRecovery", "lifecycle_event", "with_history"]

# The service's logger: recovery was part of the service, and operators'
# filters and the JSON log's logger field name it.
_log = logging.getLogger("shell.service")


# What a runtime record says besides its watermark: (held, waiting,
# lifecycle_seq, backfill).
RuntimeMark = tuple[datetime | None, tuple[datetime, ...], int, Backfill | None]


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


def _runtime_mark(record: Mapping[str, Any]) -> RuntimeMark:
    held = parse_instant(record["held"]) if record.get("held") else None
    waiting = tuple(sorted(parse_instant(text) for text in record.get("waiting", ())))
    backfill = record.get("backfill")
    return (
        held,
        waiting,
        int(record["lifecycle_seq"]),
        None if backfill is None else backfill_from_payload(backfill),
    )


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
    if kind in OPERATOR_KINDS:
        return _operator_event(schedule_id, kind, at, record["action"], record["seq"])
    raise ValueError(f"unknown lifecycle record kind {kind!r}")


def _operator_event(schedule_id: str, kind: str, at: datetime, action: Any, seq: int) -> Event:
    """The event of an operator's request (rules P, Q); a backfill's
    `decided` instants are read by `with_history` when it is delivered."""
    if not isinstance(action, Mapping):
        raise ValueError(f"a {kind} record needs an action object")
    try:
        overlap = check_overlap_override(action.get("overlap"), "action.overlap")
    except InvalidInput as bad:
        raise ValueError(str(bad)) from None
    if kind == "triggered":
        return ScheduleTriggered(schedule_id=schedule_id, at=at, overlap=overlap, request=seq)
    if kind == "backfill":
        return BackfillRequested(
            schedule_id=schedule_id,
            at=at,
            start=parse_instant(action["start"]),
            end=parse_instant(action["end"]),
            overlap=overlap,
        )
    return BackfillCancelled(schedule_id=schedule_id, at=at)


async def with_history(event: Event, history: HistoryPort) -> Event:
    """`event`, a backfill request given the instants of its range the
    history shows decided (read now, as it is delivered: a request replayed
    after a crash sees what it admitted before it)."""
    if not isinstance(event, BackfillRequested):
        return event
    decided = await history.backfill_decided(event.schedule_id, event.start, event.end)
    return replace(event, decided=decided)


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


def _run_number(run_id: str) -> int | None:
    # Host run ids end in their number (run-000042) and sort by it.
    match = re.search(r"(\d+)$", run_id)
    return int(match.group(1)) if match else None


def _claim_problems(
    backend: ScheduleBackend,
    schedule_id: str,
    claims: Sequence[RunClaim],
    recovered: HistoryRecovery,
) -> list[StoreProblem]:
    """`core.recovery_checks.claim_problems` on what the history store read,
    each naming the claiming run's record."""
    if not claims:
        return []  # nothing claims anything: no contradiction (most schedules)
    open_runs = {parse_instant(o.instant): o.run_id for o in recovered.open_occurrences}
    last = recovered.last_decided_instant
    last_trigger = recovered.last_trigger_instant
    found = claim_problems(
        schedule_id,
        claims,
        open_runs,
        parse_instant(last) if last is not None else None,
        parse_instant(last_trigger) if last_trigger is not None else None,
    )
    return [
        StoreProblem(
            schedule_id=schedule_id,
            file=backend.run_location(problem.run_id),
            record=problem.record,
            reason=problem.reason,
        )
        for problem in found
    ]


class StartupRecovery:
    """One recovery of every schedule of a store. See the module docstring.

    `block_unknown` and `damaged_record` are the service's: a schedule is
    blocked, and damage reported, the same way whether a start or a round
    finds it. `at_start`: a start's recovery (not a rebuild after a failed
    round), which may take what the last clean stop left for it.
    """

    def __init__(
        self,
        *,
        host: HostApi,
        schedules: SchedulesApi,
        block_unknown: Callable[[str, StoreProblem], Awaitable[None]],
        damaged_record: Callable[[str, Mapping[str, Any], str], Awaitable[list[Event]]],
        at_start: bool = False,
    ) -> None:
        self._host = host
        self._api = schedules
        self._backend = schedules.backend
        self._block_unknown = block_unknown
        self._damaged_record = damaged_record
        self._at_start = at_start
        self._events: list[Event] = []
        self._consumed: dict[str, int] = {}
        self._consumed_now: set[str] = set()
        self._unseeded: list[tuple[str, str]] = []
        self._runtime_marks: dict[str, RuntimeMark] = {}
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
        )

    async def recover(self) -> Recovered:
        """Recover every schedule, in schedule order. Call once."""
        reader = self._backend.recovery_reader(at_start=self._at_start)
        ids = await reader.schedule_ids()
        claims = await self._run_claims(set(ids), reader.checked_claims())
        for schedule_id in ids:
            read = await reader.read(schedule_id)
            if read is None:
                continue
            if isinstance(read, StoreProblem):
                await self._block_unknown(schedule_id, read)
                continue
            self._events.extend(
                await self._recover_schedule(schedule_id, read, claims.get(schedule_id, []))
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

    async def _run_claims(
        self, known: set[str], checked: CheckedClaims
    ) -> dict[str, list[RunClaim]]:
        """The runs whose origin names a schedule, by schedule, oldest run
        first: every run, or where the host can list them so, those written
        since the last checkpoint allows and the unfinished ones
        (`core.recovery_checks.claims_since`)."""
        claims: dict[str, list[RunClaim]] = {}
        host = self._host
        if not isinstance(host, ClaimListingHost):
            await self._page_claims(host.list_runs, known, claims)
            return claims
        since = claims_since(checked)
        changed = await host.changed_run_claims(since) if since is not None else None
        if changed is not None:
            self._add_claims(changed, known, claims)
        else:
            await self._page_claims(host.list_run_claims, known, claims)
        return claims

    async def _page_claims(
        self,
        list_page: Callable[..., Awaitable[dict[str, Any]]],
        known: set[str],
        claims: dict[str, list[RunClaim]],
    ) -> None:
        cursor: str | None = None
        while True:
            page = await list_page(cursor=cursor, limit=100)
            self._add_claims(page["runs"], known, claims)
            cursor = page["next_cursor"]
            if cursor is None:
                return

    @staticmethod
    def _add_claims(
        runs: Sequence[Mapping[str, Any]], known: set[str], claims: dict[str, list[RunClaim]]
    ) -> None:
        for run in runs:
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
                RunClaim(
                    run["run_id"],
                    parse_instant(origin["instant"]),
                    run["status"],
                    claimed_origin(origin) or "schedule",
                )
            )

    async def _recover_schedule(
        self, schedule_id: str, inputs: ScheduleInputs, claims: Sequence[RunClaim]
    ) -> list[Event]:
        backend = self._backend
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
                    file=backend.locate(schedule_id, "runtime"),
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
                    file=backend.locate(schedule_id, "runtime"),
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
                await self._block_unknown(
                    schedule_id,
                    StoreProblem(
                        schedule_id=schedule_id,
                        file=backend.locate(schedule_id, "lifecycle"),
                        record="definition",
                        reason=str(exc),
                    ),
                )
                return []
            record = runtime.record or {}
            backfill = backfill_from_payload(record["backfill"]) if record.get("backfill") else None
            backfill_decided: frozenset[datetime] = frozenset()
            if backfill is not None and backfill.state == "running":
                backfill_decided = await backend.history.backfill_decided(
                    schedule_id, backfill.start, backfill.end
                )
            held = parse_instant(record["held"]) if record.get("held") else None
            waiting_texts = record.get("waiting", ())
            last_decided = (
                parse_instant(recovered.last_decided_instant)
                if recovered.last_decided_instant
                else None
            )
            # Most schedules have nothing waiting: no generators built for them.
            waiting = (
                tuple(
                    w
                    for w in map(parse_instant, waiting_texts)
                    if last_decided is None or w > last_decided
                )
                if waiting_texts
                else ()
            )
            active = []
            for occurrence in recovered.open_occurrences:
                run, problem = await self._recovered_run(schedule_id, occurrence)
                active.append(run)
                if problem is not None:
                    problems.append(problem)
            problems.extend(_claim_problems(backend, schedule_id, claims, recovered))
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
                    waiting=waiting,
                    backfill=backfill,
                    backfill_decided=backfill_decided,
                    last_trigger=_instant_or_none(recovered.last_trigger_instant),
                    last_trigger_request=recovered.last_trigger_request,
                )
            )
            if active and not problems:
                events.extend(_missed_reports(schedule_id, recovered.open_occurrences, active))
            replay = records[consumed:]
        for record in replay:
            try:
                events.append(
                    await with_history(lifecycle_event(schedule_id, record), backend.history)
                )
            except (InvalidDefinition, ValueError, KeyError) as exc:
                events.extend(await self._damaged_record(schedule_id, record, str(exc)))
                break
            self._consumed[schedule_id] = record["seq"]
            self._consumed_now.add(schedule_id)
        self._consumed.setdefault(schedule_id, consumed)
        if consumed == 0:
            problems.extend(_claim_problems(backend, schedule_id, claims, recovered))
        for problem in problems:
            if not any(isinstance(e, ScheduleRecovered | ScheduleCreated) for e in events):
                await self._block_unknown(schedule_id, problem)
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
            events.extend(await self._lift_block(schedule_id, stored))
        return events

    async def _lift_block(self, schedule_id: str, stored: Mapping[str, Any]) -> list[Event]:
        """A schedule blocked before is sound at this start: lift the block, and
        say so. Damage inside the history, and a finished run that disagrees
        with its row, are only found by reading them (startup reads the
        history's tail and its open occurrences' runs), so a block naming the
        history, its index or a run record is lifted only after a read of the
        whole history, each finished row checked against its run record,
        finds nothing."""
        backend = self._backend
        file = stored.get("file")
        read_by_pages = (
            "",
            backend.locate(schedule_id, "history"),
            backend.locate(schedule_id, "history_index"),
        )
        if file in read_by_pages or (isinstance(file, str) and backend.is_run_location(file)):
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
            await backend.definitions.set_blocked(schedule_id, None)
        except SchedulingError as exc:
            _log.error("could not clear the diagnostic of %s: %s", schedule_id, exc)
        return []

    async def _recovered_run(
        self, schedule_id: str, occurrence: OpenOccurrence
    ) -> tuple[RecoveredRun, StoreProblem | None]:
        """The open occurrence's run as the run store has it, checked by
        `core.recovery_checks.recovered_run`, and the problem that blocks the
        schedule when the two contradict each other."""
        admission = OpenAdmission(
            instant=parse_instant(occurrence.instant),
            run_id=occurrence.run_id,
            status=occurrence.status,
            seq=occurrence.seq,
            origin=occurrence.origin,  # type: ignore[arg-type]
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
                    origin=admission.origin,
                )
                return kept, StoreProblem(
                    schedule_id=schedule_id,
                    file=self._backend.run_location(occurrence.run_id),
                    record="whole file",
                    reason=exc.message,
                )
        history_name = self._backend.locate(schedule_id, "history")
        verdict = recovered_run(schedule_id, admission, record, history_name=history_name)
        if verdict.orphan is not None:
            self._orphans.append(verdict.orphan)
        problem = verdict.problem
        if problem is None:
            return verdict.run, None
        file = (
            history_name
            if problem.witness == "history"
            else self._backend.run_location(problem.run_id)
        )
        return verdict.run, StoreProblem(
            schedule_id=schedule_id, file=file, record=problem.record, reason=problem.reason
        )
