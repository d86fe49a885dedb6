"""`server.api`: the host's Python API (artifacts, deployments, runs).

Every method validates all of its arguments before its first write; a call
that raises has changed nothing in the store. Errors are the `core.errors`
types: InvalidInput (with `problems` naming each bad field), NotFound,
AlreadyExists, InvalidState, and StoreUnavailable when the store refuses a
read or write (a full disk, a database that does not answer; recorded in
`store_health`). The methods the scheduler calls (`preflight`,
`reserve_run_ids`, `admit_run(s)`, `launch_run(s)`) raise the `OSError` (on
files) or `StoreUnavailable` (on PostgreSQL) itself: the scheduler retries
the round.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, TypeAlias

from core.errors import (
    AlreadyExists,
    InvalidInput,
    InvalidState,
    NotFound,
    Problem,
    SchedulingError,
)
from core.limits import MAX_STEPS
from shell.store_health import StoreHealth, store_call
from shell.store_ports import BatchPort

from .artifacts import ArtifactStore
from .counter import RunIdCounter
from .deployments import DeploymentStore
from .executor import RunExecutor, RunListener
from .identifiers import check_positive_int, format_run_id
from .jsonvalues import NotJson, as_json, json_problem
from .origins import check_origin
from .plans import Plan
from .records import STOP_CAUSES, RunRecord, Snapshot, StopCause, assembled
from .runs import RunStore, check_run_id
from .schemas import validate_instance

__all__ = ["MAX_RESERVE", "WorkflowApi"]

MAX_RESERVE: Final = 1000


# A deployment and inputs resolved for an admission: (deployment, merged
# inputs, problems).
_Resolved: TypeAlias = tuple[Mapping[str, Any], dict[str, Any], list[Problem]]


def _resolution_key(deployment_id: Any, inputs: Any) -> tuple[str, str] | None:
    """What an admission's resolution depends on, as a key; None for values
    that make none (they are resolved, and refused, one by one)."""
    if not isinstance(deployment_id, str):
        return None
    if type(inputs) is dict and not inputs:
        return deployment_id, "{}"
    try:
        return deployment_id, json.dumps(inputs, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        return None


def _snapshot(deployment: Mapping[str, Any], merged: dict[str, Any], max_steps: Any) -> Snapshot:
    """What a run pins at admission (fields `_admission` checked)."""
    return assembled(
        Snapshot,
        deployment_id=deployment["deployment_id"],
        artifact_id=deployment["artifact_id"],
        artifact_version=deployment["artifact_version"],
        inputs=merged,
        max_steps=max_steps,
    )


class WorkflowApi:
    """The host API. Build it with `build_local_static_workflow_server`."""

    def __init__(
        self,
        *,
        artifacts: ArtifactStore,
        deployments: DeploymentStore,
        runs: RunStore,
        counter: RunIdCounter,
        now: Callable[[], str],
        recovery_report: list[dict[str, Any]],
        store_health: StoreHealth | None = None,
    ) -> None:
        # Shared with the schedules API and the scheduler of the same store.
        self.store_health = store_health if store_health is not None else StoreHealth()
        self._artifacts = artifacts
        self._deployments = deployments
        self._runs = runs
        self._counter = counter
        self._now = now
        self._executor = RunExecutor(runs, artifacts, now)
        self._counter_lock = asyncio.Lock()
        self._store_lock = asyncio.Lock()
        self.recovery_report = recovery_report
        # Attached by the scheduler when the server is built with schedules=True.
        self.schedules: Any = None
        # This server's part in a store several servers share
        # (`adapters.host.shared_store.SharedStore`), None otherwise.
        self.shared: Any = None

    # -- artifacts -----------------------------------------------------------

    @store_call(writes=True)
    async def create_artifact_from_plan(
        self,
        artifact_id: str,
        version: int,
        plan: dict[str, Any],
        title: str | None = None,
        description: str | None = None,
    ) -> dict[str, Any]:
        """Validate `plan` and store it as an immutable artifact version.

        Returns the artifact. InvalidInput lists every problem with the ids and
        the plan; AlreadyExists if the version exists with different content
        (identical content is idempotent).
        """
        async with self._store_lock:
            await self._artifacts.refresh(artifact_id)
            return await self._artifacts.create(
                artifact_id, version, plan, title, description, self._now()
            )

    @store_call(writes=False)
    async def get_artifact(self, artifact_id: str, version: int | None = None) -> dict[str, Any]:
        """One artifact version, the latest if `version` is None. NotFound if absent."""
        await self._artifacts.refresh(artifact_id)
        return self._artifacts.get(artifact_id, version)

    @store_call(writes=False)
    async def list_artifacts(self) -> list[dict[str, Any]]:
        """Every artifact version, ordered by artifact id then version."""
        await self._artifacts.reload()
        return self._artifacts.list()

    # -- deployments ---------------------------------------------------------

    @store_call(writes=True)
    async def save_deployment(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Create or replace a deployment.

        `payload`: deployment_id, artifact_id, artifact_version, optional
        inputs (default inputs) and title. InvalidInput names each bad field;
        NotFound if the artifact version does not exist.
        """
        async with self._store_lock:
            if isinstance(payload, Mapping):
                await self._deployments.refresh(payload.get("deployment_id"))
                await self._artifacts.refresh(payload.get("artifact_id"))
            return await self._deployments.save(payload, self._artifacts, self._now())

    @store_call(writes=False)
    async def get_deployment(self, deployment_id: str) -> dict[str, Any]:
        """The deployment. NotFound if absent."""
        await self._deployments.refresh(deployment_id)
        return self._deployments.get(deployment_id)

    @store_call(writes=False)
    async def list_deployments(self) -> list[dict[str, Any]]:
        """Every deployment, ordered by id."""
        await self._deployments.reload()
        return self._deployments.list()

    @store_call(writes=True)
    async def delete_deployment(self, deployment_id: str, force: bool = False) -> dict[str, Any]:
        """Delete a deployment and return it. Existing runs keep their snapshots.

        Refused with InvalidState (data `schedule_ids`) while schedules that are
        not deleted name it, unless `force`: their next occurrences would all be
        preflight-rejected. Deleted schedules do not count: they admit nothing."""
        if not isinstance(force, bool):
            raise InvalidInput.from_problems(
                "deployment delete", [Problem(field="force", reason="must be a boolean")]
            )
        async with self._store_lock:
            await self._deployments.refresh(deployment_id)
            self._deployments.get(deployment_id)  # NotFound first, before any schedule check
            if not force and self.schedules is not None:
                using = sorted(
                    str(item["schedule_id"])
                    for item in await self.schedules.list_schedules(include_deleted=False)
                    if item.get("deployment_id") == deployment_id
                )
                if using:
                    raise InvalidState(
                        f"deployment {deployment_id!r} is used by schedule(s) "
                        f"{', '.join(using)}: delete or repoint them first, or force the delete",
                        data={"deployment_id": deployment_id, "schedule_ids": using},
                    )
            return await self._deployments.delete(deployment_id)

    # -- admission -----------------------------------------------------------

    def _resolve(
        self, deployment_id: Any, inputs: Any
    ) -> tuple[Mapping[str, Any], dict[str, Any], list[Problem]]:
        # (deployment, merged inputs, problems); NotFound for a missing deployment/artifact.
        # Read in place (no copy): merged values may share the stored deployment's
        # nested inputs, so whatever leaves this class is copied (preflight) or
        # rebuilt (the run record's snapshot).
        deployment = self._deployments.peek(deployment_id)
        plan: Plan = self._artifacts.plan(deployment["artifact_id"], deployment["artifact_version"])
        if inputs is None:
            inputs = {}
        if not isinstance(inputs, Mapping):
            return deployment, {}, [Problem(field="inputs", reason="must be an object")]
        try:
            inputs = as_json(inputs, "inputs")
        except NotJson as exc:
            return deployment, {}, [json_problem(exc)]
        merged = {**deployment["inputs"], **inputs}
        return deployment, merged, validate_instance("inputs", plan.input_schema, merged)

    async def _refresh_deployment(self, deployment_id: Any) -> None:
        """On a store several servers share: read the deployment and its
        artifact version before a call resolves them, if not cached (another
        server saved them a moment ago). What is cached is kept fresh by the
        store's notices (`adapters.host.shared_store`)."""
        if not self._deployments.has(deployment_id):
            await self._deployments.refresh(deployment_id)
        with contextlib.suppress(SchedulingError):
            deployment = self._deployments.peek(deployment_id)
            if not self._artifacts.has(deployment["artifact_id"], deployment["artifact_version"]):
                await self._artifacts.refresh(deployment["artifact_id"])

    async def preflight(
        self, deployment_id: str, inputs: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """Check that a run of `deployment_id` with `inputs` would be admitted.

        Returns the merged inputs (deployment defaults overlaid by `inputs`).
        NotFound for an unknown deployment or artifact; InvalidInput when the
        merged inputs fail the plan's input schema (fields `inputs.<path>`).
        Writes nothing.
        """
        await self._refresh_deployment(deployment_id)
        _, merged, problems = self._resolve(deployment_id, inputs)
        if problems:
            raise InvalidInput.from_problems("inputs", problems)
        return copy.deepcopy(merged)

    async def reserve_run_ids(self, count: int) -> list[str]:
        """Durably reserve `count` fresh run ids with one write; they are never reused."""
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_RESERVE:
            raise InvalidInput.from_problems(
                "count",
                [Problem(field="count", reason=f"must be an integer from 1 to {MAX_RESERVE}")],
            )
        async with self._counter_lock:
            return [format_run_id(n) for n in await self._counter.reserve(count)]

    async def admit_run(
        self,
        deployment_id: str,
        inputs: Mapping[str, Any] | None,
        max_steps: int | None = None,
        origin: Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> str:
        """Write a new run record with status `admitted` (it does not execute).

        The run pins its snapshot (deployment, artifact version, merged inputs,
        max_steps) and origin. `run_id` must be one returned by
        `reserve_run_ids` and unused; without it the next id is taken.
        NotFound (deployment/artifact), InvalidInput (inputs, max_steps,
        origin, run_id), AlreadyExists (run_id used).
        """
        await self._refresh_deployment(deployment_id)
        deployment, merged, stored_origin, number = self._admission(
            deployment_id, inputs, max_steps, origin, run_id
        )
        if number is None:
            async with self._counter_lock:
                number = (await self._counter.reserve(1))[0]
        new_id = format_run_id(number)
        async with self._runs.lock(new_id):
            if self._runs.exists(number):
                raise AlreadyExists(f"run {new_id} already exists", data={"run_id": new_id})
            await self._runs.put(
                self._admitted(new_id, _snapshot(deployment, merged, max_steps), stored_origin)
            )
        return new_id

    async def admit_runs(
        self, requests: Sequence[Mapping[str, Any]]
    ) -> list[str | SchedulingError]:
        """`admit_run` for many runs, with one group commit for all their records.

        Each request holds the keyword arguments of `admit_run`
        (`deployment_id`, `inputs`, and optionally `max_steps`, `origin`,
        `run_id`); here `run_id` is required (a reserved id). Returns, per
        request in order, the run id once its record is durable, or the error
        `admit_run` would have raised for it (nothing is written for that one).
        An error of the write itself (`OSError` on files, `StoreUnavailable` on
        PostgreSQL) is raised for the whole batch.
        """
        results, staged = self._admissions(requests)
        if not staged:
            return results
        # Under the locks of the runs, as `admit_run` writes. Taking a lock no
        # one holds does not suspend, so on files nothing can interleave from
        # the existence checks to the write. A lock someone held (an
        # `admit_run` of the same reserved id) may have let that write happen
        # first: check again once they are ours. On PostgreSQL, whose write
        # awaits the database, the locks keep every other admission of these
        # ids out until the records are cached, and the primary key of
        # `wf_runs` refuses a run written behind the cache's back.
        async with self._runs.locked(record.run_id for record in staged.values()):
            for number, record in list(staged.items()):
                if self._runs.exists(number):
                    del staged[number]
                    index = results.index(record.run_id)
                    results[index] = AlreadyExists(
                        f"run {record.run_id} already exists", data={"run_id": record.run_id}
                    )
            if staged:
                await self._runs.put_many(list(staged.values()))
        return results

    def admissions_generation(self) -> int:
        """Changes whenever an admission checked now could be checked
        differently than one checked before (a deployment saved, deleted or
        read anew): a round staged ahead of its instant is committed only if
        it did not (`shell.ports.PreparingRunHost`)."""
        return self._deployments.generation

    def stage_admit_runs(
        self,
        batch: BatchPort,
        requests: Sequence[Mapping[str, Any]],
        *,
        not_before: datetime | None = None,
    ) -> list[str | SchedulingError] | None:
        """`admit_runs` into a scheduler round's `batch`: the run records
        are written by the round's own commit, together with the admissions
        that name them (one transaction on PostgreSQL), and cached once it
        committed. Per request, the run id (durable once the batch commits)
        or the error `admit_run` would have raised (nothing staged for it).
        None when this store cannot write into `batch` (on files: the
        scheduler calls `admit_runs` after its commit instead); nothing is
        checked then. `not_before`: the records' creation time is no earlier
        (a round staged ahead of its instant decides as of that instant)."""
        if not self._runs.stages_into(batch):
            return None
        created_at = self._now()
        if not_before is not None and datetime.fromisoformat(created_at) < not_before:
            created_at = not_before.astimezone(UTC).isoformat().replace("+00:00", "Z")
        # `_admissions` refused every run id that exists, and nothing awaits
        # between it and the staging (unlike `admit_runs`, which checks again
        # under the runs' locks).
        results, staged = self._admissions(requests, created_at)
        if staged:
            self._runs.stage_created(batch, list(staged.values()))
        return results

    def _admissions(
        self, requests: Sequence[Mapping[str, Any]], created_at: str | None = None
    ) -> tuple[list[str | SchedulingError], dict[int, RunRecord]]:
        """The records a batch of admissions makes (by run number) and, per
        request in order, its run id or the error `admit_run` would raise.
        `created_at`: the records' creation time (the clock's now if None)."""
        results: list[str | SchedulingError] = []
        staged: dict[int, RunRecord] = {}
        # A herd's schedules often share a deployment and inputs: resolved
        # and checked once for the batch, and their runs share one snapshot
        # (frozen, as the records are).
        resolved: dict[tuple[str, str], _Resolved] = {}
        # By the identity of the merged inputs (one object per resolution,
        # kept alive for the batch by the snapshot made of it: the identity
        # cannot be reused meanwhile) and the step budget.
        snapshots: dict[tuple[int, Any], Snapshot] = {}
        for request in requests:
            run_id = request.get("run_id")
            try:
                if run_id is None:
                    raise InvalidInput.from_problems(
                        "run admission",
                        [Problem(field="run_id", reason="is required in a batch admission")],
                    )
                deployment, merged, stored_origin, number = self._admission(
                    request.get("deployment_id"),
                    request.get("inputs"),
                    request.get("max_steps"),
                    request.get("origin"),
                    run_id,
                    resolved,
                )
                assert number is not None
                if number in staged:
                    raise AlreadyExists(f"run {run_id} already exists", data={"run_id": run_id})
            except SchedulingError as exc:
                results.append(exc)
                continue
            max_steps = request.get("max_steps")
            snapshot = snapshots.get((id(merged), max_steps))
            if snapshot is None:
                snapshot = snapshots[id(merged), max_steps] = _snapshot(
                    deployment, merged, max_steps
                )
            staged[number] = self._admitted(run_id, snapshot, stored_origin, created_at)
            results.append(run_id)
        return results, staged

    def _admission(
        self,
        deployment_id: Any,
        inputs: Any,
        max_steps: Any,
        origin: Any,
        run_id: Any,
        resolved: dict[tuple[str, str], _Resolved] | None = None,
    ) -> tuple[Mapping[str, Any], dict[str, Any], dict[str, Any], int | None]:
        """Validate an admission: (deployment, merged inputs, stored origin, run
        number or None when the next id is to be taken). Raises like `admit_run`.
        `resolved`: the deployments and inputs this batch resolved already."""
        key = _resolution_key(deployment_id, inputs) if resolved is not None else None
        known = resolved.get(key) if resolved is not None and key is not None else None
        if known is None:
            deployment, merged, problems = self._resolve(deployment_id, inputs)
            if not problems:
                problems += self._runs.unstorable("inputs", merged)
            if resolved is not None and key is not None:
                resolved[key] = (deployment, merged, list(problems))
        else:
            deployment, merged, problems = known[0], known[1], list(known[2])
        problems += check_positive_int("max_steps", max_steps, optional=True, maximum=MAX_STEPS)
        stored_origin, origin_problems = check_origin(origin)
        problems += origin_problems or self._runs.unstorable("origin", stored_origin)
        number: int | None = None
        if run_id is not None:
            try:
                number = check_run_id(run_id)
            except InvalidInput as exc:
                problems += exc.problems
            else:
                if number > self._counter.last_issued:
                    problems.append(Problem(field="run_id", reason=f"{run_id} was not reserved"))
        if problems:
            raise InvalidInput.from_problems("run admission", problems)
        if number is not None and self._runs.exists(number):
            raise AlreadyExists(f"run {run_id} already exists", data={"run_id": run_id})
        return deployment, merged, stored_origin, number

    def _admitted(
        self,
        run_id: str,
        snapshot: Snapshot,
        origin: dict[str, Any],
        created_at: str | None = None,
    ) -> RunRecord:
        now = created_at if created_at is not None else self._now()
        # Every field was checked by `_admission` (the inputs against the
        # deployment's schema and the store, the origin, the step budget) or
        # comes from the deployment store: pydantic's validation would check
        # them again, once per run of a herd.
        return assembled(
            RunRecord,
            format=1,
            run_id=run_id,
            status="admitted",
            origin=origin,
            snapshot=snapshot,
            created_at=now,
            updated_at=now,
            attempt=0,
            executing=None,
            progress=None,
            trace=[],
            checkpoint=None,
            output=None,
            error=None,
        )

    # -- execution -----------------------------------------------------------

    async def launch_run(self, run_id: str) -> None:
        """Start executing an admitted run in a task; returns once the executing
        mark is durable. InvalidState if the run is not `admitted`."""
        await self._executor.launch(run_id)

    async def launch_runs(self, run_ids: Sequence[str]) -> list[SchedulingError | None]:
        """`launch_run` for many runs, with one group commit for all executing
        marks. Per run id in order: None once it executes, or the error
        `launch_run` would have raised for it (InvalidState, NotFound,
        InvalidInput). An error of the write itself is raised for the batch."""
        return await self._executor.launch_many(run_ids)

    @store_call(writes=True)
    async def start_run(
        self,
        deployment_id: str,
        inputs: Mapping[str, Any] | None,
        max_steps: int | None = None,
        origin: Mapping[str, Any] | None = None,
    ) -> str:
        """admit_run + launch_run: returns the run id at once; the run executes in a task."""
        run_id = await self.admit_run(deployment_id, inputs, max_steps=max_steps, origin=origin)
        await self._executor.launch(run_id)
        return run_id

    async def _wait(self, task: asyncio.Task[None], run_id: str) -> dict[str, Any]:
        try:
            # Shielded: a caller that gives up waiting does not kill the run.
            await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            # The run itself was cancelled (shutdown): report it as it stands.
        # What this call did is reported as the run record has it, unchecked
        # against a schedule's history (`inspect_run` checks): it happened.
        return self._view(self._runs.get(run_id), trace=True)

    @store_call(writes=False)
    async def run_deployment(
        self,
        deployment_id: str,
        inputs: Mapping[str, Any] | None,
        max_steps: int | None = None,
    ) -> dict[str, Any]:
        """A manual run: admit, execute, and return the inspected run once it stops."""
        # Shielded, as the wait is: a caller that gave up between the
        # admission and the launch left the run admitted with no one to
        # launch it.
        run_id, task = await asyncio.shield(
            self._admit_and_launch(deployment_id, inputs, max_steps)
        )
        return await self._wait(task, run_id)

    async def _admit_and_launch(
        self, deployment_id: str, inputs: Mapping[str, Any] | None, max_steps: int | None
    ) -> tuple[str, asyncio.Task[None]]:
        with self._executor.starting():
            run_id = await self.admit_run(deployment_id, inputs, max_steps=max_steps)
            return run_id, await self._executor.launch(run_id)

    @store_call(writes=False)
    async def resume_run(self, run_id: str, payload: Any) -> dict[str, Any]:
        """Resume an interrupted run with `payload`; returns the inspected run once it
        stops again. InvalidState if it is not interrupted; InvalidInput if the
        payload fails the interrupt's resume_schema (fields `payload.<path>`).
        The attempt mark is durable before execution continues; the step budget
        is the one the run started with.
        """
        task = await self._executor.resume(run_id, payload)
        return await self._wait(task, run_id)

    # -- inspection ----------------------------------------------------------

    def _interrupt(self, record: RunRecord) -> dict[str, Any] | None:
        if record.status != "interrupted" or record.checkpoint is None:
            return None
        node_id = record.checkpoint.node
        try:
            node = self._artifacts.plan(
                record.snapshot.artifact_id, record.snapshot.artifact_version
            ).nodes[node_id]
        except (NotFound, KeyError):
            return {"node": node_id, "prompt": None, "resume_schema": None}
        return {
            "node": node_id,
            "prompt": node.prompt,
            "resume_schema": copy.deepcopy(node.resume_schema),
        }

    def _view(self, record: RunRecord, *, trace: bool) -> dict[str, Any]:
        data = record.to_json()
        view: dict[str, Any] = {
            "run_id": record.run_id,
            "status": record.status,
            "origin": data["origin"],
            "snapshot": data["snapshot"],
            "attempt": record.attempt,
            "steps": record.progress.steps if record.progress else 0,
            "executing": data["executing"],
            "checkpoint": data["checkpoint"],
            "output": data["output"],
            "error": data["error"],
            "interrupt": self._interrupt(record),
            "created_at": record.created_at,
            "updated_at": record.updated_at,
        }
        if trace:
            view["trace"] = data["trace"]
        return view

    @store_call(writes=False)
    async def inspect_run(self, run_id: str) -> dict[str, Any]:
        """The run as stored. An admitted run has an empty trace and no output,
        checkpoint or error. NotFound if unknown; InvalidState if its record is
        unreadable (see recovery_report), or if it is a finished run of a
        schedule whose history disagrees with it (the schedule is then
        blocked: `SchedulesApi.check_inspected_run`)."""
        view = self._view(await self._runs.fetch(run_id), trace=True)
        check = getattr(self.schedules, "check_inspected_run", None)
        if check is not None:
            await check(view)
        return view

    @store_call(writes=False)
    async def list_runs(
        self,
        status: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
        newest_first: bool = False,
    ) -> dict[str, Any]:
        """A page of runs, oldest first by id (newest first with `newest_first`:
        the operator console's list): {"runs": [...], "next_cursor": str | None}.

        Rows are inspected runs without the trace. `limit` is 1..100; `cursor`
        is a `next_cursor` from a previous page. Unreadable records are not
        listed (they are in `recovery_report`).
        """
        records, next_cursor = await self._runs.fetch_page(status, cursor, limit, newest_first)
        return {
            "runs": [self._view(record, trace=False) for record in records],
            "next_cursor": next_cursor,
        }

    @store_call(writes=False)
    async def list_run_claims(self, cursor: str | None = None, limit: int = 100) -> dict[str, Any]:
        """`list_runs` oldest first, each run as `{run_id, status, origin}`:
        what a scheduler's start checks of every run (`shell.ports.
        ClaimListingHost`), without the rest of its view."""
        claims, next_cursor = await self._runs.fetch_claims(cursor, limit)
        return {"runs": [_claim(*claim) for claim in claims], "next_cursor": next_cursor}

    def close_runs(self) -> None:
        """Close the run records' files (the server's close)."""
        self._runs.close()

    def run_records_position(self) -> str | None:
        """Where the run records stand now, as a token `changed_run_claims`
        takes back; None where the store cannot say (a database)."""
        return self._runs.position()

    @store_call(writes=False)
    async def changed_run_claims(self, since: str) -> list[dict[str, Any]] | None:
        """As `list_run_claims`, every run not finished and every run whose
        record was written after `since` (a `run_records_position`), oldest
        first: what a start checks when its checkpoint vouches for the rest.
        None when the store cannot tell (a token it does not know)."""
        records = await self._runs.changed_since(since)
        if records is None:
            return None
        return [_claim(record.run_id, record.status, record.origin) for record in records]

    # -- execution control ---------------------------------------------------

    def announce_run(self, record: RunRecord) -> None:
        """Tell the run listeners of a status another server wrote."""
        self._executor.announce(record)

    async def sweep_abandoned(self, loop_time: float) -> list[dict[str, Any]]:
        """On a store several servers share, fail the runs of dead servers
        (`SharedStore.sweep`: the leading scheduler calls it every loop); the
        findings. Nothing to do on a store only this server writes."""
        if self.shared is None:
            return []
        findings: list[dict[str, Any]] = await self.shared.sweep(loop_time)
        return findings

    def add_run_listener(self, callback: RunListener) -> None:
        """Call `callback(run_id, status, origin, message)` after every durable status
        change (running, interrupted, completed, failed, exhausted). It runs
        synchronously in the event loop; exceptions are logged and ignored.
        `origin` is a copy the listeners of one change share: read it only."""
        self._executor.add_listener(callback)

    def executing_runs(self) -> list[str]:
        """Ids of the runs executing in this process now."""
        return self._executor.executing()

    async def drain(self, timeout_s: float) -> list[str]:
        """Wait up to `timeout_s` for executing runs to stop; the ids still executing."""
        if (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, int | float)
            or not timeout_s >= 0
        ):
            raise InvalidInput.from_problems(
                "drain", [Problem(field="timeout_s", reason="must be a number >= 0")]
            )
        # asyncio cannot schedule an infinite timeout; None means "no timeout" there.
        return await self._executor.drain(None if math.isinf(timeout_s) else float(timeout_s))

    async def note_stopped(self, cause: StopCause, grace_s: float) -> list[str]:
        """Note on each executing run's mark that the server is stopping before
        it finished (`cause`: "drain-expired" when the drain grace of `grace_s`
        seconds ran out, "drain-cut" when a second SIGINT cut it short); the ids
        noted. The runs go on; the next startup fails an unfinished one as
        abandoned saying the server stopped it, not that the process died."""
        problems: list[Problem] = []
        if cause not in STOP_CAUSES:
            problems.append(Problem(field="cause", reason=f"must be one of {sorted(STOP_CAUSES)}"))
        if (
            isinstance(grace_s, bool)
            or not isinstance(grace_s, int | float)
            or not 0 <= grace_s < math.inf
        ):
            problems.append(Problem(field="grace_s", reason="must be a finite number >= 0"))
        if problems:
            raise InvalidInput.from_problems("note_stopped", problems)
        return await self._executor.note_stopped(cause, grace_s)

    async def cancel_executing(self) -> list[str]:
        """Cancel every executing run task (shutdown). Nothing is written: the runs
        keep their executing marks (with the stop note, if `note_stopped` wrote
        one) and the next startup fails them as abandoned."""
        return await self._executor.cancel_executing()


def _claim(run_id: str, status: str, origin: Any) -> dict[str, Any]:
    return {"run_id": run_id, "status": status, "origin": None if origin is None else dict(origin)}
