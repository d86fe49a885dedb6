"""In-memory runtime records with `RuntimeStore`'s behaviour.

The record is built and checked by `RuntimeStore.build` itself (the same
`InvalidInput` naming each bad field), staged as a *late* append of the
wake-up's batch (durable only after the batch's history lines), and read
back as the log's last line. `NotFound` when the schedule has no directory.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from core.errors import NotFound
from shell.durable import GroupCommit
from shell.runtime_store import RUNTIME_FORMAT, RuntimeLoad, RuntimeStore
from shell.sim.definitions import SIM_STORE_ROOT
from shell.sim.disk import SimDisk
from shell.store_format import (
    RUNTIME_FILE,
    SCHEDULES_DIR,
    Instant,
    StoreProblem,
    check_schedule_id,
    encode_json_line,
)

__all__ = ["MemoryRuntimeStore"]


class MemoryRuntimeStore:
    """`RuntimeStore` over a `SimDisk` (see the module docstring)."""

    def __init__(self, disk: SimDisk) -> None:
        self._disk = disk
        # Only its pure record builder is used: it touches no file.
        self._builder = RuntimeStore(SIM_STORE_ROOT)

    def load(self, schedule_id: str) -> RuntimeLoad:
        """The current record (None if never written); never raises for damage."""
        files = self._disk.schedules.get(check_schedule_id(schedule_id))
        if files is None or not files.runtime:
            return RuntimeLoad(schedule_id=schedule_id, record=None)
        try:
            record = json.loads(files.runtime[-1])
            if not isinstance(record, dict) or record.get("format") != RUNTIME_FORMAT:
                raise ValueError(f"not a runtime record: {record!r}")
        except ValueError as exc:
            return RuntimeLoad(
                schedule_id=schedule_id,
                record=None,
                problem=StoreProblem(
                    schedule_id=schedule_id,
                    file=f"{SCHEDULES_DIR}/{schedule_id}/{RUNTIME_FILE}",
                    record=f"line {len(files.runtime)}",
                    reason=f"unreadable runtime record: {exc}",
                ),
            )
        return RuntimeLoad(schedule_id=schedule_id, record=record)

    def stage(
        self,
        batch: GroupCommit,
        schedule_id: str,
        *,
        watermark: Instant,
        held: Instant | None,
        lifecycle_seq: int,
        written_at: Instant,
        waiting: Sequence[Instant] = (),
    ) -> dict[str, Any]:
        """Stage the record as a late write of `batch`; returns it."""
        record = self._builder.build(
            schedule_id,
            watermark=watermark,
            held=held,
            lifecycle_seq=lifecycle_seq,
            written_at=written_at,
            waiting=waiting,
        )
        if check_schedule_id(schedule_id) not in self._disk.schedules:
            raise NotFound(
                f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
            )
        self._disk.stage_append(batch, schedule_id, "runtime", encode_json_line(record))
        return record
