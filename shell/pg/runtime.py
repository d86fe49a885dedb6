"""Runtime records on PostgreSQL: one row per schedule in `wf_schedule_runtime`.

The record is the file store's (`shell.runtime_store.build_runtime_record`);
a round stages it as an upsert of its transaction, so it is durable exactly
with the history rows it depends on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from psycopg.types.json import Jsonb

from shell.pg import locations
from shell.pg.batch import PHASE_RUNTIME, PgBatch
from shell.pg.database import Database
from shell.runtime_store import RuntimeLoad, build_runtime_record, check_runtime_record
from shell.store_format import Instant, StoreProblem, check_schedule_id

__all__ = ["UPSERT_RUNTIME", "PgRuntime", "runtime_load"]

UPSERT_RUNTIME: Final = (
    "INSERT INTO wf_schedule_runtime (schedule_id, record) VALUES (%s, %s)"
    " ON CONFLICT (schedule_id) DO UPDATE SET record = EXCLUDED.record"
)


def runtime_load(schedule_id: str, stored: object | None) -> RuntimeLoad:
    """The load of a stored record (None: no row), checked as the file
    store checks its last line."""
    if stored is None:
        return RuntimeLoad(schedule_id=schedule_id, record=None)
    try:
        return RuntimeLoad(schedule_id=schedule_id, record=check_runtime_record(stored))
    except ValueError as exc:
        return RuntimeLoad(
            schedule_id=schedule_id,
            record=None,
            problem=StoreProblem(
                schedule_id=schedule_id,
                file=locations.table("runtime"),
                record=locations.row(schedule_id),
                reason=f"unreadable runtime record: {exc}",
            ),
        )


class PgRuntime:
    """`shell.store_ports.RuntimePort` on PostgreSQL."""

    def __init__(self, database: Database) -> None:
        self._db = database

    async def load(self, schedule_id: str) -> RuntimeLoad:
        check_schedule_id(schedule_id)
        row = await self._db.fetch_one(
            "read a runtime record",
            "SELECT record FROM wf_schedule_runtime WHERE schedule_id = %s",
            (schedule_id,),
        )
        return runtime_load(schedule_id, row[0] if row is not None else None)

    def stage(
        self,
        batch: Any,
        schedule_id: str,
        *,
        watermark: Instant,
        held: Instant | None,
        lifecycle_seq: int,
        written_at: Instant,
        waiting: Sequence[Instant] = (),
        backfill: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Stage the record as an upsert of `batch`; returns the record
        (with the schedule's backfill, when it has one)."""
        record = build_runtime_record(
            watermark=watermark,
            held=held,
            lifecycle_seq=lifecycle_seq,
            written_at=written_at,
            waiting=waiting,
            backfill=backfill,
        )
        pg_batch: PgBatch = batch
        pg_batch.add(PHASE_RUNTIME, UPSERT_RUNTIME, (schedule_id, Jsonb(record)))
        return record
