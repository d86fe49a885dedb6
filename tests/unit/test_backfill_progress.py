"""A backfill's progress as a value (`core.operator_actions.Backfill`)."""

from __future__ import annotations

from core.operator_actions import Backfill
from tests.property.builders import at


def test_a_backfill_cancelled_on_a_clock_stepped_back_ends_no_earlier_than_its_request() -> None:
    running = Backfill(
        start=at(6),
        end=at(9),
        overlap=None,
        requested_at=at(11),
        state="running",
        planned=3,
        admitted=0,
        remaining=(at(6), at(7), at(8)),
    )
    assert running.cancelled(at(10, 30)).ended_at == at(11)
    assert running.cancelled(at(11, 5)).ended_at == at(11, 5)
