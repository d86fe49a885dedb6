"""The console's words, times and timeline, as tables (pure functions)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adapters.console.present import (
    css_class,
    duration_text,
    next_instants,
    reason_text,
    relative_text,
    trigger_words,
)
from adapters.console.timeline import build_timeline, paused_spans

NOW = datetime(2027, 3, 20, 12, 0, tzinfo=UTC)

TRIGGER_WORDS = [
    ({"kind": "cron", "expression": "0 * * * *", "timezone": "Europe/Berlin"},
     "every hour at :00, Europe/Berlin"),
    ({"kind": "cron", "expression": "* * * * *", "timezone": "UTC"}, "every minute, UTC"),
    ({"kind": "cron", "expression": "*/15 * * * *", "timezone": "UTC"}, "every 15 minutes, UTC"),
    ({"kind": "cron", "expression": "20 */2 * * *", "timezone": "UTC"},
     "every 2 hours at :20, UTC"),
    ({"kind": "cron", "expression": "30 6 * * *", "timezone": "America/New_York"},
     "every day at 06:30, America/New_York"),
    ({"kind": "cron", "expression": "0 9 * * 1-5", "timezone": "UTC"},
     "on weekdays at 09:00, UTC"),
    ({"kind": "cron", "expression": "0 9 * * 1,3", "timezone": "UTC"},
     "on Monday, Wednesday at 09:00, UTC"),
    ({"kind": "cron", "expression": "0 0 1 * *", "timezone": "UTC"},
     "monthly on day 1 at 00:00, UTC"),
    ({"kind": "cron", "expression": "0 0 25 12 *", "timezone": "UTC"},
     "every year on December 25 at 00:00, UTC"),
    ({"kind": "cron", "expression": "30 2 * 3,10 0", "timezone": "Europe/Berlin"},
     "cron 30 2 * 3,10 0, Europe/Berlin"),
    ({"kind": "oneshot", "at": "2027-03-28T01:30:00Z"}, "once at 2027-03-28 01:30 UTC"),
]  # fmt: skip


@pytest.mark.parametrize(("trigger", "words"), TRIGGER_WORDS)
def test_trigger_words(trigger: dict[str, Any], words: str) -> None:
    assert trigger_words(trigger) == words


RELATIVE = [
    (timedelta(minutes=14, seconds=5), "in 14 min"),
    (timedelta(seconds=-30), "30 s ago"),
    (timedelta(hours=3, minutes=5), "in 3 h 5 min"),
    (timedelta(hours=-20), "20 h ago"),
    (timedelta(days=92), "in 92 days"),
    (timedelta(milliseconds=300), "now"),
]


@pytest.mark.parametrize(("offset", "text"), RELATIVE)
def test_relative_text(offset: timedelta, text: str) -> None:
    assert relative_text(NOW + offset, NOW) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (0.05, "50 ms"), (1.25, "1.2 s"), (184, "3 min 4 s"), (7500, "2 h 5 min")],
)
def test_duration_text(seconds: float | None, text: str) -> None:
    assert duration_text(seconds) == text


def test_status_classes_follow_the_cli_styles() -> None:
    assert css_class("completed") == "st-completed"
    assert css_class("skipped-overlap") == "st-skipped-overlap"
    assert css_class("blocked") == "st-blocked"
    assert css_class("<script>") == "st-unknown"


def test_next_instants_mark_the_dst_gap_and_fold() -> None:
    schedule = {
        "schedule_id": "dst",
        "deployment_id": "hello.default",
        "trigger": {"kind": "cron", "expression": "30 2 * 3,10 0", "timezone": "Europe/Berlin"},
    }
    shown = next_instants(schedule, NOW, 10)
    assert len(shown) == 10
    marks = {(row["local"], row["utc"]): row["dst"] for row in shown if row["dst"]}
    # 2027-03-28 02:30 does not exist in Berlin: croniter takes the first wall
    # time after the jump (03:00 CEST); 2027-10-31 02:30 happens twice.
    assert marks == {
        ("2027-03-28 03:00 CEST", "2027-03-28 01:00:00Z"): "gap",
        ("2027-10-31 02:30 CEST", "2027-10-31 00:30:00Z"): "fold",
        ("2027-10-31 02:30 CET", "2027-10-31 01:30:00Z"): "fold",
    }
    assert shown[0]["local"] == "2027-03-21 02:30 CET"
    assert shown[0]["relative"] == "in 13 h"


REASONS = [
    ({"status": "failed", "reason": "upstream unavailable"}, {}, "upstream unavailable"),
    ({"status": "skipped-overlap", "reason": None}, {"overlap": "skip"},
     "not admitted: a run of this schedule was still active (overlap skip)"),
    ({"status": "skipped-overlap"}, {"overlap": "parallel", "max_active_runs": 3},
     "not admitted: 3 run(s) of this schedule were already active (overlap)"),
    ({"status": "skipped-misfire", "count": 2, "first_instant": "2027-03-20T10:00:00Z",
      "last_instant": "2027-03-20T11:00:00Z"}, {"lateness_allowance_s": 60.0},
     "missed by more than the lateness allowance of 60 s (misfire skip): 2 instants,"
     " 2027-03-20 10:00Z to 2027-03-20 11:00Z"),
    ({"status": "coalesced", "count": 3, "first_instant": "2027-03-20T09:00:00Z",
      "last_instant": "2027-03-20T11:00:00Z"}, {},
     "missed in one catch-up and folded into a newer candidate: 3 instants,"
     " 2027-03-20 09:00Z to 2027-03-20 11:00Z"),
    ({"status": "completed"}, {}, ""),
]  # fmt: skip


@pytest.mark.parametrize(("row", "schedule", "text"), REASONS)
def test_reason_text(row: dict[str, Any], schedule: dict[str, Any], text: str) -> None:
    assert reason_text(row, schedule) == text


def _row(status: str, instant: datetime, decided: datetime, updated: datetime, run: str) -> Any:
    return {
        "status": status,
        "instant": instant.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "decided_at": decided.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "updated_at": updated.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "run_id": run,
    }


def test_timeline_puts_parallel_runs_in_lanes_and_shows_what_happened() -> None:
    day = NOW - timedelta(days=1)
    h = timedelta(hours=1)
    rows = [
        # Two runs that overlap in time (lanes 0 and 1), a third after both (lane 0).
        _row("completed", day + 1 * h, day + 1 * h, day + 4 * h, "run-000001"),
        _row("failed", day + 2 * h, day + 2 * h, day + 3 * h, "run-000002"),
        _row("completed", day + 5 * h, day + 5 * h, day + 6 * h, "run-000003"),
        # Interrupted since hour 8: hatched from there to now.
        _row("interrupted", day + 7 * h, day + 7 * h, day + 8 * h, "run-000004"),
        {"status": "skipped-overlap", "instant": (day + 9 * h).isoformat(), "reason": None},
        {"status": "coalesced", "instant": (day + 12 * h).isoformat(), "count": 3,
         "first_instant": (day + 10 * h).isoformat(), "last_instant": (day + 12 * h).isoformat()},
    ]  # fmt: skip
    records = [
        {"kind": "created", "at": (day - h).isoformat()},
        {"kind": "paused", "at": (day + 13 * h).isoformat()},
        {"kind": "resumed", "at": (day + 15 * h).isoformat()},
        {"kind": "paused", "at": (day + 20 * h).isoformat()},
    ]
    spans = paused_spans(records, NOW)
    assert spans == [(day + 13 * h, day + 15 * h), (day + 20 * h, NOW)]
    svg = build_timeline(title="t", start=day, end=NOW, rows=rows, paused=spans)
    bars = re.findall(r'<rect class="tl-bar st-([a-z-]+)" x="([\d.]+)" y="([\d.]+)"', svg)
    lanes = {status_x[1]: float(status_x[2]) for status_x in bars}
    assert [b[0] for b in bars] == ["completed", "failed", "completed", "interrupted"]
    y_first, y_second, y_third = (float(b[2]) for b in bars[:3])
    assert y_first != y_second  # parallel: a lane each
    assert y_third == y_first  # after both: back in the first lane
    assert len(lanes) == 4
    assert svg.count('class="tl-interrupted"') == 1
    assert svg.count('class="tl-paused"') == 2
    assert svg.count('class="tl-mark st-skipped-overlap"') == 1
    assert svg.count('class="tl-mark st-coalesced"') == 1
    assert '<a href="/runs/run-000002">' in svg
    assert svg.startswith("<svg") and svg.endswith("</svg>")
