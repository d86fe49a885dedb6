"""How the console words the operator's requests: the ledger's origin label
and the schedule page's backfill progress (pure functions of their input)."""

from __future__ import annotations

from datetime import UTC, datetime

from adapters.console.present import backfill_progress, origin_label

NOW = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def test_only_an_operators_occurrence_is_labelled() -> None:
    assert origin_label({"origin": "trigger"}) == {
        "name": "trigger",
        "title": "run now by an operator (trigger): an instant of its own, outside the calendar",
    }
    assert origin_label({"origin": "backfill"})["name"] == "backfill"  # type: ignore[index]
    # The calendar's rows, and held candidates that name no origin: no label.
    assert origin_label({"origin": "schedule"}) is None
    assert origin_label({"status": "pending"}) is None


def test_backfill_progress_in_the_schedules_zone() -> None:
    assert backfill_progress(None, "UTC", NOW) is None
    running = {
        "start": "2026-03-01T23:00:00Z",
        "end": "2026-03-02T03:00:00Z",
        "overlap": "allow",
        "requested_at": "2026-03-02T09:30:00Z",
        "state": "running",
        "planned": 4,
        "admitted": 1,
        "remaining": 3,
        "next": "2026-03-02T00:00:00Z",
        "already_admitted": 2,
        "left_to_calendar": 0,
        "ended_at": None,
    }
    assert backfill_progress(running, "Europe/Berlin", NOW) == {
        "state": "running",
        "admitted": 1,
        "planned": 4,
        "remaining": 3,
        "percent": 25,
        "words": "1 of 4 admitted",
        "start": "2026-03-02 00:00 CET",
        "end": "2026-03-02 04:00 CET",
        "next": "2026-03-02 01:00 CET",
        "overlap": "allowed",
        "requested": "2026-03-02 10:30 CET",
        "requested_relative": "30 min ago",
        "ended": None,
        "left_out": "2 already admitted before",
    }
    nothing = running | {"planned": 0, "admitted": 0, "remaining": 0, "next": None}
    done = backfill_progress(
        nothing | {"state": "done", "ended_at": "2026-03-02T09:30:00Z"}, "UTC", NOW
    )
    assert done is not None
    assert (done["percent"], done["next"], done["ended"]) == (100, None, "2026-03-02 09:30 UTC")
