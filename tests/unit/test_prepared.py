"""A round decided ahead of its instant, committed later (`core.prepared`)."""

from __future__ import annotations

from datetime import timedelta

from core.commands import AdmitOccurrence
from core.decide import decide
from core.prepared import PREPARED_STALE_AFTER, commits_as_decided
from tests.property.builders import at, cron, started_state


def test_a_round_decided_ahead_holds_at_its_instant_and_within_the_allowance() -> None:
    base = started_state(cron("r", lateness_allowance_s=30.0))
    _, commands = decide(base, at(10), [])
    assert any(isinstance(c, AdmitOccurrence) for c in commands)
    assert commits_as_decided(base, commands, at(10), at(10))
    assert commits_as_decided(base, commands, at(10), at(10) + PREPARED_STALE_AFTER)


def test_an_admission_past_its_allowance_at_the_commit_does_not_hold() -> None:
    base = started_state(cron("r", lateness_allowance_s=0.0))
    _, commands = decide(base, at(10), [])
    assert commits_as_decided(base, commands, at(10), at(10))
    # Decided at 10:00:00.5 it is missed (rule B): the round ahead is not that round.
    assert not commits_as_decided(base, commands, at(10), at(10) + timedelta(milliseconds=500))


def test_a_clock_past_the_stale_bound_does_not_hold_whatever_the_allowance() -> None:
    base = started_state(cron("r", lateness_allowance_s=3600.0))
    _, commands = decide(base, at(10), [])
    late = at(10) + PREPARED_STALE_AFTER + timedelta(microseconds=1)
    assert not commits_as_decided(base, commands, at(10), late)
    # Without admissions only the bound counts.
    assert commits_as_decided(base, [], at(10), at(10) + timedelta(milliseconds=900))
    assert not commits_as_decided(base, [], at(10), late)
