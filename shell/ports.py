"""What the shell needs from the workflow host, as a structural type.

The shell never imports the host (it lives in `adapters`); the server object
handed to `build_scheduler_service` only has to look like this.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from core.errors import SchedulingError

__all__ = [
    "BatchRunHost",
    "ClaimListingHost",
    "HostApi",
    "HostServer",
    "PreparingRunHost",
    "RunListener",
    "StagingRunHost",
    "StopNotingHost",
    "SweepingHost",
]

RunListener = Callable[[str, str, "Mapping[str, Any] | None", "str | None"], None]


class HostApi(Protocol):
    async def preflight(self, deployment_id: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Raise NotFound / InvalidInput if a run of `deployment_id` with `inputs`
        could not be admitted; write nothing."""
        ...

    async def reserve_run_ids(self, count: int) -> list[str]: ...

    async def admit_run(
        self,
        deployment_id: str,
        inputs: Mapping[str, Any],
        max_steps: int | None = None,
        origin: Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> str: ...

    async def launch_run(self, run_id: str) -> None: ...

    async def inspect_run(self, run_id: str) -> dict[str, Any]: ...

    async def list_runs(
        self, status: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> dict[str, Any]:
        """A page of runs oldest first: {"runs": [...], "next_cursor": str | None}."""
        ...

    def add_run_listener(self, callback: RunListener) -> None: ...

    async def drain(self, timeout_s: float) -> list[str]: ...


@runtime_checkable
class BatchRunHost(Protocol):
    """Optional: a host that creates and launches many runs with one group
    commit each. The service uses it when the host has it, else `admit_run`
    and `launch_run` per run."""

    async def admit_runs(
        self, requests: Sequence[Mapping[str, Any]]
    ) -> list[str | SchedulingError]:
        """Per request (`admit_run`'s keyword arguments, `run_id` required): the
        run id once durable, or the error `admit_run` would have raised."""
        ...

    async def launch_runs(self, run_ids: Sequence[str]) -> list[SchedulingError | None]:
        """Per run id: None once it executes, or the error `launch_run` would raise."""
        ...


@runtime_checkable
class StagingRunHost(Protocol):
    """Optional: a host whose run records can be written by the scheduler
    round's own commit (a database where rows and runs commit in one
    transaction), so that an admission and its run record are durable
    together, with one commit instead of two."""

    def stage_admit_runs(
        self,
        batch: Any,
        requests: Sequence[Mapping[str, Any]],
        *,
        not_before: datetime | None = None,
    ) -> list[str | SchedulingError] | None:
        """`BatchRunHost.admit_runs` staged into `batch`: per request, the run
        id (durable once the batch commits) or the error; None when the host
        cannot write into that batch (nothing staged). `not_before`: the
        records say they were created no earlier (a round staged ahead of
        its instant is the decision of that instant)."""
        ...


@runtime_checkable
class PreparingRunHost(Protocol):
    """Optional: a host that says when what an admission is checked against
    (its deployments) may have changed, so that a round staged ahead of its
    instant can be committed at it only if nothing did (`shell/service.py`,
    "Prepared rounds")."""

    def admissions_generation(self) -> int:
        """A number that changes whenever an admission checked now could be
        checked differently than one checked before."""
        ...


@runtime_checkable
class ClaimListingHost(Protocol):
    """Optional: a host that pages its runs as what a start checks of them
    (`shell/recovery.py`: every run's claim on an occurrence), without the
    rest of each run's view, which a start over every run ever kept pays
    for per run."""

    async def list_run_claims(self, cursor: str | None = None, limit: int = 100) -> dict[str, Any]:
        """`list_runs` oldest first, each run as `{run_id, status, origin}`."""
        ...

    def run_records_position(self) -> str | None:
        """Where the run records stand now, as a token `changed_run_claims`
        takes back (None: this host cannot say)."""
        ...

    async def changed_run_claims(self, since: str) -> list[dict[str, Any]] | None:
        """The same of every run not finished and every run whose record was
        written after `since`, oldest first; None when this host cannot tell
        (then every run is listed)."""
        ...


@runtime_checkable
class StopNotingHost(Protocol):
    """Optional: a host that can note on its executing runs' marks that the
    server stopped before they finished. The service calls it when its drain
    runs out of time, while it still owns the store, so that the next start
    says so instead of "the process died"."""

    async def note_stopped(
        self, cause: Literal["drain-expired", "drain-cut"], grace_s: float
    ) -> list[str]:
        """`cause` "drain-expired" (the grace of `grace_s` s ran out) or
        "drain-cut"; the ids of the runs noted."""
        ...


@runtime_checkable
class SweepingHost(Protocol):
    """Optional: a host on a store several servers share, whose leading
    scheduler fails the runs of servers found dead (abandoned, never
    retried) and tells its run listeners."""

    async def sweep_abandoned(self, loop_time: float) -> list[dict[str, Any]]:
        """Sweep if a heartbeat passed since the last (`loop_time`: the
        event loop's clock); the findings."""
        ...


class HostServer(Protocol):
    @property
    def store_root(self) -> Path: ...

    @property
    def api(self) -> Any: ...
