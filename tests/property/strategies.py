"""Hypothesis strategies for schedule definitions and events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from core.definitions import ScheduleDefinition, parse_definition

__all__ = ["BASE", "EXPRESSIONS", "ZONES", "clock_steps", "definitions"]

BASE = datetime(2024, 3, 30, 20, 0, tzinfo=UTC)  # a DST weekend in Europe
EXPRESSIONS = ("0 * * * *", "*/15 * * * *", "*/7 * * * *", "30 2 * * *", "5,35 * * * *")
ZONES = ("UTC", "Europe/Berlin", "America/New_York")

# Mostly short steps, sometimes long enough for a downtime catch-up.
clock_steps = st.sampled_from(
    [
        timedelta(seconds=1),
        timedelta(seconds=30),
        timedelta(seconds=61),
        timedelta(minutes=5),
        timedelta(minutes=7),
        timedelta(minutes=15),
        timedelta(minutes=40),
        timedelta(hours=1),
        timedelta(hours=3),
        timedelta(hours=11),
    ]
)


@st.composite
def definitions(draw: st.DrawFn, schedule_id: str, now: datetime) -> ScheduleDefinition:
    payload: dict[str, Any] = {"schedule_id": schedule_id, "deployment_id": "report.default"}
    if draw(st.integers(0, 5)) == 0:
        offset = timedelta(minutes=draw(st.integers(-30, 600)))
        payload["trigger"] = {"kind": "oneshot", "at": (now + offset).isoformat()}
    else:
        payload["trigger"] = {
            "kind": "cron",
            "expression": draw(st.sampled_from(EXPRESSIONS)),
            "timezone": draw(st.sampled_from(ZONES)),
        }
    if draw(st.booleans()):
        payload["overlap"] = "parallel"
        payload["max_active_runs"] = draw(st.integers(1, 3))
    payload["misfire"] = draw(st.sampled_from(["skip", "latest"]))
    payload["lateness_allowance_s"] = draw(st.sampled_from([0.0, 60.0, 900.0, 3600.0]))
    if draw(st.booleans()):
        payload["inputs"] = {"when": {"$bind": "occurrence.instant"}, "n": 1}
    return parse_definition(payload)
