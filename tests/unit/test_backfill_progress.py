"""A backfill's progress as a value (`core.operator_actions.Backfill`): it
never ends before its request, whatever a clock stepped back since reads."""

from __future__ import annotations

from core.operator_actions import Backfill
from tests.property.builders import at

RUNNING = Backfill(
    start=at(6),
    end=at(9),
    overlap=None,
    requested_at=at(11),
    state="running",
    planned=3,
    admitted=0,
    remaining=(at(6), at(7), at(8)),
)


def test_a_backfill_cancelled_on_a_clock_stepped_back_ends_no_earlier_than_its_request() -> None:
    assert RUNNING.cancelled(at(10, 30)).ended_at == at(11)
    assert RUNNING.cancelled(at(11, 5)).ended_at == at(11, 5)


def test_a_backfill_whose_last_admission_is_on_a_clock_stepped_back_ends_at_its_request() -> None:
    last = RUNNING.admitting(at(11, 1)).admitting(at(11, 2))
    assert last.admitting(at(10, 30)).ended_at == at(11)
    assert last.admitting(at(11, 3)).ended_at == at(11, 3)


def test_a_backfill_a_restart_finds_done_on_a_clock_stepped_back_ends_at_its_request() -> None:
    repaired = RUNNING.without({at(6), at(7), at(8)}, at(10, 30))
    assert (repaired.state, repaired.ended_at) == ("done", at(11))
    assert RUNNING.without({at(6), at(7), at(8)}, at(12)).ended_at == at(12)
