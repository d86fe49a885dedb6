"""The local static workflow server: one store root, one `api`.

Building the server is startup: it opens the stores under `root`, runs
startup recovery (recovery.py) and keeps the findings in `recovery_report`.
One server per store root at a time: recovery would otherwise declare the
other process's executing runs abandoned.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.errors import SchedulerUnavailable
from shell.journal import replay_journal
from shell.lock import SchedulerLock
from shell.store_health import StoreHealth

from .api import WorkflowApi
from .artifacts import ArtifactStore
from .counter import RunIdCounter
from .deployments import DeploymentStore
from .file_persistence import FileArtifacts, FileDeployments, FileRunCounter, FileRuns
from .persistence import complete
from .runs import RunStore
from .storage import ensure_dir

__all__ = ["LocalStaticWorkflowServer", "build_local_static_workflow_server"]

_log = logging.getLogger("adapters.host.server")


def _utc_now() -> datetime:
    return datetime.now(UTC)


class LocalStaticWorkflowServer:
    """`api` (WorkflowApi), `store_root`, and the startup `recovery_report`."""

    def __init__(
        self, *, store_root: Path, api: WorkflowApi, recovery_report: list[dict[str, Any]]
    ) -> None:
        self.store_root = store_root
        self.api = api
        self.recovery_report = recovery_report
        self.clock: Callable[[], datetime] = _utc_now


def _timestamp(clock: Callable[[], datetime]) -> Callable[[], str]:
    def now() -> str:
        moment = clock()
        if moment.tzinfo is None:
            raise ValueError("the host clock must return aware datetimes")
        return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")

    return now


def _refuse_if_owned(store_root: Path) -> None:
    """Raise SchedulerUnavailable (naming the holder) when a scheduler in
    another process owns the store: the recovery below would declare that
    process's executing runs abandoned while they still execute.

    Otherwise, under the lock, replay what a scheduler that died left in its
    commit journal (`shell.journal`): the schedule files must hold every
    durable write before anything reads them."""
    probe = SchedulerLock(store_root)
    if not probe.path.exists():
        # A live owner whose lock file was removed still locks the store root.
        probe.refuse_if_owned()
        return
    probe.acquire()
    try:
        replay_journal(store_root)
    finally:
        probe.release()


async def _recover(
    artifacts: ArtifactStore,
    deployments: DeploymentStore,
    runs: RunStore,
    counter: RunIdCounter,
    now: Callable[[], str],
) -> list[dict[str, Any]]:
    """Startup recovery of every store, in order; the findings."""
    report: list[dict[str, Any]] = []
    report += await artifacts.load()
    report += await deployments.load()
    report += await runs.load(now)
    repaired = await counter.load(runs.highest_number())
    if repaired is not None:
        _log.warning("run store recovery: %s", repaired)
        report.append(repaired)
    return report


def build_local_static_workflow_server(
    root: str | os.PathLike[str],
    schedules: bool = False,
    *,
    schedules_factory: Callable[[LocalStaticWorkflowServer], object] | None = None,
    clock: Callable[[], datetime] | None = None,
) -> LocalStaticWorkflowServer:
    """Open (creating if needed) the store at `root`, recover it, and return the server.

    Recovery findings (abandoned runs failed, ambiguous resumes failed closed,
    unreadable records, counter repairs) are in `server.recovery_report` and
    `server.api.recovery_report`; none of them stops the server. When a
    scheduler in another process owns the store (`scheduler.lock`), nothing is
    opened: SchedulerUnavailable names the holder.

    With `schedules=True`, `server.api.schedules` is `schedules_factory(server)`,
    or `shell.schedules_api.build_schedules_api(server)` when no factory is
    given (SchedulerUnavailable if that module is missing). `clock` (aware
    datetimes) stamps records; it defaults to the system clock.
    """
    store_root = Path(root)
    _refuse_if_owned(store_root)
    ensure_dir(store_root)
    read_clock = clock or _utc_now
    now = _timestamp(read_clock)
    artifacts = ArtifactStore(FileArtifacts(store_root))
    deployments = DeploymentStore(FileDeployments(store_root))
    runs = RunStore(FileRuns(store_root))
    counter = RunIdCounter(FileRunCounter(store_root / "counters" / "run_id"))
    # The file stores never suspend: their load runs to completion here.
    report = complete(_recover(artifacts, deployments, runs, counter, now))
    api = WorkflowApi(
        artifacts=artifacts,
        deployments=deployments,
        runs=runs,
        counter=counter,
        now=now,
        recovery_report=report,
        store_health=StoreHealth(store_root),
    )
    server = LocalStaticWorkflowServer(store_root=store_root, api=api, recovery_report=report)
    server.clock = read_clock
    if schedules:
        if schedules_factory is None:
            try:
                module = importlib.import_module("shell.schedules_api")
                schedules_factory = module.build_schedules_api
            except (ImportError, AttributeError) as exc:
                raise SchedulerUnavailable(
                    "schedules=True needs shell.schedules_api.build_schedules_api, "
                    f"which is not available: {exc}"
                ) from exc
        api.schedules = schedules_factory(server)
    return server
