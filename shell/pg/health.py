"""Whether a PostgreSQL store answers, as its watcher finds it.

A file store is there as long as the process is; a database server can go
away and come back on its own. `StoreWatch` asks it a trivial question every
`interval_s` and records the answer in the server's `StoreHealth` (source
`store`): `workflow.health` and `/healthz` then say the store is unavailable
while it does not answer, even when no call or scheduler round happens to
fail, and stop saying so once it answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from core.errors import StoreUnavailable
from shell.pg.database import Database
from shell.store_health import StoreHealth

__all__ = ["StoreWatch"]

_log = logging.getLogger("shell.pg")


class StoreWatch:
    """Watches one database for one `StoreHealth` (see the module docstring)."""

    def __init__(self, database: Database, health: StoreHealth, *, interval_s: float = 1.0) -> None:
        self._db = database
        self._health = health
        self._interval = interval_s
        self._task: asyncio.Task[None] | None = None

    async def check(self) -> bool:
        """Ask once; True if the store answered."""
        try:
            await self._db.fetch_one("check the store", "SELECT 1")
        except StoreUnavailable as exc:
            if not self._health.is_failing("store"):
                _log.error("%s", exc.message)
            self._health.failed("store", exc)
            return False
        if self._health.is_failing("store"):
            _log.warning("the PostgreSQL store %s answers again", self._db.display)
        self._health.succeeded("store")
        # A store that answers takes the API's writes again too.
        self._health.succeeded("api")
        return True

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._watch(), name="wf-store-watch")

    async def _watch(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(self._interval)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
