"""What a definitions store checks and builds, the same on every backend.

A schedule is a lifecycle log (records `created`, `updated`, `paused`,
`resumed`, `deleted`, `seq` dense from 1) and a snapshot of it (the
lifecycle fields of `core.lifecycle` plus `format`, `schedule_id` and the
`blocked` diagnostic). The file store keeps them as `lifecycle.jsonl` and
`definition.json` (`shell/definition_store.py`), the database store as rows
(`shell/pg/definitions.py`); both build records and snapshots here and apply
records through `core.lifecycle`, so they cannot disagree about what a valid
log, a valid change or a valid snapshot is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeGuard, get_args

from core.errors import InvalidInput, InvalidState, Problem, RevisionConflict
from core.lifecycle import (
    LIFECYCLE_KINDS,
    OPERATOR_KINDS,
    LifecycleRefusal,
    apply_record,
    seq_refusal,
)
from core.limits import MAX_SAFE_INTEGER
from shell.store_format import Instant, StoreProblem, canonical_instant, parse_instant

__all__ = [
    "CHANGE_KINDS",
    "DEFINITION_FORMAT",
    "ChangeKind",
    "DefinitionLoad",
    "LifecycleResult",
    "RecordRefused",
    "apply_checked",
    "blocked_value",
    "change",
    "check_record",
    "check_snapshot",
    "creation",
    "replay",
    "same_block",
    "snapshot_after",
]

DEFINITION_FORMAT: Final = 1

ChangeKind = Literal[
    "updated", "paused", "resumed", "deleted", "triggered", "backfill", "backfill-cancelled"
]
CHANGE_KINDS: Final[frozenset[str]] = frozenset(get_args(ChangeKind))


@dataclass(frozen=True, slots=True, kw_only=True)
class DefinitionLoad:
    """What loading one schedule's definition found.

    `snapshot` is None when no definition could be reconstructed (or the
    store holds no lifecycle record yet: `incomplete`, an interrupted
    create). `problems` block the schedule. `repairs` lists what an owner's
    load fixed (a torn line dropped, the snapshot rewritten from the log).
    """

    schedule_id: str
    snapshot: dict[str, Any] | None
    lifecycle_seq: int
    problems: tuple[StoreProblem, ...] = ()
    repairs: tuple[str, ...] = ()
    incomplete: bool = False
    # Whether the stored snapshot itself is readable (set_blocked may rewrite it).
    snapshot_file_ok: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class LifecycleResult:
    """The snapshot after a change, and the lifecycle record written
    (None when the change was a no-op, for example pausing a paused schedule)."""

    snapshot: dict[str, Any]
    record: dict[str, Any] | None


class RecordRefused(Exception):
    """A lifecycle record that does not parse or does not follow the log:
    `record` names it as the file store does ("line 3 (seq 3)"), `seq` is its
    place in the log when known."""

    def __init__(self, record: str, reason: str, seq: int | None = None) -> None:
        super().__init__(reason)
        self.record = record
        self.reason = reason
        self.seq = seq


def _json_safe(value: Any, field: str) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput.from_problems(
            "schedule record", [Problem(field=field, reason=f"must be JSON-safe: {exc}")]
        ) from None


def _instant_arg(value: Instant, field: str) -> str:
    try:
        return canonical_instant(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInput.from_problems(
            "schedule record", [Problem(field=field, reason=f"must be an aware instant: {exc}")]
        ) from None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_instant_field(obj: Mapping[str, Any], key: str, *, optional: bool) -> None:
    value = obj.get(key)
    if value is None and optional:
        return
    try:
        if not isinstance(value, str):
            raise TypeError
        parse_instant(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} is not an ISO-8601 instant: {value!r}") from None


def check_snapshot(obj: object, schedule_id: str) -> dict[str, Any]:
    """Validate a stored snapshot; raises ValueError naming the bad field."""
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    if obj.get("format") != DEFINITION_FORMAT:
        raise ValueError(f"unknown format {obj.get('format')!r}")
    if obj.get("schedule_id") != schedule_id:
        raise ValueError(f"schedule_id {obj.get('schedule_id')!r} does not match where it is kept")
    revision = obj.get("revision")
    if not _is_int(revision) or revision < 1:
        raise ValueError(f"revision must be a positive integer, got {revision!r}")
    seq = obj.get("lifecycle_seq")
    if not _is_int(seq) or seq < 1:
        raise ValueError(f"lifecycle_seq must be a positive integer, got {seq!r}")
    if not isinstance(obj.get("definition"), dict):
        raise ValueError("definition must be an object")
    for flag in ("paused", "deleted"):
        if not isinstance(obj.get(flag), bool):
            raise ValueError(f"{flag} must be true or false")
    _check_instant_field(obj, "created_at", optional=False)
    for key in ("updated_at", "paused_at", "resumed_at", "deleted_at"):
        _check_instant_field(obj, key, optional=True)
    blocked = obj.get("blocked")
    if blocked is not None:
        if not isinstance(blocked, dict) or not all(
            isinstance(blocked.get(k), str) for k in ("file", "record", "reason")
        ):
            raise ValueError("blocked must be null or an object with file, record and reason")
        _check_instant_field(blocked, "at", optional=True)
    return obj


def check_record(record: object, expected_seq: int) -> dict[str, Any]:
    """A stored lifecycle record on its own (its shape and fields), expected
    at `expected_seq`; raises `RecordRefused` naming it. Whether it follows
    the records before it is `apply_checked`'s."""
    where = f"line {expected_seq}"
    if not isinstance(record, dict):
        raise RecordRefused(where, "record is not a JSON object")
    seq = record.get("seq")
    wrong_seq = seq_refusal(seq, expected_seq)
    if wrong_seq is not None:
        raise RecordRefused(where, wrong_seq)
    where = f"line {expected_seq} (seq {seq})"
    if record.get("kind") not in LIFECYCLE_KINDS:
        raise RecordRefused(where, f"unknown kind {record.get('kind')!r}")
    try:
        _check_instant_field(record, "at", optional=False)
    except ValueError as exc:
        raise RecordRefused(where, str(exc)) from None
    revision = record.get("revision")
    if not _is_int(revision) or revision < 1:
        raise RecordRefused(where, f"revision must be a positive integer, got {revision!r}")
    has_definition = record["kind"] in ("created", "updated")
    if has_definition != isinstance(record.get("definition"), dict):
        raise RecordRefused(
            where, f"a {record['kind']} record {'needs' if has_definition else 'has'} a definition"
        )
    has_action = record["kind"] in OPERATOR_KINDS
    if has_action != isinstance(record.get("action"), dict):
        raise RecordRefused(
            where, f"a {record['kind']} record {'needs' if has_action else 'has'} an action"
        )
    return record


