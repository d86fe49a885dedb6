"""Carrying out `decide`'s commands: a round's group commit, then its runs.

`CommandExecutor.commit` makes what a round's commands write durable with one
group commit: history rows and runtime records are staged in command order,
preflight runs before an admission row is staged, run ids for all admissions
are reserved with one counter write (per `reserve_chunk` ids), then everything
is flushed together. A run whose record the round's own batch holds
(`StagingRunHost`) is launched by `commit` as soon as the batch is durable:
on files before the round's history files are written from the commit
journal (`ScheduleBackend.commit`'s `then`). `CommandExecutor.launch` then
creates and launches the other runs the committed round admitted (admitted
row -> run record -> executing mark). Nothing is launched before its row is
durable.

Staging goes through `_HANDLERS`, the table from command type to handler, as
`core/decide.py` has one from event type to handler: each handler is a method
of `_Staging`, the working set of one group commit (the batch, the preflight
verdicts, the reserved run ids, and what the round leaves for after it).

The executor is the service's (`shell/service.py`): it keeps no ledger of its
own between rounds. What it learns goes back through the service's
callbacks: the events it produces are queued with `emit` as they happen (a
launched run may report before the next event is queued), and a store that
refuses a schedule's write is reported with `refused`, which blocks the
schedule. No scheduling rule lives here: every decision is `decide`'s.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, TypeAlias

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
from core.errors import SchedulingError, StoreUnavailable
from core.events import (
    Event,
    OccurrenceAdmitted,
    PreflightFailed,
    RecordsContradicted,
    RunStatusChanged,
)
from core.occurrences import RUN_STATUSES
from core.operator_actions import backfill_to_payload
from shell.clock import Clock
from shell.observer import Decision, NullObserver, SchedulerObserver
from shell.ports import BatchRunHost, HostApi, StagingRunHost
from shell.recovery import RuntimeMark
from shell.schedules_api import RUN_NOT_CREATED, SchedulesApi
from shell.store_format import format_instant
from shell.store_ports import BatchPort, ScheduleBackend

__all__ = ["CommandExecutor", "CommittedRound", "StagedRound"]

# The service's own messages: operators and tests filter on its logger name.
_log = logging.getLogger("shell.service")


@dataclass(slots=True)
class CommittedRound:
    """What one round's commands produced for after the group commit."""

    launches: list[tuple[str, str, datetime, dict[str, Any], str]] = field(default_factory=list)
    # Per admitted run id, what the host made of its record staged in the
    # round's own batch (`StagingRunHost`): the run id, or why not.
    staged_runs: dict[str, str | SchedulingError] = field(default_factory=dict)
    creates: list[tuple[str, datetime]] = field(default_factory=list)
    starts: list[tuple[str, datetime, str]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    # Per schedule, the instant of the newest decision row staged in the batch.
    decided: dict[str, datetime] = field(default_factory=dict)
    # Runtime records staged in the batch: durable once it commits.
    runtime_marks: dict[str, RuntimeMark] = field(default_factory=dict)
    # The decision rows staged in the batch, for the observer once it commits.
    decisions: list[Decision] = field(default_factory=list)


@dataclass(slots=True)
class StagedRound:
    """A round staged in its batch and not committed yet (`CommandExecutor.stage`)."""

    batch: BatchPort
    after: CommittedRound
    # Schedules whose store refused a write: their rows are not in the batch.
    refused: set[str]
    runtime_marks: dict[str, RuntimeMark]
    # The run ids reserved for it: from the spares, and fresh ones.
    spare_ids: list[str]
    fresh_ids: list[str]


class CommandExecutor:
    """Carries out the commands of the service's rounds. See the module docstring."""

    def __init__(
        self,
        *,
        host: HostApi,
        schedules: SchedulesApi,
        clock: Clock,
        reserve_chunk: int,
        emit: Callable[[Event], None],
        refused: Callable[[str, SchedulingError], Awaitable[None]],
        observer: SchedulerObserver | None = None,
    ) -> None:
        self._observer: SchedulerObserver = observer or NullObserver()
        self._host = host
        self._api = schedules
        self._backend = schedules.backend
        self._clock = clock
        self._reserve_chunk = reserve_chunk
        self._emit = emit
        self._refused = refused
        # Run ids reserved for a round prepared ahead and dropped, in order:
        # the next rounds use them first, so a dropped round leaves no gap.
        self._spare_ids: list[str] = []

    async def commit(
        self,
        commands: Sequence[Command],
        now: datetime,
        *,
        consumed: Mapping[str, int],
        runtime_marks: dict[str, RuntimeMark],
        contradicted: Sequence[RecordsContradicted],
    ) -> CommittedRound:
        """Stage and commit what `commands` write; returns what is left to do
        once they are durable (see `launch`).

        `consumed` gives each schedule's consumed lifecycle seq, which its
        runtime record carries; `runtime_marks` what each schedule's last
        durable runtime record says, updated with the records this commit
        made durable; `contradicted` the round's RecordsContradicted events,
        whose file, record and reason a BlockSchedule's stored diagnostic
        keeps (the command carries only decide's text)."""
        if not commands and not contradicted:
            # An idle round (the loop looks every `poll_interval_s`): nothing
            # to write, so no batch, no flush and no commit observed.
            return CommittedRound()
        staged = await self.stage(
            commands,
            now,
            consumed=consumed,
            runtime_marks=runtime_marks,
            contradicted=contradicted,
        )
        assert staged is not None  # only a round staged ahead gives up
        return await self.finish(staged)

    async def stage(
        self,
        commands: Sequence[Command],
        now: datetime,
        *,
        consumed: Mapping[str, int],
        runtime_marks: dict[str, RuntimeMark],
        contradicted: Sequence[RecordsContradicted],
        ahead: bool = False,
    ) -> StagedRound | None:
        """The first part of `commit`: every write of `commands` staged in a
        new batch, nothing durable yet but the run ids reserved.

        `ahead`: the round is staged ahead of its instant (`now`, still to
        come), to be committed at it (`finish`) or dropped (`drop`). Such a
        round does nothing outside its batch: where a store refuses a write,
        or a block's diagnostic would be written, it gives up (None, the
        batch aborted) and the round at the instant does it all again. The
        run ids of a round given up or dropped are the next rounds' first
        (`_spare_ids`): preparing leaves no gap between run ids."""
        admits = [c for c in commands if isinstance(c, AdmitOccurrence)]
        verdicts = await self._preflight_all(admits)
        passing = [a for a in admits if verdicts[(a.schedule_id, a.instant)] is None]
        spare_ids, self._spare_ids = (
            self._spare_ids[: len(passing)],
            self._spare_ids[len(passing) :],
        )
        try:
            fresh_ids = await self._reserve_run_ids(len(passing) - len(spare_ids))
        except BaseException:
            self._give_back(spare_ids, [])
            raise
        staged: StagedRound | None = None
        try:
            staged = await self._stage_reserved(
                commands,
                now,
                verdicts,
                spare_ids,
                fresh_ids,
                consumed=consumed,
                runtime_marks=runtime_marks,
                contradicted=contradicted,
                ahead=ahead,
            )
        finally:
            if staged is None and ahead:
                # Nothing of a round staged ahead was written: its ids are unused.
                self._give_back(spare_ids, fresh_ids)
        return staged

    async def _stage_reserved(
        self,
        commands: Sequence[Command],
        now: datetime,
        verdicts: Mapping[tuple[str, datetime], str | None],
        spare_ids: list[str],
        fresh_ids: list[str],
        *,
        consumed: Mapping[str, int],
        runtime_marks: dict[str, RuntimeMark],
        contradicted: Sequence[RecordsContradicted],
        ahead: bool,
    ) -> StagedRound | None:
        """`stage` once the preflights ran and the run ids are reserved."""
        run_ids = iter([*spare_ids, *fresh_ids])
        after = CommittedRound()
        backend = self._backend
        batch = backend.new_batch()
        staging = _Staging(
            backend=backend,
            batch=batch,
            now=now,
            verdicts=verdicts,
            run_ids=run_ids,
            consumed=consumed,
            runtime_marks=runtime_marks,
            contradicted=contradicted,
            after=after,
        )
        # A schedule whose store refuses a write (a damaged history is frozen)
        # loses the rest of this round's writes, and only it does: it is blocked.
        refused: set[str] = set()
        try:
            for command in commands:
                schedule_id = getattr(command, "schedule_id", None)
                if schedule_id in refused and not isinstance(command, BlockSchedule):
                    # (A block writes nothing to the refusing store, and its
                    # diagnostic is what the operator must see.)
                    continue
                try:
                    staging.stage(command)
                except SchedulingError as exc:
                    if schedule_id is None or ahead:
                        raise
                    refused.add(schedule_id)
                    await self._refused(schedule_id, exc)
            if ahead and staging.blocks:
                batch.abort()
                return None
            # The diagnostics of the round's blocks, each written on its own.
            for block in staging.blocks:
                await self._persist_block(block, staging)
            self._stage_runs(batch, after, not_before=now if ahead else None)
        except SchedulingError:
            if batch.state == "open":
                batch.abort()
            if ahead:
                return None
            raise
        except BaseException:
            if batch.state == "open":
                batch.abort()
            raise
        return StagedRound(
            batch=batch,
            after=after,
            refused=refused,
            runtime_marks=runtime_marks,
            spare_ids=spare_ids,
            fresh_ids=fresh_ids,
        )

    async def finish(self, staged: StagedRound) -> CommittedRound:
        """The rest of `commit`: make the staged round durable, then launch the
        runs whose records its batch wrote."""
        batch, after, refused = staged.batch, staged.after, staged.refused
        runtime_marks = staged.runtime_marks
        began = time.perf_counter()

        async def durable() -> None:
            self._observer.committed(time.perf_counter() - began)
            runtime_marks.update(after.runtime_marks)
            # Only rows of schedules whose writes were not refused reached the
            # batch; durable now (a round prepared ahead was decided at its
            # instant, before this).
            self._observer.decided(
                [d for d in after.decisions if d.schedule_id not in refused], self._clock.now()
            )
            for event in after.events:
                self._emit(event)
            # The runs whose records the commit wrote start now: on files,
            # before the round's history files are written from the
            # journal (a herd's first firing creates them all).
            await self._launch_staged(after)

        try:
            await self._backend.commit(batch, durable)
        except BaseException:
            if batch.state == "open":
                batch.abort()
            raise
        return after

    def drop(self, staged: StagedRound) -> None:
        """Give up a staged round: nothing of its batch is written, and its
        run ids, reserved and unused, are the next rounds' first."""
        if staged.batch.state == "open":
            staged.batch.abort()
            self._give_back(staged.spare_ids, staged.fresh_ids)

    def _give_back(self, spare_ids: list[str], fresh_ids: list[str]) -> None:
        # The spares taken were the first, the fresh ones are above every spare.
        self._spare_ids = [*spare_ids, *self._spare_ids, *fresh_ids]

    def _stage_runs(
        self, batch: BatchPort, after: CommittedRound, *, not_before: datetime | None
    ) -> None:
        """The admitted run records into the round's own batch, when the host
        can write there: each admission and its run record then commit
        together (`StagingRunHost`)."""
        if not after.launches or not isinstance(self._host, StagingRunHost):
            return
        outcomes = self._host.stage_admit_runs(
            batch,
            [_admission_request(*launch) for launch in after.launches],
            not_before=not_before,
        )
        if outcomes is None:
            return
        for (_, run_id, _, _, _), outcome in zip(after.launches, outcomes, strict=True):
            after.staged_runs[run_id] = outcome

    async def launch(self, after: CommittedRound) -> None:
        """Create and start the runs of a committed round that `commit` did
        not start (those whose records the round's own batch wrote, it did)."""
        history = self._backend.history
        creations = [c for c in after.launches if c[1] not in after.staged_runs]
        for schedule_id, instant in after.creates:
            occurrence = history.open_occurrence(schedule_id, instant)
            if occurrence is None or occurrence.run_id is None or occurrence.snapshot is None:
                _log.error(
                    "admitted occurrence %s@%s has no run id or snapshot to create its run from",
                    schedule_id,
                    format_instant(instant),
                )
                continue
            creations.append(
                (
                    schedule_id,
                    occurrence.run_id,
                    instant,
                    occurrence.snapshot,
                    occurrence.origin,
                )
            )
        await self._create_and_launch_all(creations)
        for schedule_id, _, run_id in after.starts:
            await self._launch(schedule_id, run_id)

    # --- before the commit ------------------------------------------------------------

    async def _reserve_run_ids(self, count: int) -> list[str]:
        """`count` run ids, in reservations of at most `reserve_chunk` (the host's
        bound per call): a herd larger than that still gets every id."""
        reserved: list[str] = []
        while len(reserved) < count:
            chunk = min(self._reserve_chunk, count - len(reserved))
            reserved.extend(await self._host.reserve_run_ids(chunk))
        return reserved

    async def _preflight_all(
        self, admits: Sequence[AdmitOccurrence]
    ) -> dict[tuple[str, datetime], str | None]:
        """Each admission's preflight verdict (None = passes). Admissions of one
        round with the same deployment and inputs share one host check: a
        herd of schedules on one deployment costs one preflight, not thousands."""
        verdicts: dict[tuple[str, datetime], str | None] = {}
        shared: dict[tuple[str, str], str | None] = {}
        for admit in admits:
            try:
                key: tuple[str, str] | None = (
                    admit.deployment_id,
                    json.dumps(admit.inputs, sort_keys=True, allow_nan=False)
                    if admit.inputs
                    else "{}",
                )
            except (TypeError, ValueError):
                key = None
            if key is not None and key in shared:
                verdict = shared[key]
            else:
                verdict = await self._preflight(admit)
                if key is not None:
                    shared[key] = verdict
            verdicts[(admit.schedule_id, admit.instant)] = verdict
        return verdicts

    async def _preflight(self, admit: AdmitOccurrence) -> str | None:
        try:
            await self._host.preflight(admit.deployment_id, admit.inputs)
        except StoreUnavailable:
            # No verdict on the occurrence: the round fails and is decided
            # again once the store answers.
            raise
        except SchedulingError as exc:
            return exc.message
        return None

    async def _persist_block(self, command: BlockSchedule, staging: _Staging) -> None:
        source = next(
            (e for e in staging.contradicted if e.schedule_id == command.schedule_id), None
        )
        blocked = {"file": "", "record": "", "reason": command.diagnostic}
        if source is not None:
            staging.contradicted.remove(source)
            blocked = {
                "file": source.file,
                "record": source.record,
                "reason": "; ".join((source.reason, *source.extra)),
            }
        definitions = self._backend.definitions
        try:
            current = await definitions.get(command.schedule_id)
            stored = current.get("blocked")
            if stored is not None and stored.get("file"):
                return  # the first diagnostic found stays until the records are sound
            await definitions.set_blocked(command.schedule_id, blocked, at=self._clock.now())
        except SchedulingError as exc:
            _log.error("could not persist the diagnostic of %s: %s", command.schedule_id, exc)

    # --- after the commit -------------------------------------------------------------

    async def _create_and_launch(
        self,
        schedule_id: str,
        instant: datetime,
        run_id: str,
        snapshot: Mapping[str, Any],
        origin: str,
    ) -> None:
        try:
            await self._host.admit_run(
                **_admission_request(schedule_id, run_id, instant, snapshot, origin)
            )
        except SchedulingError as exc:
            self._not_created(schedule_id, instant, run_id, exc)
            return
        self._emit(OccurrenceAdmitted(schedule_id=schedule_id, instant=instant, run_id=run_id))
        await self._launch(schedule_id, run_id)

    def _not_created(
        self, schedule_id: str, instant: datetime, run_id: str, exc: SchedulingError
    ) -> None:
        # The occurrence is admitted and durable; its run cannot be created
        # (the deployment vanished between preflight and now). Fail it
        # truthfully rather than leave the overlap place taken forever.
        _log.error(
            "run %s for %s@%s could not be created: %s",
            run_id,
            schedule_id,
            format_instant(instant),
            exc,
        )
        self._emit(OccurrenceAdmitted(schedule_id=schedule_id, instant=instant, run_id=run_id))
        self._emit(
            RunStatusChanged(
                schedule_id=schedule_id,
                instant=instant,
                run_id=run_id,
                status="failed",
                message=f"{RUN_NOT_CREATED}: {exc.message}",
            )
        )

    async def _launch_staged(self, after: CommittedRound) -> None:
        """Launch the runs whose records the round's commit wrote."""
        launching: list[tuple[str, str]] = []
        for schedule_id, run_id, instant, _, _ in after.launches:
            outcome = after.staged_runs.get(run_id)
            if outcome is None:
                continue
            if isinstance(outcome, SchedulingError):
                self._not_created(schedule_id, instant, run_id, outcome)
                continue
            self._emit(OccurrenceAdmitted(schedule_id=schedule_id, instant=instant, run_id=run_id))
            launching.append((schedule_id, run_id))
        await self._launch_all(launching)

    async def _launch_all(self, launching: Sequence[tuple[str, str]]) -> None:
        """Launch created runs ((schedule id, run id) each), in one batch when
        the host takes batches."""
        if not launching:
            return
        if len(launching) == 1 or not isinstance(self._host, BatchRunHost):
            for schedule_id, run_id in launching:
                await self._launch(schedule_id, run_id)
            return
        launched = await self._host.launch_runs([run_id for _, run_id in launching])
        for (schedule_id, run_id), error in zip(launching, launched, strict=True):
            if error is not None:
                _log.error("run %s of %s could not be launched: %s", run_id, schedule_id, error)

    async def _create_and_launch_all(
        self, creations: Sequence[tuple[str, str, datetime, Mapping[str, Any], str]]
    ) -> None:
        """Create and launch the runs of admitted occurrences ((schedule id, run
        id, instant, snapshot, origin) each). A host that takes batches writes all run
        records with one group commit, then all executing marks with another,
        instead of four fsyncs per run."""
        if len(creations) < 2 or not isinstance(self._host, BatchRunHost):
            for schedule_id, run_id, instant, snapshot, origin in creations:
                await self._create_and_launch(schedule_id, instant, run_id, snapshot, origin)
            return
        created = await self._host.admit_runs(
            [_admission_request(*creation) for creation in creations]
        )
        launching: list[tuple[str, str]] = []
        for (schedule_id, run_id, instant, _, _), outcome in zip(creations, created, strict=True):
            if isinstance(outcome, SchedulingError):
                self._not_created(schedule_id, instant, run_id, outcome)
                continue
            self._emit(OccurrenceAdmitted(schedule_id=schedule_id, instant=instant, run_id=run_id))
            launching.append((schedule_id, run_id))
        await self._launch_all(launching)

    async def _launch(self, schedule_id: str, run_id: str) -> None:
        try:
            await self._host.launch_run(run_id)
        except SchedulingError as exc:
            _log.error("run %s of %s could not be launched: %s", run_id, schedule_id, exc)


def _admission_request(
    schedule_id: str,
    run_id: str,
    instant: datetime,
    snapshot: Mapping[str, Any],
    origin: str = "schedule",
) -> dict[str, Any]:
    """The host's admission of the run of an admitted occurrence (`origin`:
    who opened it, named in the run's origin as its `action` when an
    operator's request did)."""
    run_origin: dict[str, Any] = {
        "kind": "schedule",
        "schedule_id": schedule_id,
        "instant": format_instant(instant),
        "revision": snapshot["revision"],
    }
    if origin != "schedule":
        run_origin["action"] = origin
    return {
        "deployment_id": snapshot["deployment_id"],
        "inputs": dict(snapshot["inputs"]),
        "max_steps": snapshot["max_steps"],
        "origin": run_origin,
        "run_id": run_id,
    }


class _Staging:
    """One group commit being staged, private to one `CommandExecutor.commit`:
    the batch, what the handlers read, and the round they fill in."""

    __slots__ = (
        "_backend",
        "_consumed",
        "_run_ids",
        "_runtime_marks",
        "_verdicts",
        "after",
        "batch",
        "blocks",
        "contradicted",
        "now",
    )

    def __init__(
        self,
        *,
        backend: ScheduleBackend,
        batch: BatchPort,
        now: datetime,
        verdicts: Mapping[tuple[str, datetime], str | None],
        run_ids: Iterator[str],
        consumed: Mapping[str, int],
        runtime_marks: Mapping[str, RuntimeMark],
        contradicted: Sequence[RecordsContradicted],
        after: CommittedRound,
    ) -> None:
        self._backend = backend
        self.batch = batch
        self.now = now
        self._verdicts = verdicts
        self._run_ids = run_ids
        self._consumed = consumed
        self._runtime_marks = runtime_marks
        # A copy: each diagnostic is used once, by the first block of its schedule.
        self.contradicted = list(contradicted)
        self.after = after
        # The round's blocks, whose diagnostics are written after the staging.
        self.blocks: list[BlockSchedule] = []

    def stage(self, command: Command) -> None:
        handler = _HANDLERS.get(type(command))
        if handler is None:
            raise TypeError(f"unknown command {command!r}")
        handler(self, command)

    # --- the handlers (see `_HANDLERS`) ----------------------------------------------

    def on_record(self, command: RecordOccurrence) -> None:
        self._stage_row(command)
        if command.status not in RUN_STATUSES:
            if command.origin == "schedule":
                # Only a calendar row bounds the watermark (`_runtime_implied`).
                self.after.decided[command.schedule_id] = command.instant
            self.after.decisions.append(
                Decision(
                    schedule_id=command.schedule_id,
                    instant=command.instant,
                    status=command.status,
                    count=command.count,
                )
            )

    def on_admit(self, command: AdmitOccurrence) -> None:
        history = self._backend.history
        origin = None if command.origin == "schedule" else command.origin
        if origin is None:
            self.after.decided[command.schedule_id] = command.instant
        reason = self._verdicts[(command.schedule_id, command.instant)]
        if reason is not None:
            history.append_decision(
                command.schedule_id,
                instant=command.instant,
                status="preflight-rejected",
                reason=reason,
                revision=command.revision,
                recorded_at=self.now,
                batch=self.batch,
                origin=origin,
                request=command.request,
            )
            self.after.decisions.append(
                Decision(
                    schedule_id=command.schedule_id,
                    instant=command.instant,
                    status="preflight-rejected",
                )
            )
            self.after.events.append(
                PreflightFailed(
                    schedule_id=command.schedule_id,
                    instant=command.instant,
                    reason=reason,
                )
            )
            return
        run_id = next(self._run_ids)
        snapshot = {
            "deployment_id": command.deployment_id,
            "inputs": command.inputs,
            "max_steps": command.max_steps,
            "revision": command.revision,
        }
        history.stage_admitted(
            command.schedule_id,
            instant=command.instant,
            run_id=run_id,
            snapshot=snapshot,
            recorded_at=self.now,
            batch=self.batch,
            origin=origin,
            request=command.request,
        )
        self.after.launches.append(
            (command.schedule_id, run_id, command.instant, snapshot, command.origin)
        )
        self.after.decisions.append(
            Decision(schedule_id=command.schedule_id, instant=command.instant, status="admitted")
        )

    def on_persist_runtime(self, command: PersistRuntime) -> None:
        lifecycle_seq = self._consumed.get(command.schedule_id, 0)
        mark: RuntimeMark = (
            command.held,
            tuple(command.waiting),
            lifecycle_seq,
            command.backfill,
        )
        if self._runtime_implied(command, mark):
            return
        self._backend.runtime.stage(
            self.batch,
            command.schedule_id,
            watermark=command.watermark,
            held=command.held,
            waiting=command.waiting,
            lifecycle_seq=lifecycle_seq,
            written_at=self.now,
            backfill=None if command.backfill is None else backfill_to_payload(command.backfill),
        )
        self.after.runtime_marks[command.schedule_id] = mark

    def on_block(self, command: BlockSchedule) -> None:
        _log.error("schedule %s is blocked: %s", command.schedule_id, command.diagnostic)
        self.blocks.append(command)

    def on_create(self, command: CreateAdmittedRun) -> None:
        self.after.creates.append((command.schedule_id, command.instant))

    def on_start(self, command: StartRun) -> None:
        self.after.starts.append((command.schedule_id, command.instant, command.run_id))

    def on_warning(self, command: LogWarning) -> None:
        _log.warning("%s", command.message)

    # --- what the handlers share ------------------------------------------------------

    def _runtime_implied(self, command: PersistRuntime, mark: RuntimeMark) -> bool:
        """True when the record would say nothing a start cannot read elsewhere,
        so it is not written: its held candidate, waiting instants and lifecycle
        seq are those of the schedule's last durable record, and its watermark
        is the instant of a decision row of this same batch.

        Recovery takes the newest of the persisted watermark and the newest
        decision row, and that row is durable before any late write of its
        batch would have been, so every crash state reads the same watermark as
        with the record. A herd of admissions is the common case: this halves
        the files its group commit appends to. A round that fails part-way
        rebuilds the service's runtime marks from the disk before the next one.
        """
        schedule_id = command.schedule_id
        return (
            self.after.decided.get(schedule_id) == command.watermark
            and self._runtime_marks.get(schedule_id) == mark
        )

    def _stage_row(self, command: RecordOccurrence) -> None:
        history = self._backend.history
        if command.status in RUN_STATUSES:
            history.append_transition(
                command.schedule_id,
                instant=command.instant,
                status=command.status,
                run_id=command.run_id,
                reason=command.reason,
                recorded_at=self.now,
                batch=self.batch,
            )
            return
        history.append_decision(
            command.schedule_id,
            instant=command.instant,
            status=command.status,
            reason=command.reason,
            count=command.count,
            first_instant=command.first_instant if command.count > 1 else None,
            last_instant=command.last_instant if command.count > 1 else None,
            recorded_at=self.now,
            batch=self.batch,
            origin=None if command.origin == "schedule" else command.origin,
            request=command.request,
        )


_Handler: TypeAlias = Callable[[_Staging, Any], None]


# The command table: which handler stages each kind of command. Looked up by
# exact type, as decide's event table is: a command type without an entry is
# a programming error, not something to carry out as its base class.
_HANDLERS: Final[dict[type[Command], _Handler]] = {
    RecordOccurrence: _Staging.on_record,
    AdmitOccurrence: _Staging.on_admit,
    PersistRuntime: _Staging.on_persist_runtime,
    BlockSchedule: _Staging.on_block,
    CreateAdmittedRun: _Staging.on_create,
    StartRun: _Staging.on_start,
    LogWarning: _Staging.on_warning,
}
