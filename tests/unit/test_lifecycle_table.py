"""core.lifecycle: the lifecycle transition table, one row per (phase, kind).

Each row applies one well-formed record (right seq, right revision) of a kind
to a snapshot in a phase and asserts the outcome: the phase it leads to, or
the refusal the stores report. The order of the checks (seq, kind, the
table's structural refusals, revision, pause/resume) is tested after.
"""

from __future__ import annotations

from typing import Any

import pytest

from core.lifecycle import (
    LIFECYCLE_FIELDS,
    LIFECYCLE_KINDS,
    LIFECYCLE_TABLE,
    OPERATOR_KINDS,
    LifecyclePhase,
    LifecycleRefusal,
    apply_record,
    phase_of,
    seq_refusal,
)

AT = "2026-03-01T10:00:00Z"
LATER = "2026-03-01T11:00:00Z"


def _snapshot(phase: LifecyclePhase) -> dict[str, Any] | None:
    """A snapshot in `phase` at seq 4, revision 2 (None for absent)."""
    if phase == "absent":
        return None
    return {
        "revision": 2,
        "definition": {"name": "old"},
        "created_at": AT,
        "updated_at": AT,
        "paused": phase == "paused",
        "paused_at": AT if phase == "paused" else None,
        "resumed_at": None,
        "deleted": phase == "deleted",
        "deleted_at": AT if phase == "deleted" else None,
        "lifecycle_seq": 4,
        "blocked": None,
    }