def snapshot_after(
    snapshot: Mapping[str, Any] | None, record: Mapping[str, Any], schedule_id: str
) -> dict[str, Any] | LifecycleRefusal:
    """The snapshot after `record`, or why it cannot follow: the rules are
    `core.lifecycle`'s; a created record's snapshot gets the store's own keys."""
    applied = apply_record(snapshot, record)
    if snapshot is None and not isinstance(applied, LifecycleRefusal):
        applied.update(format=DEFINITION_FORMAT, schedule_id=schedule_id, blocked=None)
    return applied


def apply_checked(
    snapshot: dict[str, Any] | None, record: Mapping[str, Any], schedule_id: str
) -> dict[str, Any]:
    """`snapshot_after`, raising `RecordRefused` if the record contradicts the snapshot."""
    applied = snapshot_after(snapshot, record, schedule_id)
    if isinstance(applied, LifecycleRefusal):
        raise RecordRefused(applied.record, applied.reason)
    return applied


def replay(records: Sequence[object], schedule_id: str) -> list[dict[str, Any]]:
    """Every record of a log, each checked on its own and against the ones
    before it; raises `RecordRefused` at the first that does not follow."""
    checked: list[dict[str, Any]] = []
    snapshot: dict[str, Any] | None = None
    for index, raw in enumerate(records):
        try:
            record = check_record(raw, index + 1)
            snapshot = apply_checked(snapshot, record, schedule_id)
        except RecordRefused as refused:
            refused.seq = index + 1
            raise
        checked.append(record)
    return checked


