"""Runtime state of each schedule: watermark, held candidate, consumed lifecycle.

`runtime.json` per schedule, rewritten atomically (normally inside the
wake-up's `GroupCommit`, so it becomes visible only after the history rows it
depends on are durable):

    {"format": 1, "watermark": "<instant>", "held": "<instant>" | null,
     "waiting": ["<instant>", ...],
     "lifecycle_seq": <last lifecycle seq the scheduler consumed>,
     "written_at": "<instant>"}

`waiting` lists on-time instants of a misfire="skip" schedule that wait for
an execution slot: they have no history row yet, so they must survive a
restart. It is written sorted and without duplicates; records written before
the field existed read as `[]`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from core.errors import InvalidInput, NotFound, Problem
from shell.durable import GroupCommit, atomic_write_json
from shell.store_format import (
    Instant,
    ScheduleFiles,
    StoreProblem,
    canonical_instant,
    parse_instant,
    read_file,
)

__all__ = ["RUNTIME_FORMAT", "RuntimeLoad", "RuntimeStore"]

RUNTIME_FORMAT: Final = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeLoad:
    """`record` is None when the file is absent or damaged; `problem` says why
    when it is damaged."""

    schedule_id: str
    record: dict[str, Any] | None
    problem: StoreProblem | None = None


def _check(obj: object) -> dict[str, Any]:
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
    return obj


class RuntimeStore:
    """Per-schedule runtime records under `<store_root>/schedules/<id>/runtime.json`."""

    def __init__(self, store_root: str | os.PathLike[str]) -> None:
        self.store_root = Path(store_root)
        self._paths: dict[str, ScheduleFiles] = {}

    def _files(self, schedule_id: str) -> ScheduleFiles:
        files = self._paths.get(schedule_id)
        if files is None:
            files = self._paths[schedule_id] = ScheduleFiles.of(self.store_root, schedule_id)
        return files

    def load(self, schedule_id: str) -> RuntimeLoad:
        """Read the runtime record; never raises for a damaged file (it comes
        back as `problem`)."""
        files = self._files(schedule_id)
        raw = read_file(files.runtime)
        if raw is None:
            return RuntimeLoad(schedule_id=schedule_id, record=None)
        try:
            return RuntimeLoad(schedule_id=schedule_id, record=_check(json.loads(raw)))
        except ValueError as exc:
            return RuntimeLoad(
                schedule_id=schedule_id,
                record=None,
                problem=StoreProblem(
                    schedule_id=schedule_id,
                    file=files.relative(files.runtime),
                    record="whole file",
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
    ) -> dict[str, Any]:
        """The record to persist; raises `InvalidInput` naming each bad field."""
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
        if (
            not isinstance(lifecycle_seq, int)
            or isinstance(lifecycle_seq, bool)
            or lifecycle_seq < 0
        ):
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
                        Problem(
                            field=f"waiting[{index}]", reason=f"must be an aware instant: {exc}"
                        )
                    )
        if problems:
            raise InvalidInput.from_problems("runtime record", problems)
        record["lifecycle_seq"] = lifecycle_seq
        # Sorted by instant (all are UTC "Z" text of one shape except for
        # optional microseconds, so sort the parsed values, not the text).
        record["waiting"] = sorted(waiting_texts, key=parse_instant)
        return record

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
        """Stage the atomic rewrite of `runtime.json` in `batch`; returns the record.

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
        )
        if not os.path.isdir(files.directory):
            raise NotFound(
                f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
            )
        batch.replace_json(files.runtime, record)
        return record

    def write(
        self,
        schedule_id: str,
        *,
        watermark: Instant,
        held: Instant | None,
        lifecycle_seq: int,
        written_at: Instant,
        waiting: Sequence[Instant] = (),
    ) -> dict[str, Any]:
        """Rewrite `runtime.json` now (atomic and durable); returns the record."""
        files = self._files(schedule_id)
        record = self.build(
            schedule_id,
            watermark=watermark,
            held=held,
            lifecycle_seq=lifecycle_seq,
            written_at=written_at,
            waiting=waiting,
        )
        if not os.path.isdir(files.directory):
            raise NotFound(
                f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
            )
        atomic_write_json(files.runtime, record)
        return record
