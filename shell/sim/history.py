"""In-memory occurrence history with `HistoryStore`'s behaviour.

Rows are the file store's rows (see `shell.history_store`), kept as canonical
JSON lines on the `SimDisk`. The rules are the same and so are the errors:

- a decision row opens the next seq (dense from 0); decision instants strictly
  increase (a row standing for several instants counts from its first one),
  so deciding an instant twice is refused with `InvalidState`;
- a transition row moves an open (admitted, not terminal) occurrence:
  admitted -> running/interrupted/terminal, running <-> interrupted, either ->
  terminal, and admitted -> admitted only to attach the run id; nothing
  follows a terminal row. Repeating the current status is a no-op;
- rows staged in a batch become visible (to queries and pages) when it
  commits; if its commit fails, the schedule is re-read from the disk before
  its next use (part of the batch may be there);
- `InvalidInput` names each malformed argument, `NotFound` an unknown
  schedule, `StoreDamaged` a history frozen by a row that breaks the rules.

The seam is the whole point: the service cannot tell these stores from the
file ones, so the simulation exercises its real code paths.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final

from core.errors import InvalidInput, InvalidState, NotFound, Problem
from core.occurrences import (
    DECISION_STATUSES,
    RUN_STATUSES,
    TERMINAL_STATUSES,
    decision_row_refusal,
    run_row_refusal,
    span_refusal,
)
from shell.durable import GroupCommit
from shell.history_store import MAX_PAGE_LIMIT, HistoryRecovery, OpenOccurrence
from shell.sim.disk import SimDisk
from shell.store_format import (
    HISTORY_FILE,
    SCHEDULES_DIR,
    Instant,
    StoreDamaged,
    StoreProblem,
    canonical_instant,
    check_schedule_id,
    encode_json_line,
    parse_instant,
)

__all__ = ["MemoryHistoryStore"]

_CURSOR: Final = struct.Struct("<2s8sQ")
_CURSOR_TAG: Final = b"m1"


@dataclass(frozen=True, slots=True)
class _Open:
    seq: int
    instant: str
    status: str
    run_id: str | None
    reason: str | None
    snapshot: dict[str, Any] | None
    revision: int | None
    decided_at: str
    updated_at: str

    def public(self) -> OpenOccurrence:
        return OpenOccurrence(
            seq=self.seq,
            instant=self.instant,
            status=self.status,
            run_id=self.run_id,
            reason=self.reason,
            snapshot=self.snapshot,
            revision=self.revision,
            decided_at=self.decided_at,
            updated_at=self.updated_at,
        )


@dataclass(slots=True)
class _State:
    """What the rules need to judge the next row."""

    count: int = 0
    last_decided: datetime | None = None
    last_decided_text: str | None = None
    open: dict[int, _Open] = field(default_factory=dict)
    by_instant: dict[str, int] = field(default_factory=dict)

    def copy(self) -> _State:
        return _State(
            self.count,
            self.last_decided,
            self.last_decided_text,
            dict(self.open),
            dict(self.by_instant),
        )


class _Refused(Exception):
    def __init__(self, reason: str, seq: object = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.seq = seq


def _instant(row: Mapping[str, Any], key: str, seq: object) -> datetime:
    try:
        return parse_instant(row.get(key))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise _Refused(f"{key} is not an ISO-8601 instant: {row.get(key)!r}", seq) from None


def _apply(state: _State, row: object) -> None:
    """Apply `row` to `state` or raise `_Refused`, leaving `state` unchanged."""
    if not isinstance(row, dict):
        raise _Refused("record is not a JSON object")
    seq = row.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise _Refused(f"seq must be a non-negative integer, got {seq!r}")
    status = row.get("status")
    recorded_at = _instant(row, "recorded_at", seq)
    instant = _instant(row, "instant", seq)
    instant_text = canonical_instant(instant)
    if "update" not in row:
        if seq != state.count:
            raise _Refused(f"decision for seq {seq} where seq {state.count} was expected", seq)
        if status not in DECISION_STATUSES:
            raise _Refused(f"{status!r} is not a decision status", seq)
        count = row.get("count", 1)
        has_span = row.get("first_instant") is not None or row.get("last_instant") is not None
        refusal = decision_row_refusal(revision=row.get("revision"), count=count, has_span=has_span)
        if refusal is not None:
            raise _Refused(refusal, seq)
        first = instant
        if count > 1:
            first = _instant(row, "first_instant", seq)
            refusal = span_refusal(first, _instant(row, "last_instant", seq), instant)
            if refusal is not None:
                raise _Refused(refusal, seq)
        if (status == "admitted") != isinstance(row.get("snapshot"), dict):
            raise _Refused("an admitted row, and only it, carries a snapshot", seq)
        if state.last_decided is not None and first <= state.last_decided:
            raise _Refused(
                f"decision for {instant_text} is not after the previous decision"
                f" {state.last_decided_text} (duplicate or out of order)",
                seq,
            )
        state.count += 1
        state.last_decided = instant
        state.last_decided_text = instant_text
        if status == "admitted":
            recorded_text = canonical_instant(recorded_at)
            state.open[seq] = _Open(
                seq=seq,
                instant=instant_text,
                status="admitted",
                run_id=row.get("run_id"),
                reason=row.get("reason"),
                snapshot=row["snapshot"],
                revision=row.get("revision"),
                decided_at=recorded_text,
                updated_at=recorded_text,
            )
            state.by_instant[instant_text] = seq
        return
    if row["update"] is not True:
        raise _Refused("update must be true when present", seq)
    if status not in RUN_STATUSES:
        raise _Refused(f"{status!r} is not a run status", seq)
    if seq >= state.count:
        raise _Refused(f"transition for unknown seq {seq}", seq)
    current = state.open.get(seq)
    if current is None:
        raise _Refused(f"a row after the terminal row of seq {seq}", seq)
    if instant_text != current.instant:
        raise _Refused(f"transition names {instant_text} but seq {seq} is {current.instant}", seq)
    run_id = row.get("run_id")
    refusal = run_row_refusal(current.status, current.run_id, status, run_id, seq)
    if refusal is not None:
        raise _Refused(refusal, seq)
    if status in TERMINAL_STATUSES:
        del state.open[seq]
        state.by_instant.pop(current.instant, None)
        return
    state.open[seq] = replace(
        current,
        status=status,
        run_id=run_id if run_id is not None else current.run_id,
        reason=row.get("reason"),
        updated_at=canonical_instant(recorded_at),
    )


@dataclass(slots=True)
class _Log:
    """A schedule's history as this process knows it: committed rows plus
    what an open batch staged."""

    schedule_id: str
    state: _State
    decisions: list[dict[str, Any]]
    latest: list[dict[str, Any]]
    problems: tuple[StoreProblem, ...] = ()
    pending: _State | None = None
    pending_rows: list[dict[str, Any]] = field(default_factory=list)
    pending_batch: GroupCommit | None = None

    def publish(self, row: dict[str, Any]) -> None:
        if "update" in row:
            self.latest[row["seq"]] = row
        else:
            self.decisions.append(row)
            self.latest.append(row)


def _page_row(seq: int, decision: Mapping[str, Any], latest: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "seq": seq,
        "instant": decision["instant"],
        "status": latest["status"],
        "run_id": latest.get("run_id") or decision.get("run_id"),
        "reason": latest.get("reason"),
        "count": decision.get("count", 1),
        "first_instant": decision.get("first_instant"),
        "last_instant": decision.get("last_instant"),
        "revision": decision.get("revision"),
        "decided_at": decision.get("recorded_at"),
        "updated_at": latest.get("recorded_at"),
    }


def _cursor_owner(schedule_id: str) -> bytes:
    return hashlib.sha256(schedule_id.encode()).digest()[:8]


class MemoryHistoryStore:
    """`HistoryStore` over a `SimDisk` (see the module docstring)."""

    def __init__(self, disk: SimDisk) -> None:
        self._disk = disk
        self._logs: dict[str, _Log] = {}

    # --- loading ------------------------------------------------------------------

    def _read(self, schedule_id: str) -> _Log:
        files = self._disk.schedules.get(check_schedule_id(schedule_id))
        if files is None:
            raise NotFound(
                f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
            )
        log = _Log(schedule_id=schedule_id, state=_State(), decisions=[], latest=[])
        for number, line in enumerate(files.history, start=1):
            try:
                row = json.loads(line)
                _apply(log.state, row)
            except (ValueError, _Refused) as exc:
                reason = exc.reason if isinstance(exc, _Refused) else "unparseable record"
                log.problems = (
                    StoreProblem(
                        schedule_id=schedule_id,
                        file=f"{SCHEDULES_DIR}/{schedule_id}/{HISTORY_FILE}",
                        record=f"line {number}",
                        reason=reason,
                    ),
                )
                break
            log.publish(row)
        return log

    def _owned(self, schedule_id: str) -> _Log:
        log = self._logs.get(schedule_id)
        if log is None:
            log = self._logs[schedule_id] = self._read(schedule_id)
        return log

    def adopt_state(self, schedule_id: str, exported: Sequence[Any]) -> HistoryRecovery | None:
        # No startup checkpoint is kept in memory: there is never a state to adopt.
        return None

    def recover(self, schedule_id: str, *, full_scan: bool = False) -> HistoryRecovery:
        """Load one schedule's history from the disk as its owner (always
        whole: `full_scan` changes nothing)."""
        existing = self._logs.get(schedule_id)
        if existing is not None and existing.pending is not None:
            raise RuntimeError(f"history of {schedule_id!r} has writes staged in an open batch")
        log = self._logs[schedule_id] = self._read(schedule_id)
        state = log.state
        return HistoryRecovery(
            schedule_id=schedule_id,
            occurrences=state.count,
            last_decided_instant=state.last_decided_text,
            open_occurrences=tuple(state.open[s].public() for s in sorted(state.open)),
            problems=log.problems,
        )

    def sync_recovered(self) -> None:
        """Nothing to flush: the disk holds only durable lines."""

    def close(self) -> None:
        """Forget every cached history without staged rows (the next use re-reads)."""
        self._logs = {k: v for k, v in self._logs.items() if v.pending is not None}

    # --- appends --------------------------------------------------------------------

    def _stage(self, log: _Log, batch: GroupCommit | None, row: dict[str, Any]) -> int:
        if log.problems:
            raise StoreDamaged(log.problems[0])
        active = GroupCommit() if batch is None else batch
        if log.pending_batch is not None and log.pending_batch is not active:
            raise RuntimeError(f"history of {log.schedule_id!r} has writes staged in another batch")
        first = log.pending is None
        shadow = log.state.copy() if log.pending is None else log.pending
        try:
            _apply(shadow, row)
        except _Refused as refused:
            raise InvalidState(
                f"history of {log.schedule_id!r} refuses the row: {refused.reason}",
                data={"schedule_id": log.schedule_id},
            ) from None
        self._disk.stage_append(active, log.schedule_id, "history", encode_json_line(row))
        log.pending_rows.append(row)
        if first:
            log.pending = shadow
            log.pending_batch = active
            active.on_commit(lambda: self._publish(log))
            active.on_abort(lambda: self._drop(log))
        if batch is None:
            active.commit()
        return int(row["seq"])

    def _publish(self, log: _Log) -> None:
        assert log.pending is not None
        for row in log.pending_rows:
            log.publish(row)
        log.state = log.pending
        log.pending, log.pending_rows, log.pending_batch = None, [], None

    def _drop(self, log: _Log) -> None:
        log.pending, log.pending_rows, log.pending_batch = None, [], None
        # Part of the batch may be on the disk: read it again before the next use.
        if self._logs.get(log.schedule_id) is log:
            del self._logs[log.schedule_id]

    def append_decision(
        self,
        schedule_id: str,
        *,
        instant: Instant,
        status: str,
        recorded_at: Instant,
        run_id: str | None = None,
        reason: str | None = None,
        count: int = 1,
        first_instant: Instant | None = None,
        last_instant: Instant | None = None,
        revision: int | None = None,
        snapshot: Mapping[str, Any] | None = None,
        batch: GroupCommit | None = None,
    ) -> int:
        """Append the decision row opening the occurrence at `instant`; returns its seq."""
        problems: list[Problem] = []

        def text(value: Instant | None, name: str) -> str | None:
            if value is None:
                return None
            try:
                return canonical_instant(value)
            except (TypeError, ValueError) as exc:
                problems.append(Problem(field=name, reason=f"must be an aware instant: {exc}"))
                return None

        instant_text = text(instant, "instant")
        recorded_text = text(recorded_at, "recorded_at")
        first_text = text(first_instant, "first_instant")
        last_text = text(last_instant, "last_instant")
        if status not in DECISION_STATUSES:
            problems.append(
                Problem(field="status", reason=f"must be one of {sorted(DECISION_STATUSES)}")
            )
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            problems.append(Problem(field="count", reason="must be a positive integer"))
        elif count > 1 and (first_text is None or last_text is None):
            problems.append(
                Problem(field="first_instant", reason="count > 1 needs first and last instants")
            )
        elif count == 1 and (first_text is not None or last_text is not None):
            problems.append(
                Problem(field="first_instant", reason="only a row with count > 1 has them")
            )
        if (status == "admitted") != (snapshot is not None):
            problems.append(
                Problem(field="snapshot", reason="is required for admitted and only for it")
            )
        elif snapshot is not None:
            try:
                json.dumps(dict(snapshot), allow_nan=False)
                ok = isinstance(snapshot.get("deployment_id"), str) and isinstance(
                    snapshot.get("inputs"), dict
                )
            except (TypeError, ValueError):
                ok = False
            if not ok:
                problems.append(
                    Problem(
                        field="snapshot",
                        reason="must be JSON {deployment_id, inputs, max_steps, revision}",
                    )
                )
        for name, value in (("run_id", run_id), ("reason", reason)):
            if value is not None and not isinstance(value, str):
                problems.append(Problem(field=name, reason="must be a string"))
        if revision is not None and (
            not isinstance(revision, int) or isinstance(revision, bool) or revision < 1
        ):
            problems.append(Problem(field="revision", reason="must be a positive integer"))
        if problems:
            raise InvalidInput.from_problems("history row", problems)
        log = self._owned(schedule_id)
        state = log.pending if log.pending is not None else log.state
        row: dict[str, Any] = {
            "seq": state.count,
            "instant": instant_text,
            "status": status,
            "recorded_at": recorded_text,
        }
        optional = {"run_id": run_id, "reason": reason, "revision": revision}
        row.update({k: v for k, v in optional.items() if v is not None})
        if snapshot is not None:
            row["snapshot"] = dict(snapshot)
        if count > 1:
            row.update(count=count, first_instant=first_text, last_instant=last_text)
        return self._stage(log, batch, row)

    def stage_admitted(
        self,
        schedule_id: str,
        *,
        instant: datetime,
        run_id: str,
        snapshot: Mapping[str, Any],
        recorded_at: datetime,
        batch: GroupCommit,
    ) -> int:
        """The `admitted` row of `instant`, as `append_decision` stages it (the
        file store's fast path for a herd; here there is nothing to speed up)."""
        revision = snapshot.get("revision") if isinstance(snapshot, Mapping) else None
        return self.append_decision(
            schedule_id,
            instant=instant,
            status="admitted",
            recorded_at=recorded_at,
            run_id=run_id,
            revision=revision,
            snapshot=snapshot,
            batch=batch,
        )

    def append_transition(
        self,
        schedule_id: str,
        *,
        status: str,
        recorded_at: Instant,
        seq: int | None = None,
        instant: Instant | None = None,
        run_id: str | None = None,
        reason: str | None = None,
        batch: GroupCommit | None = None,
    ) -> int:
        """Move an open occurrence (by `seq` or `instant`) to `status`; returns its seq."""
        problems: list[Problem] = []
        if (seq is None) == (instant is None):
            problems.append(Problem(field="seq", reason="give exactly one of seq and instant"))
        if seq is not None and (not isinstance(seq, int) or isinstance(seq, bool) or seq < 0):
            problems.append(Problem(field="seq", reason="must be a non-negative integer"))
        if status not in RUN_STATUSES:
            problems.append(
                Problem(field="status", reason=f"must be one of {sorted(RUN_STATUSES)}")
            )
        instant_text: str | None = None
        recorded_text = ""
        for name, value in (("instant", instant), ("recorded_at", recorded_at)):
            if value is None:
                continue
            try:
                converted = canonical_instant(value)
            except (TypeError, ValueError) as exc:
                problems.append(Problem(field=name, reason=f"must be an aware instant: {exc}"))
                continue
            if name == "instant":
                instant_text = converted
            else:
                recorded_text = converted
        for name, value in (("run_id", run_id), ("reason", reason)):
            if value is not None and not isinstance(value, str):
                problems.append(Problem(field=name, reason="must be a string"))
        if problems:
            raise InvalidInput.from_problems("history row", problems)
        log = self._owned(schedule_id)
        state = log.pending if log.pending is not None else log.state
        target = seq if seq is not None else state.by_instant.get(instant_text or "")
        current = state.open.get(target) if target is not None else None
        if current is None:
            what = f"seq {seq}" if seq is not None else f"instant {instant_text}"
            raise InvalidState(
                f"history of {schedule_id!r} has no open occurrence at {what}",
                data={"schedule_id": schedule_id},
            )
        if status == current.status and (run_id is None or run_id == current.run_id):
            return current.seq
        row: dict[str, Any] = {
            "seq": current.seq,
            "update": True,
            "instant": current.instant,
            "status": status,
            "recorded_at": recorded_text,
        }
        known_run = run_id if run_id is not None else current.run_id
        if known_run is not None:
            row["run_id"] = known_run
        if reason is not None:
            row["reason"] = reason
        return self._stage(log, batch, row)

    # --- queries ---------------------------------------------------------------------

    def open_occurrence(self, schedule_id: str, instant: Instant) -> OpenOccurrence | None:
        """The committed open occurrence at `instant`, if any."""
        state = self._owned(schedule_id).state
        seq = state.by_instant.get(canonical_instant(instant))
        return state.open[seq].public() if seq is not None else None

    def page(
        self, schedule_id: str, *, limit: int, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of occurrences, oldest first (see `HistoryStore.page`)."""
        problems: list[Problem] = []
        if (
            not isinstance(limit, int)
            or isinstance(limit, bool)
            or not 1 <= limit <= MAX_PAGE_LIMIT
        ):
            problems.append(
                Problem(field="limit", reason=f"must be an integer from 1 to {MAX_PAGE_LIMIT}")
            )
        start = 0
        if cursor is not None:
            decoded = _decode_cursor(schedule_id, cursor)
            if decoded is None:
                problems.append(
                    Problem(field="cursor", reason="is not a cursor of this schedule's history")
                )
            else:
                start = decoded
        if problems:
            raise InvalidInput.from_problems("history page", problems)
        log = self._logs.get(schedule_id) or self._read(schedule_id)
        count = len(log.decisions)
        if start > count:
            raise InvalidInput.from_problems(
                "history page", [Problem(field="cursor", reason="is past the end of this history")]
            )
        end = min(count, start + limit)
        rows = [_page_row(s, log.decisions[s], log.latest[s]) for s in range(start, end)]
        return rows, (_encode_cursor(schedule_id, end) if end < count else None)


def _encode_cursor(schedule_id: str, seq: int) -> str:
    raw = _CURSOR.pack(_CURSOR_TAG, _cursor_owner(schedule_id), seq)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _decode_cursor(schedule_id: str, cursor: object) -> int | None:
    if not isinstance(cursor, str) or not 0 < len(cursor) <= 64:
        return None
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) != _CURSOR.size:
        return None
    tag, owner, seq = _CURSOR.unpack(raw)
    if tag != _CURSOR_TAG or owner != _cursor_owner(schedule_id):
        return None
    return int(seq)
