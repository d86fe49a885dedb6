"""In-memory schedule definitions with `DefinitionStore`'s behaviour.

Same records (lifecycle log + snapshot, see `shell.definition_store`), same
write order (mkdir, append the lifecycle record, replace the snapshot, each
passing the same fault points) and the same errors: `InvalidInput` for bad
arguments, `NotFound`, `AlreadyExists` (ids are never reused; a failed
create leaves nothing, an interrupted one is taken over by the next),
`RevisionConflict`, `InvalidState` for a change to a deleted schedule,
`StoreDamaged` for contradictory records. A crash between
the append and the snapshot leaves the log ahead; loading replays it, and an
owner's load rewrites the snapshot.
"""

from __future__ import annotations

import json
from collections.abc import Container, Mapping
from pathlib import Path
from typing import Any, Final

from core.errors import (
    AlreadyExists,
    InvalidInput,
    InvalidState,
    NotFound,
    Problem,
    RevisionConflict,
)
from core.lifecycle import LifecycleRefusal
from shell.definition_store import (
    CHANGE_KINDS,
    ChangeKind,
    DefinitionLoad,
    LifecycleResult,
    snapshot_after,
)
from shell.durable import fault_point
from shell.sim.disk import SimDisk, SimScheduleFiles
from shell.store_format import (
    DEFINITION_FILE,
    LIFECYCLE_FILE,
    SCHEDULES_DIR,
    Instant,
    StoreDamaged,
    StoreProblem,
    canonical_instant,
    check_schedule_id,
    encode_json_line,
)

__all__ = ["SIM_STORE_ROOT", "MemoryDefinitionStore"]

# The root diagnostics name files under; nothing is ever read or written there.
SIM_STORE_ROOT: Final = Path("/wf-sim")


class _Contradiction(Exception):
    def __init__(self, record: str, reason: str) -> None:
        super().__init__(reason)
        self.record = record
        self.reason = reason


def _apply(
    snapshot: dict[str, Any] | None, record: Mapping[str, Any], schedule_id: str
) -> dict[str, Any]:
    """The snapshot after `record`, judged as the file store judges it;
    raises `_Contradiction` if it does not follow."""
    applied = snapshot_after(snapshot, record, schedule_id)
    if isinstance(applied, LifecycleRefusal):
        raise _Contradiction(applied.record, applied.reason)
    return applied


