"""A simulated run API implementing `shell.ports.HostApi` on virtual time.

Runs do not execute anything: each attempt of a run has a seeded plan (how
long it takes and how it stops: completed, failed, exhausted or interrupted),
a pure function of the simulation seed, the run id and the attempt, so it
does not depend on the order in which things happen. The simulation moves
the clock and calls `fire_due(now)`, which makes due transitions durable and
then tells the listeners, as the real host does. An interrupted run is
resumed by a simulated operator after a seeded delay (attempt + 1, without an
execution slot); from the third attempt on a run no longer interrupts, so
every run ends.

Run records and the run-id counter live on the `SimDisk`; timers and
listeners belong to the process and die with it. A new process calls
`recover()` first, which is the real host's startup recovery: a run found
`running` with an executing mark was abandoned (`failed`, "external effects
may already have occurred"), one found running after a resume is the
ambiguous case (`failed`, closed); interrupted runs stay interrupted (and
get a resume timer); admitted ones stay admitted.

Writes pass the host's fault points: `before/after:counter:run_id` and
`before/after:run:<admitted|executing-mark|attempt-mark|checkpoint|recovery>`.
"""

from __future__ import annotations

import heapq
import json
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Literal, Protocol

from core.errors import AlreadyExists, InvalidInput, InvalidState, NotFound, Problem
from core.occurrences import RUN_STATUSES
from shell.durable import fault_point
from shell.ports import RunListener
from shell.sim.disk import SimDisk
from shell.sim.faults import SIMULATED, SimFaults
from shell.store_format import encode_json_line, format_instant

__all__ = [
    "ABANDONED",
    "AMBIGUOUS_RESUME",
    "HostObserver",
    "RunBehaviour",
    "RunPlan",
    "SimHost",
    "format_run_id",
    "run_number",
]

ABANDONED: Final = (
    "abandoned: the process died while this run was executing;"
    " external effects may already have occurred"
)
AMBIGUOUS_RESUME: Final = (
    "ambiguous resume: attempt {attempt} was marked but left no result; failed closed,"
    " not retried; external effects may already have occurred"
)
MAX_RESERVE: Final = 1000
_RUN_ID: Final = re.compile(r"run-[0-9]{7}")
# From this attempt on, a run runs to its end (so every simulated run ends).
_LAST_INTERRUPTIBLE_ATTEMPT: Final = 2

Outcome = Literal["completed", "failed", "exhausted", "interrupted"]
_OUTCOME_MESSAGES: Final[dict[str, str]] = {
    "failed": "a step failed (simulated outcome)",
    "exhausted": "the step budget was exhausted (simulated outcome)",
}


def format_run_id(number: int) -> str:
    return f"run-{number:07d}"


def run_number(run_id: str) -> int:
    """The number `format_run_id` made `run_id` of: ids are reserved in the
    order occurrences are admitted."""
    return int(run_id.removeprefix("run-"))


@dataclass(frozen=True, slots=True)
class RunPlan:
    """How one attempt of a run goes."""

    duration: timedelta
    outcome: Outcome


class RunBehaviour:
    """Seeded run plans and operator delays (see the module docstring)."""

    def __init__(self, seed: int) -> None:
        self._seed = seed

    def _rng(self, *parts: object) -> random.Random:
        return random.Random("/".join(["wf-sim/runs", str(self._seed), *map(str, parts)]))

    def plan(self, run_id: str, attempt: int) -> RunPlan:
        rng = self._rng(run_id, attempt)
        roll = rng.random()
        if roll < 0.6:
            seconds = rng.uniform(5, 120)
        elif roll < 0.9:
            seconds = rng.uniform(120, 600)
        else:
            seconds = rng.uniform(600, 2400)
        roll = rng.random()
        outcome: Outcome
        if roll < 0.62:
            outcome = "completed"
        elif roll < 0.74:
            outcome = "failed"
        elif roll < 0.80:
            outcome = "exhausted"
        elif attempt <= _LAST_INTERRUPTIBLE_ATTEMPT:
            outcome = "interrupted"
        else:
            outcome = "completed"
        return RunPlan(duration=timedelta(seconds=round(seconds, 3)), outcome=outcome)

    def resume_delay(self, run_id: str, attempt: int) -> timedelta:
        """How long the operator takes to resume attempt `attempt` once interrupted."""
        return timedelta(seconds=round(self._rng(run_id, attempt, "resume").uniform(30, 1800), 3))


class HostObserver(Protocol):
    def run_written(self, record: Mapping[str, Any], what: str) -> None:
        """A run record was just made durable by the write named `what`
        (`admitted`, `executing-mark`, `attempt-mark`, `checkpoint`, `recovery`)."""
        ...


@dataclass(frozen=True, slots=True, order=True)
class _Timer:
    when: datetime
    order: int
    run_id: str
    attempt: int
    kind: Literal["stop", "resume"]


