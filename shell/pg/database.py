"""One PostgreSQL store: its URL, its connection pool, its schema, its errors.

`Database(url)` is opened once per server (`await database.open()`): it
checks that the server answers (a clear `StoreUnavailable` when it does not),
opens a pool of connections (psycopg 3's `AsyncConnectionPool`), and brings
the schema to this code's version by the migrations in `shell/pg/migrations`
(`shell.pg.migrations`). Every store of the server (artifacts, deployments,
runs, schedules, occurrence history) works through it.

Errors: a connection that fails or breaks (the server is down, restarting,
or terminated the session) leaves every call as `core.errors.StoreUnavailable`
naming the store (its URL without the password) and the operation, never as
a driver exception; the pool replaces broken connections, so calls work again
once the server is back. Credentials never appear in logs or errors: the URL
is shown as `display`.

Fencing: a scheduler that owns the store (`shell.pg.ownership`) sets `fence`
here; from then on every write transaction of this process that asks for it
checks, inside the transaction, that the ownership's epoch is still the
current one, so a deposed owner cannot commit a single row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from core.errors import InvalidInput, Problem, StoreFenced, StoreUnavailable

__all__ = [
    "DEFAULT_POOL_SIZE",
    "Database",
    "Fence",
    "display_url",
    "is_store_url",
    "raise_if_cancelled",
]

_log = logging.getLogger("shell.pg")

DEFAULT_POOL_SIZE: Final = 10
# How long a call waits for a connection (or a new one to be made) before it
# answers store_unavailable: long enough for a busy pool, short enough that a
# client of a server whose database is down hears so promptly.
_CONNECT_TIMEOUT_S: Final = 5.0
_SCHEMES: Final = ("postgresql", "postgres")
# Query parameters that hold secrets, never shown.
_SECRET_PARAMETERS: Final = frozenset({"password", "sslpassword"})


def raise_if_cancelled(exc: BaseException) -> None:
    """Re-raise the cancellation of the current task that `exc` stands in for.

    A task cancelled in the middle of a query leaves the connection busy; the
    rollback on the way out then fails with a driver error, which replaces
    the `CancelledError`. Turned into `StoreUnavailable`, it would be taken
    for a failed round and the cancellation (a shutdown, a test killing the
    "process") lost."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from exc


def is_store_url(text: str) -> bool:
    """Whether `text` names a PostgreSQL store (postgresql:// or postgres://)."""
    return urlsplit(text).scheme in _SCHEMES


def display_url(url: str) -> str:
    """`url` without its password (and any secret query parameter)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostinfo = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}@{hostinfo}" if user else hostinfo
    query = "&".join(
        f"{key}=***" if key in _SECRET_PARAMETERS else urlencode([(key, value)])
        for key, value in parse_qsl(parts.query, keep_blank_values=True)
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _check_url(url: object) -> str:
    if not isinstance(url, str) or not is_store_url(url):
        raise InvalidInput.from_problems(
            "store",
            [
                Problem(
                    field="store_url",
                    reason="must be a PostgreSQL URL: postgresql://user[:password]@host[:port]/dbname",
                )
            ],
        )
    return url


class Fence:
    """The ownership epoch a process's write transactions must still hold."""

    def __init__(self, epoch: int, *, describe: Callable[[], str]) -> None:
        self.epoch = epoch
        self._describe = describe

    async def check(self, conn: AsyncConnection[TupleRow]) -> None:
        """Inside a transaction: lock the owner row against a takeover until
        the transaction ends, and refuse when another owner took over."""
        cursor = await conn.execute("SELECT epoch FROM wf_scheduler_owner FOR SHARE")
        row = await cursor.fetchone()
        current = int(row[0]) if row is not None else None
        if current != self.epoch:
            raise StoreFenced(
                f"this process no longer owns the store {self._describe()} (ownership epoch"
                f" {self.epoch}, now {current}): another scheduler took it over; nothing is"
                " written; restart the scheduler",
                data={"epoch": self.epoch, "current_epoch": current},
            )


