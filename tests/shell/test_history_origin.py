"""Operators' rows in the file history: the order each origin keeps, what a
start reads through the index, and the lookups a trigger and a backfill need."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from core.errors import InvalidInput, InvalidState
from shell.durable import GroupCommit
from shell.history_store import HistoryStore
from tests.shell.history_helpers import SNAPSHOT, all_rows, create, decide, minute, move


@pytest.fixture
def history(store_root: Path) -> HistoryStore:
    create(store_root, "s1")
    return HistoryStore(store_root)


def _trigger(history: HistoryStore, i: int, request: int, **extra: object) -> int:
    """A trigger row at minute `i` plus 30 s (never a calendar minute)."""
    at = minute(i) + timedelta(seconds=30)
    return history.append_decision(
        "s1",
        instant=at,
        status="admitted",
        recorded_at=at,
        snapshot=SNAPSHOT,
        origin="trigger",
        request=request,
        **extra,  # type: ignore[arg-type]
    )


def _backfill(history: HistoryStore, i: int, recorded: int) -> int:
    return history.append_decision(
        "s1",
        instant=minute(i),
        status="admitted",
        recorded_at=minute(recorded),
        snapshot=SNAPSHOT,
        origin="backfill",
    )


def _history_with_operators_rows(history: HistoryStore) -> None:
    decide(history, "s1", 0, "admitted")
    move(history, "s1", 0, "completed", run_id="run-1")
    decide(history, "s1", 1, "skipped-overlap")
    decide(history, "s1", 2, "skipped-misfire")
    _trigger(history, 3, request=4)
    decide(history, "s1", 4, "admitted")
    _backfill(history, 1, recorded=5)  # makes up for the skipped minute 1
    _backfill(history, 2, recorded=6)
    _trigger(history, 6, request=5)


def test_each_origin_keeps_its_own_order(history: HistoryStore) -> None:
    _history_with_operators_rows(history)
    # A calendar row follows the newest calendar row, whatever operators wrote since.
    with pytest.raises(InvalidState, match="not after the previous decision"):
        decide(history, "s1", 4, "skipped-overlap")
    decide(history, "s1", 5, "skipped-overlap")
    # A trigger follows the newest trigger.
    with pytest.raises(InvalidState, match="not after the previous trigger"):
        _trigger(history, 6, request=6)
    # A backfill row may not open an instant that is open already.
    with pytest.raises(InvalidState, match="admitted and still open"):
        _backfill(history, 2, recorded=7)
    # Only a trigger's row names a request; operators' rows are single instants.
    with pytest.raises(InvalidInput, match="request"):
        history.append_decision(
            "s1",
            instant=minute(7),
            status="skipped-overlap",
            recorded_at=minute(7),
            request=3,
        )
    rows = all_rows(history, "s1", limit=3)
    assert [(r["instant"][14:19], r["origin"]) for r in rows] == [
        ("00:00", "schedule"),
        ("01:00", "schedule"),
        ("02:00", "schedule"),
        ("03:30", "trigger"),
        ("04:00", "schedule"),
        ("01:00", "backfill"),
        ("02:00", "backfill"),
        ("06:30", "trigger"),
        ("05:00", "schedule"),
    ]


@pytest.mark.parametrize("full_scan", [False, True])
def test_a_start_reads_the_newest_calendar_decision_and_trigger(
    store_root: Path, history: HistoryStore, full_scan: bool
) -> None:
    with GroupCommit() as batch:
        decide(history, "s1", 0, "admitted", batch=batch)
        decide(history, "s1", 1, "skipped-overlap", batch=batch)
    with GroupCommit() as batch:
        # Operators' rows after the newest calendar decision, in a commit
        # of their own and then in the commit a start replays.
        _trigger(history, 2, request=2)
    _backfill(history, 1, recorded=3)
    history.close()
    again = HistoryStore(store_root)
    recovered = again.recover("s1", full_scan=full_scan)
    assert recovered.last_decided_instant == "2024-01-01T00:01:00Z"
    assert not recovered.problems
    # The trigger row is the newest commit's but one: a load through the
    # index knows it only when a full scan read it (see `State`); its
    # request is what a replay is judged by.
    if full_scan:
        assert recovered.last_trigger_instant == "2024-01-01T00:02:30Z"
        assert recovered.last_trigger_request == 2
    assert [o.origin for o in recovered.open_occurrences] == ["schedule", "trigger", "backfill"]


def test_occurrence_at_and_backfill_decided(history: HistoryStore) -> None:
    _history_with_operators_rows(history)
    by_origin = {
        origin: history.occurrence_at("s1", minute(1), origin)
        for origin in ("schedule", "backfill", "trigger")
    }
    assert (
        by_origin["schedule"] is not None and by_origin["schedule"]["status"] == "skipped-overlap"
    )
    assert by_origin["backfill"] is not None and by_origin["backfill"]["status"] == "admitted"
    assert by_origin["trigger"] is None
    trigger = history.occurrence_at("s1", minute(3) + timedelta(seconds=30), "trigger")
    assert trigger is not None and trigger["origin"] == "trigger"
    assert history.occurrence_at("s1", minute(4), "schedule") is not None
    # Minute 0 was admitted by the calendar, 1 and 2 by a backfill, 4 by the
    # calendar; 3 was never admitted (the trigger at 3:30 is not minute 3).
    decided = history.backfill_decided("s1", minute(0), minute(5))
    assert sorted(decided) == [minute(0), minute(1), minute(2), minute(4)]
    assert history.backfill_decided("s1", minute(1), minute(2)) == {minute(1)}
