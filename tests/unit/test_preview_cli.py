"""`wf-schedule preview`: instants shown, JSON output, and rejected options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from adapters.schedule_cli import app

runner = CliRunner()

# (id, arguments, expected (UTC instant, local instant, DST note) rows)
JSON_CASES: list[tuple[str, list[str], list[tuple[str, str, str | None]]]] = [
    (
        "berlin hourly across the fall fold",
        ["--cron", "0 * * * *", "--timezone", "Europe/Berlin", "--count", "4",
         "--after", "2026-10-24T22:30:00Z"],
        [
            ("2026-10-24T23:00:00Z", "2026-10-25T01:00:00+02:00", None),
            ("2026-10-25T00:00:00Z", "2026-10-25T02:00:00+02:00", "fold"),
            ("2026-10-25T01:00:00Z", "2026-10-25T02:00:00+01:00", "fold"),
            ("2026-10-25T02:00:00Z", "2026-10-25T03:00:00+01:00", None),
        ],
    ),
    (
        "berlin 02:30 across the spring gap",
        ["--cron", "30 2 * * *", "--timezone", "Europe/Berlin", "--count", "3",
         "--after", "2026-03-28T00:00:00+01:00"],
        [
            ("2026-03-28T01:30:00Z", "2026-03-28T02:30:00+01:00", None),
            ("2026-03-29T01:00:00Z", "2026-03-29T03:00:00+02:00", "gap"),
            ("2026-03-30T00:30:00Z", "2026-03-30T02:30:00+02:00", None),
        ],
    ),
    (
        "utc by default",
        ["--cron", "*/15 * * * *", "--count", "2", "--after", "2026-01-01T00:00:00Z"],
        [
            ("2026-01-01T00:15:00Z", "2026-01-01T00:15:00+00:00", None),
            ("2026-01-01T00:30:00Z", "2026-01-01T00:30:00+00:00", None),
        ],
    ),
    (
        "one-shot",
        ["--at", "2026-05-01T10:00:00+02:00", "--after", "2026-01-01T00:00:00Z"],
        [("2026-05-01T08:00:00Z", "2026-05-01T08:00:00+00:00", None)],
    ),
    (
        "one-shot already passed",
        ["--at", "2026-05-01T10:00:00+02:00", "--after", "2026-06-01T00:00:00Z"],
        [],
    ),
]  # fmt: skip


@pytest.mark.parametrize(("case", "args", "expected"), JSON_CASES, ids=[c[0] for c in JSON_CASES])
def test_preview_json(
    case: str, args: list[str], expected: list[tuple[str, str, str | None]]
) -> None:
    result = runner.invoke(app, ["preview", *args, "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["instant"], r["local_instant"], r["dst_note"]) for r in rows] == expected
    assert [r["index"] for r in rows] == list(range(1, len(expected) + 1))


def test_preview_table_shows_instants_and_notes() -> None:
    result = runner.invoke(
        app,
        [
            "preview",
            "--cron",
            "30 2 * * *",
            "--timezone",
            "Europe/Berlin",
            "--count",
            "3",
            "--after",
            "2026-03-27T23:00:00Z",
        ],
        env={"COLUMNS": "160"},
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    gap_lines = [line for line in lines if "2026-03-29T01:00:00Z" in line]
    assert len(gap_lines) == 1
    assert "2026-03-29T03:00:00+02:00" in gap_lines[0]
    assert "gap: wall time did not exist, croniter moved it" in gap_lines[0]
    for instant in ("2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z"):
        (line,) = [line for line in lines if instant in line]
        assert "gap" not in line
    assert "Local instant (Europe/Berlin)" in result.stdout


def test_preview_table_fold_note() -> None:
    result = runner.invoke(
        app,
        [
            *("preview", "--cron", "0 * * * *", "--timezone", "America/New_York"),
            *("--count", "3", "--after", "2026-11-01T04:30:00Z"),
        ],
        env={"COLUMNS": "160"},
    )
    assert result.exit_code == 0, result.output
    folded = [line for line in result.stdout.splitlines() if "fold: repeated hour" in line]
    assert len(folded) == 2
    assert "2026-11-01T01:00:00-04:00" in folded[0]
    assert "2026-11-01T01:00:00-05:00" in folded[1]


# (id, arguments, fragments expected on stderr)
INVALID_CASES: list[tuple[str, list[str], list[str]]] = [
    ("six-field cron", ["--cron", "0 0 * * * *"], ["--cron (trigger.expression)", "got 6"]),
    ("unknown zone", ["--cron", "0 * * * *", "--timezone", "Mars/Olympus"],
     ["--timezone (trigger.timezone)", "unknown time zone 'Mars/Olympus'"]),
    ("both bad", ["--cron", "61 * * * *", "--timezone", "Nowhere"],
     ["--cron (trigger.expression)", "--timezone (trigger.timezone)"]),
    ("naive at", ["--at", "2026-01-01T00:00:00"],
     ["--at (trigger.at)", "must include a UTC offset"]),
    ("neither", [], ["give exactly one of --cron or --at"]),
    ("both", ["--cron", "0 * * * *", "--at", "2026-01-01T00:00:00Z"],
     ["give exactly one of --cron or --at"]),
    ("zone with at", ["--at", "2026-01-01T00:00:00Z", "--timezone", "UTC"],
     ["--timezone: applies to --cron only"]),
    ("naive after", ["--cron", "0 * * * *", "--after", "2026-01-01T00:00:00"],
     ["--after: must include a UTC offset"]),
    ("garbage after", ["--cron", "0 * * * *", "--after", "soon"],
     ["--after: is not an ISO-8601 date-time"]),
    ("zero count", ["--cron", "0 * * * *", "--count", "0"], ["--count"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "args", "fragments"), INVALID_CASES, ids=[c[0] for c in INVALID_CASES]
)
def test_preview_rejects(case: str, args: list[str], fragments: list[str]) -> None:
    result = runner.invoke(app, ["preview", *args], terminal_width=200)
    assert result.exit_code == 2
    assert result.stdout == ""
    for fragment in fragments:
        assert fragment in result.stderr


def test_preview_is_a_subcommand() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "preview" in result.stdout


def _preview_process(*args: str) -> str:
    """What `wf-schedule preview ARGS` prints on a pipe, as its own process
    (no COLUMNS: the width a pipe gets)."""
    completed = subprocess.run(
        [sys.executable, "-m", "adapters.schedule_cli", "preview", *args],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "COLUMNS"},
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_preview_as_a_process() -> None:
    printed = _preview_process(
        *("--cron", "0 * * * *", "--timezone", "Europe/Berlin", "--count", "3"),
        *("--after", "2026-03-29T00:30:00+01:00", "--json"),
    )
    assert [row["instant"] for row in json.loads(printed)] == [
        "2026-03-29T00:00:00Z",
        "2026-03-29T01:00:00Z",
        "2026-03-29T02:00:00Z",
    ]


def test_preview_piped_keeps_each_row_on_one_line_without_trailing_spaces() -> None:
    lines = _preview_process(
        *("--cron", "30 2 * * *", "--timezone", "Europe/Berlin", "--count", "2"),
        *("--after", "2027-03-27T00:00:00Z"),
    ).splitlines()
    assert [line for line in lines if line != line.rstrip()] == []
    (gap,) = [line for line in lines if "2027-03-28T01:00:00Z" in line]
    assert "gap: wall time did not exist, croniter moved it" in gap


def test_console_script_rejects_with_exit_code_2() -> None:
    script = Path(sys.executable).with_name("wf-schedule")
    assert script.exists(), "wf-schedule console script missing: run `uv sync --frozen`"
    completed = subprocess.run(
        [str(script), "preview", "--cron", "0 0 * * * *"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 2
    assert "--cron (trigger.expression)" in completed.stderr
    assert completed.stdout == ""
