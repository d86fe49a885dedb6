"""Leadership of a PostgreSQL store: one scheduler leads, others may stand by.

The seed's rule holds: one scheduler admits for a store, a second one is
refused with an error naming the holder (pid, host, since), and a dead one
blocks no one for long. On PostgreSQL it is a lease kept in the database,
measured on the database's clock, never on a server's:

- the row of `wf_scheduler_owner` holds the leader (server id, pid, host,
  since), an epoch, and `lease_until`. Taking it needs no lease or a lapsed
  one (`lease_until < now()` on the database's clock) and moves the epoch on
  by one; the leader renews it every `renew_s`, for `lease_s` from the
  database's now, only while it is still its own (same epoch, not lapsed).
- every write transaction of the leader's process checks, inside the
  transaction (`shell.pg.database.Fence`), that the epoch is still its own
  and the lease has not lapsed, holding the row against a takeover until it
  commits: a deposed leader (frozen, partitioned, its event loop starved)
  cannot commit a single row once a successor may have taken over.
- the leader stops admitting before its lease can lapse: a renewal sent at
  monotonic time t (the database renews it until its own now + `lease_s`,
  after t) keeps it safe until t + `lease_s` - a margin. A renewal that fails
  or comes late leaves `verify()` answering False once that passes, whatever
  the database says afterwards.

A clean stop gives the lease up and says so on the channel `wf_leadership`,
so a standby takes over at once; after a crash a standby takes over once the
lease lapsed (within `lease_s` plus its poll), or at once when the leader's
server is known dead (`shell.pg.servers`: it stopped, was declared gone, or
its process is dead on this machine). Taking over early is safe whatever
happens to the old leader: the epoch moved, so the fence refuses its writes;
the lease only keeps leadership from moving while its holder is alive. A leader whose lease lapsed
(the database was away, say) takes it again when it can (`campaign`), as a
standby would: the service then rebuilds its state from the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from psycopg.types.json import Jsonb

from core.errors import SchedulerUnavailable, StoreUnavailable
from shell.pg.database import Database, Fence
from shell.pg.listener import LEADERSHIP, send
from shell.pg.servers import ProcessIdentity, surely_dead
from shell.store_format import format_instant

__all__ = ["DEFAULT_LEASE_S", "DEFAULT_RENEW_S", "PgOwnership"]

_log = logging.getLogger("shell.pg")

# Failover after a crash within the lease plus a standby's poll: under 10 s.
DEFAULT_LEASE_S: Final = 6.0
DEFAULT_RENEW_S: Final = 2.0

_TAKE: Final = (
    "INSERT INTO wf_scheduler_owner (epoch, holder, lease_until)"
    " VALUES (1, %(holder)s, now() + %(lease)s * interval '1 second')"
    " ON CONFLICT (singleton) DO UPDATE"
    " SET epoch = wf_scheduler_owner.epoch + 1, holder = EXCLUDED.holder,"
    " lease_until = EXCLUDED.lease_until"
    " WHERE wf_scheduler_owner.lease_until IS NULL OR wf_scheduler_owner.lease_until < now()"
    " OR wf_scheduler_owner.epoch = %(dead_epoch)s"
    " RETURNING epoch"
)
# The leader's epoch with what tells whether its server is dead.
_LEADER_SERVER: Final = (
    "SELECT o.epoch, s.host, s.pid, s.boot_id, s.pid_namespace, s.process_start,"
    " s.stopped_at IS NOT NULL OR s.gone_at IS NOT NULL"
    " FROM wf_scheduler_owner o JOIN wf_servers s ON s.server_id = o.holder->>'server_id'"
    " WHERE o.lease_until > now()"
)
_RENEW: Final = (
    "UPDATE wf_scheduler_owner SET lease_until = now() + %s * interval '1 second'"
    " WHERE epoch = %s AND lease_until > now() RETURNING epoch"
)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class PgOwnership:
    """`shell.store_ports.OwnershipPort` on PostgreSQL (see the module docstring)."""

    def __init__(
        self,
        database: Database,
        *,
        clock: Callable[[], datetime] = _utc_now,
        lease_s: float = DEFAULT_LEASE_S,
        renew_s: float = DEFAULT_RENEW_S,
    ) -> None:
        if not 0 < renew_s < lease_s:
            raise ValueError("the lease must be renewed more often than it lasts")
        self._db = database
        self._clock = clock
        self._me = ProcessIdentity.of_this_process(database.host)
        self.lease_s = lease_s
        self.renew_s = renew_s
        # How long before the database's end of a lease this process stops
        # trusting it: its clock and the database's may run at slightly
        # different rates, and a renewal's answer may come late.
        self._margin = max(0.5, lease_s * 0.2)
        self.holder: dict[str, Any] | None = None
        self.epoch: int | None = None
        # Monotonic time until which the lease is surely still this
        # process's (see the module docstring); 0 when it holds none.
        self._safe_until = 0.0
        self._lost: str | None = None
        self._renewer: asyncio.Task[None] | None = None

    @property
    def path(self) -> str:
        return f"PostgreSQL store {self._db.display}"

    def loss(self) -> str:
        """What happened when leadership is found lost."""
        return self._lost or f"the scheduler's leadership of the {self.path} was lost"

    # Several servers share the store: a lost lease is taken again later.
    stands_by = True

    @property
    def held(self) -> bool:
        return self.epoch is not None

    @property
    def assured(self) -> bool:
        return self._lost is None and self.safe_for() > 0

    def safe_for(self) -> float:
        """Seconds the lease is surely this process's still (0: not held)."""
        return max(0.0, self._safe_until - time.monotonic()) if self.held else 0.0

    # --- taking, keeping, giving up -----------------------------------------------------

    async def acquire(self) -> dict[str, Any]:
        """Lead: take the lease, or raise `SchedulerUnavailable` naming the
        leader when another holds it (`StoreUnavailable`: the database does
        not answer)."""
        if self.held or not await self.campaign():
            raise await self.refusal()
        assert self.holder is not None
        return dict(self.holder)

    async def campaign(self) -> bool:
        """Take the lease if no one holds it (or it lapsed); True if taken.
        A standby calls it at every poll; a leader whose lease lapsed, to
        lead again."""
        if self.held:
            return True
        if await self._take(dead_epoch=-1):
            return True
        dead_epoch = await self._dead_leader_epoch()
        return dead_epoch is not None and await self._take(dead_epoch=dead_epoch)

    async def _dead_leader_epoch(self) -> int | None:
        """The epoch of a live lease whose holder's server is known dead."""
        row = await self._db.fetch_one(
            "read the scheduler's leader", _LEADER_SERVER, background=True
        )
        if row is None:
            return None
        epoch, host, pid, boot_id, pid_namespace, process_start, stopped = row
        holder = ProcessIdentity(str(host), int(pid), boot_id, pid_namespace, process_start)
        if stopped or surely_dead(holder, self._me):
            _log.warning(
                "the scheduler's leader (pid %s on %s, epoch %s) is dead: taking over"
                " before its lease lapses",
                pid,
                host,
                epoch,
            )
            return int(epoch)
        return None

    async def _take(self, *, dead_epoch: int) -> bool:
        holder = {
            "server_id": self._db.server_id,
            "pid": os.getpid(),
            "host": self._db.host,
            "since": format_instant(self._clock()),
        }
        sent = time.monotonic()
        async with self._db.transaction("take the scheduler's leadership", background=True) as conn:
            cursor = await conn.execute(
                _TAKE, {"holder": Jsonb(holder), "lease": self.lease_s, "dead_epoch": dead_epoch}
            )
            taken = await cursor.fetchone()
        if taken is None:
            return False
        self.holder, self.epoch = holder, int(taken[0])
        self._safe_until = sent + self.lease_s - self._margin
        self._lost = None
        self._db.fence = Fence(self.epoch, describe=lambda: self._db.display)
        self._renewer = asyncio.create_task(self._renew_forever(), name="wf-leadership-renewal")
        _log.info("leading the %s at epoch %d", self.path, self.epoch)
        return True

    async def _renew_forever(self) -> None:
        while self.held and self._lost is None:
            await asyncio.sleep(self.renew_s)
            await self.renew()

    async def renew(self) -> bool:
        """Renew the lease once; False when it is lost (taken or lapsed)."""
        epoch = self.epoch
        if epoch is None:
            return False
        sent = time.monotonic()
        try:
            async with self._db.transaction(
                "renew the scheduler's leadership", background=True
            ) as conn:
                cursor = await conn.execute(_RENEW, (self.lease_s, epoch))
                renewed = await cursor.fetchone()
        except StoreUnavailable as exc:
            # The lease runs out on its own, locally first (`verify`).
            _log.warning("could not renew the scheduler's leadership: %s", exc.message)
            return self.safe_for() > 0
        if renewed is None:
            self._lost = (
                f"the scheduler's lease on the {self.path} lapsed or was taken over (epoch {epoch})"
            )
            return False
        if self.epoch == epoch:
            self._safe_until = max(self._safe_until, sent + self.lease_s - self._margin)
        return True

    async def verify(self) -> bool:
        """True while the lease is surely still this process's; False once a
        renewal failed for too long, came back lost, or it was never taken."""
        if not self.held or self._lost is not None:
            return False
        if time.monotonic() >= self._safe_until:
            self._lost = (
                f"the scheduler's lease on the {self.path} was not renewed in time"
                f" (epoch {self.epoch}); it stops admitting before it can lapse"
            )
            return False
        return True

    async def step_down(self) -> None:
        """Stop leading at once, locally: no renewal, no fence (the writes of
        this process that need the lease are refused by the database anyway),
        nothing written. A lost lease is this."""
        renewer, self._renewer = self._renewer, None
        if renewer is not None and renewer is not asyncio.current_task():
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
        self.epoch = None
        self._safe_until = 0.0
        self._db.fence = None

    async def release(self) -> None:
        """Give the lease up (if still ours) and tell the standbys at once."""
        epoch = self.epoch
        await self.step_down()
        if epoch is None:
            return
        try:
            async with self._db.transaction("give up the scheduler's leadership") as conn:
                await conn.execute(
                    "UPDATE wf_scheduler_owner SET lease_until = NULL WHERE epoch = %s", (epoch,)
                )
                await send(conn, self._db, LEADERSHIP, {"epoch": epoch})
        except StoreUnavailable as exc:
            # It lapses on its own.
            _log.warning("could not give up the scheduler's leadership: %s", exc.message)

    async def ensure(self) -> None:
        """Nothing to do: a lapsed lease is taken again by `campaign`."""
        return None

    # --- who leads ------------------------------------------------------------------------

    async def leader(self) -> dict[str, Any] | None:
        """The leader and its epoch, as the database has them: holder fields
        and `epoch`, `lease_until`, `live`; None when no one ever led."""
        row = await self._db.fetch_one(
            "read the scheduler's leadership",
            "SELECT holder, epoch, lease_until, lease_until > now() FROM wf_scheduler_owner",
            background=True,
        )
        if row is None:
            return None
        holder = row[0] if isinstance(row[0], dict) else {}
        return {
            **holder,
            "epoch": int(row[1]),
            "lease_until": format_instant(row[2]) if row[2] is not None else None,
            "live": bool(row[3]),
        }

    async def refusal(self) -> SchedulerUnavailable:
        """The error that names the leader, for a second scheduler."""
        leader = await self.leader()
        if leader is None or not leader.get("live"):
            return SchedulerUnavailable(
                f"the {self.path} is led by another scheduler; stop it first",
                data={"holder": leader},
            )
        return SchedulerUnavailable(
            f"the {self.path} is owned by pid {leader.get('pid')} on host"
            f" {leader.get('host')} since {leader.get('since')} (server"
            f" {leader.get('server_id')}, epoch {leader.get('epoch')}); stop it first,"
            " or start this one with --standby to take over when it is gone",
            data={"holder": leader},
        )
