"""What `wf-schedule` makes of the operator's requests without a server: the
relative bounds of `backfill`, the backfill line of `get`, the ORIGIN column
of `occurrences`, and `--last` after a backfill."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console

from adapters.admin.occurrences import newest_first
from adapters.admin.output import backfill_text, occurrence_table, show_trigger
from adapters.admin.schedules import parse_ago

NOW = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)

AGO_CASES: list[tuple[str, str]] = [
    ("-90s", "2026-01-05T09:58:30Z"),
    ("-2m", "2026-01-05T09:58:00Z"),
    ("-1.5h", "2026-01-05T08:30:00Z"),
    ("-1d", "2026-01-04T10:00:00Z"),
    # Anything else is the server's to parse (it names the field when it cannot).
    ("2026-01-01T09:00:00+01:00", "2026-01-01T09:00:00+01:00"),
    (" yesterday ", "yesterday"),
    ("+1h", "+1h"),
]


@pytest.mark.parametrize(("raw", "expected"), AGO_CASES)
def test_parse_ago(raw: str, expected: str) -> None:
    assert parse_ago(raw, NOW) == expected


BACKFILL = {
    "start": "2026-01-05T06:00:00Z",
    "end": "2026-01-05T09:00:00Z",
    "overlap": None,
    "requested_at": "2026-01-05T09:30:00Z",
    "state": "running",
    "planned": 3,
    "admitted": 1,
    "remaining": 2,
    "next": "2026-01-05T07:00:00Z",
    "already_admitted": 0,
    "left_to_calendar": 0,
    "ended_at": None,
}


def test_backfill_text_says_state_progress_and_range() -> None:
    assert backfill_text(BACKFILL) == (
        "running: 1 of 3 admitted, next 2026-01-05T07:00:00Z; range 2026-01-05T06:00:00Z to"
        " 2026-01-05T09:00:00Z (end excluded) (requested 2026-01-05T09:30:00Z)"
    )
    cancelled = BACKFILL | {
        "state": "cancelled",
        "next": "2026-01-05T07:00:00Z",
        "overlap": "allow",
        "already_admitted": 2,
        "left_to_calendar": 1,
        "ended_at": "2026-01-05T09:40:00Z",
    }
    assert backfill_text(cancelled) == (
        "cancelled: 1 of 3 admitted, 2 not run (2 already admitted, 1 left to the calendar);"
        " range 2026-01-05T06:00:00Z to 2026-01-05T09:00:00Z (end excluded), overlap allowed"
        " (requested 2026-01-05T09:30:00Z, ended 2026-01-05T09:40:00Z)"
    )


def _row(seq: int | None, instant: str, origin: str | None, status: str) -> dict[str, Any]:
    row: dict[str, Any] = {"instant": instant, "status": status, "run_id": None}
    if seq is not None:
        row["seq"] = seq
    if origin is not None:
        row["origin"] = origin
    return row


def test_the_occurrence_table_shows_each_rows_origin() -> None:
    rows: list[Mapping[str, Any]] = [
        _row(0, "2026-01-05T10:00:00Z", "schedule", "completed"),
        _row(1, "2026-01-05T10:20:00Z", "trigger", "completed"),
        _row(2, "2026-01-05T06:00:00Z", "backfill", "running"),
        # A held candidate (no seq), from a server that does not name its origin.
        _row(None, "2026-01-05T11:00:00Z", None, "pending"),
    ]
    buffer = io.StringIO()
    Console(file=buffer, width=200).print(occurrence_table(rows))
    lines = buffer.getvalue().splitlines()
    assert lines[0].split() == ["INSTANT", "ORIGIN", "STATUS", "RUN", "COUNT", "REASON"]
    assert [line.split()[:3] for line in lines[1:]] == [
        ["2026-01-05T10:00:00Z", "schedule", "completed"],
        ["2026-01-05T10:20:00Z", "trigger", "completed"],
        ["2026-01-05T06:00:00Z", "backfill", "running"],
        ["2026-01-05T11:00:00Z", "schedule", "pending"],
    ]


def test_newest_first_goes_by_recording_not_by_instant() -> None:
    rows = [
        _row(None, "2026-01-05T11:00:00Z", None, "pending"),
        _row(0, "2026-01-05T10:00:00Z", "schedule", "completed"),
        _row(1, "2026-01-05T06:00:00Z", "backfill", "completed"),
        _row(2, "2026-01-05T07:00:00Z", "backfill", "running"),
    ]
    assert [(row.get("seq"), row["instant"][11:16]) for row in newest_first(rows)] == [
        (None, "11:00"),
        (2, "07:00"),
        (1, "06:00"),
        (0, "10:00"),
    ]


TRIGGERED = {
    "schedule_id": "hourly",
    "requested_at": "2026-01-05T10:20:00Z",
    "instant": "2026-01-05T10:20:00Z",
    "status": "admitted",
    "run_id": "run-000007",
    "overlap": None,
}


@pytest.mark.parametrize(
    ("answer", "line"),
    [
        (TRIGGERED, "triggered hourly: 2026-01-05T10:20:00Z admitted, run run-000007"),
        (
            TRIGGERED | {"overlap": "allow", "status": "completed"},
            "triggered hourly (overlap allowed): 2026-01-05T10:20:00Z completed, run run-000007",
        ),
        (
            TRIGGERED | {"status": "preflight-rejected", "run_id": None},
            "triggered hourly: 2026-01-05T10:20:00Z preflight-rejected"
            " (no run: see `wf-schedule occurrences hourly`)",
        ),
        (
            # No scheduler decided it within the call's wait.
            TRIGGERED | {"status": "requested", "run_id": None},
            "triggered hourly: requested at 2026-01-05T10:20:00Z, not decided yet (its"
            " occurrence will be 2026-01-05T10:20:00Z: see `wf-schedule occurrences hourly`)",
        ),
    ],
)
def test_what_trigger_prints(
    answer: dict[str, Any], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    show_trigger(answer, as_json=False)
    assert capsys.readouterr().out == line + "\n"
    show_trigger(answer, as_json=True)
    assert json.loads(capsys.readouterr().out) == answer
