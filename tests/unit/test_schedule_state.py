"""The lifecycle state `get`/`list` show: a decision table (`core/schedule_state.py`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from core.schedule_state import LIFECYCLE_STATES, lifecycle_state, oneshot_finished

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


PAUSED_AT = AT - timedelta(minutes=1)

# (case, facts, finished); unnamed facts are: now AFTER, not paused, never
# paused, watermark AFTER, no history row read, nothing open.
ONESHOT: list[tuple[str, dict[str, Any], bool]] = [
    ("instant ahead", {"now": BEFORE, "watermark": BEFORE}, False),
    (
        "instant ahead, paused",
        {"now": BEFORE, "watermark": BEFORE, "paused": True, "paused_at": BEFORE},
        False,
    ),
    ("run completed", {"recorded_status": "completed"}, True),
    ("run failed", {"recorded_status": "failed"}, True),
    ("skipped as missed", {"recorded_status": "skipped-misfire"}, True),
    ("preflight rejected", {"recorded_status": "preflight-rejected"}, True),
    ("superseded by a pause", {"recorded_status": "superseded", "paused": True}, True),
    ("run still running (live)", {"open_instants": (AT,)}, False),
    (
        "completed, a trigger's run still running (live)",
        {"recorded_status": "completed", "open_instants": (AFTER,)},
        False,
    ),
    ("run still running (history)", {"recorded_status": "running"}, False),
    ("run interrupted, may resume", {"recorded_status": "interrupted"}, False),
    ("admitted, run not started", {"recorded_status": "admitted"}, False),
    ("completed, history not read", {}, True),
    ("behind the watermark, no row (consumed)", {"watermark": AT}, True),
    ("passed, watermark not yet moved (may still fire)", {"watermark": BEFORE}, False),
    ("passed, watermark unknown", {"watermark": None}, False),
    (
        "passed while paused (never replayed)",
        {"watermark": BEFORE, "paused": True, "paused_at": PAUSED_AT},
        True,
    ),
    (
        "paused at the instant: decided before the pause",
        {"watermark": BEFORE, "paused": True, "paused_at": AT},
        False,
    ),
    (
        "paused after the instant the scheduler has not decided yet",
        {"watermark": BEFORE, "paused": True, "paused_at": AFTER},
        False,
    ),
    (
        "resumed after it, the scheduler not caught up",
        {"watermark": BEFORE, "paused_at": PAUSED_AT, "resumed_at": AFTER},
        True,
    ),
    (
        "paused and resumed before it",
        {"watermark": BEFORE, "paused_at": BEFORE, "resumed_at": PAUSED_AT},
        False,
    ),
    (
        "fired, then paused while the run goes on",
        {"recorded_status": "running", "paused": True, "paused_at": AFTER},
        False,
    ),
    (
        "fired, completed, then paused",
        {"recorded_status": "completed", "paused": True, "paused_at": AFTER},
        True,
    ),
]

DEFAULTS: dict[str, Any] = {
    "now": AFTER,
    "paused": False,
    "paused_at": None,
    "resumed_at": None,
    "watermark": AFTER,
    "recorded_status": None,
    "open_instants": (),
}


@pytest.mark.parametrize(
    ("facts", "finished"),
    [row[1:] for row in ONESHOT],
    ids=[row[0] for row in ONESHOT],
)
def test_oneshot_finished(facts: dict[str, Any], finished: bool) -> None:
    assert oneshot_finished(at=AT, **{**DEFAULTS, **facts}) is finished


def test_a_paused_fired_oneshot_is_finished_and_a_running_one_active() -> None:
    done = oneshot_finished(
        at=AT, **{**DEFAULTS, "recorded_status": "completed", "paused": True, "paused_at": AFTER}
    )
    assert lifecycle_state(deleted=False, blocked=False, paused=True, finished=done) == "finished"
    going = oneshot_finished(at=AT, **{**DEFAULTS, "open_instants": (AT,)})
    assert lifecycle_state(deleted=False, blocked=False, paused=False, finished=going) == "active"
