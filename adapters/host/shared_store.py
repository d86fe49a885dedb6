"""A server's part in a PostgreSQL store that several servers share.

Every server of the store (docs/operations.md, "Several servers"):

- is registered in `wf_servers` from its start and proves it is alive by a
  heartbeat (`shell.pg.servers`); a clean stop says so;
- hears what the others change (`shell.pg.listener`, channel `wf_store`) and
  refreshes what it caches of it: a deployment saved or deleted, an artifact
  stored, a run whose status changed (and tells its run listeners, so the
  leading scheduler tracks the runs it admitted wherever they execute). After
  the notices were lost (the listening connection broke) it reads again all
  it caches that can change;
- when it leads the scheduler, sweeps now and then (`sweep`): every server
  silent for too long, or known dead, is declared gone, and the runs that
  the dead servers were executing are failed as abandoned, with the
  disclosure that external effects may already have occurred, never retried.
  A run executing on a live server is never touched.

A server found declared gone (frozen or cut off for longer than the silence)
cancels what it was executing: those runs were failed by the sweep that
declared it, and nothing it writes to them would be kept anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from core.errors import SchedulingError, StoreUnavailable
from shell.pg.database import Database
from shell.pg.listener import STORE, Listener
from shell.pg.servers import ServerRegistry, Servers

from .artifacts import ArtifactStore
from .deployments import DeploymentStore
from .identifiers import parse_run_id
from .records import STOP_STATUSES, RunRecord
from .runs import RunStore

__all__ = ["SharedStore"]

_log = logging.getLogger("adapters.host.shared")

# Servers dead for a week, no run naming them, are forgotten at most hourly.
_FORGET_EVERY: Final = 3600


class SharedStore:
    """See the module docstring. `register()` before the stores are loaded
    (recovery must know which servers are dead), `start()` once the API
    exists, `stop()` at a clean stop, before the database closes."""

    def __init__(
        self,
        database: Database,
        *,
        runs: RunStore,
        deployments: DeploymentStore,
        artifacts: ArtifactStore,
        now: Callable[[], str],
        heartbeat_s: float,
        silence_s: float,
    ) -> None:
        self.database = database
        self.registry = ServerRegistry(database, heartbeat_s=heartbeat_s, silence_s=silence_s)
        self._runs = runs
        self._deployments = deployments
        self._artifacts = artifacts
        self._now = now
        self._announce: Callable[[RunRecord], None] = lambda record: None
        self._cancel: Callable[[], Awaitable[list[str]]] | None = None
        self._notices: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._swept_at = 0.0
        self._forgotten_at = 0.0
        # Runs failed as abandoned by this server's sweeps (findings).
        self.swept: list[dict[str, Any]] = []

    @property
    def server_id(self) -> str:
        return self.database.server_id

    async def register(self) -> Servers:
        """Register this server; which servers are dead (for the startup
        recovery of runs), after declaring gone those silent too long or
        known dead."""
        await self.registry.register()
        return await self.registry.settle()

    async def start(
        self,
        *,
        announce: Callable[[RunRecord], None],
        cancel_executing: Callable[[], Awaitable[list[str]]],
    ) -> None:
        """Beat, and listen to the other servers' changes. `announce` tells
        the run listeners of a status another server wrote;
        `cancel_executing` stops this server's executions once it was
        declared gone."""
        self._announce = announce
        self._cancel = cancel_executing
        listener = Listener.of(self.database)
        listener.subscribe(STORE, self._notices.put_nowait)
        listener.on_connect(lambda: self._notices.put_nowait(None))
        self._tasks = [
            asyncio.create_task(self.registry.keep_alive(self._gone), name="wf-server-heartbeat"),
            asyncio.create_task(self._refresh_forever(), name="wf-store-refresh"),
        ]
        # A database closed without a clean stop (a dying process, a test)
        # ends them too, writing nothing.
        self.database.add_close_hook(self._halt)
        await listener.wait_connected()

    async def stop(self) -> None:
        """Stop beating and listening; say this server stopped."""
        await self._halt()
        await self.registry.stop()

    async def _halt(self) -> None:
        Listener.of(self.database).unsubscribe(STORE, self._notices.put_nowait)
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _gone(self, server_id: str) -> None:
        if self._cancel is not None:
            cancelled = await self._cancel()
            if cancelled:
                _log.error(
                    "stopped executing %s: server %s was declared gone, and its runs failed"
                    " as abandoned",
                    ", ".join(cancelled),
                    server_id,
                )

    # --- what the other servers changed ------------------------------------------------

    async def _refresh_forever(self) -> None:
        while True:
            notice = await self._notices.get()
            try:
                if notice is None or notice.get("more"):
                    await self._refresh_all()
                else:
                    await self._refresh(notice)
            except StoreUnavailable as exc:
                # What was missed is read again once the listener reconnects.
                _log.warning("could not refresh what another server changed: %s", exc.message)
            except SchedulingError as exc:
                _log.warning("ignored a change another server made: %s", exc.message)

    async def _refresh(self, notice: dict[str, Any]) -> None:
        deployment_id = notice.get("deployment")
        if deployment_id is not None:
            await self._deployments.refresh(deployment_id)
        artifact_id = notice.get("artifact")
        if artifact_id is not None:
            await self._artifacts.refresh(artifact_id)
        for entry in notice.get("runs", ()):
            if isinstance(entry, list) and entry and isinstance(entry[0], int):
                await self._refresh_run(entry[0])

    async def _refresh_run(self, number: int) -> None:
        before = self._runs.cached(number)
        record = await self._runs.refresh(number)
        if record is not None and (before is None or before.status != record.status):
            self._announce(record)

    async def _refresh_all(self) -> None:
        await self._deployments.reload()
        await self._artifacts.reload()
        for record in self._runs.records():
            if record.status not in STOP_STATUSES:
                number = parse_run_id(record.run_id)
                if number is not None:
                    await self._refresh_run(number)

    # --- the leader's sweep ------------------------------------------------------------

    async def sweep(self, loop_time: float) -> list[dict[str, Any]]:
        """Declare gone the servers silent too long or known dead, and fail
        as abandoned the runs the dead ones were executing (see the module
        docstring); the findings. At most once per heartbeat (`loop_time`:
        the event loop's clock)."""
        if loop_time - self._swept_at < self.registry.heartbeat_s:
            return []
        self._swept_at = loop_time
        servers = await self.registry.settle()
        failed, findings = await self._runs.abandoned_by(servers.dead, servers.silent, self._now)
        for record in failed:
            self._announce(record)
        self.swept += findings
        if loop_time - self._forgotten_at >= _FORGET_EVERY:
            self._forgotten_at = loop_time
            await self.registry.forget_dead()
        return findings

    async def servers(self) -> list[dict[str, Any]]:
        """Every server of the store with its liveness (health, the console)."""
        return await self.registry.servers()
