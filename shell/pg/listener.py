"""What the other servers of a PostgreSQL store changed, as it commits.

A write that another server must hear of sends a notice in its own
transaction (`send`, PostgreSQL's `pg_notify`: delivered when the
transaction commits, never when it rolls back). Every server LISTENs on one
connection of its own (`Listener.of(database)`, outside the pool) and calls
the callbacks subscribed to the notice's channel:

- `wf_schedules`: a schedule was created or changed (the leader reads it at
  once instead of at its next poll);
- `wf_store`: a run's status, a deployment or an artifact changed (servers
  refresh what they keep of it; the leader tracks the runs it admitted that
  execute elsewhere);
- `wf_leadership`: a leader gave its lease up (a standby campaigns at once).

A notice is JSON with the sender's server id (`from`); a server's own notices
are not delivered back to it. Notices sent while the connection is down are
lost: once it is back, the `on_connect` callbacks run so each subscriber
reads again what it keeps (the leader rebuilds its state from the store, the
host refreshes its caches). Until then everything still works from the
store, only later.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import weakref
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.rows import TupleRow

from core.errors import StoreUnavailable
from shell.pg.database import Database, notify

__all__ = ["CHANNELS", "LEADERSHIP", "SCHEDULES", "STORE", "Listener", "send"]

_log = logging.getLogger("shell.pg")

SCHEDULES: Final = "wf_schedules"
STORE: Final = "wf_store"
LEADERSHIP: Final = "wf_leadership"
CHANNELS: Final = (SCHEDULES, STORE, LEADERSHIP)
# PostgreSQL refuses a payload of 8,000 bytes or more.
_MAX_PAYLOAD: Final = 7_900

Callback = Callable[[dict[str, Any]], None]


async def send(
    conn: AsyncConnection[TupleRow], database: Database, channel: str, notice: Mapping[str, Any]
) -> None:
    """Inside a transaction: send `notice` on `channel` once it commits. A
    notice too long for PostgreSQL is cut to what the receivers need to know
    that something changed (`more`: read it all again)."""
    payload = json.dumps({**notice, "from": database.server_id}, separators=(",", ":"))
    if len(payload.encode()) > _MAX_PAYLOAD:
        payload = json.dumps({"from": database.server_id, "more": True}, separators=(",", ":"))
    await notify(conn, channel, payload)


class Listener:
    """The LISTEN connection of one server (see the module docstring)."""

    _of: ClassVar[weakref.WeakKeyDictionary[Database, Listener]] = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, database: Database) -> Listener:
        """The listener of `database` (one per database object); it stops
        when the database closes."""
        listener = cls._of.get(database)
        if listener is None:
            listener = cls._of[database] = cls(database)
            database.add_close_hook(listener.stop)
        return listener

    def __init__(self, database: Database, *, retry_s: float = 1.0) -> None:
        self._db = database
        self._retry_s = retry_s
        self._callbacks: dict[str, list[Callback]] = {channel: [] for channel in CHANNELS}
        self._on_connect: list[Callable[[], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self.connections = 0

    def subscribe(self, channel: str, callback: Callback) -> None:
        if channel not in self._callbacks:
            raise ValueError(f"no channel {channel!r} (one of {', '.join(CHANNELS)})")
        self._callbacks[channel].append(callback)
        self._start()

    def unsubscribe(self, channel: str, callback: Callback) -> None:
        with contextlib.suppress(ValueError):
            self._callbacks[channel].remove(callback)

    def on_connect(self, callback: Callable[[], None]) -> None:
        """Call `callback` every time the connection is made again (what was
        sent meanwhile was lost)."""
        self._on_connect.append(callback)
        self._start()

    def remove_on_connect(self, callback: Callable[[], None]) -> None:
        with contextlib.suppress(ValueError):
            self._on_connect.remove(callback)

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def wait_connected(self) -> None:
        """Return once the listener is listening (tests, and a start that
        must not miss what is sent right after it)."""
        self._start()
        await self._connected.wait()

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._listen_forever(), name="wf-store-listener")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._connected.clear()

    async def _listen_forever(self) -> None:
        failing = False
        while True:
            try:
                conn = await self._db.connect(autocommit=True)
            except StoreUnavailable as exc:
                if not failing:
                    _log.warning("cannot listen to the store's changes: %s", exc.message)
                failing = True
                await asyncio.sleep(self._retry_s)
                continue
            try:
                for channel in CHANNELS:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                self.connections += 1
                first = self.connections == 1
                self._connected.set()
                if failing or not first:
                    _log.info("listening to the store's changes again")
                failing = False
                if not first:
                    self._reconnected()
                async for notice in conn.notifies():
                    self._dispatch(notice.channel, notice.payload)
            except psycopg.Error as exc:
                self._connected.clear()
                _log.warning("lost the store's change notices: %s", str(exc).strip()[:200])
                failing = True
            finally:
                with contextlib.suppress(psycopg.Error):
                    await conn.close()
            await asyncio.sleep(self._retry_s)

    def _reconnected(self) -> None:
        for callback in list(self._on_connect):
            try:
                callback()
            except Exception:
                _log.exception("a reconnect callback of the store's listener failed")

    def _dispatch(self, channel: str, payload: str) -> None:
        try:
            notice = json.loads(payload)
        except ValueError:
            _log.warning("ignored a notice on %s that is not JSON: %.100r", channel, payload)
            return
        if not isinstance(notice, dict) or notice.get("from") == self._db.server_id:
            return
        for callback in list(self._callbacks.get(channel, ())):
            try:
                callback(notice)
            except Exception:
                _log.exception("a callback of the store's listener failed on %s", channel)
