"""The servers of a PostgreSQL store, and which of them are alive.

Several servers may share one store. Each registers a row of `wf_servers`
when it starts (`register`) and moves its `heartbeat_at` every `heartbeat_s`
on the database's clock (`keep_alive`); a clean stop sets `stopped_at`.

A server is dead once it stopped, or was declared gone. `settle` declares
gone every server silent for `silence_s` (the database's clock again), and
every one whose process is known dead on this machine (`surely_dead`: same
boot and pid namespace, and its pid runs no more, or runs another program),
so a server restarted after a crash need not wait for the silence. The
declaration is a transaction of its own that waits for every write of that
server still in flight: each of them holds the server's row `FOR SHARE`
(`ServerFence`, checked inside the write's transaction), so nothing the gone
server writes to a run commits once it is declared, and the runs it was
executing can be failed as abandoned by whoever declared it (a starting
server's recovery, or the leader's sweep) without a late write undoing it.

A server that finds itself declared gone (it was frozen, or cut off from the
database, for longer than the silence) cannot write its runs any more; it
registers again under a new id and goes on serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from core.errors import StoreFenced, StoreUnavailable
from shell.pg.database import Database, new_server_id
from shell.store_format import format_instant

__all__ = [
    "DEFAULT_HEARTBEAT_S",
    "DEFAULT_SILENCE_S",
    "ProcessIdentity",
    "ServerFence",
    "ServerRegistry",
    "Servers",
    "surely_dead",
]

_log = logging.getLogger("shell.pg")

# As the leadership's renewal and lease (`shell.pg.ownership`): a server is
# gone after three missed heartbeats, as a leader's lease lapses.
DEFAULT_HEARTBEAT_S: Final = 2.0
DEFAULT_SILENCE_S: Final = 6.0
# Rows of servers dead this long, with no run still naming them, are deleted.
_FORGET_AFTER: Final = "7 days"


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """What tells one process from another on a machine, across pid reuse:
    the kernel's boot, the pid namespace, the pid and when it started (clock
    ticks since boot). The last three are None off Linux."""

    host: str
    pid: int
    boot_id: str | None
    pid_namespace: str | None
    process_start: int | None

    @classmethod
    def of_this_process(cls, host: str) -> ProcessIdentity:
        pid = os.getpid()
        return cls(host, pid, _boot_id(), _pid_namespace(), _process_start(pid))

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> ProcessIdentity:
        return cls(
            str(row["host"]),
            int(row["pid"]),
            row.get("boot_id"),
            row.get("pid_namespace"),
            int(row["process_start"]) if row.get("process_start") is not None else None,
        )


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _boot_id() -> str | None:
    return _read("/proc/sys/kernel/random/boot_id")


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _process_state(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) of a process, or
    None when no process has that pid (see proc(5): the fields after the
    command name, which may itself hold spaces and parentheses)."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None or ")" not in stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def _process_start(pid: int) -> int | None:
    state = _process_state(pid)
    return state[1] if state is not None else None


def surely_dead(
    other: ProcessIdentity,
    me: ProcessIdentity,
    process_state: Callable[[int], tuple[str, int] | None] = _process_state,
) -> bool:
    """Whether the process `other` is known dead from where `me` runs: only
    when both run under one kernel boot and one pid namespace (else nothing
    here can tell), and its pid runs no process, a zombie, or one started at
    another time (the pid was reused). A process sharing `me`'s pid and start
    is `me` itself, or a server inside it: alive."""
    if other.boot_id is None or other.pid_namespace is None or other.process_start is None:
        return False
    if (other.boot_id, other.pid_namespace) != (me.boot_id, me.pid_namespace):
        return False
    if other.pid == me.pid:
        return other.process_start != me.process_start
    state = process_state(other.pid)
    if state is None:
        return True
    letter, started = state
    return letter in {"Z", "X", "x"} or started != other.process_start


class ServerFence:
    """`shell.pg.database.TransactionFence` of a registered server: its row
    held `FOR SHARE` until the write commits, and the write refused once the
    server was declared gone."""

    def __init__(self, server_id: str, describe: Callable[[], str]) -> None:
        self.server_id = server_id
        self._describe = describe

    async def check(self, conn: AsyncConnection[TupleRow]) -> None:
        cursor = await conn.execute(
            "SELECT gone_at FROM wf_servers WHERE server_id = %s FOR SHARE", (self.server_id,)
        )
        row = await cursor.fetchone()
        if row is None or row[0] is not None:
            when = f" at {format_instant(row[0])}" if row is not None else ""
            raise StoreFenced(
                f"this server ({self.server_id}) was declared gone from the store"
                f" {self._describe()}{when}: the runs it was executing were failed as"
                " abandoned, so nothing it writes to them is kept",
                data={"server_id": self.server_id},
            )


@dataclass(frozen=True, slots=True)
class Servers:
    """What `ServerRegistry.settle` found: the servers dead (stopped or
    declared gone, the ones it declared included), those of them declared
    gone for their silence (which may be frozen or cut off rather than dead),
    and every server it knew of."""

    dead: frozenset[str]
    silent: frozenset[str]
    known: frozenset[str]
    declared: tuple[str, ...] = ()


_COLUMNS: Final = (
    "server_id",
    "host",
    "pid",
    "boot_id",
    "pid_namespace",
    "process_start",
    "started_at",
    "heartbeat_at",
    "stopped_at",
    "gone_at",
    "gone_why",
)


class ServerRegistry:
    """This server's row of `wf_servers`, its heartbeat, and the liveness of
    the others (see the module docstring)."""

    def __init__(
        self,
        database: Database,
        *,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        silence_s: float = DEFAULT_SILENCE_S,
        identity: ProcessIdentity | None = None,
    ) -> None:
        if not 0 < heartbeat_s < silence_s:
            raise ValueError("a server must beat more often than the silence that makes it gone")
        self._db = database
        self.heartbeat_s = heartbeat_s
        self.silence_s = silence_s
        self.identity = identity or ProcessIdentity.of_this_process(database.host)
        self.registered = False

    @property
    def server_id(self) -> str:
        return self._db.server_id

    async def register(self) -> None:
        """Add this server's row (the database's clock stamps it) and fence
        its run writes by it."""
        me = self.identity
        async with self._db.transaction("register this server") as conn:
            await conn.execute(
                "INSERT INTO wf_servers (server_id, host, pid, boot_id, pid_namespace,"
                " process_start, started_at, heartbeat_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, now(), now())",
                (
                    self.server_id,
                    me.host,
                    me.pid,
                    me.boot_id,
                    me.pid_namespace,
                    me.process_start,
                ),
            )
        self._db.server_fence = ServerFence(self.server_id, lambda: self._db.display)
        self.registered = True
        _log.info("server %s registered on the %s", self.server_id, self._db.display)

    async def beat(self) -> bool:
        """Prove this server alive once; False when it was declared gone."""
        row = await self._db.fetch_one(
            "prove this server alive",
            "UPDATE wf_servers SET heartbeat_at = now() WHERE server_id = %s"
            " AND gone_at IS NULL RETURNING 1",
            (self.server_id,),
            background=True,
        )
        return row is not None

    async def keep_alive(self, on_gone: Callable[[str], Awaitable[None]]) -> None:
        """Beat every `heartbeat_s` until cancelled. A database that does not
        answer is logged once per outage; a server found declared gone calls
        `on_gone(old id)` and registers again under a new id."""
        failing = False
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                alive = await self.beat()
            except StoreUnavailable as exc:
                if not failing:
                    _log.warning("this server's heartbeat failed: %s", exc.message)
                failing = True
                continue
            if failing:
                _log.info("this server's heartbeat reaches the store again")
            failing = False
            if alive:
                continue
            old = self.server_id
            _log.error(
                "this server (%s) was declared gone from the store %s: its executing runs"
                " were failed as abandoned; it goes on as a new server",
                old,
                self._db.display,
            )
            await on_gone(old)
            self._db.server_id = new_server_id()
            with contextlib.suppress(StoreUnavailable):
                await self.register()

    async def stop(self) -> None:
        """Say this server stopped: its runs still marked executing are
        failed by the leader's sweep without waiting for a silence."""
        if not self.registered:
            return
        self.registered = False
        try:
            async with self._db.transaction("note this server stopped") as conn:
                await conn.execute(
                    "UPDATE wf_servers SET stopped_at = now(), heartbeat_at = now()"
                    " WHERE server_id = %s AND gone_at IS NULL",
                    (self.server_id,),
                )
        except StoreUnavailable as exc:
            # It falls silent instead: declared gone after `silence_s`.
            _log.warning("could not note this server stopped: %s", exc.message)

    async def settle(self) -> Servers:
        """Declare gone every server silent too long or known dead here; which
        servers are dead, and every one known (see `Servers`)."""
        rows = await self.servers()
        me = self.identity
        suspects = [
            row["server_id"]
            for row in rows
            if row["stopped_at"] is None
            and row["gone_at"] is None
            and row["server_id"] != self.server_id
            and (row["silent"] or surely_dead(ProcessIdentity.of_row(row), me))
        ]
        dead_here = [
            row["server_id"] for row in rows if row["server_id"] in suspects and not row["silent"]
        ]
        declared: list[tuple[str, str]] = []
        if suspects:
            async with self._db.transaction("declare silent servers gone", background=True) as conn:
                # Waits for their writes in flight (`ServerFence`); a silent
                # one that beat meanwhile is spared.
                cursor = await conn.execute(
                    "UPDATE wf_servers SET gone_at = now(), gone_why = CASE WHEN"
                    " server_id = ANY(%(dead)s) THEN 'dead' ELSE 'silent' END"
                    " WHERE server_id = ANY(%(suspects)s) AND gone_at IS NULL"
                    " AND stopped_at IS NULL AND (server_id = ANY(%(dead)s)"
                    " OR heartbeat_at < now() - %(silence)s * interval '1 second')"
                    " RETURNING server_id, gone_why",
                    {"suspects": suspects, "dead": dead_here, "silence": self.silence_s},
                )
                declared = sorted((str(r[0]), str(r[1])) for r in await cursor.fetchall())
            for server_id, why in declared:
                _log.warning("server %s declared gone from the store (%s)", server_id, why)
        gone = {row["server_id"] for row in rows if row["gone_at"] is not None}
        silent = {row["server_id"] for row in rows if row["gone_why"] == "silent"}
        stopped = {row["server_id"] for row in rows if row["stopped_at"] is not None}
        return Servers(
            dead=frozenset(gone | stopped | {server_id for server_id, _ in declared}),
            silent=frozenset(silent | {s for s, why in declared if why == "silent"}),
            known=frozenset(row["server_id"] for row in rows),
            declared=tuple(server_id for server_id, _ in declared),
        )

    async def servers(self) -> list[dict[str, Any]]:
        """Every server's row, with `silent` (past the silence, by the
        database's clock) and `heartbeat_age_s`."""
        rows = await self._db.fetch_all(
            "read the servers",
            f"SELECT {', '.join(_COLUMNS)}, heartbeat_at < now() - %s * interval '1 second',"
            " extract(epoch FROM now() - heartbeat_at) FROM wf_servers ORDER BY started_at",
            (self.silence_s,),
            background=True,
        )
        found: list[dict[str, Any]] = []
        for row in rows:
            entry = dict(zip(_COLUMNS, row[: len(_COLUMNS)], strict=True))
            entry["silent"] = bool(row[len(_COLUMNS)])
            entry["heartbeat_age_s"] = float(row[len(_COLUMNS) + 1])
            found.append(entry)
        return found

    async def forget_dead(self) -> int:
        """Delete the rows of servers dead for long that no run names any
        more (the table stays as small as the servers recently alive)."""
        row = await self._db.fetch_one(
            "forget long-dead servers",
            "WITH gone AS (DELETE FROM wf_servers s WHERE coalesce(s.gone_at, s.stopped_at)"
            f" < now() - interval '{_FORGET_AFTER}' AND NOT EXISTS (SELECT 1 FROM wf_runs r"
            " WHERE r.status = 'running' AND r.record->'executing'->>'server' = s.server_id)"
            " RETURNING 1) SELECT count(*) FROM gone",
        )
        return int(row[0]) if row is not None else 0