class SimHost:
    """The run API of one simulated process (see the module docstring)."""

    def __init__(
        self,
        disk: SimDisk,
        now: Callable[[], datetime],
        *,
        behaviour: RunBehaviour,
        faults: SimFaults,
        observer: HostObserver | None = None,
    ) -> None:
        self._disk = disk
        self._now = now
        self._behaviour = behaviour
        self._faults = faults
        self._observer = observer
        self._listeners: list[RunListener] = []
        self._timers: list[_Timer] = []
        self._order = 0
        self.transitions = 0

    # --- records ----------------------------------------------------------------------

    def _get(self, run_id: str) -> dict[str, Any]:
        data = self._disk.runs.get(run_id) if isinstance(run_id, str) else None
        if data is None:
            raise NotFound(f"run {run_id!r} not found", data={"run_id": run_id})
        record: dict[str, Any] = json.loads(data)
        return record

    def _put(self, record: dict[str, Any], what: str) -> None:
        fault_point(f"before:run:{what}")
        record["updated_at"] = format_instant(self._now())
        self._disk.runs[record["run_id"]] = encode_json_line(record)
        if self._observer is not None:
            self._observer.run_written(record, what)
        fault_point(f"after:run:{what}")

    def _notify(self, record: Mapping[str, Any]) -> None:
        error = record.get("error")
        message = error.get("message") if isinstance(error, Mapping) else None
        for listener in list(self._listeners):
            origin = record.get("origin")
            listener(
                record["run_id"],
                record["status"],
                dict(origin) if isinstance(origin, Mapping) else None,
                message,
            )

    def _schedule(self, delay: timedelta, run_id: str, attempt: int, kind: Any) -> None:
        self._order += 1
        heapq.heappush(
            self._timers, _Timer(self._now() + delay, self._order, run_id, attempt, kind)
        )

    def _run_for(self, record: dict[str, Any]) -> None:
        plan = self._behaviour.plan(record["run_id"], record["attempt"])
        self._schedule(plan.duration, record["run_id"], record["attempt"], "stop")

    # --- HostApi ----------------------------------------------------------------------

    async def preflight(self, deployment_id: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """NotFound for an unknown deployment; InvalidInput when the simulation
        refuses these inputs (a seeded fault). Writes nothing."""
        if deployment_id not in self._disk.deployments:
            raise NotFound(
                f"deployment {deployment_id!r} not found", data={"deployment_id": deployment_id}
            )
        if not isinstance(inputs, Mapping):
            raise InvalidInput.from_problems(
                "inputs", [Problem(field="inputs", reason="must be an object")]
            )
        if self._faults.preflight_fails():
            raise InvalidInput.from_problems(
                "inputs", [Problem(field="inputs", reason=f"{SIMULATED} refused by preflight")]
            )
        return dict(inputs)

    def admissions_generation(self) -> int:
        """Changes when the simulation adds or removes a deployment (the only
        thing its admissions are checked against)."""
        return hash(tuple(sorted(self._disk.deployments)))

    async def reserve_run_ids(self, count: int) -> list[str]:
        """Durably reserve `count` fresh run ids with one write."""
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_RESERVE:
            raise InvalidInput.from_problems(
                "count",
                [Problem(field="count", reason=f"must be an integer from 1 to {MAX_RESERVE}")],
            )
        first = self._disk.run_counter + 1
        fault_point("before:counter:run_id")
        self._disk.run_counter += count
        fault_point("after:counter:run_id")
        return [format_run_id(n) for n in range(first, first + count)]

    async def admit_run(
        self,
        deployment_id: str,
        inputs: Mapping[str, Any],
        max_steps: int | None = None,
        origin: Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> str:
        """Write a new `admitted` run record. NotFound (deployment, or a seeded
        refusal: the deployment vanished since preflight), InvalidInput (run id
        not reserved), AlreadyExists (run id used)."""
        if deployment_id not in self._disk.deployments or self._faults.admission_refused():
            raise NotFound(
                f"{SIMULATED} deployment {deployment_id!r} vanished before the run was created",
                data={"deployment_id": deployment_id},
            )
        if run_id is None:
            run_id = (await self.reserve_run_ids(1))[0]
        number = int(run_id[4:]) if _RUN_ID.fullmatch(run_id) else 0
        if not 1 <= number <= self._disk.run_counter:
            raise InvalidInput.from_problems(
                "run admission", [Problem(field="run_id", reason=f"{run_id} was not reserved")]
            )
        if run_id in self._disk.runs:
            raise AlreadyExists(f"run {run_id} already exists", data={"run_id": run_id})
        now = format_instant(self._now())
        record: dict[str, Any] = {
            "run_id": run_id,
            "status": "admitted",
            "origin": dict(origin) if origin is not None else None,
            "snapshot": {
                "deployment_id": deployment_id,
                "inputs": dict(inputs),
                "max_steps": max_steps,
            },
            "attempt": 0,
            "executing": None,
            "error": None,
            "created_at": now,
            "updated_at": now,
        }
        self._put(record, "admitted")
        return run_id

    async def launch_run(self, run_id: str) -> None:
        """admitted -> running (the executing mark is durable first). InvalidState
        if the run is not admitted."""
        record = self._get(run_id)
        if record["status"] != "admitted":
            raise InvalidState(
                f"run {run_id} is {record['status']}; only an admitted run can be launched",
                data={"run_id": run_id, "status": record["status"]},
            )
        record.update(status="running", attempt=1, executing={"attempt": 1, "kind": "start"})
        self._put(record, "executing-mark")
        self._notify(record)
        self._run_for(record)

    async def inspect_run(self, run_id: str) -> dict[str, Any]:
        """The run as stored. NotFound if unknown."""
        return self._get(run_id)

    async def list_runs(
        self, status: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> dict[str, Any]:
        """A page of runs oldest first (by id): {"runs", "next_cursor"}.
        InvalidInput names a bad `status`, `cursor` or `limit`."""
        problems: list[Problem] = []
        if status is not None and status not in RUN_STATUSES:
            problems.append(
                Problem(field="status", reason=f"must be one of {sorted(RUN_STATUSES)}")
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100:
            problems.append(Problem(field="limit", reason="must be an integer from 1 to 100"))
        if cursor is not None and (not isinstance(cursor, str) or not _RUN_ID.fullmatch(cursor)):
            problems.append(Problem(field="cursor", reason="is not a cursor of this listing"))
        if problems:
            raise InvalidInput.from_problems("list_runs arguments", problems)
        runs: list[dict[str, Any]] = []
        # Run ids are fixed-width, so their text order is their number order.
        for run_id in sorted(self._disk.runs):
            if cursor is not None and run_id <= cursor:
                continue
            record = self._get(run_id)
            if status is None or record["status"] == status:
                runs.append(record)
            if len(runs) == limit:
                break
        last = runs[-1]["run_id"] if len(runs) == limit else None
        more = last is not None and any(r > last for r in self._disk.runs)
        return {"runs": runs, "next_cursor": last if more else None}

    def add_run_listener(self, callback: RunListener) -> None:
        self._listeners.append(callback)

    async def drain(self, timeout_s: float) -> list[str]:
        """Virtual time does not pass while draining: the runs still executing."""
        return sorted(
            run_id
            for run_id, data in self._disk.runs.items()
            if json.loads(data)["status"] == "running"
        )

    # --- the simulation's side ---------------------------------------------------------

    def recover(self) -> int:
        """The host's startup recovery (see the module docstring); returns how
        many runs it failed."""
        failed = 0
        for run_id in sorted(self._disk.runs):
            record = self._get(run_id)
            if record["status"] == "interrupted":
                self._schedule(
                    self._behaviour.resume_delay(run_id, record["attempt"]),
                    run_id,
                    record["attempt"],
                    "resume",
                )
                continue
            executing = record.get("executing")
            if record["status"] != "running" or not isinstance(executing, Mapping):
                continue
            attempt = executing["attempt"]
            if executing["kind"] == "start":
                kind, message = "abandoned", f"{ABANDONED} (attempt {attempt}); not retried"
            else:
                kind, message = "ambiguous-resume", AMBIGUOUS_RESUME.format(attempt=attempt)
            record.update(status="failed", executing=None, error={"kind": kind, "message": message})
            self._put(record, "recovery")
            failed += 1
        return failed

    def next_due(self) -> datetime | None:
        """When the next run transition is due (None: nothing is executing)."""
        return self._timers[0].when if self._timers else None

    def fire_due(self, now: datetime) -> int:
        """Carry out every transition due at or before `now`, in order; returns
        how many. A fault at one of their writes propagates (a crash kills
        the process)."""
        fired = 0
        while self._timers and self._timers[0].when <= now:
            timer = heapq.heappop(self._timers)
            record = self._get(timer.run_id)
            if record["attempt"] != timer.attempt:
                continue
            if timer.kind == "stop" and record["status"] == "running":
                outcome = self._behaviour.plan(timer.run_id, timer.attempt).outcome
                message = _OUTCOME_MESSAGES.get(outcome)
                record.update(
                    status=outcome,
                    executing=None,
                    error={"kind": outcome, "message": message} if message else None,
                )
                self._put(record, "checkpoint")
                if outcome == "interrupted":
                    self._schedule(
                        self._behaviour.resume_delay(timer.run_id, timer.attempt),
                        timer.run_id,
                        timer.attempt,
                        "resume",
                    )
            elif timer.kind == "resume" and record["status"] == "interrupted":
                attempt = record["attempt"] + 1
                record.update(
                    status="running",
                    attempt=attempt,
                    executing={"attempt": attempt, "kind": "resume"},
                )
                self._put(record, "attempt-mark")
                self._run_for(record)
            else:
                continue
            fired += 1
            self.transitions += 1
            self._notify(record)
        return fired