def _record(snapshot: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    """The record of `kind` a writer would append next to `snapshot`."""
    seq = 1 if snapshot is None else snapshot["lifecycle_seq"] + 1
    if kind == "created":
        revision = 1
    else:
        revision = (snapshot["revision"] if snapshot else 1) + (kind == "updated")
    record: dict[str, Any] = {"seq": seq, "kind": kind, "at": LATER, "revision": revision}
    if kind in ("created", "updated"):
        record["definition"] = {"name": "new"}
    if kind in OPERATOR_KINDS:
        record["action"] = {"overlap": None}
    return record


BEFORE = "a {kind} record before the created record"
AFTER = "a {kind} record after the schedule was deleted"
NOT_FIRST = "a created record that is not the first record at revision 1"

# (phase, kind, the phase reached or the refusal's reason)
ROWS: list[tuple[LifecyclePhase, str, str]] = [
    ("absent", "created", "active"),
    ("absent", "updated", BEFORE),
    ("absent", "paused", BEFORE),
    ("absent", "resumed", BEFORE),
    ("absent", "deleted", BEFORE),
    ("active", "created", NOT_FIRST),
    ("active", "updated", "active"),
    ("active", "paused", "paused"),
    ("active", "resumed", "resumed while not paused"),
    ("active", "deleted", "deleted"),
    ("paused", "created", NOT_FIRST),
    ("paused", "updated", "paused"),
    ("paused", "paused", "paused while already paused"),
    ("paused", "resumed", "active"),
    ("paused", "deleted", "deleted"),
    ("deleted", "created", NOT_FIRST),
    ("deleted", "updated", AFTER),
    ("deleted", "paused", AFTER),
    ("deleted", "resumed", AFTER),
    ("deleted", "deleted", AFTER),
    # An operator's request (rules P, Q) keeps the phase; never before a
    # create or after a delete.
    *[("absent", kind, BEFORE) for kind in ("triggered", "backfill", "backfill-cancelled")],
    *[("active", kind, "active") for kind in ("triggered", "backfill", "backfill-cancelled")],
    *[("paused", kind, "paused") for kind in ("triggered", "backfill", "backfill-cancelled")],
    *[("deleted", kind, AFTER) for kind in ("triggered", "backfill", "backfill-cancelled")],
]
PHASES = ("absent", "active", "paused", "deleted")


def test_the_rows_cover_the_table() -> None:
    assert {(phase, kind) for phase, kind, _ in ROWS} == set(LIFECYCLE_TABLE)
    assert set(LIFECYCLE_TABLE) == {(p, k) for p in PHASES for k in LIFECYCLE_KINDS}


@pytest.mark.parametrize(("phase", "kind", "outcome"), ROWS, ids=[f"{p}-{k}" for p, k, _ in ROWS])
def test_transition(phase: LifecyclePhase, kind: str, outcome: str) -> None:
    snapshot = _snapshot(phase)
    record = _record(snapshot, kind)
    applied = apply_record(snapshot, record)
    if outcome in PHASES:
        assert isinstance(applied, dict), applied
        assert phase_of(applied) == outcome
        assert applied["lifecycle_seq"] == record["seq"]
        assert applied["revision"] == record["revision"]
        if kind in OPERATOR_KINDS:
            # Nothing but the seq moves: the stamps stay as they were.
            assert {k: v for k, v in applied.items() if k != "lifecycle_seq"} == {
                k: v for k, v in (snapshot or {}).items() if k != "lifecycle_seq"
            }
            return
        assert applied[f"{kind}_at"] == LATER
        if kind in ("created", "updated"):
            assert applied["definition"] == {"name": "new"}
        if snapshot is None:
            assert set(applied) == set(LIFECYCLE_FIELDS)
        else:
            assert applied["blocked"] is None  # a store's own keys are kept
            assert snapshot == _snapshot(phase)  # the input is not changed
    else:
        seq = record["seq"]
        assert applied == LifecycleRefusal(f"line {seq} (seq {seq})", outcome.format(kind=kind))


def test_delete_keeps_the_pause_flag() -> None:
    applied = apply_record(_snapshot("paused"), _record(_snapshot("paused"), "deleted"))
    assert isinstance(applied, dict)
    assert applied["paused"] is True and applied["deleted"] is True


@pytest.mark.parametrize(
    ("phase", "change", "refusal"),
    [
        # seq first, whatever else is wrong
        (
            "absent",
            {"seq": 2},
            LifecycleRefusal("line 1", "seq 2 where 1 was expected (missing or duplicate)"),
        ),
        ("active", {"seq": 5.0}, None),  # 5.0 == 5 but is not an int
        (
            "active",
            {"seq": True, "kind": "nope"},
            LifecycleRefusal("line 5", "seq True where 5 was expected (missing or duplicate)"),
        ),
        (
            "active",
            {"seq": 4},
            LifecycleRefusal("line 5", "seq 4 where 5 was expected (missing or duplicate)"),
        ),
        ("active", {"kind": "nope"}, LifecycleRefusal("line 5 (seq 5)", "unknown kind 'nope'")),
        # revision before pause-of-paused / resume-of-active
        (
            "paused",
            {"revision": 3},
            LifecycleRefusal("line 5 (seq 5)", "revision 3 where 2 was expected"),
        ),
        (
            "active",
            {"kind": "resumed", "revision": 9},
            LifecycleRefusal("line 5 (seq 5)", "revision 9 where 2 was expected"),
        ),
        (
            "active",
            {"kind": "updated", "revision": 2},
            LifecycleRefusal("line 5 (seq 5)", "revision 2 where 3 was expected"),
        ),
        # structural refusals before revision
        (
            "deleted",
            {"revision": 9},
            LifecycleRefusal("line 5 (seq 5)", "a paused record after the schedule was deleted"),
        ),
        (
            "absent",
            {"kind": "created", "revision": 2},
            LifecycleRefusal("line 1 (seq 1)", NOT_FIRST),
        ),
    ],
)
def test_check_order(
    phase: LifecyclePhase, change: dict[str, Any], refusal: LifecycleRefusal | None
) -> None:
    snapshot = _snapshot(phase)
    record = {**_record(snapshot, "paused"), **change}
    applied = apply_record(snapshot, record)
    if refusal is None:
        assert isinstance(applied, LifecycleRefusal)
        assert applied.reason.startswith("seq 5.0 where 5")
    else:
        assert applied == refusal


def test_seq_refusal() -> None:
    assert seq_refusal(3, 3) is None
    assert seq_refusal(None, 1) == "seq None where 1 was expected (missing or duplicate)"


def test_an_operator_request_needs_its_action() -> None:
    snapshot = _snapshot("active")
    record = _record(snapshot, "triggered")
    del record["action"]
    assert apply_record(snapshot, record) == LifecycleRefusal(
        "line 5 (seq 5)", "a triggered record needs an action object"
    )
