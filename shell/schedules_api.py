"""The schedule administration API: `server.api.schedules`.

Every call validates through `core` before its first write, writes through the
stores, and then tells the scheduler service (when one is attached in this
process) that a schedule changed. The API never admits runs itself: the
service reads the lifecycle record the API wrote and feeds it to `decide`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from core.bindings import resolve_inputs
from core.calendar import compile_trigger
from core.definitions import (
    DEFINITION_FIELDS,
    PATCHABLE_FIELDS,
    OneShotTrigger,
    ScheduleDefinition,
    apply_update,
    check_oneshot_in_future,
    definition_to_payload,
    parse_definition,
    parse_update,
)
from core.errors import (
    InvalidDefinition,
    InvalidInput,
    InvalidState,
    NotFound,
    Problem,
    SchedulingError,
)
from core.occurrences import TERMINAL_RUN_STATUSES
from core.operator_actions import (
    Backfill,
    BackfillInForce,
    backfill_in_force,
    check_overlap_override,
)
from core.recovery_checks import claimed_origin
from core.schedule_state import lifecycle_state, oneshot_finished
from shell.clock import Clock, ReadClock, SystemClock
from shell.disk import OS_DISK, Disk
from shell.file_backend import FileBackend, FileOwnership
from shell.history_cursor import decode_cursor, encode_cursor
from shell.operator_requests import (
    TRIGGER_WAIT_S,
    backfill_plan_view,
    backfill_view,
    checked_range,
    predicted_trigger_instant,
    refuse_unless_live,
    stored_backfill,
    trigger_refusal,
    wait_for_trigger,
)
from shell.ports import HostApi
from shell.store_format import (
    StoreDamaged,
    StoreProblem,
    format_instant,
    parse_instant,
)
from shell.store_health import StoreHealth, store_call
from shell.store_ports import (
    DefinitionsPort,
    HistoryPort,
    RuntimePort,
    ScheduleBackend,
    StoreUpkeepPort,
)

__all__ = [
    "RUN_NOT_CREATED",
    "LiveScheduleView",
    "SchedulesApi",
    "build_schedules_api",
    "unchecked_run_reads",
]

_log = logging.getLogger(__name__)

# How the reason of a `failed` row begins when the occurrence's run could
# not be created (the deployment vanished): the one finished occurrence
# whose run has no record, truthfully (`shell/service_commands.py`).
RUN_NOT_CREATED = "the run could not be created"

# Marks a newest-first page cursor (not base64url, so never an oldest-first one).
_NEWEST = "~"
# How often a cancel waiting for a requested backfill to start looks again.
_APPLIED_POLL_S = 0.02

# Set while the scheduler reads run records itself (recovery, the checks
# below): `check_inspected_run` is then not asked again for each of them.
_RUN_READS_UNCHECKED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "run_reads_unchecked", default=False
)


@contextlib.contextmanager
def unchecked_run_reads() -> Iterator[None]:
    """Within it, `inspect_run` of this task does not check the run against
    its schedule's history (the caller checks what it reads itself)."""
    token = _RUN_READS_UNCHECKED.set(True)
    try:
        yield
    finally:
        _RUN_READS_UNCHECKED.reset(token)


