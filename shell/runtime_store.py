"""Runtime state of each schedule: watermark, held candidate, consumed lifecycle.

`runtime.jsonl` per schedule is an append-only log whose last complete line
is the current record:

    {"format": 1, "watermark": "<instant>", "held": "<instant>" | null,
     "waiting": ["<instant>", ...],
     "lifecycle_seq": <last lifecycle seq the scheduler consumed>,
     "written_at": "<instant>"}

Why a log and not a file rewritten atomically: the scheduler persists the
runtime of every schedule it touched at every wake-up, and on ext4 an atomic
rewrite costs a new inode and a rename per schedule, far more than an append
(ten thousand schedules due at once took seconds). A record is staged as a
*late* append of the wake-up's `GroupCommit`, so it reaches the disk only
after the history rows it depends on are durable. When the log passes a size
threshold (staggered per schedule, so that schedules in lockstep do not all
compact at the same wake-up) it is compacted: rewritten atomically to its
latest record, inside the same batch.

`backfill` (only while the schedule has had one) is its backfill and its
progress (`core.operator_actions.backfill_to_payload`: the instants still to
admit, oldest first); a record without it has none.

`waiting` lists on-time instants of a misfire="skip" schedule that wait for
an execution slot: they have no history row yet, so they must survive a
restart. It is written sorted and without duplicates; records written before
the field existed read as `[]`.

A torn final line is a crash artifact: readers ignore it and the owner drops
it (with a warning) before appending again. A complete last line that cannot
be parsed is damage: the schedule is blocked.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, NamedTuple

from core.errors import InvalidInput, NotFound, Problem
from core.operator_actions import backfill_from_payload
from shell.disk import OS_DISK, Disk, is_directory
from shell.durable import GroupCommit, append_records, atomic_write_bytes
from shell.jsonlog import read_last_line, repair_torn_tail
from shell.store_format import (
    Instant,
    ScheduleFiles,
    StoreProblem,
    canonical_instant,
    encode_json_line,
    parse_instant,
)

__all__ = [
    "COMPACT_AT_BYTES",
    "RUNTIME_FORMAT",
    "RuntimeLoad",
    "RuntimeStore",
    "build_runtime_record",
    "check_runtime_record",
]

RUNTIME_FORMAT: Final = 1
# A runtime log is compacted once it passes this size plus a per-schedule
# offset in [0, COMPACT_AT_BYTES).
COMPACT_AT_BYTES: Final = 32 << 10


class RuntimeLoad(NamedTuple):
    """`record` is None when the file is absent or damaged; `problem` says why
    when it is damaged. (A tuple: a start makes one per schedule.)"""

    schedule_id: str
    record: dict[str, Any] | None
    problem: StoreProblem | None = None


def check_runtime_record(obj: object) -> dict[str, Any]:
    """A stored runtime record, checked; raises ValueError naming the bad field."""
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    if obj.get("format") != RUNTIME_FORMAT:
        raise ValueError(f"unknown format {obj.get('format')!r}")
    for key, optional in (("watermark", False), ("held", True), ("written_at", False)):
        value = obj.get(key)
        if value is None and optional:
            continue
        try:
            if not isinstance(value, str):
                raise TypeError
            parse_instant(value)
        except (TypeError, ValueError):
            raise ValueError(f"{key} is not an ISO-8601 instant: {value!r}") from None
    waiting = obj.setdefault("waiting", [])
    if not isinstance(waiting, list):
        raise ValueError("waiting must be a list of instants")
    for value in waiting:
        try:
            parse_instant(value)
        except (TypeError, ValueError):
            raise ValueError(f"waiting holds a value that is not an instant: {value!r}") from None
    seq = obj.get("lifecycle_seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise ValueError(f"lifecycle_seq must be a non-negative integer, got {seq!r}")
    if obj.get("backfill") is not None:
        backfill_from_payload(obj["backfill"])
    return obj


def build_runtime_record(
    *,
    watermark: Instant,
    held: Instant | None,
    lifecycle_seq: int,
    written_at: Instant,
    waiting: Sequence[Instant] = (),
    backfill: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The record to persist, the same on every backend; raises
    `InvalidInput` naming each bad field."""
    problems: list[Problem] = []
    record: dict[str, Any] = {"format": RUNTIME_FORMAT}
    for key, value in (("watermark", watermark), ("held", held), ("written_at", written_at)):
        if value is None and key == "held":
            record[key] = None
            continue
        try:
            record[key] = canonical_instant(value)  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            problems.append(Problem(field=key, reason=f"must be an aware instant: {exc}"))
    if not isinstance(lifecycle_seq, int) or isinstance(lifecycle_seq, bool) or lifecycle_seq < 0:
        problems.append(Problem(field="lifecycle_seq", reason="must be a non-negative integer"))
    waiting_texts: set[str] = set()
    if isinstance(waiting, str | bytes) or not isinstance(waiting, Sequence):
        problems.append(Problem(field="waiting", reason="must be a list of instants"))
    else:
        for index, value in enumerate(waiting):
            try:
                waiting_texts.add(canonical_instant(value))
            except (TypeError, ValueError) as exc:
                problems.append(
                    Problem(field=f"waiting[{index}]", reason=f"must be an aware instant: {exc}")
                )
    if backfill is not None:
        try:
            backfill_from_payload(backfill)
        except ValueError as exc:
            problems.append(Problem(field="backfill", reason=str(exc)))
    if problems:
        raise InvalidInput.from_problems("runtime record", problems)
    record["lifecycle_seq"] = lifecycle_seq
    # Sorted by instant (text of one shape except for optional
    # microseconds, so sort the parsed values, not the text).
    record["waiting"] = sorted(waiting_texts, key=parse_instant)
    if backfill is not None:
        record["backfill"] = dict(backfill)
    return record