def _instant_arg(value: Instant, field: str) -> str:
    try:
        return canonical_instant(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInput.from_problems(
            "schedule record", [Problem(field=field, reason=f"must be an aware instant: {exc}")]
        ) from None


def _json_safe(value: Any, field: str) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput.from_problems(
            "schedule record", [Problem(field=field, reason=f"must be JSON-safe: {exc}")]
        ) from None


class MemoryDefinitionStore:
    """`DefinitionStore` over a `SimDisk` (see the module docstring)."""

    def __init__(self, disk: SimDisk) -> None:
        self._disk = disk

    @property
    def store_root(self) -> Path:
        return SIM_STORE_ROOT

    def _problem(self, schedule_id: str, name: str, record: str, reason: str) -> StoreProblem:
        return StoreProblem(
            schedule_id=schedule_id,
            file=f"{SCHEDULES_DIR}/{schedule_id}/{name}",
            record=record,
            reason=reason,
        )

    def _files(self, schedule_id: str) -> SimScheduleFiles:
        files = self._disk.schedules.get(check_schedule_id(schedule_id))
        if files is None:
            raise NotFound(
                f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
            )
        return files

    # --- queries ------------------------------------------------------------------

    def exists(self, schedule_id: str) -> bool:
        return check_schedule_id(schedule_id) in self._disk.schedules

    def list_ids(self, *, present: Container[str] = ()) -> list[str]:
        return sorted(
            schedule_id
            for schedule_id, files in self._disk.schedules.items()
            if schedule_id in present or files.lifecycle or files.snapshot is not None
        )

    def load(self, schedule_id: str, *, repair: bool = False) -> DefinitionLoad:
        """The snapshot reconciled with the log; with `repair`, a snapshot
        behind its log is rewritten. Raises `NotFound`."""
        files = self._files(schedule_id)
        records = [json.loads(line) for line in files.lifecycle]
        base = json.loads(files.snapshot) if files.snapshot is not None else None
        if not records:
            if base is None:
                return DefinitionLoad(
                    schedule_id=schedule_id, snapshot=None, lifecycle_seq=0, incomplete=True
                )
            problem = self._problem(
                schedule_id, LIFECYCLE_FILE, "whole file", "lifecycle log is missing or empty"
            )
            return DefinitionLoad(
                schedule_id=schedule_id,
                snapshot=base,
                lifecycle_seq=base["lifecycle_seq"],
                problems=(problem,),
            )
        start = base["lifecycle_seq"] if base is not None else 0
        if start > len(records):
            problem = self._problem(
                schedule_id,
                DEFINITION_FILE,
                f"lifecycle_seq {start}",
                f"snapshot is ahead of the lifecycle log, which ends at seq {len(records)}",
            )
            return DefinitionLoad(
                schedule_id=schedule_id,
                snapshot=base,
                lifecycle_seq=len(records),
                problems=(problem,),
            )
        current = base
        try:
            for record in records[start:]:
                current = _apply(current, record, schedule_id)
        except _Contradiction as bad:
            problem = self._problem(schedule_id, LIFECYCLE_FILE, bad.record, bad.reason)
            return DefinitionLoad(
                schedule_id=schedule_id, snapshot=base, lifecycle_seq=start, problems=(problem,)
            )
        assert current is not None
        repairs: tuple[str, ...] = ()
        if current is not base:
            if base is not None and base.get("blocked") is not None:
                current = dict(current, blocked=base["blocked"])
            if repair:
                self._write_snapshot(files, current)
                repairs = (f"rewrote {DEFINITION_FILE} from the lifecycle log",)
        return DefinitionLoad(
            schedule_id=schedule_id,
            snapshot=current,
            lifecycle_seq=len(records),
            repairs=repairs,
        )

    def get(self, schedule_id: str) -> dict[str, Any]:
        """The current snapshot. Raises `NotFound` or `StoreDamaged`."""
        loaded = self.load(schedule_id)
        if loaded.incomplete:
            raise NotFound(
                f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
            )
        if loaded.snapshot is None:
            raise StoreDamaged(loaded.problems[0])
        if loaded.problems and loaded.snapshot.get("blocked") is None:
            return dict(loaded.snapshot, blocked={**loaded.problems[0].as_dict(), "at": None})
        return loaded.snapshot

    def read_for_recovery(
        self, schedule_id: str, *, repair: bool = False
    ) -> tuple[tuple[dict[str, Any], ...], DefinitionLoad | None]:
        """`records_after(schedule_id, 0)`, then `load` (None if no record)."""
        records = self.records_after(schedule_id, 0)
        return records, self.load(schedule_id, repair=repair) if records else None

    def records_after(self, schedule_id: str, seq: int) -> tuple[dict[str, Any], ...]:
        """Lifecycle records after `seq`, every record checked. Raises
        `InvalidInput`, `NotFound`, `StoreDamaged`."""
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise InvalidInput.from_problems(
                "lifecycle query", [Problem(field="seq", reason="must be >= 0")]
            )
        files = self._files(schedule_id)
        records = [json.loads(line) for line in files.lifecycle]
        snapshot: dict[str, Any] | None = None
        try:
            for record in records:
                snapshot = _apply(snapshot, record, schedule_id)
        except _Contradiction as bad:
            raise StoreDamaged(
                self._problem(schedule_id, LIFECYCLE_FILE, bad.record, bad.reason)
            ) from None
        return tuple(records[seq:])

    # --- changes ------------------------------------------------------------------

    def create(
        self, schedule_id: str, definition: Mapping[str, Any], *, at: Instant
    ) -> LifecycleResult:
        """Create at revision 1. Raises `AlreadyExists` or `InvalidInput`."""
        check_schedule_id(schedule_id)
        if not isinstance(definition, Mapping):
            raise InvalidInput.from_problems(
                "schedule record", [Problem(field="definition", reason="must be an object")]
            )
        payload = dict(definition)
        _json_safe(payload, "definition")
        record = {
            "seq": 1,
            "kind": "created",
            "at": _instant_arg(at, "at"),
            "revision": 1,
            "definition": payload,
        }
        snapshot = _apply(None, record, schedule_id)
        fault_point("before:mkdir:schedule")
        if schedule_id in self._disk.schedules and not self.load(schedule_id).incomplete:
            raise AlreadyExists(
                f"schedule {schedule_id!r} already exists (ids are never reused)",
                data={"schedule_id": schedule_id},
            )
        # An incomplete create's directory is taken over.
        files = self._disk.schedules[schedule_id] = SimScheduleFiles()
        try:
            fault_point("after:mkdir:schedule")
            self._append(files, record)
            self._write_snapshot(files, snapshot)
        except Exception:
            # A failed create removes what it wrote (a crash does not).
            del self._disk.schedules[schedule_id]
            raise
        return LifecycleResult(snapshot=snapshot, record=record)

    def apply_change(
        self,
        schedule_id: str,
        kind: ChangeKind,
        *,
        at: Instant,
        definition: Mapping[str, Any] | None = None,
        expected_revision: int | None = None,
    ) -> LifecycleResult:
        """Record one change (see `DefinitionStore.apply_change`)."""
        bad: list[Problem] = []
        if kind not in CHANGE_KINDS:
            bad.append(Problem(field="kind", reason=f"must be one of {sorted(CHANGE_KINDS)}"))
        if (kind == "updated") != (definition is not None):
            bad.append(
                Problem(field="definition", reason="is required for updated and only for it")
            )
        if definition is not None and not isinstance(definition, Mapping):
            bad.append(Problem(field="definition", reason="must be an object"))
        if expected_revision is not None and (
            not isinstance(expected_revision, int) or isinstance(expected_revision, bool)
        ):
            bad.append(Problem(field="expected_revision", reason="must be an integer"))
        if bad:
            raise InvalidInput.from_problems("lifecycle change", bad)
        payload = dict(definition) if definition is not None else None
        if payload is not None:
            _json_safe(payload, "definition")
        at_text = _instant_arg(at, "at")
        files = self._files(schedule_id)
        loaded = self.load(schedule_id, repair=True)
        if loaded.incomplete:
            raise NotFound(
                f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
            )
        if loaded.problems or loaded.snapshot is None:
            raise StoreDamaged(loaded.problems[0])
        current = loaded.snapshot
        if expected_revision is not None and expected_revision != current["revision"]:
            raise RevisionConflict(
                f"schedule {schedule_id!r} is at revision {current['revision']},"
                f" not {expected_revision}",
                data={
                    "schedule_id": schedule_id,
                    "expected": expected_revision,
                    "actual": current["revision"],
                },
            )
        if current["deleted"]:
            if kind == "deleted":
                return LifecycleResult(snapshot=current, record=None)
            raise InvalidState(
                f"schedule {schedule_id!r} is deleted", data={"schedule_id": schedule_id}
            )
        if (kind == "paused" and current["paused"]) or (
            kind == "resumed" and not current["paused"]
        ):
            return LifecycleResult(snapshot=current, record=None)
        record: dict[str, Any] = {
            "seq": loaded.lifecycle_seq + 1,
            "kind": kind,
            "at": at_text,
            "revision": current["revision"] + (1 if kind == "updated" else 0),
        }
        if payload is not None:
            record["definition"] = payload
        snapshot = _apply(current, record, schedule_id)
        self._append(files, record)
        self._write_snapshot(files, snapshot)
        return LifecycleResult(snapshot=snapshot, record=record)

    def set_blocked(
        self, schedule_id: str, blocked: Mapping[str, Any] | None, *, at: Instant | None = None
    ) -> dict[str, Any]:
        """Persist (or clear) the blocking diagnostic in the snapshot only."""
        value: dict[str, Any] | None = None
        if blocked is not None:
            bad = [
                Problem(field=f"blocked.{key}", reason="must be a string")
                for key in ("file", "record", "reason")
                if not isinstance(blocked.get(key), str)
            ]
            if bad:
                raise InvalidInput.from_problems("blocked diagnostic", bad)
            value = {
                "file": blocked["file"],
                "record": blocked["record"],
                "reason": blocked["reason"],
                "at": _instant_arg(at, "at") if at is not None else None,
            }
        files = self._files(schedule_id)
        loaded = self.load(schedule_id, repair=True)
        if loaded.incomplete:
            raise NotFound(
                f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
            )
        if loaded.snapshot is None:
            raise StoreDamaged(loaded.problems[0])
        current = loaded.snapshot
        previous = current.get("blocked")
        same = (previous is None and value is None) or (
            previous is not None
            and value is not None
            and all(previous.get(k) == value[k] for k in ("file", "record", "reason"))
        )
        if same:
            return current
        snapshot = dict(current, blocked=value)
        self._write_snapshot(files, snapshot)
        return snapshot

    # --- writes -------------------------------------------------------------------

    @staticmethod
    def _append(files: SimScheduleFiles, record: Mapping[str, Any]) -> None:
        fault_point(f"before:append:{LIFECYCLE_FILE}")
        files.lifecycle.append(encode_json_line(record))
        fault_point(f"after:append:{LIFECYCLE_FILE}")

    @staticmethod
    def _write_snapshot(files: SimScheduleFiles, snapshot: Mapping[str, Any]) -> None:
        fault_point(f"before:replace:{DEFINITION_FILE}")
        files.snapshot = encode_json_line(snapshot)
        fault_point(f"after:replace:{DEFINITION_FILE}")
