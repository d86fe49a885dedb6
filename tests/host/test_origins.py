"""A run's origin as the host stores it: the scheduler's calendar origins
take a shorter check (`origins._scheduled`), which must answer exactly what
the full check answers, for every value it accepts."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from adapters.host.origins import _checked_in_full, _scheduled, check_origin
from core.limits import MAX_SAFE_INTEGER

SCHEDULER_ORIGIN = {
    "kind": "schedule",
    "schedule_id": "nightly-report",
    "instant": "2026-03-02T09:00:00Z",
    "revision": 3,
}

_texts = st.one_of(
    st.sampled_from(["schedule", "manual", "", "x" * 128, "x" * 129, "nightly"]),
    st.text(max_size=140),
)
_instants = st.one_of(
    st.sampled_from(
        [
            "2026-03-02T09:00:00Z",
            "2026-03-02T09:00:00.250000Z",
            "2026-03-02T09:00:00+00:00",
            "2026-03-02T09:00:00+02:00",
            "2026-03-02T09:00:00",
            "yesterday",
        ]
    ),
    st.text(max_size=30),
)
_values = st.one_of(
    _texts,
    st.integers(min_value=-2, max_value=MAX_SAFE_INTEGER + 2),
    st.sampled_from([True, False, None, 1.0, [], {}]),
)
_origins = st.fixed_dictionaries(
    {
        "kind": st.one_of(st.just("schedule"), _values),
        "schedule_id": st.one_of(_texts, _values),
        "instant": st.one_of(_instants, _values),
        "revision": st.one_of(st.integers(min_value=-2, max_value=MAX_SAFE_INTEGER + 2), _values),
    },
    optional={"action": _values, "extra": _values},
)


@given(_origins)
def test_the_short_check_answers_what_the_full_check_answers(origin: dict[str, Any]) -> None:
    short = _scheduled(origin)
    if short is not None:
        full = _checked_in_full(origin)
        assert full == (short, [])
        # Stored byte for byte alike: the same keys in the same order.
        assert json.dumps(short) == json.dumps(full[0])
    assert check_origin(origin) == _checked_in_full(origin)


def test_the_scheduler_origin_takes_the_short_check() -> None:
    assert _scheduled(dict(SCHEDULER_ORIGIN)) == {
        "instant": "2026-03-02T09:00:00Z",
        "kind": "schedule",
        "revision": 3,
        "schedule_id": "nightly-report",
    }
    # A copy: the caller's dict is not stored.
    stored, problems = check_origin(SCHEDULER_ORIGIN)
    assert problems == [] and stored == SCHEDULER_ORIGIN and stored is not SCHEDULER_ORIGIN


def test_anything_else_is_checked_in_full() -> None:
    for origin in (
        {**SCHEDULER_ORIGIN, "action": "trigger"},
        {**SCHEDULER_ORIGIN, "revision": True},
        {**SCHEDULER_ORIGIN, "instant": "2026-03-02T09:00:00+02:00"},
        {**SCHEDULER_ORIGIN, "schedule_id": "été"},
        {"kind": "manual"},
    ):
        assert _scheduled(origin) is None
