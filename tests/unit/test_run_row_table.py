"""core.occurrences: the run-row table and the decision-row rules, one row each."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.occurrences import (
    OPEN_RUN_STATUSES,
    RUN_ROW_TABLE,
    RUN_STATUSES,
    decision_row_refusal,
    run_row_refusal,
    span_refusal,
)

# (open status, row status, refusal with no run ids involved; None: accepted)
ROWS: list[tuple[str, str, str | None]] = [
    ("admitted", "admitted", "duplicate admitted row for seq 7"),
    ("admitted", "running", None),
    ("admitted", "interrupted", None),
    ("admitted", "completed", None),
    ("admitted", "failed", None),
    ("admitted", "exhausted", None),
    ("running", "admitted", "status went backwards from running to admitted for seq 7"),
    ("running", "running", "duplicate running row for seq 7"),
    ("running", "interrupted", None),
    ("running", "completed", None),
    ("running", "failed", None),
    ("running", "exhausted", None),
    ("interrupted", "admitted", "status went backwards from interrupted to admitted for seq 7"),
    ("interrupted", "running", None),
    ("interrupted", "interrupted", "duplicate interrupted row for seq 7"),
    ("interrupted", "completed", None),
    ("interrupted", "failed", None),
    ("interrupted", "exhausted", None),
]


def test_the_rows_cover_the_table() -> None:
    assert {(c, s) for c, s, _ in ROWS} == set(RUN_ROW_TABLE)
    assert set(RUN_ROW_TABLE) == {(c, s) for c in OPEN_RUN_STATUSES for s in RUN_STATUSES}


@pytest.mark.parametrize(
    ("current", "status", "refusal"), ROWS, ids=[f"{c}-{s}" for c, s, _ in ROWS]
)
def test_transition(current: str, status: str, refusal: str | None) -> None:
    assert run_row_refusal(current, "run-1", status, "run-1", 7) == refusal


@pytest.mark.parametrize("current", sorted(OPEN_RUN_STATUSES))
def test_a_repeat_may_only_attach_the_run_id(current: str) -> None:
    assert run_row_refusal(current, None, current, "run-1", 7) is None
    assert run_row_refusal(current, None, current, None, 7) is not None


def test_the_run_id_never_changes() -> None:
    assert run_row_refusal("running", "run-1", "completed", "run-2", 7) == (
        "run id changed from run-1 to run-2 for seq 7"
    )
    assert run_row_refusal("running", "run-1", "completed", None, 7) is None


SPAN_ONLY = "first_instant/last_instant only belong to a row with count > 1"
DECISIONS: list[tuple[object, object, bool, str | None]] = [
    (None, 1, False, None),
    (3, 1, False, None),
    (3, 4, True, None),
    (0, 1, False, "revision must be a positive integer, got 0"),
    ("2", 1, False, "revision must be a positive integer, got '2'"),
    (True, 1, False, "revision must be a positive integer, got True"),
    (1, 0, False, "count must be a positive integer, got 0"),
    (1, True, False, "count must be a positive integer, got True"),
    (1, 1, True, SPAN_ONLY),
    (0, 1, True, "revision must be a positive integer, got 0"),  # revision first
]


@pytest.mark.parametrize(("revision", "count", "has_span", "refusal"), DECISIONS)
def test_decision_row(revision: object, count: object, has_span: bool, refusal: str | None) -> None:
    assert decision_row_refusal(revision=revision, count=count, has_span=has_span) == refusal


def test_span() -> None:
    a, b = datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 2, tzinfo=UTC)
    assert span_refusal(a, b, b) is None
    assert span_refusal(b, b, b) is not None
    assert span_refusal(a, b, a) is not None
