"""The local static workflow server: one store, one `api`.

The store is a root directory of files (`build_local_static_workflow_server`)
or a PostgreSQL database (`build_postgres_workflow_server`); the stores'
rules are the same on both (persistence.py). Building the server is startup:
it opens the stores, runs startup recovery (recovery.py) and keeps the
findings in `recovery_report`. One server per store at a time: recovery would
otherwise declare the other process's executing runs abandoned.
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from core.errors import SchedulerUnavailable
from shell.clock import ReadClock, system_now
from shell.disk import OS_DISK, Disk
from shell.durable import TEMP_IN_FLIGHT_NS
from shell.journal import replay_journal
from shell.lock import SchedulerLock
from shell.store_health import StoreHealth

from .api import WorkflowApi
from .artifacts import ArtifactStore
from .counter import RunIdCounter
from .deployments import DeploymentStore
from .file_persistence import FileArtifacts, FileDeployments, FileRunCounter, sweep_temp_files
from .persistence import complete
from .run_log import FileRunLog
from .runs import RunStore
from .storage import ensure_dir

# The defaults of a shared store's liveness, without importing the driver
# for a server on files (`shell.pg.servers`, `shell.pg.ownership`).
DEFAULT_HEARTBEAT_S = 2.0
DEFAULT_SILENCE_S = 6.0
DEFAULT_LEASE_S = 6.0
DEFAULT_RENEW_S = 2.0

if TYPE_CHECKING:
    from shell.pg.database import Database
    from shell.pg.servers import Servers

    from .shared_store import SharedStore

__all__ = [
    "LocalStaticWorkflowServer",
    "build_local_static_workflow_server",
    "build_postgres_workflow_server",
]

_log = logging.getLogger("adapters.host.server")

SchedulesFactory = Callable[["LocalStaticWorkflowServer"], object]


# The system clock itself, not a function like it: a scheduler on it is told
# of the clock's steps (`shell.clock.ReadClock.watch_steps`).
_utc_now: Final = system_now


class LocalStaticWorkflowServer:
    """`api` (WorkflowApi), the startup `recovery_report`, and the store:
    `store_root` (a `Path`; None on PostgreSQL) and `database` (the open
    `shell.pg.database.Database`; None on files). On files, `store_lock` is
    the store's lock, held from the build to `close()`: one process serves a
    store directory."""

    def __init__(
        self,
        *,
        store_root: Path | None,
        api: WorkflowApi,
        recovery_report: list[dict[str, Any]],
        database: Database | None = None,
    ) -> None:
        self.store_root = store_root
        self.database = database
        self.api = api
        self.recovery_report = recovery_report
        self.clock: Callable[[], datetime] = _utc_now
        # This server's part in a database several servers share.
        self.shared: SharedStore | None = None
        self.store_lock: SchedulerLock | None = None

    async def close(self) -> None:
        """Close the server's run records (on files: the run log writes the
        index the next start reads) and its database, saying first that this
        server stopped. Runs still executing are not stopped: drain or
        cancel them first (a record they write after goes to a new
        segment). Last, on files, the store's lock is released: another
        process may take the store."""
        try:
            self.api.close_runs()
            if self.shared is not None:
                shared, self.shared = self.shared, None
                await shared.stop()
            if self.database is not None:
                await self.database.close()
        finally:
            if self.store_lock is not None:
                self.store_lock.release()


def _timestamp(clock: Callable[[], datetime]) -> Callable[[], str]:
    if clock is _utc_now:
        return _system_timestamp

    def now() -> str:
        moment = clock()
        if moment.tzinfo is UTC:
            # Every record's timestamps: the common case skips the conversion.
            return moment.isoformat()[:-6] + "Z"
        if moment.tzinfo is None:
            raise ValueError("the host clock must return aware datetimes")
        return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")

    return now


# The last whole second `_system_timestamp` formatted, and its text.
_second: list[Any] = [None, ""]


def _system_timestamp() -> str:
    """`_utc_now()` as a record's text (`2026-12-06T05:18:17.509331Z`),
    without building a datetime: a run takes three, and the date and time
    of day are formatted once a second. Truncated to the microsecond, as
    `datetime.now` is."""
    seconds, fraction = divmod(time.time_ns() // 1000, 1_000_000)
    if _second[0] != seconds:
        _second[:] = [seconds, datetime.fromtimestamp(seconds, UTC).isoformat()[:-6]]
    text: str = _second[1]
    # `isoformat` leaves a zero fraction out; so does this.
    return f"{text}.{fraction:06d}Z" if fraction else text + "Z"


@dataclass(frozen=True, slots=True)
class _Stores:
    artifacts: ArtifactStore
    deployments: DeploymentStore
    runs: RunStore
    counter: RunIdCounter


async def _recover(
    stores: _Stores, now: Callable[[], str], servers: Servers | None = None
) -> list[dict[str, Any]]:
    """Startup recovery of every store, in order; the findings. `servers`:
    on a store several servers share, which of them are dead (only their
    executing runs are recovered)."""
    report: list[dict[str, Any]] = []
    report += await stores.artifacts.load()
    report += await stores.deployments.load()
    if servers is None:
        report += await stores.runs.load(now)
    else:
        report += await stores.runs.load(
            now, dead_servers=servers.dead, silent_servers=servers.silent
        )
    repaired = await stores.counter.load(stores.runs.highest_number())
    if repaired is not None:
        _log.warning("run store recovery: %s", repaired)
        report.append(repaired)
    return report


def _server(
    stores: _Stores,
    *,
    now: Callable[[], str],
    report: list[dict[str, Any]],
    read_clock: Callable[[], datetime],
    store_root: Path | None,
    database: Database | None,
) -> LocalStaticWorkflowServer:
    api = WorkflowApi(
        artifacts=stores.artifacts,
        deployments=stores.deployments,
        runs=stores.runs,
        counter=stores.counter,
        now=now,
        recovery_report=report,
        # On PostgreSQL there is no file to probe: the next write that
        # succeeds clears an API failure.
        store_health=StoreHealth(store_root),
    )
    server = LocalStaticWorkflowServer(
        store_root=store_root, api=api, recovery_report=report, database=database
    )
    server.clock = read_clock
    return server


def _take_store(store_root: Path, disk: Disk) -> SchedulerLock:
    """The store's lock, held, or SchedulerUnavailable naming the process that
    holds it: a second server would declare the first's executing runs
    abandoned while they still execute, and both would number runs from the
    same counter.

    The server keeps it from before its recovery to its `close()`, and its
    scheduler service runs under it (`shell.file_backend.FileOwnership`):
    no second start can recover between this one's recovery and its
    service's start, nor while it serves runs without a scheduler. First,
    under the lock, replay what a scheduler that died left in its commit
    journal (`shell.journal`): the schedule files must hold every durable
    write before anything reads them."""
    ensure_dir(store_root)
    lock = SchedulerLock(store_root)
    lock.acquire()
    try:
        replay_journal(store_root, disk=disk)
    except BaseException:
        lock.release()
        raise
    return lock


def _sweep_temp_files(store_root: Path, *, older_than_ns: int, disk: Disk) -> None:
    """The host's directories are few (one per artifact, and three), so a
    start sweeps them at once, unlike the scheduler's one per schedule."""
    try:
        removed = sweep_temp_files(store_root, older_than_ns=older_than_ns, disk=disk)
    except OSError as exc:
        _log.warning("could not sweep temp files of interrupted writes: %s", exc)
        return
    for directory, names in removed:
        _log.info("removed temp files of interrupted writes in %s: %s", directory, names)


