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

Fencing: a scheduler that leads the store (`shell.pg.ownership`) sets
`fence` here; from then on every write transaction of this process that asks
for it (`fenced=True`: the scheduler's rounds) checks, inside the
transaction, that the leadership's epoch is still the current one and its
lease has not lapsed (on the database's clock), so a deposed leader cannot
commit a single row. A server registered on the store (`shell.pg.servers`)
sets `server_fence`: the writes of the runs it executes (`as_server=True`)
check that it was not declared gone, after which its runs belong to the
recovery that failed them.

`server_id` names this server process on the store: the leadership's holder,
its row of `wf_servers`, and the executing marks of the runs it executes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, Protocol
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
    "TransactionFence",
    "display_url",
    "is_store_url",
    "new_server_id",
    "notify",
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


def new_server_id() -> str:
    """An identity for one server process (each start is a new server)."""
    return uuid.uuid4().hex[:12]


async def notify(conn: AsyncConnection[TupleRow], channel: str, payload: str) -> None:
    """Inside a transaction: tell the store's other servers (`LISTEN`) once it
    commits; nothing is sent if it rolls back."""
    await conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))


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


class TransactionFence(Protocol):
    """A check that runs first inside a write transaction, raising
    `StoreFenced` when the writer may no longer write."""

    async def check(self, conn: AsyncConnection[TupleRow]) -> None: ...


class Fence:
    """The leadership epoch a process's write transactions must still hold."""

    def __init__(self, epoch: int, *, describe: Callable[[], str]) -> None:
        self.epoch = epoch
        self._describe = describe

    async def check(self, conn: AsyncConnection[TupleRow]) -> None:
        """Inside a transaction: lock the leader's row against a takeover
        until the transaction ends, and refuse when another scheduler took
        over or the lease lapsed (on the database's clock)."""
        cursor = await conn.execute(
            "SELECT epoch, lease_until IS NOT NULL AND lease_until > now()"
            " FROM wf_scheduler_owner FOR SHARE"
        )
        row = await cursor.fetchone()
        current = int(row[0]) if row is not None else None
        if current != self.epoch or row is None or not row[1]:
            why = (
                f"another scheduler took over (epoch {self.epoch}, now {current})"
                if current != self.epoch
                else f"its lease (epoch {self.epoch}) lapsed"
            )
            raise StoreFenced(
                f"this process no longer leads the store {self._describe()}: {why}; nothing"
                " is written",
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
        application_name: str | None = None,
        server_id: str | None = None,
    ) -> None:
        self._url = _check_url(url)
        self.display = display_url(url)
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise InvalidInput.from_problems(
                "store", [Problem(field="pool_size", reason="must be an integer >= 1")]
            )
        self.pool_size = pool_size
        self.connect_timeout_s = connect_timeout_s
        self.server_id = server_id or new_server_id()
        # Which server a session belongs to, in `pg_stat_activity`.
        self.application_name = application_name or f"wf-scheduler {self.server_id}"
        self._pool: AsyncConnectionPool[AsyncConnection[TupleRow]] | None = None
        # Set by the scheduler's ownership while it leads the store.
        self.fence: TransactionFence | None = None
        # Set once this server registered on the store (`shell.pg.servers`).
        self.server_fence: TransactionFence | None = None
        self._close_hooks: list[Callable[[], Awaitable[None]]] = []
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

    def add_close_hook(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Await `hook` when the database closes (what holds a connection of
        its own, such as the listener)."""
        self._close_hooks.append(hook)

    async def close(self) -> None:
        hooks, self._close_hooks = self._close_hooks, []
        for hook in hooks:
            await hook()
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
        self,
        operation: str,
        *,
        fenced: bool = False,
        as_server: bool = False,
        background: bool = False,
    ) -> AsyncIterator[AsyncConnection[TupleRow]]:
        """A connection in a transaction committed when the block ends (rolled
        back if it raises). `fenced`: the leadership fence is checked first, if
        this process leads the store; `as_server`: the server's (see the
        module docstring). `background`: the upkeep of leadership and
        liveness, which `quiesce` does not count as activity. Driver errors
        leave as `StoreUnavailable` (a failed COMMIT included: its outcome is
        then unknown)."""
        if self._pool is None:
            raise StoreUnavailable(
                f"the PostgreSQL store {self.display} is not open",
                data={"operation": operation, "store": self.display},
            )
        self._begin(counted=not background)
        try:
            async with self._pool.connection() as conn, conn.transaction():
                if fenced and self.fence is not None:
                    await self.fence.check(conn)
                if as_server and self.server_fence is not None:
                    await self.server_fence.check(conn)
                yield conn
        except (psycopg.OperationalError, PoolTimeout) as exc:
            raise_if_cancelled(exc)
            raise self.unavailable(exc, operation) from None
        finally:
            self._end()

    def _begin(self, *, counted: bool) -> None:
        self._in_flight += 1
        self._begun += counted
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
        self,
        operation: str,
        query: str,
        params: tuple[Any, ...] | None = None,
        *,
        background: bool = False,
    ) -> list[TupleRow]:
        """The rows of one query, in a transaction of its own."""
        async with self.transaction(operation, background=background) as conn:
            cursor = await conn.execute(query, params)
            return await cursor.fetchall()

    async def fetch_one(
        self,
        operation: str,
        query: str,
        params: tuple[Any, ...] | None = None,
        *,
        background: bool = False,
    ) -> TupleRow | None:
        async with self.transaction(operation, background=background) as conn:
            cursor = await conn.execute(query, params)
            return await cursor.fetchone()