def _given(arguments: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """The definition fields among a call's `arguments` that were given
    (None means "not given": the definition's default, or unpatched)."""
    return {name: arguments[name] for name in fields if arguments[name] is not None}


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveScheduleView:
    """What a running service knows about a schedule that the stores may lag."""

    pending: tuple[datetime, ...]
    held: datetime | None
    blocked: str | None
    # Every trigger instant at or before it is decided, held or waiting.
    watermark: datetime
    # The instants whose runs are still active (admitted, running, interrupted).
    active: tuple[datetime, ...] = ()
    # The schedule's backfill and its progress (rule Q), if it ever had one.
    backfill: Backfill | None = None
    # The newest trigger's instant (rule P: the next one comes after it).
    last_trigger: datetime | None = None
    # The newest lifecycle record this view has applied.
    lifecycle_seq: int = 0


@dataclass(frozen=True, slots=True)
class _BackfillInForce:
    state: BackfillInForce | None
    # The backfill the scheduler's state holds (None when it never had one).
    applied: Backfill | None
    # The newest lifecycle record written.
    newest_seq: int


def _applied(
    live: LiveScheduleView | None, record: Mapping[str, Any] | None
) -> tuple[Backfill | None, int]:
    """The backfill the scheduler's state holds and the lifecycle seq that
    state applied: the live view's, or without one the runtime record's."""
    if live is not None:
        return live.backfill, live.lifecycle_seq
    return stored_backfill(record), int(record["lifecycle_seq"]) if record is not None else 0


class _Service(Protocol):
    def schedule_changed(self, schedule_id: str) -> None: ...

    def live_view(self, schedule_id: str) -> LiveScheduleView | None: ...

    async def records_damaged(self, problem: StoreProblem) -> None: ...

    async def ensure_owner(self) -> None: ...


def _int_problem(field: str, value: object, *, low: int, high: int | None = None) -> Problem | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return Problem(field=field, reason=f"must be an integer, got {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        return Problem(field=field, reason=f"must be {bound}, got {value}")
    return None


class SchedulesApi:
    """Create, inspect, change and page the history of schedules.

    All methods are coroutines taking keyword arguments and returning JSON-safe
    dicts. Errors: `InvalidDefinition` (every bad field named; nothing written),
    `NotFound`, `AlreadyExists`, `RevisionConflict`, `InvalidState`, and
    `StoreUnavailable` when the store refuses a read or write (a full disk):
    a create that fails so leaves nothing; a change may have been recorded
    (its lifecycle record is the truth: read the schedule before retrying).
    Store failures and successes are recorded in `store_health`.
    """

    def __init__(
        self,
        *,
        backend: ScheduleBackend,
        host: HostApi,
        clock: Clock | None = None,
        store_health: StoreHealth | None = None,
        answer_wait_s: float = TRIGGER_WAIT_S,
    ) -> None:
        if not answer_wait_s >= 0:
            raise ValueError(f"answer_wait_s must be 0 or more, got {answer_wait_s!r}")
        # How long a trigger waits for its decision, and a cancel for the
        # backfill it stops to be started. The simulation sets 0: its calls
        # must not wait on the wall clock, and it checks the decision itself.
        self.answer_wait_s = answer_wait_s
        # Shared with the host API and the scheduler service of the same store.
        self.store_health = store_health if store_health is not None else StoreHealth()
        # The stores (files or a database), their batches and ownership: the
        # scheduler service of this API runs on the same backend.
        self.backend = backend
        self.definitions: DefinitionsPort = backend.definitions
        self.runtime: RuntimePort = backend.runtime
        self.history: HistoryPort = backend.history
        self.upkeep: StoreUpkeepPort | None = backend.upkeep
        self._host = host
        self.clock: Clock = clock or SystemClock()
        self._service: _Service | None = None
        # One writer at a time: each change reads, validates and writes.
        self._write_lock = asyncio.Lock()

    # --- wiring -------------------------------------------------------------------

    def attach_service(self, service: _Service) -> None:
        """Called by the scheduler service at start; changes then wake it at once."""
        self._service = service

    def detach_service(self, service: _Service) -> None:
        if self._service is service:
            self._service = None

    def _changed(self, schedule_id: str) -> None:
        if self._service is not None:
            self._service.schedule_changed(schedule_id)

    @contextlib.asynccontextmanager
    async def _telling(self, schedule_id: str) -> AsyncIterator[None]:
        """Around a lifecycle write: if it fails part-way with an I/O error
        (the snapshot after the lifecycle record, say), the record may be
        durable all the same, and the log is the truth. Tell the service,
        which reads the log, before the error reaches the caller."""
        try:
            yield
        except OSError:
            if await self.definitions.exists(schedule_id):
                self._changed(schedule_id)
            raise

    async def _check_owner(self) -> None:
        """Before a change: the attached service must still own the store. One
        whose lock file was removed or replaced (fenced) may have a successor
        in another process, and two writers would corrupt the logs."""
        if self._service is not None:
            await self._service.ensure_owner()

    # --- validation ---------------------------------------------------------------

    async def _check_runnable(
        self, definition: ScheduleDefinition, revision: int, now: datetime
    ) -> None:
        """The deployment exists and the inputs resolved for a sample occurrence
        (the next instant) validate against its input schema."""
        trigger = compile_trigger(definition.trigger)
        sample = trigger.next_after(now)
        if sample is None and isinstance(definition.trigger, OneShotTrigger):
            sample = definition.trigger.at
        if sample is None:
            raise InvalidDefinition.from_problems(
                "schedule definition",
                [Problem(field="trigger", reason="has no instant after now")],
            )
        inputs = resolve_inputs(definition, revision, sample)
        try:
            await self._host.preflight(definition.deployment_id, inputs)
        except NotFound as exc:
            # Still an invalid definition (nothing was written), but `not_found`
            # lets a caller tell a missing deployment from a malformed field:
            # `wf-schedule` exits with its not-found status for it.
            problem = Problem(field="deployment_id", reason=exc.message)
            raise InvalidDefinition(
                f"invalid schedule definition: deployment_id: {exc.message}",
                problems=[problem],
                data={"not_found": {"deployment_id": definition.deployment_id}},
            ) from None
        except InvalidInput as exc:
            problems = [
                Problem(
                    field=p.field if p.field.startswith("inputs") else f"inputs.{p.field}",
                    reason=f"{p.reason} (sample occurrence {format_instant(sample)})",
                )
                for p in exc.problems
            ] or [Problem(field="inputs", reason=exc.message)]
            raise InvalidDefinition.from_problems("schedule definition", problems) from None

    # --- operations ---------------------------------------------------------------

    @store_call(writes=True)
    async def create_schedule(
        self,
        *,
        schedule_id: str,
        deployment_id: str,
        trigger: Mapping[str, Any],
        inputs: Mapping[str, Any] | None = None,
        overlap: str | None = None,
        max_active_runs: int | None = None,
        misfire: str | None = None,
        lateness_allowance_s: float | None = None,
        max_steps: int | None = None,
    ) -> dict[str, Any]:
        """Create a schedule at revision 1; its watermark starts now (no backfill).

        Raises InvalidDefinition (trigger, deployment, sample inputs, a one-shot
        already past) or AlreadyExists (ids are never reused, even after delete).
        """
        # The keyword arguments are the definition's fields (a test holds them
        # to the model): hand every one given to the definition's parser.
        given = _given(locals(), DEFINITION_FIELDS)
        definition = parse_definition(given)
        async with self._write_lock:
            await self._check_owner()
            now = self.clock.now()
            check_oneshot_in_future(definition, now)
            await self._check_runnable(definition, 1, now)
            async with self._telling(definition.schedule_id):
                result = await self.definitions.create(
                    definition.schedule_id, definition_to_payload(definition), at=now
                )
        self._changed(definition.schedule_id)
        return await self._present(result.snapshot, now)

    @store_call(writes=False)
    async def get_schedule(self, *, schedule_id: str) -> dict[str, Any]:
        """The full definition payload with revision, lifecycle flags, the blocking
        diagnostic (if any), the next instant and the held candidate."""
        snapshot = await self.definitions.get(schedule_id)
        return await self._present(snapshot, self.clock.now())

    @store_call(writes=False)
    async def list_schedules(self, *, include_deleted: bool = False) -> list[dict[str, Any]]:
        """Every schedule, sorted by id; deleted ones only when asked."""
        if not isinstance(include_deleted, bool):
            raise InvalidInput.from_problems(
                "list request", [Problem(field="include_deleted", reason="must be a boolean")]
            )
        now = self.clock.now()
        listed: list[dict[str, Any]] = []
        for schedule_id in await self.definitions.list_ids():
            try:
                snapshot = await self.definitions.get(schedule_id)
            except NotFound:
                continue
            except InvalidState as exc:
                # A schedule whose records cannot be rebuilt is still listed, blocked.
                listed.append(
                    {
                        "schedule_id": schedule_id,
                        "blocked": exc.data,
                        "deleted": False,
                        "state": "blocked",
                    }
                )
                continue
            if snapshot["deleted"] and not include_deleted:
                continue
            listed.append(await self._present(snapshot, now))
        return listed

    @store_call(writes=True)
    async def update_schedule(
        self,
        *,
        schedule_id: str,
        expected_revision: int,
        deployment_id: str | None = None,
        trigger: Mapping[str, Any] | None = None,
        inputs: Mapping[str, Any] | None = None,
        overlap: str | None = None,
        max_active_runs: int | None = None,
        misfire: str | None = None,
        lateness_allowance_s: float | None = None,
        max_steps: int | None = None,
    ) -> dict[str, Any]:
        """Apply the provided fields (None = unpatched) and bump the revision.

        Raises RevisionConflict when `expected_revision` is stale, InvalidDefinition
        when the result is invalid, InvalidState for a deleted schedule. A rejected
        edit changes nothing. The edit affects admissions after it only.
        """
        given = _given(locals(), PATCHABLE_FIELDS)
        problem = _int_problem("expected_revision", expected_revision, low=1)
        if problem is not None:
            raise InvalidDefinition.from_problems("schedule update", [problem])
        patch = parse_update(given)
        async with self._write_lock:
            await self._check_owner()
            now = self.clock.now()
            snapshot = await self.definitions.get(schedule_id)
            if snapshot["deleted"]:
                raise InvalidState(
                    f"schedule {schedule_id!r} is deleted", data={"schedule_id": schedule_id}
                )
            current = parse_definition(snapshot["definition"])
            updated = apply_update(current, patch, now)
            await self._check_runnable(updated, snapshot["revision"] + 1, now)
            async with self._telling(schedule_id):
                result = await self.definitions.apply_change(
                    schedule_id,
                    "updated",
                    at=now,
                    definition=definition_to_payload(updated),
                    expected_revision=expected_revision,
                )
        self._changed(schedule_id)
        return await self._present(result.snapshot, now)

    @store_call(writes=False)
    async def pause_schedule(self, *, schedule_id: str) -> dict[str, Any]:
        """Stop future admissions (active runs go on); idempotent. The held
        candidate is superseded and the paused span is never replayed."""
        return await self._lifecycle(schedule_id, "paused")

    @store_call(writes=False)
    async def resume_schedule(self, *, schedule_id: str) -> dict[str, Any]:
        """Resume from the next instant after now; idempotent."""
        return await self._lifecycle(schedule_id, "resumed")

    @store_call(writes=False)
    async def delete_schedule(self, *, schedule_id: str) -> dict[str, Any]:
        """Soft delete: no admissions after it; runs and history survive; the id
        is never reused. Idempotent."""
        return await self._lifecycle(schedule_id, "deleted")

    @store_call(writes=True)
    async def trigger_schedule(
        self, *, schedule_id: str, overlap: str | None = None
    ) -> dict[str, Any]:
        """Run the schedule now, once (rule P): one occurrence of its current
        definition at this instant, recorded with origin "trigger". The
        schedule's overlap policy applies unless `overlap="allow"`; a paused
        schedule can be triggered, a deleted or blocked one cannot. Waits up
        to `answer_wait_s` (`TRIGGER_WAIT_S`) for the scheduler's decision and answers the
        occurrence (`status` "requested" when it has not decided yet).
        Raises `InvalidInput` (overlap), `NotFound`, and `InvalidState` when
        the schedule cannot be triggered or its overlap policy refuses (then
        nothing is recorded)."""
        check = check_overlap_override(overlap)
        async with self._write_lock:
            await self._check_owner()
            snapshot = await self.definitions.get(schedule_id)
            definition = refuse_unless_live(snapshot, "triggered")
            now = self.clock.now()
            live = self._live_view(schedule_id)
            taken: tuple[datetime, ...] = ()
            after: datetime | None = None
            if live is not None:
                after = live.last_trigger
                refusal = trigger_refusal(len(live.active), definition, check)
                if refusal is not None:
                    raise InvalidState(
                        f"schedule {schedule_id!r} refuses a trigger now: {refusal}"
                        ' (overlap="allow" runs it anyway)',
                        data={"schedule_id": schedule_id, "reason": refusal},
                    )
                taken = (*live.active, *live.pending)
            async with self._telling(schedule_id):
                await self.definitions.apply_change(
                    schedule_id, "triggered", at=now, action={"overlap": check}
                )
        self.store_health.succeeded("api")
        self._changed(schedule_id)
        instant = predicted_trigger_instant(definition, now, taken, after)
        row = None
        if self._service is not None:
            row = await wait_for_trigger(
                self.history.occurrence_at, schedule_id, instant, budget_s=self.answer_wait_s
            )
        if row is not None and row["status"] in ("skipped-overlap", "skipped-misfire"):
            raise InvalidState(
                f"schedule {schedule_id!r} refused the trigger: {row['reason']}",
                data={"schedule_id": schedule_id, "occurrence": row},
            )
        return {
            "schedule_id": schedule_id,
            "requested_at": format_instant(now),
            "instant": row["instant"] if row is not None else format_instant(instant),
            "status": row["status"] if row is not None else "requested",
            "run_id": row["run_id"] if row is not None else None,
            "overlap": check,
        }

    @store_call(writes=True)
    async def backfill_schedule(
        self,
        *,
        schedule_id: str,
        start: str | datetime,
        end: str | datetime,
        overlap: str | None = None,
    ) -> dict[str, Any]:
        """Admit the calendar instants of `[start, end)` (both in the past) that
        the scheduler decided without running them, oldest first, paced
        (rule Q). At most `BACKFILL_LIMIT` calendar instants per request and
        one backfill per schedule at a time. Answers the plan as the stores
        show it now; `get_schedule` shows the progress. Raises `InvalidInput`
        naming `start`, `end` (with the count beyond the bound) or `overlap`,
        `NotFound`, and `InvalidState` for a deleted or blocked schedule or
        one whose backfill is still running."""
        check = check_overlap_override(overlap)
        async with self._write_lock:
            await self._check_owner()
            snapshot = await self.definitions.get(schedule_id)
            definition = refuse_unless_live(snapshot, "backfilled")
            now = self.clock.now()
            first, last, instants = checked_range(definition, start, end, now)
            live = self._live_view(schedule_id)
            loaded = await self.runtime.load(schedule_id)
            in_force = await self._backfill_in_force(schedule_id, live, loaded.record)
            if in_force.state == "running":
                running = in_force.applied
                assert running is not None
                raise InvalidState(
                    f"schedule {schedule_id!r} has a backfill running"
                    f" ({running.admitted} of {running.planned} admitted): cancel it first",
                    data={"schedule_id": schedule_id, "backfill": backfill_view(running)},
                )
            if in_force.state == "requested":
                raise InvalidState(
                    f"schedule {schedule_id!r} has a backfill requested that the scheduler"
                    " has not started yet: cancel it first",
                    data={"schedule_id": schedule_id},
                )
            if live is not None:
                watermark, pending = live.watermark, (*live.pending, *live.active)
            else:
                record = loaded.record or {}
                watermark = (
                    parse_instant(record["watermark"])
                    if record.get("watermark")
                    else parse_instant(snapshot["created_at"])
                )
                pending = await self._pending_instants(schedule_id)
            decided = await self.history.backfill_decided(schedule_id, first, last)
            plan = backfill_plan_view(
                start=first,
                end=last,
                overlap=check,
                requested_at=now,
                instants=instants,
                watermark=watermark,
                pending=pending,
                decided=decided,
                paused_until=now if snapshot["paused"] else None,
            )
            action = {"start": plan["start"], "end": plan["end"], "overlap": check}
            async with self._telling(schedule_id):
                await self.definitions.apply_change(schedule_id, "backfill", at=now, action=action)
        self.store_health.succeeded("api")
        self._changed(schedule_id)
        return {"schedule_id": schedule_id, "backfill": plan}

    @store_call(writes=True)
    async def cancel_backfill(self, *, schedule_id: str) -> dict[str, Any]:
        """Stop the schedule's running backfill: nothing more is admitted; its
        runs already admitted go on. A backfill requested that the scheduler
        has not started yet is waited for (up to `answer_wait_s`), so the
        answer shows its plan. Raises `NotFound`, and `InvalidState` when no
        backfill is running (a cancel already written counts), the schedule
        is deleted, or the requested one was not started within the wait."""
        for waited in (False, True):
            async with self._write_lock:
                await self._check_owner()
                snapshot = await self.definitions.get(schedule_id)
                if snapshot["deleted"]:
                    raise InvalidState(
                        f"schedule {schedule_id!r} is deleted", data={"schedule_id": schedule_id}
                    )
                live = self._live_view(schedule_id)
                loaded = await self.runtime.load(schedule_id)
                in_force = await self._backfill_in_force(schedule_id, live, loaded.record)
                if in_force.state is None:
                    raise InvalidState(
                        f"schedule {schedule_id!r} has no backfill running",
                        data={"schedule_id": schedule_id},
                    )
                if in_force.state == "running":
                    now = self.clock.now()
                    async with self._telling(schedule_id):
                        await self.definitions.apply_change(
                            schedule_id, "backfill-cancelled", at=now, action={}
                        )
                    break
            if waited:
                raise InvalidState(
                    f"schedule {schedule_id!r} has a backfill requested that the scheduler"
                    f" did not start within {self.answer_wait_s:g} s; cancel again once it has",
                    data={"schedule_id": schedule_id},
                )
            await self._applied_through(schedule_id, in_force.newest_seq)
        self.store_health.succeeded("api")
        self._changed(schedule_id)
        return {
            "schedule_id": schedule_id,
            "cancelled_at": format_instant(now),
            "backfill": backfill_view(in_force.applied),
        }

    async def _backfill_in_force(
        self,
        schedule_id: str,
        live: LiveScheduleView | None,
        record: Mapping[str, Any] | None,
    ) -> _BackfillInForce:
        """The schedule's backfill with the lifecycle records written after
        the ones the scheduler applied (`backfill_in_force`): the live view's,
        or with no leading service here, the stored runtime record's."""
        applied, seq = _applied(live, record)
        unapplied = await self.definitions.records_after(schedule_id, seq)
        return _BackfillInForce(
            state=backfill_in_force(applied, [r["kind"] for r in unapplied]),
            applied=applied,
            newest_seq=unapplied[-1]["seq"] if unapplied else seq,
        )

    async def _applied_through(self, schedule_id: str, seq: int) -> None:
        """Wait (up to `answer_wait_s`) until the scheduler applied the
        schedule's lifecycle records through `seq`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.answer_wait_s
        while loop.time() < deadline:
            live = self._live_view(schedule_id)
            record = None if live is not None else (await self.runtime.load(schedule_id)).record
            if _applied(live, record)[1] >= seq:
                return
            await asyncio.sleep(_APPLIED_POLL_S)

    def _live_view(self, schedule_id: str) -> LiveScheduleView | None:
        """What the attached service knows of the schedule, if it leads."""
        return self._service.live_view(schedule_id) if self._service is not None else None

    async def _lifecycle(self, schedule_id: str, kind: Any) -> dict[str, Any]:
        async with self._write_lock:
            await self._check_owner()
            now = self.clock.now()
            async with self._telling(schedule_id):
                result = await self.definitions.apply_change(schedule_id, kind, at=now)
        if result.record is not None:
            self.store_health.succeeded("api")
            self._changed(schedule_id)
        return await self._present(result.snapshot, now)

    @store_call(writes=False)
    async def list_schedule_occurrences(
        self,
        *,
        schedule_id: str,
        limit: int = 50,
        cursor: str | None = None,
        newest_first: bool = False,
    ) -> dict[str, Any]:
        """One page of the schedule's occurrence history in the order
        decided, oldest first (with `newest_first`, newest first: the
        operator console's ledger); a backfill's rows come after the newer
        instants decided before it ran.

        On the first page (no cursor) a held or waiting candidate is shown as a
        synthesized `pending` row at the top, so that page may hold `limit + 1`
        rows. Raises InvalidInput for a limit outside 1-100 or a bad cursor (a
        cursor is good only in the order that issued it).
        """
        problems = [p for p in (_int_problem("limit", limit, low=1, high=100),) if p]
        if cursor is not None and not isinstance(cursor, str):
            problems.append(Problem(field="cursor", reason="must be a string or null"))
        if not isinstance(newest_first, bool):
            problems.append(Problem(field="newest_first", reason="must be a boolean"))
        if problems:
            raise InvalidInput.from_problems("occurrence query", problems)
        if not await self.definitions.exists(schedule_id):
            raise NotFound(
                f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
            )
        try:
            if newest_first:
                rows, next_cursor = await self._newest_page(schedule_id, limit, cursor)
            else:
                rows, next_cursor = await self.history.page(schedule_id, limit=limit, cursor=cursor)
            problem = await self._run_disagreement(schedule_id, rows)
            if problem is not None:
                raise StoreDamaged(problem)
        except StoreDamaged as exc:
            # Damage inside the history, or a run record that disagrees with
            # it, is found when it is read: block the schedule, serve nothing.
            await self._found_damaged(exc.problem)
            raise
        occurrences = [dict(row) for row in rows]
        if cursor is None:
            pending = [
                {
                    "instant": format_instant(instant),
                    "status": "pending",
                    "run_id": None,
                    "reason": "held candidate: waits for overlap or capacity",
                    "count": 1,
                    "first_instant": None,
                    "last_instant": None,
                    "recorded_at": None,
                    "revision": None,
                    # Only calendar instants are ever held or waiting.
                    "origin": "schedule",
                }
                for instant in await self._pending_instants(schedule_id)
            ]
            occurrences = pending + occurrences
        return {"occurrences": occurrences, "next_cursor": next_cursor}

    async def _newest_page(
        self, schedule_id: str, limit: int, cursor: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page newest first: the oldest-first page that ends where the
        cursor says (the history's end without one), reversed. Its cursor is
        the seq the page ends before, marked so that neither order's cursor
        is taken for the other's."""
        if cursor is None:
            end = await self.history.length(schedule_id)
        else:
            decoded = decode_cursor(schedule_id, cursor[1:]) if cursor.startswith(_NEWEST) else None
            if decoded is None or decoded < 1:
                raise InvalidInput.from_problems(
                    "occurrence query",
                    [
                        Problem(
                            field="cursor", reason="is not a newest-first cursor of this history"
                        )
                    ],
                )
            end = decoded
        start = max(0, end - limit)
        if end == 0:
            return [], None
        rows, _ = await self.history.page(
            schedule_id, limit=end - start, cursor=encode_cursor(schedule_id, start)
        )
        rows.reverse()
        return rows, (_NEWEST + encode_cursor(schedule_id, start) if start > 0 else None)

    # --- history against run records ------------------------------------------------

    async def _found_damaged(self, problem: StoreProblem) -> None:
        if self._service is not None:
            await self._service.records_damaged(problem)

    def _history_problem(self, schedule_id: str, seq: int, reason: str) -> StoreProblem:
        return StoreProblem(
            schedule_id=schedule_id,
            file=self.backend.locate(schedule_id, "history"),
            record=self.history.locate(schedule_id, seq),
            reason=reason,
        )

    async def _run_disagreement(
        self, schedule_id: str, rows: Sequence[Mapping[str, Any]]
    ) -> StoreProblem | None:
        """The first row of `rows` (page entries) that says its occurrence's
        run finished and whose run record disagrees: there is none, it cannot
        be read, it names another occurrence, or it finished otherwise. A
        history row that is not finished may lag its run (the report is
        recorded by the next round), so only finished ones are checked: those
        are final on both sides. One in-memory read of the host per row."""
        for row in rows:
            status, run_id = row.get("status"), row.get("run_id")
            if status not in TERMINAL_RUN_STATUSES or run_id is None:
                continue
            seq = int(row["seq"])
            try:
                with unchecked_run_reads():
                    run = await self._host.inspect_run(run_id)
            except NotFound:
                if status == "failed" and str(row.get("reason") or "").startswith(RUN_NOT_CREATED):
                    continue
                return self._history_problem(
                    schedule_id,
                    seq,
                    f"the occurrence's run {run_id} was {status} but has no run record",
                )
            except InvalidInput:
                return self._history_problem(
                    schedule_id, seq, f"the occurrence names run {run_id!r}, which is not a run id"
                )
            except SchedulingError as exc:
                return StoreProblem(
                    schedule_id=schedule_id,
                    file=self.backend.run_location(run_id),
                    record="whole file",
                    reason=exc.message,
                )
            problem = self._run_against_row(schedule_id, run, row)
            if problem is not None:
                return problem
        return None

    def _run_against_row(
        self, schedule_id: str, run: Mapping[str, Any], row: Mapping[str, Any]
    ) -> StoreProblem | None:
        """What is wrong with finished history `row` and the run record `run`
        it names, if anything (see `_run_disagreement`)."""
        run_id, seq = str(row["run_id"]), int(row["seq"])
        origin = run.get("origin")
        origin = origin if isinstance(origin, Mapping) else {}
        claimed = origin.get("instant")
        try:
            same_instant = isinstance(claimed, str) and parse_instant(claimed) == parse_instant(
                row["instant"]
            )
        except ValueError:
            same_instant = False
        if (
            origin.get("kind") != "schedule"
            or origin.get("schedule_id") != schedule_id
            or not same_instant
        ):
            return StoreProblem(
                schedule_id=schedule_id,
                file=self.backend.run_location(run_id),
                record="origin",
                reason=(
                    f"run {run_id} names origin {dict(origin)!r}, but seq {seq} of"
                    f" {self.backend.locate(schedule_id, 'history')} ran it for {schedule_id}"
                    f" at {row['instant']}"
                ),
            )
        if run.get("status") != row["status"]:
            return self._history_problem(
                schedule_id,
                seq,
                f"the occurrence's run {run_id} is {row['status']} here, but its record"
                f" {self.backend.run_location(run_id)} says {run.get('status')}:"
                " the two disagree",
            )
        return None

    async def check_inspected_run(self, run: Mapping[str, Any]) -> None:
        """Called by the host's `inspect_run` before it answers: a finished
        run that names a schedule occurrence must agree with that
        occurrence's history row (found by instant, O(log n) reads). One that
        does not blocks the schedule and raises `StoreDamaged` instead of
        being served. A run that is not finished is not checked (the history
        may lag it), nor one of a schedule that does not exist."""
        origin = run.get("origin")
        if (
            _RUN_READS_UNCHECKED.get()
            or run.get("status") not in TERMINAL_RUN_STATUSES
            or not isinstance(origin, Mapping)
            or origin.get("kind") != "schedule"
        ):
            return
        claimed = claimed_origin(origin)
        if claimed is None:
            return  # an origin that names no occurrence a history can hold
        schedule_id, instant = origin.get("schedule_id"), origin.get("instant")
        if not isinstance(schedule_id, str) or not isinstance(instant, str):
            return  # no instant at all: not an occurrence's run
        run_id = str(run.get("run_id"))
        try:
            row = await self.history.occurrence_at(schedule_id, instant, claimed)
        except StoreDamaged as exc:
            await self._found_damaged(exc.problem)
            raise
        except (NotFound, InvalidInput):
            return  # no such schedule (a start warns of it), or no instant at all
        problem: StoreProblem | None = None
        if row is None or row.get("run_id") != run_id:
            held = f"admitted it as run {row['run_id']}" if row and row.get("run_id") else None
            problem = StoreProblem(
                schedule_id=schedule_id,
                file=self.backend.run_location(run_id),
                record="origin",
                reason=(
                    f"run {run_id} ({run.get('status')}) claims occurrence {instant} of"
                    f" {schedule_id}, but {self.backend.locate(schedule_id, 'history')}"
                    f" {held or 'has no run for that instant'}"
                ),
            )
        elif row.get("status") in TERMINAL_RUN_STATUSES:
            problem = self._run_against_row(schedule_id, run, row)
        if problem is not None:
            await self._found_damaged(problem)
            raise StoreDamaged(problem)

    async def verify_history(self, schedule_id: str) -> StoreProblem | None:
        """Read the whole history as pages read it, each finished row checked
        against its run record; the first problem found, blocking nothing.
        O(history): for lifting a block at a start."""
        cursor: str | None = None
        try:
            while True:
                rows, cursor = await self.history.page(schedule_id, limit=100, cursor=cursor)
                problem = await self._run_disagreement(schedule_id, rows)
                if problem is not None:
                    return problem
                if cursor is None:
                    return None
        except StoreDamaged as exc:
            return exc.problem

    # --- presentation -------------------------------------------------------------

    async def _pending_instants(self, schedule_id: str) -> tuple[datetime, ...]:
        live = self._live_view(schedule_id)
        if live is not None:
            return live.pending
        return _pending_in((await self.runtime.load(schedule_id)).record)

    async def _present(self, snapshot: Mapping[str, Any], now: datetime) -> dict[str, Any]:
        schedule_id = snapshot["schedule_id"]
        definition = dict(snapshot["definition"])
        live = self._live_view(schedule_id)
        try:
            parsed: ScheduleDefinition | None = parse_definition(definition)
        except InvalidDefinition:
            parsed = None
        backfill: Backfill | None = None
        watermark: datetime | None
        if live is not None:
            pending, backfill, watermark = live.pending, live.backfill, live.watermark
        else:
            # One read of the runtime record for all three (a listing does
            # this for every schedule on a server that does not lead).
            loaded = await self.runtime.load(schedule_id)
            pending = _pending_in(loaded.record)
            backfill = stored_backfill(loaded.record)
            watermark = _instant_or_none((loaded.record or {}).get("watermark"))
        next_instant: str | None = None
        if not snapshot["paused"] and not snapshot["deleted"] and parsed is not None:
            # After the instants decided too: with the clock stepped back,
            # the next one after now may be one decided already, which is
            # never replayed (rule L).
            after = now if watermark is None else max(now, watermark)
            try:
                upcoming = compile_trigger(parsed.trigger).next_after(after)
            except InvalidDefinition:
                upcoming = None
            next_instant = format_instant(upcoming) if upcoming is not None else None
        blocked = snapshot.get("blocked")
        if blocked is None and live is not None and live.blocked is not None:
            blocked = {"file": None, "record": None, "reason": live.blocked, "at": None}
        finished = False
        if parsed is not None and isinstance(parsed.trigger, OneShotTrigger):
            finished = await self._oneshot_finished(
                schedule_id, parsed.trigger.at, snapshot, live, pending, now
            )
        state = lifecycle_state(
            deleted=bool(snapshot["deleted"]),
            blocked=blocked is not None,
            paused=bool(snapshot["paused"]),
            finished=finished,
        )
        return {
            **definition,
            "revision": snapshot["revision"],
            "state": state,
            "created_at": snapshot["created_at"],
            "updated_at": snapshot["updated_at"],
            "paused": snapshot["paused"],
            # The latest pause and resume (a resume keeps `paused_at`: when
            # the span it ended began), and the delete; None until one happened.
            "paused_at": snapshot.get("paused_at"),
            "resumed_at": snapshot.get("resumed_at"),
            "deleted": snapshot["deleted"],
            "deleted_at": snapshot.get("deleted_at"),
            "blocked": blocked,
            "next_instant": next_instant,
            "held": format_instant(pending[0]) if pending else None,
            "backfill": backfill_view(backfill),
        }

    async def _oneshot_finished(
        self,
        schedule_id: str,
        at: datetime,
        snapshot: Mapping[str, Any],
        live: LiveScheduleView | None,
        pending: tuple[datetime, ...],
        now: datetime,
    ) -> bool:
        """Gather the facts `core.schedule_state.oneshot_finished` decides on. A
        running service's view is the truth (the stores may lag it), so the
        history is read only without one: then the runtime record's watermark
        and the occurrence's row (one O(log n) lookup) stand in for it."""
        decide_finished = functools.partial(
            oneshot_finished,
            at=at,
            now=now,
            paused=bool(snapshot["paused"]),
            paused_at=_instant_or_none(snapshot.get("paused_at")),
            resumed_at=_instant_or_none(snapshot.get("resumed_at")),
        )
        if live is not None:
            return decide_finished(
                watermark=live.watermark,
                recorded_status=None,
                open_instants=(*pending, *live.active),
            )
        watermark: datetime | None = None
        loaded = await self.runtime.load(schedule_id)
        if loaded.record is not None and loaded.record.get("watermark"):
            watermark = parse_instant(loaded.record["watermark"])
        try:
            row = await self.history.occurrence_at(schedule_id, at)
        except (StoreDamaged, NotFound, InvalidInput):
            # Damage blocks the schedule where it is served (a page); a
            # state is no place to report it, so the row is not known.
            row = None
        recorded = str(row["status"]) if row is not None else None
        return decide_finished(
            watermark=watermark,
            recorded_status=recorded,
            open_instants=pending,
        )


def _pending_in(record: Mapping[str, Any] | None) -> tuple[datetime, ...]:
    """The held and waiting instants a runtime record holds, sorted."""
    if record is None:
        return ()
    instants = [record.get("held"), *record.get("waiting", ())]
    return tuple(sorted(parse_instant(text) for text in instants if text))


def _instant_or_none(text: object) -> datetime | None:
    # Snapshot instants were checked when the snapshot was read.
    return parse_instant(text) if isinstance(text, str) else None


def build_schedules_api(
    server: Any, *, clock: Clock | None = None, disk: Disk = OS_DISK
) -> SchedulesApi:
    """The schedules API for a host server (used by `schedules=True`), its
    file stores under the server's store root on `disk` (the operating
    system's unless a test passes a simulated one, `shell.sim.disk`). Its
    time is the server's own `clock` unless `clock` is given."""
    read = getattr(server, "clock", None)
    if clock is None and callable(read):
        clock = ReadClock(read)
    # The server holds the store's lock from its build to its close (one
    # process serves a store); the service runs under it.
    store_lock = getattr(server, "store_lock", None)
    ownership = None if store_lock is None else FileOwnership(store_lock, lent=True)
    return SchedulesApi(
        backend=FileBackend(server.store_root, disk=disk, ownership=ownership),
        host=server.api,
        clock=clock,
        store_health=getattr(server.api, "store_health", None),
    )
