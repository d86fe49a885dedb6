"""The lifecycle state machine of a schedule, as a table.

A schedule's lifecycle log holds one record per change (`created`,
`updated`, `paused`, `resumed`, `deleted`) and per operator request
(`triggered`, `backfill`, `backfill-cancelled`: rules P and Q, which carry
their arguments in `action` and change no lifecycle field but the seq),
`seq` dense from 1. Which record
may follow which is `LIFECYCLE_TABLE`: (phase, record kind) -> the phase the
record leads to, or the refusal a store reports for it. `apply_record` is the
one place a record is judged against the state before it; the file store, the
simulator's store and recovery's fold all apply records through it, so they
cannot disagree about what a valid log is.

The state is the lifecycle part of a schedule's snapshot (the keys of
`LIFECYCLE_FIELDS`), so the stores apply records to the snapshot they keep.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

__all__ = [
    "LIFECYCLE_FIELDS",
    "LIFECYCLE_KINDS",
    "LIFECYCLE_TABLE",
    "OPERATOR_KINDS",
    "REVISION_STEP",
    "LifecycleKind",
    "LifecycleOutcome",
    "LifecyclePhase",
    "LifecycleRefusal",
    "TableRefusal",
    "apply_record",
    "phase_of",
    "seq_refusal",
]

LifecycleKind = Literal[
    "created",
    "updated",
    "paused",
    "resumed",
    "deleted",
    "triggered",
    "backfill",
    "backfill-cancelled",
]
LIFECYCLE_KINDS: Final[frozenset[str]] = frozenset(get_args(LifecycleKind))
# The operator's requests: delivered to `decide` once, in log order, like the
# changes; they leave the lifecycle fields as they were.
OPERATOR_KINDS: Final[frozenset[str]] = frozenset({"triggered", "backfill", "backfill-cancelled"})

# `absent`: no record applied yet. Paused and deleted are separate flags in a
# snapshot, but a deleted schedule accepts nothing, so its pause flag is moot.
LifecyclePhase = Literal["absent", "active", "paused", "deleted"]

# The snapshot keys a lifecycle record decides (a store adds its own: format,
# schedule_id, blocked).
LIFECYCLE_FIELDS: Final = (
    "revision",
    "definition",
    "created_at",
    "updated_at",
    "paused",
    "paused_at",
    "resumed_at",
    "deleted",
    "deleted_at",
    "lifecycle_seq",
)

# How far each kind moves the revision: only a definition change makes a new one.
REVISION_STEP: Final[Mapping[str, int]] = {
    "created": 1,
    "updated": 1,
    "paused": 0,
    "resumed": 0,
    "deleted": 0,
    "triggered": 0,
    "backfill": 0,
    "backfill-cancelled": 0,
}


@dataclass(frozen=True, slots=True)
class TableRefusal:
    """A table cell that refuses; `{kind}` in the reason names the record's kind."""

    reason: str


_NOT_FIRST: Final = TableRefusal("a created record that is not the first record at revision 1")
_BEFORE_CREATE: Final = TableRefusal("a {kind} record before the created record")
_AFTER_DELETE: Final = TableRefusal("a {kind} record after the schedule was deleted")

LifecycleOutcome = LifecyclePhase | TableRefusal

# Which record may follow which: (phase, kind) -> the phase reached, or a refusal.
LIFECYCLE_TABLE: Final[Mapping[tuple[LifecyclePhase, LifecycleKind], LifecycleOutcome]] = {
    ("absent", "created"): "active",
    ("absent", "updated"): _BEFORE_CREATE,
    ("absent", "paused"): _BEFORE_CREATE,
    ("absent", "resumed"): _BEFORE_CREATE,
    ("absent", "deleted"): _BEFORE_CREATE,
    ("active", "created"): _NOT_FIRST,
    ("active", "updated"): "active",
    ("active", "paused"): "paused",
    ("active", "resumed"): TableRefusal("resumed while not paused"),
    ("active", "deleted"): "deleted",
    ("paused", "created"): _NOT_FIRST,
    ("paused", "updated"): "paused",
    ("paused", "paused"): TableRefusal("paused while already paused"),
    ("paused", "resumed"): "active",
    ("paused", "deleted"): "deleted",
    ("deleted", "created"): _NOT_FIRST,
    ("deleted", "updated"): _AFTER_DELETE,
    ("deleted", "paused"): _AFTER_DELETE,
    ("deleted", "resumed"): _AFTER_DELETE,
    ("deleted", "deleted"): _AFTER_DELETE,
    # Operator requests: on a live schedule, paused or not (rules P, Q).
    ("absent", "triggered"): _BEFORE_CREATE,
    ("absent", "backfill"): _BEFORE_CREATE,
    ("absent", "backfill-cancelled"): _BEFORE_CREATE,
    ("active", "triggered"): "active",
    ("active", "backfill"): "active",
    ("active", "backfill-cancelled"): "active",
    ("paused", "triggered"): "paused",
    ("paused", "backfill"): "paused",
    ("paused", "backfill-cancelled"): "paused",
    ("deleted", "triggered"): _AFTER_DELETE,
    ("deleted", "backfill"): _AFTER_DELETE,
    ("deleted", "backfill-cancelled"): _AFTER_DELETE,
}