class RuntimeStore:
    """Per-schedule runtime records under `<store_root>/schedules/<id>/runtime.jsonl`.

    Only the scheduler (the lock holder) writes. Not thread-safe.
    """

    def __init__(self, store_root: str | os.PathLike[str], *, disk: Disk = OS_DISK) -> None:
        self.disk = disk
        self.store_root = Path(store_root)
        self._paths: dict[str, ScheduleFiles] = {}
        # Known size of each runtime log this process appends to.
        self._sizes: dict[str, int] = {}
        # Schedule -> (batch, whether it compacts) for writes staged but not committed.
        self._staged: dict[str, tuple[GroupCommit, bool]] = {}
        self._pending_sizes: dict[str, int] = {}

    def _files(self, schedule_id: str) -> ScheduleFiles:
        files = self._paths.get(schedule_id)
        if files is None:
            files = self._paths[schedule_id] = ScheduleFiles.of(self.store_root, schedule_id)
        return files

    def load(self, schedule_id: str) -> RuntimeLoad:
        """Read the current runtime record (the log's last complete line).

        Never raises for a damaged record: it comes back as `problem`.
        """
        files = self._files(schedule_id)
        found = read_last_line(files.runtime, disk=self.disk)
        if found is None:
            return RuntimeLoad(schedule_id=schedule_id, record=None)
        line, size = found
        if line is None:
            return RuntimeLoad(schedule_id=schedule_id, record=None)
        try:
            return RuntimeLoad(
                schedule_id=schedule_id, record=check_runtime_record(json.loads(line))
            )
        except ValueError as exc:
            return RuntimeLoad(
                schedule_id=schedule_id,
                record=None,
                problem=StoreProblem(
                    schedule_id=schedule_id,
                    file=files.relative(files.runtime),
                    record=f"last record (ends at byte {size})",
                    reason=f"unreadable runtime record: {exc}",
                ),
            )

    def build(
        self,
        schedule_id: str,
        *,
        watermark: Instant,
        held: Instant | None,
        lifecycle_seq: int,
        written_at: Instant,
        waiting: Sequence[Instant] = (),
        backfill: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """`build_runtime_record` (kept as a method for its callers)."""
        return build_runtime_record(
            watermark=watermark,
            held=held,
            lifecycle_seq=lifecycle_seq,
            written_at=written_at,
            waiting=waiting,
            backfill=backfill,
        )

    def _prepared_size(self, schedule_id: str, files: ScheduleFiles) -> int:
        """The log's size, after dropping a torn final line (owner only)."""
        size = self._sizes.get(schedule_id)
        if size is None:
            if not is_directory(self.disk, files.directory):
                raise NotFound(
                    f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
                )
            repair_torn_tail(files.runtime, disk=self.disk)
            try:
                size = self.disk.stat(files.runtime).st_size
            except FileNotFoundError:
                size = 0
        return size

    @staticmethod
    def _compacts(schedule_id: str, size: int) -> bool:
        return size >= COMPACT_AT_BYTES + zlib.crc32(schedule_id.encode()) % COMPACT_AT_BYTES

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
        backfill: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Stage the record as a late write of `batch` (durable only after the
        batch's history rows); returns the record.

        Raises `NotFound` when the schedule's directory does not exist.
        """
        files = self._files(schedule_id)
        record = self.build(
            schedule_id,
            watermark=watermark,
            held=held,
            lifecycle_seq=lifecycle_seq,
            written_at=written_at,
            waiting=waiting,
            backfill=backfill,
        )
        line = encode_json_line(record)
        staged = self._staged_in_open_batch(schedule_id)
        if staged is not None and staged[0] is not batch:
            raise RuntimeError(f"runtime of {schedule_id!r} has a write staged in another batch")
        if staged is not None and staged[0] is batch:
            if staged[1]:
                batch.replace_bytes(files.runtime, line)  # the compacted file: latest wins
            else:
                batch.append_bytes(files.runtime, line, late=True, seldom=True)
            self._pending_sizes[schedule_id] = (
                len(line) if staged[1] else self._pending_sizes[schedule_id] + len(line)
            )
            return record
        size = self._prepared_size(schedule_id, files)
        compact = self._compacts(schedule_id, size)
        if compact:
            batch.replace_bytes(files.runtime, line)
            self._pending_sizes[schedule_id] = len(line)
        else:
            batch.append_bytes(files.runtime, line, expect_size=size, late=True, seldom=True)
            self._pending_sizes[schedule_id] = size + len(line)
        self._staged[schedule_id] = (batch, compact)

        def committed() -> None:
            self._sizes[schedule_id] = self._pending_sizes.pop(schedule_id)
            self._staged.pop(schedule_id, None)

        batch.on_commit(committed)
        batch.on_abort(lambda: self._forget(schedule_id))
        return record

    def _forget(self, schedule_id: str) -> None:
        # Part of a failed batch may be on disk: measure the file again next time.
        self._sizes.pop(schedule_id, None)
        self._pending_sizes.pop(schedule_id, None)
        self._staged.pop(schedule_id, None)

    def _staged_in_open_batch(self, schedule_id: str) -> tuple[GroupCommit, bool] | None:
        staged = self._staged.get(schedule_id)
        if staged is not None and staged[0].state != "open":
            # A batch that ended without running our callbacks (a simulated crash).
            self._forget(schedule_id)
            return None
        return staged

    def write(
        self,
        schedule_id: str,
        *,
        watermark: Instant,
        held: Instant | None,
        lifecycle_seq: int,
        written_at: Instant,
        waiting: Sequence[Instant] = (),
        backfill: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Persist the record now (fsynced); returns the record."""
        files = self._files(schedule_id)
        record = self.build(
            schedule_id,
            watermark=watermark,
            held=held,
            lifecycle_seq=lifecycle_seq,
            written_at=written_at,
            waiting=waiting,
            backfill=backfill,
        )
        if self._staged_in_open_batch(schedule_id) is not None:
            raise RuntimeError(f"runtime of {schedule_id!r} has a write staged in an open batch")
        size = self._prepared_size(schedule_id, files)
        self._sizes.pop(schedule_id, None)
        if self._compacts(schedule_id, size):
            atomic_write_bytes(files.runtime, encode_json_line(record), disk=self.disk)
            self._sizes[schedule_id] = len(encode_json_line(record))
        else:
            append_records(files.runtime, [record], disk=self.disk)
            self._sizes[schedule_id] = size + len(encode_json_line(record))
        return record
