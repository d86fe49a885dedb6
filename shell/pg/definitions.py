"""Schedule definitions on PostgreSQL: the lifecycle log and its snapshot as rows.

`wf_schedule_lifecycle` holds one row per lifecycle record (`seq` dense from
1) and is the truth; `wf_schedules` holds the snapshot of it. A create inserts
both in one transaction; a change locks the schedule's row (`FOR UPDATE`),
checks the change by `shell.definition_rules` (the file store's rules),
appends its record and rewrites the snapshot in one transaction (any server
of the store may: the row lock orders them, and the transaction tells the
leader, `shell.pg.listener`): the two
can never disagree unless someone edits the tables by hand, which the reads
below find and report as damage naming the table and row.

Ids are never reused: the primary key of `wf_schedules` refuses a second
create of an id, deleted or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from core.errors import AlreadyExists, InvalidInput, NotFound, Problem
from shell.definition_rules import (
    ChangeKind,
    LifecycleResult,
    RecordRefused,
    blocked_value,
    change,
    check_snapshot,
    creation,
    replay,
    same_block,
)
from shell.pg import locations
from shell.pg.database import Database
from shell.pg.listener import SCHEDULES, send
from shell.store_format import Instant, StoreDamaged, StoreProblem, check_schedule_id

__all__ = ["PgDefinitions", "snapshot_problem"]


def _not_found(schedule_id: str) -> NotFound:
    return NotFound(f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id})


def snapshot_problem(schedule_id: str, reason: str) -> StoreProblem:
    return StoreProblem(
        schedule_id=schedule_id,
        file=locations.table("definition"),
        record=locations.row(schedule_id),
        reason=reason,
    )


def lifecycle_problem(schedule_id: str, refused: RecordRefused) -> StoreProblem:
    # The file store's "line N (seq N)" is the row of that seq here.
    return StoreProblem(
        schedule_id=schedule_id,
        file=locations.table("lifecycle"),
        record=locations.row(schedule_id, refused.seq),
        reason=refused.reason,
    )


def checked_snapshot(schedule_id: str, raw: object, lifecycle_seq: int) -> dict[str, Any]:
    """A stored snapshot row, checked; raises `StoreDamaged` naming it."""
    try:
        snapshot = check_snapshot(raw, schedule_id)
    except ValueError as exc:
        raise StoreDamaged(snapshot_problem(schedule_id, f"unreadable snapshot: {exc}")) from None
    if snapshot["lifecycle_seq"] != lifecycle_seq:
        raise StoreDamaged(
            snapshot_problem(
                schedule_id,
                f"snapshot says lifecycle_seq {snapshot['lifecycle_seq']} but its row says"
                f" {lifecycle_seq}",
            )
        )
    return snapshot


class PgDefinitions:
    """`shell.store_ports.DefinitionsPort` on PostgreSQL (see the module docstring)."""

    def __init__(self, database: Database) -> None:
        self._db = database

    async def exists(self, schedule_id: str) -> bool:
        check_schedule_id(schedule_id)
        row = await self._db.fetch_one(
            "read a schedule", "SELECT 1 FROM wf_schedules WHERE schedule_id = %s", (schedule_id,)
        )
        return row is not None

    async def list_ids(self) -> list[str]:
        rows = await self._db.fetch_all(
            "list schedules", "SELECT schedule_id FROM wf_schedules ORDER BY schedule_id"
        )
        return [str(r[0]) for r in rows]

    async def get(self, schedule_id: str) -> dict[str, Any]:
        """The current snapshot; `NotFound`, or `StoreDamaged` naming the row
        when the stored snapshot is not one."""
        check_schedule_id(schedule_id)
        row = await self._db.fetch_one(
            "read a schedule",
            "SELECT snapshot, lifecycle_seq FROM wf_schedules WHERE schedule_id = %s",
            (schedule_id,),
        )
        if row is None:
            raise _not_found(schedule_id)
        return checked_snapshot(schedule_id, row[0], int(row[1]))

    async def records_after(self, schedule_id: str, seq: int) -> tuple[dict[str, Any], ...]:
        """Lifecycle records with seq greater than `seq`, oldest first; every
        record of the log is checked against the ones before it
        (`StoreDamaged` naming the first that does not follow)."""
        check_schedule_id(schedule_id)
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise InvalidInput.from_problems(
                "lifecycle query", [Problem(field="seq", reason="must be >= 0")]
            )
        async with self._db.transaction("read a lifecycle log") as conn:
            if not await _schedule_exists(conn, schedule_id):
                raise _not_found(schedule_id)
            records = await _lifecycle(conn, schedule_id)
        return tuple(_replayed(schedule_id, records)[seq:])

    async def create(
        self, schedule_id: str, definition: Mapping[str, Any], *, at: Instant
    ) -> LifecycleResult:
        """Create a schedule at revision 1; `AlreadyExists` if the id was ever
        used. Everything is checked before the transaction begins."""
        check_schedule_id(schedule_id)
        record, snapshot = creation(schedule_id, definition, at)
        # Any server of the store takes changes (the row locks order them);
        # the leader hears of each (`shell.pg.listener`).
        async with self._db.transaction("create a schedule") as conn:
            cursor = await conn.execute(
                "INSERT INTO wf_schedules (schedule_id, lifecycle_seq, snapshot)"
                " VALUES (%s, 1, %s) ON CONFLICT (schedule_id) DO NOTHING RETURNING 1",
                (schedule_id, Jsonb(snapshot)),
            )
            if await cursor.fetchone() is None:
                raise AlreadyExists(
                    f"schedule {schedule_id!r} already exists (ids are never reused)",
                    data={"schedule_id": schedule_id},
                )
            await conn.execute(
                "INSERT INTO wf_schedule_lifecycle (schedule_id, seq, record) VALUES (%s, 1, %s)",
                (schedule_id, Jsonb(record)),
            )
            await send(conn, self._db, SCHEDULES, {"schedule_id": schedule_id})
        return LifecycleResult(snapshot=snapshot, record=record)

    async def apply_change(
        self,
        schedule_id: str,
        kind: ChangeKind,
        *,
        at: Instant,
        definition: Mapping[str, Any] | None = None,
        expected_revision: int | None = None,
        action: Mapping[str, Any] | None = None,
    ) -> LifecycleResult:
        """Record one lifecycle change (see `DefinitionStore.apply_change`)."""
        check_schedule_id(schedule_id)
        async with self._db.transaction("change a schedule") as conn:
            current, lifecycle_seq = await _locked_snapshot(conn, schedule_id)
            await _check_log_end(conn, schedule_id, current, lifecycle_seq)
            result = change(
                current,
                lifecycle_seq,
                schedule_id,
                kind,
                at=at,
                definition=definition,
                expected_revision=expected_revision,
                action=action,
            )
            if result.record is None:
                return result
            await conn.execute(
                "INSERT INTO wf_schedule_lifecycle (schedule_id, seq, record) VALUES (%s, %s, %s)",
                (schedule_id, result.record["seq"], Jsonb(result.record)),
            )
            await conn.execute(
                "UPDATE wf_schedules SET snapshot = %s, lifecycle_seq = %s WHERE schedule_id = %s",
                (Jsonb(result.snapshot), result.record["seq"], schedule_id),
            )
            await send(conn, self._db, SCHEDULES, {"schedule_id": schedule_id})
        return result

    async def set_blocked(
        self, schedule_id: str, blocked: Mapping[str, Any] | None, *, at: Instant | None = None
    ) -> dict[str, Any]:
        """Persist (or clear) the diagnostic that blocks a schedule; not a
        lifecycle change, and nothing is written when it is unchanged."""
        check_schedule_id(schedule_id)
        value = blocked_value(blocked, at)
        async with self._db.transaction("record a schedule's block", fenced=True) as conn:
            current, _ = await _locked_snapshot(conn, schedule_id)
            if same_block(current.get("blocked"), value):
                return current
            snapshot = dict(current, blocked=value)
            await conn.execute(
                "UPDATE wf_schedules SET snapshot = %s WHERE schedule_id = %s",
                (Jsonb(snapshot), schedule_id),
            )
            await send(conn, self._db, SCHEDULES, {"schedule_id": schedule_id})
        return snapshot


async def _schedule_exists(conn: AsyncConnection[TupleRow], schedule_id: str) -> bool:
    cursor = await conn.execute("SELECT 1 FROM wf_schedules WHERE schedule_id = %s", (schedule_id,))
    return await cursor.fetchone() is not None


async def _lifecycle(conn: AsyncConnection[TupleRow], schedule_id: str) -> list[Any]:
    cursor = await conn.execute(
        "SELECT record FROM wf_schedule_lifecycle WHERE schedule_id = %s ORDER BY seq",
        (schedule_id,),
    )
    return [r[0] for r in await cursor.fetchall()]


def _replayed(schedule_id: str, records: list[Any]) -> list[dict[str, Any]]:
    try:
        return replay(records, schedule_id)
    except RecordRefused as refused:
        raise StoreDamaged(lifecycle_problem(schedule_id, refused)) from None


async def _locked_snapshot(
    conn: AsyncConnection[TupleRow], schedule_id: str
) -> tuple[dict[str, Any], int]:
    cursor = await conn.execute(
        "SELECT snapshot, lifecycle_seq FROM wf_schedules WHERE schedule_id = %s FOR UPDATE",
        (schedule_id,),
    )
    row = await cursor.fetchone()
    if row is None:
        raise _not_found(schedule_id)
    return checked_snapshot(schedule_id, row[0], int(row[1])), int(row[1])


async def _check_log_end(
    conn: AsyncConnection[TupleRow],
    schedule_id: str,
    snapshot: Mapping[str, Any],
    lifecycle_seq: int,
) -> None:
    """The snapshot reflects the log's last record: same seq, same revision."""
    cursor = await conn.execute(
        "SELECT seq, record->'revision' FROM wf_schedule_lifecycle WHERE schedule_id = %s"
        " ORDER BY seq DESC LIMIT 1",
        (schedule_id,),
    )
    last = await cursor.fetchone()
    if last is None or int(last[0]) != lifecycle_seq or last[1] != snapshot["revision"]:
        ends = f"seq {last[0]} (revision {last[1]})" if last is not None else "no record"
        raise StoreDamaged(
            snapshot_problem(
                schedule_id,
                f"snapshot is at lifecycle seq {lifecycle_seq} (revision"
                f" {snapshot['revision']}) but the log ends at {ends}",
            )
        )
