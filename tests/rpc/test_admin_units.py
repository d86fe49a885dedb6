"""Pieces of the admin CLI that need no server: exit codes, colours, times."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
from rich.console import Console

from adapters.admin.output import occurrence_table as _occurrence_table
from adapters.admin.output import state_text as _state_of
from adapters.schedule_admin import (
    EXIT_CODES,
    STATE_STYLES,
    STATUS_STYLES,
    connection_options_last,
    parse_when,
)
from core.occurrences import OCCURRENCE_STATUSES
from core.schedule_state import LIFECYCLE_STATES


def test_every_exit_code_is_distinct_per_error_kind() -> None:
    codes = [code for _, code in EXIT_CODES]
    # Conflicts share 4 on purpose (revision_conflict, already_exists).
    assert sorted(set(codes)) == [3, 4, 5, 6, 7, 8, 9, 10]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--url", "U", "list"], ["list", "--url", "U"]),
        (["--json", "--token=T", "get", "x"], ["get", "x", "--json", "--token=T"]),
        (
            ["--url", "U", "run", "start", "d", "--", "-x"],
            ["run", "start", "d", "--url", "U", "--", "-x"],
        ),
        (["list", "--url", "U"], ["list", "--url", "U"]),  # after the name: as given
        (["--version"], ["--version"]),
        (["--help", "--url", "U", "list"], ["--help", "list", "--url", "U"]),
        (["--token"], ["--token"]),  # no value: the root refuses it as usual
        (["create", "--json", "--", "--url"], ["create", "--json", "--", "--url"]),
    ],
)
def test_connection_options_before_the_command_go_after_it(
    argv: list[str], expected: list[str]
) -> None:
    assert connection_options_last(argv) == expected


def test_every_schedule_state_has_a_colour_and_the_payload_state_is_shown() -> None:
    assert set(STATE_STYLES) == set(LIFECYCLE_STATES)
    finished = {"state": "finished", "paused": True, "deleted": False, "blocked": None}
    assert _state_of(finished).plain == "finished"
    # A server from before `state`: derived from its flags.
    assert _state_of({"paused": True, "deleted": False, "blocked": None}).plain == "paused"
    assert _state_of({"paused": True, "deleted": True}).plain == "deleted"


def test_every_occurrence_status_has_a_colour() -> None:
    assert set(STATUS_STYLES) == set(OCCURRENCE_STATUSES)
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, color_system="standard", width=120)
    rows = [
        {"instant": "2026-01-05T10:00:00+00:00", "status": "completed", "run_id": "run-000001"},
        {"instant": "2026-01-05T11:00:00+00:00", "status": "failed", "run_id": "run-000002"},
        {"instant": "2026-01-05T12:00:00+00:00", "status": "skipped-overlap", "count": 3},
    ]
    console.print(_occurrence_table(rows))
    text = buffer.getvalue()
    assert "\x1b[32mcompleted" in text  # green
    assert "\x1b[1;31mfailed" in text  # bold red
    assert "\x1b[2mskipped-overlap" in text  # dim


WHEN_CASES: list[tuple[str, str]] = [
    ("+90s", "2026-01-05T10:01:30+00:00"),
    ("+2m", "2026-01-05T10:02:00+00:00"),
    ("+1.5h", "2026-01-05T11:30:00+00:00"),
    ("+1d", "2026-01-06T10:00:00+00:00"),
    ("2026-03-01T09:00:00+01:00", "2026-03-01T09:00:00+01:00"),
]


@pytest.mark.parametrize(("raw", "expected"), WHEN_CASES)
def test_parse_when(raw: str, expected: str) -> None:
    assert parse_when(raw, datetime(2026, 1, 5, 10, 0, tzinfo=UTC)) == expected