# The instant field each kind stamps, and whether it carries a new definition.
_STAMPS: Final[Mapping[str, tuple[str, bool]]] = {
    "created": ("created_at", True),
    "updated": ("updated_at", True),
    "paused": ("paused_at", False),
    "resumed": ("resumed_at", False),
    "deleted": ("deleted_at", False),
}


# The lifecycle fields before a created record applies.
_CREATED_BLANK: Final[Mapping[str, Any]] = {
    **dict.fromkeys(LIFECYCLE_FIELDS),
    "paused": False,
    "deleted": False,
}


@dataclass(frozen=True, slots=True)
class LifecycleRefusal:
    """Why a record cannot follow the state: `record` names it as the
    stores' diagnostics do ("line 3 (seq 3)"), `reason` says what is wrong."""

    record: str
    reason: str


def phase_of(snapshot: Mapping[str, Any] | None) -> LifecyclePhase:
    """The phase a snapshot (None: no record yet) is in."""
    if snapshot is None:
        return "absent"
    if snapshot["deleted"]:
        return "deleted"
    return "paused" if snapshot["paused"] else "active"


def seq_refusal(seq: object, expected: int) -> str | None:
    """The reason `seq` cannot be the seq of the record expected at `expected`
    (seqs are dense from 1: a gap is a lost record, a repeat a duplicate)."""
    if seq != expected or not isinstance(seq, int) or isinstance(seq, bool):
        return f"seq {seq!r} where {expected} was expected (missing or duplicate)"
    return None


def apply_record(
    snapshot: Mapping[str, Any] | None, record: Mapping[str, Any]
) -> dict[str, Any] | LifecycleRefusal:
    """The lifecycle fields after `record` (a copy of `snapshot` with them
    changed; for a created record, only the `LIFECYCLE_FIELDS`), or the
    refusal. `record` has the shape of a lifecycle line; the checks run in a
    fixed order so every store reports the same first problem: seq, kind,
    the table's structural refusals, revision, then pause/resume."""
    seq = record.get("seq")
    expected = 1 if snapshot is None else int(snapshot["lifecycle_seq"]) + 1
    if seq != expected or type(seq) is not int:
        # `seq_refusal`'s rule, tested inline first: a start folds every
        # schedule's records, and the valid ones must not pay for the message.
        return LifecycleRefusal(f"line {expected}", str(seq_refusal(seq, expected)))
    kind = record.get("kind")
    if kind not in LIFECYCLE_KINDS:
        return LifecycleRefusal(_where(seq), f"unknown kind {kind!r}")
    phase = phase_of(snapshot)
    outcome = LIFECYCLE_TABLE[(phase, kind)]
    revision = record.get("revision")
    if kind == "created":
        if isinstance(outcome, TableRefusal) or revision != 1:
            return LifecycleRefusal(_where(seq), _NOT_FIRST.reason)
    elif snapshot is not None and phase != "deleted":
        # Checked before pause-of-paused and resume-of-active: a record at the
        # wrong revision is reported as that, whatever else is wrong with it.
        expected_revision = snapshot["revision"] + REVISION_STEP[kind]
        if revision != expected_revision:
            return LifecycleRefusal(
                _where(seq), f"revision {revision} where {expected_revision} was expected"
            )
    if isinstance(outcome, TableRefusal):
        return LifecycleRefusal(_where(seq), outcome.reason.format(kind=kind))
    if kind in OPERATOR_KINDS:
        assert snapshot is not None  # the table refuses them before a create
        if not isinstance(record.get("action"), Mapping):
            return LifecycleRefusal(_where(seq), f"a {kind} record needs an action object")
        moved = dict(snapshot)
        moved["lifecycle_seq"] = seq
        return moved
    stamp, carries_definition = _STAMPS[kind]
    # Built in one literal, not copied and updated key by key: a start folds
    # every schedule's log through here.
    new: dict[str, Any] = dict(_CREATED_BLANK) if snapshot is None else dict(snapshot)
    new["revision"] = revision
    new["lifecycle_seq"] = seq
    new["deleted"] = outcome == "deleted"
    if outcome != "deleted":
        # A deleted snapshot keeps the pause flag it had: it says what the
        # schedule was when it was deleted.
        new["paused"] = outcome == "paused"
    new[stamp] = record["at"]
    if carries_definition:
        new["definition"] = record["definition"]
    return new


def _where(seq: int) -> str:
    return f"line {seq} (seq {seq})"