def creation(
    schedule_id: str, definition: Mapping[str, Any], at: Instant
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The created record and the snapshot a create writes. Raises
    `InvalidInput` for a definition that is not an object or not JSON-safe,
    or a naive `at`."""
    if not isinstance(definition, Mapping):
        raise InvalidInput.from_problems(
            "schedule record", [Problem(field="definition", reason="must be an object")]
        )
    payload = dict(definition)
    _json_safe(payload, "definition")
    at_text = _instant_arg(at, "at")
    record = {"seq": 1, "kind": "created", "at": at_text, "revision": 1, "definition": payload}
    return record, apply_checked(None, record, schedule_id)


def change(
    current: dict[str, Any],
    lifecycle_seq: int,
    schedule_id: str,
    kind: ChangeKind,
    *,
    at: Instant,
    definition: Mapping[str, Any] | None = None,
    expected_revision: int | None = None,
    action: Mapping[str, Any] | None = None,
) -> LifecycleResult:
    """The record a change appends to a log that ends at `lifecycle_seq`
    with snapshot `current`, and the snapshot after it; `record` None for a
    no-op (pausing a paused schedule, deleting a deleted one).

    `updated` needs `definition` (the full new payload) and bumps the
    revision. Raises `InvalidInput` for bad arguments, `RevisionConflict`
    when `expected_revision` is stale, `InvalidState` for a change to a
    deleted schedule. Nothing is written here: the store writes the record,
    then the snapshot."""
    bad: list[Problem] = []
    if kind not in CHANGE_KINDS:
        bad.append(Problem(field="kind", reason=f"must be one of {sorted(CHANGE_KINDS)}"))
    if (kind == "updated") != (definition is not None):
        bad.append(Problem(field="definition", reason="is required for updated and only for it"))
    if definition is not None and not isinstance(definition, Mapping):
        bad.append(Problem(field="definition", reason="must be an object"))
    if (kind in OPERATOR_KINDS) != isinstance(action, Mapping):
        bad.append(
            Problem(field="action", reason="is required for operator requests and only for them")
        )
    if expected_revision is not None and not _is_int(expected_revision):
        bad.append(Problem(field="expected_revision", reason="must be an integer"))
    elif expected_revision is not None and abs(expected_revision) > MAX_SAFE_INTEGER:
        bad.append(
            Problem(
                field="expected_revision",
                reason=f"must be an integer from 1 to {MAX_SAFE_INTEGER}",
            )
        )
    if bad:
        raise InvalidInput.from_problems("lifecycle change", bad)
    payload = dict(definition) if definition is not None else None
    if payload is not None:
        _json_safe(payload, "definition")
    action_payload = dict(action) if action is not None else None
    if action_payload is not None:
        _json_safe(action_payload, "action")
    at_text = _instant_arg(at, "at")
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
    if (kind == "paused" and current["paused"]) or (kind == "resumed" and not current["paused"]):
        return LifecycleResult(snapshot=current, record=None)
    record: dict[str, Any] = {
        "seq": lifecycle_seq + 1,
        "kind": kind,
        "at": at_text,
        "revision": current["revision"] + (1 if kind == "updated" else 0),
    }
    if payload is not None:
        record["definition"] = payload
    if action_payload is not None:
        record["action"] = action_payload
    try:
        snapshot = apply_checked(current, record, schedule_id)
    except RecordRefused as refused:  # the snapshot does not follow its own log
        raise InvalidState(
            f"schedule {schedule_id!r} refuses the change: {refused.reason}",
            data={"schedule_id": schedule_id},
        ) from None
    return LifecycleResult(snapshot=snapshot, record=record)


def blocked_value(blocked: Mapping[str, Any] | None, at: Instant | None) -> dict[str, Any] | None:
    """The stored form of a block diagnostic (`file`, `record`, `reason`,
    `at`); raises `InvalidInput` naming a field that is not a string."""
    if blocked is None:
        return None
    bad = [
        Problem(field=f"blocked.{key}", reason="must be a string")
        for key in ("file", "record", "reason")
        if not isinstance(blocked.get(key), str)
    ]
    if bad:
        raise InvalidInput.from_problems("blocked diagnostic", bad)
    return {
        "file": blocked["file"],
        "record": blocked["record"],
        "reason": blocked["reason"],
        "at": _instant_arg(at, "at") if at is not None else None,
    }


def same_block(previous: Mapping[str, Any] | None, value: Mapping[str, Any] | None) -> bool:
    """Whether a stored diagnostic already says `value` (its time aside):
    `set_blocked` writes nothing then."""
    if previous is None or value is None:
        return previous is None and value is None
    return all(previous.get(k) == value[k] for k in ("file", "record", "reason"))
