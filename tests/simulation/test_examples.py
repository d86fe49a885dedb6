"""The examples in docs/examples/: each checked-in output is byte-identical to
a fresh simulation, and the outputs show what their titles promise."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from tests.simulation.regenerate_examples import output_path, render, scenarios


def _load(name: str) -> dict[str, Any]:
    path = next(p for p in scenarios() if p.name == name)
    document: dict[str, Any] = json.loads(output_path(path).read_text(encoding="utf-8"))
    return document


def _rows(document: dict[str, Any], schedule_id: str) -> list[dict[str, Any]]:
    return [r for r in document["rows"] if r["schedule_id"] == schedule_id]


def _on(document: dict[str, Any], schedule_id: str, local_day: str) -> list[dict[str, Any]]:
    return [r for r in _rows(document, schedule_id) if r["local_instant"][:10] == local_day]


def _statuses(rows: Iterable[dict[str, Any]]) -> set[str]:
    return {r["status"] for r in rows}


def test_every_example_has_an_output() -> None:
    names = {p.name for p in scenarios()}
    assert names == {
        "backfill-after-pause.json",
        "downtime-catch-up.json",
        "dst-autumn-berlin.json",
        "dst-spring-berlin.json",
        "illustrative-week.json",
    }


@pytest.mark.parametrize("scenario", scenarios(), ids=lambda p: p.name)
def test_checked_in_output_is_byte_identical(scenario: Path) -> None:
    expected = output_path(scenario).read_text(encoding="utf-8")
    assert render(scenario) == expected
    assert render(scenario) == expected  # and a second run in the same process


def test_illustrative_week() -> None:
    document = _load("illustrative-week.json")
    rows = _rows(document, "hourly-report")
    instants = [r["instant"] for r in rows]
    # Created Monday 08:45: the first instant is 09:00; nothing before is decided.
    assert instants[0] == "2026-03-02T09:00:00Z"
    # Paused Friday 17:30, resumed Monday 08:15: the weekend is never replayed.
    assert "2026-03-06T17:00:00Z" in instants
    assert not [i for i in instants if "2026-03-06T18:00:00Z" <= i < "2026-03-09T09:00:00Z"]
    assert "2026-03-09T09:00:00Z" in instants
    summary = document["summary"]["schedules"]["hourly-report"]
    assert summary["max_active"] == 2
    # Two long runs make a third instant wait as the held candidate, a fourth
    # supersede it, and the newest run late: never a burst.
    assert summary["lateness_s"]["max"] == 1800.0
    assert {"completed", "failed", "superseded"} <= _statuses(rows)
    assert _statuses(rows) <= {"completed", "failed", "superseded", "running", "pending"}


def test_dst_spring() -> None:
    document = _load("dst-spring-berlin.json")
    nightly = _rows(document, "nightly-0230")
    # 02:30 does not exist that night: croniter resolves it to 03:00 local.
    flagged = [r for r in nightly if r["dst"] == "gap"]
    assert [(r["instant"], r["local_instant"]) for r in flagged] == [
        ("2026-03-29T01:00:00Z", "2026-03-29T03:00:00+02:00")
    ]
    morning = {r["local_instant"][:10]: r["instant"] for r in _rows(document, "morning-0900")}
    assert morning["2026-03-28"] == "2026-03-28T08:00:00Z"
    assert morning["2026-03-29"] == "2026-03-29T07:00:00Z"
    hourly = _on(document, "hourly-berlin", "2026-03-29")
    assert len(hourly) == 23


def test_dst_autumn() -> None:
    document = _load("dst-autumn-berlin.json")
    # croniter fires 02:30 on both passes of the repeated hour; both are flagged.
    flagged = [r for r in _rows(document, "nightly-0230") if r["dst"] == "fold"]
    assert [(r["instant"], r["local_instant"]) for r in flagged] == [
        ("2026-10-25T00:30:00Z", "2026-10-25T02:30:00+02:00"),
        ("2026-10-25T01:30:00Z", "2026-10-25T02:30:00+01:00"),
    ]
    hourly = _on(document, "hourly-berlin", "2026-10-25")
    assert len(hourly) == 25
    assert [r["local_instant"] for r in hourly if r["dst"] == "fold"] == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",
    ]


def test_downtime_catch_up_under_each_policy() -> None:
    document = _load("downtime-catch-up.json")
    skip = [r for r in _rows(document, "misfire-skip") if r["status"] == "skipped-misfire"]
    assert [(r["count"], r["first_instant"], r["last_instant"]) for r in skip] == [
        (6, "2026-03-02T10:00:00Z", "2026-03-02T15:00:00Z")
    ]
    latest = _rows(document, "misfire-latest")
    coalesced = [r for r in latest if r["status"] == "coalesced"]
    assert [(r["count"], r["first_instant"], r["last_instant"]) for r in coalesced] == [
        (5, "2026-03-02T10:00:00Z", "2026-03-02T14:00:00Z")
    ]
    caught_up = next(r for r in latest if r["instant"] == "2026-03-02T15:00:00Z")
    assert (caught_up["status"], caught_up["lateness_s"]) == ("completed", 600.0)
    allowance = next(
        r for r in _rows(document, "misfire-skip-15min") if r["instant"] == "2026-03-02T15:00:00Z"
    )
    assert (allowance["status"], allowance["lateness_s"]) == ("completed", 600.0)


def test_backfill_after_pause() -> None:
    document = _load("backfill-after-pause.json")
    etl = _rows(document, "hourly-etl")
    by_origin = {
        origin: [(r["instant"][11:16], r["status"]) for r in etl if r["origin"] == origin]
        for origin in ("trigger", "backfill")
    }
    # The paused span (11:00-16:00) oldest first; 10:00 ran before the pause.
    assert by_origin["backfill"] == [(f"{h}:00", "completed") for h in range(11, 17)]
    backfilled = [r for r in etl if r["origin"] == "backfill"]
    assert [r["run_start"][11:16] for r in backfilled] == [
        "16:45",  # after the 16:20 trigger's run
        "17:10",
        "17:35",
        "18:25",  # after 18:00's calendar run
        "18:50",
        "19:15",
    ]
    # The trigger at 16:20 runs; the one at 17:20 meets a backfill run.
    assert by_origin["trigger"] == [("16:20", "completed"), ("17:20", "skipped-overlap")]
    skipped = [r["instant"][11:16] for r in etl if r["status"] == "skipped-overlap"]
    assert skipped == ["17:00", "17:20", "19:00"]
    summary = document["summary"]["schedules"]
    assert summary["hourly-etl"]["runs_by_origin"] == {"backfill": 6, "schedule": 15, "trigger": 1}
    assert summary["hourly-etl"]["backfill"]["already_admitted"] == 1
    # The daily report's week before it existed, cancelled after four runs.
    report = summary["daily-report"]["backfill"]
    assert (report["state"], report["admitted"], report["remaining"]) == ("cancelled", 4, 3)
    assert report["next"] == "2026-02-27T06:00:00Z"
    assert document["summary"]["warnings"] == []