class Database:
    """One PostgreSQL store (see the module docstring).

    `pool_size`: the most connections this process opens (the scheduler's
    ownership holds one more of its own). `connect_timeout_s`: how long a call
    waits for a connection before it answers store_unavailable.
    """

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        connect_timeout_s: float = _CONNECT_TIMEOUT_S,
        application_name: str = "wf-scheduler",
    ) -> None:
        self._url = _check_url(url)
        self.display = display_url(url)
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise InvalidInput.from_problems(
                "store", [Problem(field="pool_size", reason="must be an integer >= 1")]
            )
        self.pool_size = pool_size
        self.connect_timeout_s = connect_timeout_s
        self.application_name = application_name
        self._pool: AsyncConnectionPool[AsyncConnection[TupleRow]] | None = None
        # Set by the scheduler's ownership while it owns the store.
        self.fence: Fence | None = None
        # Transactions in flight, and (made on first use, in the loop) the
        # event set whenever there are none: see `quiesce`.
        self._in_flight = 0
        self._begun = 0
        self._quiet: asyncio.Event | None = None
        self.host = socket.gethostname()

    def connection_kwargs(self) -> dict[str, Any]:
        """What every connection of this store is opened with."""
        return {
            "connect_timeout": max(1, round(self.connect_timeout_s)),
            "application_name": self.application_name,
            # A dead peer is noticed in seconds, not after the system's
            # two-hour keepalive default.
            "keepalives": 1,
            "keepalives_idle": 5,
            "keepalives_interval": 2,
            "keepalives_count": 3,
        }

    async def connect(self, *, autocommit: bool = True) -> AsyncConnection[TupleRow]:
        """A connection of its own, outside the pool (the ownership's, the
        migrations'); raises `StoreUnavailable`."""
        try:
            return await AsyncConnection.connect(
                self._url, autocommit=autocommit, **self.connection_kwargs()
            )
        except psycopg.Error as exc:
            raise_if_cancelled(exc)
            raise self.unavailable(exc, "connect") from None

    async def open(self, *, migrate: bool = True) -> None:
        """Reach the server, open the pool and bring the schema up to date.
        Raises `StoreUnavailable` (the server does not answer, refuses the
        credentials, or its schema is newer than this code)."""
        if self._pool is not None:
            return
        # One connection first: the pool only logs why it cannot connect.
        probe = await self.connect()
        try:
            if migrate:
                from shell.pg.migrations import migrate as apply_migrations

                await apply_migrations(probe, display=self.display)
        finally:
            await probe.close()
        pool: AsyncConnectionPool[AsyncConnection[TupleRow]] = AsyncConnectionPool(
            self._url,
            min_size=1,
            max_size=self.pool_size,
            kwargs=self.connection_kwargs(),
            open=False,
            timeout=self.connect_timeout_s,
            # A connection the server dropped (a restart) is replaced before
            # it is handed out, instead of failing the call that gets it.
            check=AsyncConnectionPool.check_connection,
            reconnect_timeout=0,
            name="wf-store",
        )
        try:
            await pool.open(wait=True, timeout=self.connect_timeout_s)
        except PoolTimeout as exc:
            await pool.close()
            raise self.unavailable(exc, "open the connection pool") from None
        self._pool = pool
        _log.info("store: PostgreSQL %s (pool of %d)", self.display, self.pool_size)

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    @property
    def is_open(self) -> bool:
        return self._pool is not None

    def unavailable(self, exc: BaseException, operation: str) -> StoreUnavailable:
        """The domain error for a driver error `exc` during `operation`."""
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return StoreUnavailable(
            f"the PostgreSQL store {self.display} is unavailable: {operation} failed: {detail}",
            data={
                "operation": operation,
                "errno": None,
                "path": None,
                "disk_full": False,
                "store": self.display,
            },
        )

    @contextlib.asynccontextmanager
    async def transaction(
        self, operation: str, *, fenced: bool = False
    ) -> AsyncIterator[AsyncConnection[TupleRow]]:
        """A connection in a transaction committed when the block ends (rolled
        back if it raises). `fenced`: the ownership fence is checked first, if
        this process owns the store. Driver errors leave as `StoreUnavailable`
        (a failed COMMIT included: its outcome is then unknown)."""
        if self._pool is None:
            raise StoreUnavailable(
                f"the PostgreSQL store {self.display} is not open",
                data={"operation": operation, "store": self.display},
            )
        self._begin()
        try:
            async with self._pool.connection() as conn, conn.transaction():
                if fenced and self.fence is not None:
                    await self.fence.check(conn)
                yield conn
        except (psycopg.OperationalError, PoolTimeout) as exc:
            raise_if_cancelled(exc)
            raise self.unavailable(exc, operation) from None
        finally:
            self._end()

    def _begin(self) -> None:
        self._in_flight += 1
        self._begun += 1
        if self._quiet is not None:
            self._quiet.clear()

    def _end(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0 and self._quiet is not None:
            self._quiet.set()

    async def quiesce(self) -> int:
        """Return once no transaction of this process is in flight (tests on
        a manual clock wait for what runs write before they look), with how
        many were begun so far."""
        while self._in_flight:
            if self._quiet is None:
                self._quiet = asyncio.Event()
            await self._quiet.wait()
        return self._begun

    async def fetch_all(
        self, operation: str, query: str, params: tuple[Any, ...] | None = None
    ) -> list[TupleRow]:
        """The rows of one read-only query."""
        async with self.transaction(operation) as conn:
            cursor = await conn.execute(query, params)
            return await cursor.fetchall()

    async def fetch_one(
        self, operation: str, query: str, params: tuple[Any, ...] | None = None
    ) -> TupleRow | None:
        async with self.transaction(operation) as conn:
            cursor = await conn.execute(query, params)
            return await cursor.fetchone()