def _default_schedules_factory() -> SchedulesFactory:
    try:
        module = importlib.import_module("shell.schedules_api")
        factory: SchedulesFactory = module.build_schedules_api
    except (ImportError, AttributeError) as exc:
        raise SchedulerUnavailable(
            "schedules=True needs shell.schedules_api.build_schedules_api, "
            f"which is not available: {exc}"
        ) from exc
    return factory


def build_local_static_workflow_server(
    root: str | os.PathLike[str],
    schedules: bool = False,
    *,
    schedules_factory: SchedulesFactory | None = None,
    clock: Callable[[], datetime] | None = None,
    disk: Disk = OS_DISK,
) -> LocalStaticWorkflowServer:
    """Open (creating if needed) the store at `root`, recover it, and return the server.

    Recovery findings (abandoned runs failed, ambiguous resumes failed closed,
    unreadable records, counter repairs) are in `server.recovery_report` and
    `server.api.recovery_report`; none of them stops the server. The server
    holds the store's lock (`scheduler.lock`) from before its recovery to
    its `close()`; when another live process holds it (a server, with or
    without its scheduler, or `wf-store copy`), nothing is opened:
    SchedulerUnavailable names the holder.

    With `schedules=True`, `server.api.schedules` is `schedules_factory(server)`,
    or `shell.schedules_api.build_schedules_api(server)` when no factory is
    given (SchedulerUnavailable if that module is missing). `clock` (aware
    datetimes) stamps records; it defaults to the system clock. `disk` holds
    the host's records (run log, run-id counter, artifacts, deployments) and
    the commit journal (the scheduler's stores must be built on the same
    one; tests simulate it). The store root's lock is the operating
    system's in any case.
    """
    started_ns = time.time_ns()
    store_root = Path(root)
    read_clock = clock or _utc_now
    now = _timestamp(read_clock)
    lock = _take_store(store_root, disk)
    try:
        stores = _Stores(
            artifacts=ArtifactStore(FileArtifacts(store_root, disk=disk)),
            deployments=DeploymentStore(FileDeployments(store_root, disk=disk)),
            runs=RunStore(FileRunLog(store_root, disk=disk)),
            counter=RunIdCounter(FileRunCounter(store_root / "counters" / "run_id", disk=disk)),
        )
        # The file stores never suspend: their load runs to completion here.
        report = complete(_recover(stores, now))
        _sweep_temp_files(store_root, older_than_ns=started_ns - TEMP_IN_FLIGHT_NS, disk=disk)
        server = _server(
            stores,
            now=now,
            report=report,
            read_clock=read_clock,
            store_root=store_root,
            database=None,
        )
        server.store_lock = lock
        if schedules:
            if schedules_factory is None:
                schedules_factory = _default_schedules_factory()
            server.api.schedules = schedules_factory(server)
    except BaseException:
        lock.release()
        raise
    return server


