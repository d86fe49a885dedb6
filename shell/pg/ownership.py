"""Ownership of a PostgreSQL store: one scheduler per database.

The rule is the seed's: one scheduler per store, a second one refused with an
error naming the holder (pid, host, since), and a dead holder blocking no
one. On PostgreSQL the database holds it, not a file:

- a session-level advisory lock (`pg_try_advisory_lock`), taken on a
  connection of the owner's own and held as long as that session lives. The
  server releases it the moment the session ends (the process died, the
  network broke, the session was terminated), so a dead owner blocks no one;
- the row of `wf_scheduler_owner`: who holds it (pid, host, since, the
  session's backend pid) and an epoch that grows at every taking. Every write
  transaction of the owner's process checks the epoch inside the
  transaction (`shell.pg.database.Fence`), so a process that lost its session
  and was replaced cannot commit a single row afterwards.

Losing the session stops admissions at once: `verify()` answers False when
another process owns the store now (fenced: restart to own it again), and
raises `StoreUnavailable` when the session broke, so the round fails; the
scheduler then rebuilds its state from the store, which retakes the lock
(`ensure`) once the database answers again and no one else took it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from core.errors import SchedulerUnavailable, StoreFenced, StoreUnavailable
from shell.pg.database import Database, Fence, raise_if_cancelled
from shell.pg.migrations import LOCK_NAMESPACE
from shell.store_format import format_instant

__all__ = ["SCHEDULER_LOCK", "PgOwnership"]

_log = logging.getLogger("shell.pg")

SCHEDULER_LOCK: Final = 2


def _utc_now() -> datetime:
    return datetime.now(UTC)


class PgOwnership:
    """`shell.store_ports.OwnershipPort` on PostgreSQL (see the module docstring)."""

    def __init__(self, database: Database, *, clock: Callable[[], datetime] = _utc_now) -> None:
        self._db = database
        self._clock = clock
        self._conn: AsyncConnection[TupleRow] | None = None
        self.holder: dict[str, Any] | None = None
        self.epoch: int | None = None

    @property
    def path(self) -> str:
        return f"PostgreSQL store {self._db.display}"

    def loss(self) -> str:
        """What happened when ownership is found lost."""
        return f"another scheduler took over the {self.path} from this process"

    @property
    def held(self) -> bool:
        return self._conn is not None

    async def acquire(self) -> dict[str, Any]:
        """Take the lock and record this process as the holder; returns the
        holder. Raises `SchedulerUnavailable` naming the holder when another
        live session holds it, `StoreUnavailable` when the database does not
        answer."""
        if self._conn is not None:
            raise await self._refusal(self._conn)
        conn = await self._db.connect(autocommit=True)
        try:
            await self._take(conn)
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        assert self.holder is not None
        return dict(self.holder)

    async def _take(self, conn: AsyncConnection[TupleRow]) -> None:
        """Lock on `conn` and write the holder with the next epoch."""
        try:
            cursor = await conn.execute(
                "SELECT pg_try_advisory_lock(%s, %s), pg_backend_pid()",
                (LOCK_NAMESPACE, SCHEDULER_LOCK),
            )
            row = await cursor.fetchone()
            assert row is not None
            if not row[0]:
                raise await self._refusal(conn)
            holder = {
                "pid": os.getpid(),
                "host": self._db.host,
                "since": format_instant(self._clock()),
                "backend_pid": int(row[1]),
            }
            cursor = await conn.execute(
                "INSERT INTO wf_scheduler_owner (epoch, holder) VALUES (1, %s)"
                " ON CONFLICT (singleton) DO UPDATE"
                " SET epoch = wf_scheduler_owner.epoch + 1, holder = EXCLUDED.holder"
                " RETURNING epoch",
                (Jsonb(holder),),
            )
            taken = await cursor.fetchone()
        except psycopg.OperationalError as exc:
            raise_if_cancelled(exc)
            raise self._db.unavailable(exc, "take the scheduler's ownership") from None
        assert taken is not None
        self.holder, self.epoch = holder, int(taken[0])
        self._db.fence = Fence(self.epoch, describe=lambda: self._db.display)

    async def _refusal(self, conn: AsyncConnection[TupleRow]) -> SchedulerUnavailable:
        cursor = await conn.execute("SELECT holder FROM wf_scheduler_owner")
        row = await cursor.fetchone()
        holder = row[0] if row is not None and isinstance(row[0], dict) else None
        if holder is None:
            return SchedulerUnavailable(
                f"the {self.path} is owned by another scheduler (holder not recorded yet);"
                " stop it first",
                data={"holder": None},
            )
        return SchedulerUnavailable(
            f"the {self.path} is owned by pid {holder.get('pid')} on host"
            f" {holder.get('host')} since {holder.get('since')}; stop it first",
            data={"holder": holder},
        )

    async def verify(self) -> bool:
        """True while this process's session holds the lock at its epoch;
        False once another took the store over; `StoreUnavailable` when the
        session broke (see the module docstring)."""
        conn = self._conn
        if conn is None:
            if self.epoch is None:
                return False  # never owned, or released
            # Lost, not taken: the round fails, and the state is rebuilt once
            # `ensure` owns the store again.
            raise StoreUnavailable(
                f"the scheduler's session on the {self.path} was lost; it is taken again"
                " once the database answers",
                data={"operation": "check the scheduler's ownership", "store": self._db.display},
            )
        try:
            cursor = await conn.execute("SELECT epoch FROM wf_scheduler_owner")
            row = await cursor.fetchone()
        except psycopg.OperationalError as exc:
            raise_if_cancelled(exc)
            await self._drop()
            raise self._db.unavailable(exc, "check the scheduler's ownership") from None
        return row is not None and int(row[0]) == self.epoch

    async def ensure(self) -> None:
        """Own the store again if the session was lost and no one took it
        since: the lock retaken at a new epoch. Raises `StoreFenced` when
        another scheduler owns it now, `StoreUnavailable` while the database
        does not answer."""
        if self._conn is not None:
            try:
                await self._conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                await self._drop()
        if self.epoch is None:
            raise SchedulerUnavailable(f"this process does not own the {self.path}")
        conn = await self._db.connect(autocommit=True)
        try:
            await self._take(conn)
        except SchedulerUnavailable as refused:
            await conn.close()
            raise StoreFenced(
                f"{self.loss()} while its session was lost: {refused.message}",
                data=refused.data,
            ) from None
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        _log.warning(
            "the scheduler's session on the %s was lost; ownership retaken at epoch %s",
            self.path,
            self.epoch,
        )

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                await conn.close()

    async def release(self) -> None:
        """Give the store up (the lock, then the session); the fence goes."""
        conn, self._conn = self._conn, None
        self._db.fence = None
        self.epoch = None
        if conn is None:
            return
        try:
            await conn.execute(
                "SELECT pg_advisory_unlock(%s, %s)", (LOCK_NAMESPACE, SCHEDULER_LOCK)
            )
        except psycopg.Error as exc:
            # The session ending releases it all the same.
            _log.info("could not release the scheduler's lock explicitly: %s", exc)
        finally:
            await conn.close()
