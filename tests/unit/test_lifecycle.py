"""The lifecycle state `get`/`list` show: a decision table (`core/lifecycle.py`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.lifecycle import LIFECYCLE_STATES, lifecycle_state, oneshot_finished

AT = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
BEFORE = AT - timedelta(minutes=5)
AFTER = AT + timedelta(minutes=5)

# (case, deleted, blocked, paused, finished, state): the first rule that applies wins.
PRECEDENCE: list[tuple[str, bool, bool, bool, bool, str]] = [
    ("nothing set", False, False, False, False, "active"),
    ("paused", False, False, True, False, "paused"),
    ("finished", False, False, False, True, "finished"),
    ("finished beats paused", False, False, True, True, "finished"),
    ("blocked beats finished", False, True, False, True, "blocked"),
    ("blocked beats paused", False, True, True, False, "blocked"),
    ("deleted beats blocked", True, True, False, False, "deleted"),
    ("deleted beats everything", True, True, True, True, "deleted"),
    ("deleted beats finished", True, False, False, True, "deleted"),
]


@pytest.mark.parametrize(
    ("deleted", "blocked", "paused", "finished", "state"),
    [row[1:] for row in PRECEDENCE],
    ids=[row[0] for row in PRECEDENCE],
)
def test_state_precedence(
    deleted: bool, blocked: bool, paused: bool, finished: bool, state: str
) -> None:
    assert (
        lifecycle_state(deleted=deleted, blocked=blocked, paused=paused, finished=finished) == state
    )


def test_states_are_listed_in_precedence_order() -> None:
    assert LIFECYCLE_STATES == ("deleted", "blocked", "finished", "paused", "active")


# (case, now, paused, watermark, recorded status, open instants, finished)
ONESHOT: list[
    tuple[str, datetime, bool, datetime | None, str | None, tuple[datetime, ...], bool]
] = [
    ("instant ahead", BEFORE, False, BEFORE, None, (), False),
    ("instant ahead, paused", BEFORE, True, BEFORE, None, (), False),
    ("run completed", AFTER, False, AFTER, "completed", (), True),
    ("run failed", AFTER, False, AFTER, "failed", (), True),
    ("skipped as missed", AFTER, False, AFTER, "skipped-misfire", (), True),
    ("preflight rejected", AFTER, False, AFTER, "preflight-rejected", (), True),
    ("superseded by a pause", AFTER, True, AFTER, "superseded", (), True),
    ("run still running (live)", AFTER, False, AFTER, None, (AT,), False),
    ("run still running (history)", AFTER, False, AFTER, "running", (), False),
    ("run interrupted, may resume", AFTER, False, AFTER, "interrupted", (), False),
    ("admitted, run not started", AFTER, False, AFTER, "admitted", (), False),
    ("held for overlap or a slot", AFTER, False, AFTER, None, (AT,), False),
    ("completed, history not read", AFTER, False, AFTER, None, (), True),
    ("behind the watermark, no row (consumed)", AFTER, False, AT, None, (), True),
    ("passed, watermark not yet moved", AFTER, False, BEFORE, None, (), False),
    ("passed, watermark unknown", AFTER, False, None, None, (), False),
    ("passed while paused (never replayed)", AFTER, True, BEFORE, None, (), True),
    ("fired, then paused while the run goes on", AFTER, True, AFTER, "running", (), False),
    ("fired, completed, then paused", AFTER, True, AFTER, "completed", (), True),
]


@pytest.mark.parametrize(
    ("now", "paused", "watermark", "recorded", "open_instants", "finished"),
    [row[1:] for row in ONESHOT],
    ids=[row[0] for row in ONESHOT],
)
def test_oneshot_finished(
    now: datetime,
    paused: bool,
    watermark: datetime | None,
    recorded: str | None,
    open_instants: tuple[datetime, ...],
    finished: bool,
) -> None:
    got = oneshot_finished(
        at=AT,
        now=now,
        paused=paused,
        watermark=watermark,
        recorded_status=recorded,
        open_instants=open_instants,
    )
    assert got is finished


def test_a_paused_fired_oneshot_is_finished_and_a_running_one_active() -> None:
    done = oneshot_finished(
        at=AT,
        now=AFTER,
        paused=True,
        watermark=AFTER,
        recorded_status="completed",
        open_instants=(),
    )
    assert lifecycle_state(deleted=False, blocked=False, paused=True, finished=done) == "finished"
    going = oneshot_finished(
        at=AT, now=AFTER, paused=False, watermark=AFTER, recorded_status=None, open_instants=(AT,)
    )
    assert lifecycle_state(deleted=False, blocked=False, paused=False, finished=going) == "active"