async def build_postgres_workflow_server(
    database: Database,
    *,
    schedules: bool = False,
    schedules_factory: SchedulesFactory | None = None,
    clock: Callable[[], datetime] | None = None,
    heartbeat_s: float = DEFAULT_HEARTBEAT_S,
    silence_s: float = DEFAULT_SILENCE_S,
    lease_s: float = DEFAULT_LEASE_S,
    renew_s: float = DEFAULT_RENEW_S,
) -> LocalStaticWorkflowServer:
    """Recover the stores in the PostgreSQL `database` and return the server.

    `database` must be open (`await database.open()` applies the migrations);
    `server.close()` says this server stopped and closes it. As the file
    builder: the findings are in `recovery_report`; StoreUnavailable when the
    database does not answer. `server.store_root` is None and
    `server.database` is `database`.

    Several servers may share the database (`server.shared`,
    `adapters.host.shared_store`): this one registers first and proves it is
    alive every `heartbeat_s`; the recovery fails only the executing runs of
    servers dead (stopped, or declared gone: silent for `silence_s`, or
    known dead on this machine), never those of a live server. `lease_s`
    and `renew_s` are the scheduler's leadership lease (`shell.pg.ownership`).

    With `schedules=True`, `server.api.schedules` is `schedules_factory(server)`,
    or a `shell.schedules_api.SchedulesApi` on `shell.pg.backend.PgBackend`
    (the schedule stores in the same database) when no factory is given.
    """
    from .pg_persistence import PgArtifacts, PgDeployments, PgRunCounter, PgRuns
    from .shared_store import SharedStore

    read_clock = clock or _utc_now
    now = _timestamp(read_clock)
    stores = _Stores(
        artifacts=ArtifactStore(PgArtifacts(database)),
        deployments=DeploymentStore(PgDeployments(database)),
        runs=RunStore(PgRuns(database)),
        counter=RunIdCounter(PgRunCounter(database)),
    )
    shared = SharedStore(
        database,
        runs=stores.runs,
        deployments=stores.deployments,
        artifacts=stores.artifacts,
        now=now,
        heartbeat_s=heartbeat_s,
        silence_s=silence_s,
    )
    servers = await shared.register()
    try:
        report = await _recover(stores, now, servers)
        server = _server(
            stores,
            now=now,
            report=report,
            read_clock=read_clock,
            store_root=None,
            database=database,
        )
        await shared.start(
            announce=server.api.announce_run, cancel_executing=server.api.cancel_executing
        )
    except BaseException:
        await shared.stop()
        raise
    server.shared = shared
    server.api.shared = shared
    if schedules:
        if schedules_factory is None:
            schedules_factory = _pg_schedules_factory(database, read_clock, lease_s, renew_s)
        server.api.schedules = schedules_factory(server)
    return server


def _pg_schedules_factory(
    database: Database, read_clock: Callable[[], datetime], lease_s: float, renew_s: float
) -> SchedulesFactory:
    try:
        from shell.pg.backend import PgBackend
        from shell.schedules_api import SchedulesApi
    except ImportError as exc:
        raise SchedulerUnavailable(
            "schedules=True needs shell.schedules_api and shell.pg.backend,"
            f" which are not available: {exc}"
        ) from exc

    def factory(server: LocalStaticWorkflowServer) -> object:
        return SchedulesApi(
            backend=PgBackend(database, clock=read_clock, lease_s=lease_s, renew_s=renew_s),
            host=server.api,
            clock=ReadClock(read_clock),
            store_health=server.api.store_health,
        )

    return factory
