"""Operator requests in a scenario: trigger, backfill and cancel-backfill
(rules P and Q) carried through the engine to the real `decide`.

Each test simulates a small scenario and asserts on the settled rows, with
their origin, and on the summary.
"""

from __future__ import annotations

import csv
import io
import itertools
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from adapters.simulate_cli import OutputFormat, run_simulation
from adapters.simulation import engine
from adapters.simulation.output import Row
from adapters.simulation.scenario import parse_scenario
from core.errors import InvalidInput
from core.operator_actions import BACKFILL_LIMIT
from tests.simulation.test_engine import DAY, at, run, schedule, z

_TICK = timedelta(microseconds=1)


def trigger(hours: float, **extra: Any) -> dict[str, Any]:
    return {"at": z(hours), "action": "trigger", "schedule_id": "s", **extra}


def backfill(hours: float, start: float, end: float, **extra: Any) -> dict[str, Any]:
    return {
        "at": z(hours),
        "action": "backfill",
        "schedule_id": "s",
        "start": z(start),
        "end": z(end),
        **extra,
    }


def action(hours: float, name: str) -> dict[str, Any]:
    return {"at": z(hours), "action": name, "schedule_id": "s"}


def hour(value: datetime | None) -> float | None:
    return None if value is None else round((value - DAY).total_seconds() / 3600, 4)


def origins(rows: Sequence[Row]) -> list[tuple[Any, ...]]:
    """(instant hour, status, origin, run start hour, run end hour) per row."""
    return [(hour(r.instant), r.status, r.origin, hour(r.run_start), hour(r.run_end)) for r in rows]


# --- trigger ------------------------------------------------------------------


def test_a_trigger_during_a_long_run_is_refused_under_overlap_skip() -> None:
    rows, result = run(
        schedule(run={"duration": 5400}), hours=3, events=[trigger(1.5)]
    )  # 01:00 runs until 02:30
    assert origins(rows) == [
        (1.0, "completed", "schedule", 1.0, 2.5),
        (1.5, "skipped-overlap", "trigger", None, None),
        (2.0, "skipped-overlap", "schedule", None, None),
    ]
    refused = rows[1]
    assert refused.reason == 'overlap "skip": the schedule has an active run'
    assert refused.run_id is None
    summary = result.summary["schedules"]["s"]
    assert summary["runs_by_origin"] == {"schedule": 1, "trigger": 0, "backfill": 0}
    assert summary["counts"] == {"skipped-overlap": 2, "completed": 1}


def test_a_trigger_with_overlap_allow_runs_beside_the_long_run() -> None:
    rows, result = run(
        schedule(run={"duration": 5400}), hours=4, events=[trigger(1.5, overlap="allow")]
    )
    assert origins(rows) == [
        (1.0, "completed", "schedule", 1.0, 2.5),
        (1.5, "completed", "trigger", 1.5, 3.0),
        (2.0, "skipped-overlap", "schedule", None, None),  # two runs were active
        (3.0, "running", "schedule", 3.0, None),
    ]
    assert rows[1].run_id == "run-000002"
    assert rows[1].lateness_s == 0.0
    summary = result.summary["schedules"]["s"]
    assert summary["runs_by_origin"] == {"schedule": 2, "trigger": 1, "backfill": 0}
    assert summary["max_active"] == 2
    assert result.summary["totals"]["runs_by_origin"]["trigger"] == 1


def test_a_trigger_on_a_calendar_instant_moves_off_it() -> None:
    rows, _ = run(schedule(run={"duration": 60}), hours=3, events=[trigger(2, overlap="allow")])
    # The calendar's 02:00 keeps its instant; the trigger's is a microsecond later.
    assert [(r.instant, r.origin) for r in rows] == [
        (at(1), "schedule"),
        (at(2), "schedule"),
        (at(2) + _TICK, "trigger"),
    ]
    assert rows[2].local_instant == "2026-03-02T02:00:00.000001+00:00"
    assert rows[2].dst is None


def test_a_trigger_of_a_paused_schedule_runs() -> None:
    rows, _ = run(
        schedule(run={"duration": 360}),
        hours=4,
        events=[action(1.5, "pause"), trigger(2.5)],
    )
    assert origins(rows) == [
        (1.0, "completed", "schedule", 1.0, 1.1),
        (2.5, "completed", "trigger", 2.5, 2.6),
    ]


def test_a_trigger_read_after_downtime_is_a_missed_trigger() -> None:
    # Made during an outage, delivered when it ends: later than the allowance.
    rows, _ = run(
        schedule(run={"duration": 60}),
        hours=4,
        events=[trigger(1.5)],
        downtime=[{"from": z(1.25), "to": z(2.5)}],
    )
    missed = [r for r in rows if r.origin == "trigger"]
    assert [(hour(r.instant), r.status) for r in missed] == [(1.5, "skipped-misfire")]
    assert missed[0].reason == "the trigger was read 3600 s after it was made"


# --- backfill -----------------------------------------------------------------


def _paused_span(*events: dict[str, Any], **fields: Any) -> tuple[list[Row], Any]:
    """Hourly runs of 30 min, paused 01:30 to 05:30 (02:00-05:00 consumed)."""
    return run(
        schedule(run={"duration": 1800}, **fields),
        hours=10,
        events=[action(1.5, "pause"), action(5.5, "resume"), *events],
    )


def test_a_backfill_admits_the_paused_span_one_at_a_time_oldest_first() -> None:
    rows, result = _paused_span(backfill(6.75, 1, 6))
    assert origins(rows) == [
        (1.0, "completed", "schedule", 1.0, 1.5),
        (2.0, "completed", "backfill", 6.75, 7.25),
        (3.0, "completed", "backfill", 7.25, 7.75),
        (4.0, "completed", "backfill", 7.75, 8.25),
        (5.0, "completed", "backfill", 8.25, 8.75),
        (6.0, "completed", "schedule", 6.0, 6.5),
        # The backfill's runs hold the schedule's one overlap place.
        (7.0, "skipped-overlap", "schedule", None, None),
        (8.0, "skipped-overlap", "schedule", None, None),
        (9.0, "completed", "schedule", 9.0, 9.5),
    ]
    backfilled = [r for r in rows if r.origin == "backfill"]
    # Oldest first, each admitted when the previous one ended: never two at once.
    assert [r.instant for r in backfilled] == sorted(r.instant for r in backfilled)
    for earlier, later in itertools.pairwise(backfilled):
        assert later.run_start == earlier.run_end
    # The backfill's row of an old instant is late by design; the calendar's
    # lateness is not muddied by it.
    assert backfilled[0].lateness_s == 4.75 * 3600
    summary = result.summary["schedules"]["s"]
    assert summary["lateness_s"] == {"mean": 0.0, "max": 0.0}
    assert summary["runs_by_origin"] == {"schedule": 3, "trigger": 0, "backfill": 4}
    assert summary["backfill"] == {
        "start": z(1),
        "end": z(6),
        "overlap": None,
        "requested_at": z(6.75),
        "state": "done",
        "planned": 4,
        "admitted": 4,
        "remaining": 0,
        "next": None,
        "already_admitted": 1,
        "left_to_calendar": 0,
        "ended_at": z(8.25),
    }


def test_a_backfill_never_admits_an_instant_that_was_admitted() -> None:
    # 01:00's run failed and 06:00's was rejected at preflight: a run was
    # admitted for 01:00 (whatever it became), none for 06:00.
    rows, result = run(
        schedule(run={"duration": 600, "outcome": "failed"}),
        hours=10,
        events=[
            action(1.5, "pause"),
            action(3.5, "resume"),
            backfill(7.5, 0.5, 7),
        ],
        missing_deployments=[{"deployment_id": "dep.default", "from": z(5.9), "to": z(6.1)}],
    )
    calendar = [(hour(r.instant), r.status) for r in rows if r.origin == "schedule"]
    assert calendar == [
        (1.0, "failed"),
        (4.0, "failed"),
        (5.0, "failed"),
        (6.0, "preflight-rejected"),
        (7.0, "failed"),
        (8.0, "failed"),
        (9.0, "failed"),
    ]
    # The paused span and the rejected 06:00; never 01:00, 04:00 or 05:00.
    backfilled = [hour(r.instant) for r in rows if r.origin == "backfill"]
    assert backfilled == [2.0, 3.0, 6.0]
    admitted = {hour(r.instant) for r in rows if r.origin == "schedule" and r.run_id}
    assert not admitted & set(backfilled)
    # 06:00 has two rows: the calendar's rejection, then the backfill's run.
    assert [(r.origin, r.status) for r in rows if r.instant == at(6)] == [
        ("schedule", "preflight-rejected"),
        ("backfill", "failed"),
    ]
    assert result.summary["schedules"]["s"]["backfill"]["already_admitted"] == 3


def test_a_second_backfill_skips_what_the_first_admitted() -> None:
    rows, result = _paused_span(backfill(6.75, 2, 4), backfill(8.75, 1, 6))
    backfilled = [(hour(r.instant), hour(r.run_start)) for r in rows if r.origin == "backfill"]
    assert backfilled == [(2.0, 6.75), (3.0, 7.25), (4.0, 8.75), (5.0, 9.25)]
    progress = result.summary["schedules"]["s"]["backfill"]
    # 01:00 (the calendar's) and 02:00, 03:00 (the first backfill's).
    assert (progress["planned"], progress["already_admitted"]) == (2, 3)
    assert result.warnings == ()


def test_a_backfill_waits_while_the_schedule_is_paused() -> None:
    rows, result = run(
        schedule(run={"duration": 1800}),
        hours=8,
        events=[
            action(1.5, "pause"),
            action(3.5, "resume"),
            action(3.75, "pause"),
            backfill(4, 1, 4),  # 02:00 and 03:00, consumed by the first pause
            action(5.5, "resume"),
        ],
    )
    backfilled = [(hour(r.instant), hour(r.run_start)) for r in rows if r.origin == "backfill"]
    # Nothing while paused; 03:00 waits for 06:00's calendar run (06:00-06:30).
    assert backfilled == [(2.0, 5.5), (3.0, 6.5)]
    assert result.summary["schedules"]["s"]["backfill"]["already_admitted"] == 1


@pytest.mark.parametrize(("overlap", "first_start"), [(None, 6.5), ("allow", 6.25)])
def test_a_backfill_with_overlap_allow_does_not_wait_for_the_calendars_run(
    overlap: str | None, first_start: float
) -> None:
    extra = {"overlap": overlap} if overlap else {}
    rows, result = _paused_span(backfill(6.25, 1, 6, **extra))
    backfilled = [r for r in rows if r.origin == "backfill"]
    # 06:00's run is active until 06:30: the schedule's overlap "skip" makes
    # the backfill wait for it, unless the request says "allow".
    assert (hour(backfilled[0].instant), hour(backfilled[0].run_start)) == (2.0, first_start)
    # Either way the backfill's own runs go one at a time, oldest first.
    assert [hour(r.instant) for r in backfilled] == [2.0, 3.0, 4.0, 5.0]
    for earlier, later in itertools.pairwise(backfilled):
        assert earlier.run_end is not None and later.run_start is not None
        assert later.run_start >= earlier.run_end
    assert result.summary["schedules"]["s"]["max_active"] == (2 if overlap else 1)


def test_a_cancelled_backfill_admits_nothing_more_and_its_runs_go_on() -> None:
    rows, result = _paused_span(backfill(6.75, 1, 6), action(7.5, "cancel-backfill"))
    backfilled = [origin for origin in origins(rows) if origin[2] == "backfill"]
    # 03:00 was admitted at 07:25 and ends after the cancellation.
    assert backfilled == [
        (2.0, "completed", "backfill", 6.75, 7.25),
        (3.0, "completed", "backfill", 7.25, 7.75),
    ]
    progress = result.summary["schedules"]["s"]["backfill"]
    assert progress["state"] == "cancelled"
    assert (progress["admitted"], progress["remaining"], progress["next"]) == (2, 2, z(4))
    assert progress["ended_at"] == z(7.5)
    # The calendar takes its overlap place back once the backfill stops.
    assert (8.0, "completed", "schedule", 8.0, 8.5) in origins(rows)
    assert result.warnings == ()


def test_a_cancellation_with_no_backfill_running_is_a_warning() -> None:
    _, result = run(
        schedule(run={"duration": 60}), hours=3, events=[action(1.5, "cancel-backfill")]
    )
    assert result.warnings == (
        f"{z(1.5)}: cancel-backfill of schedule s: no backfill was running"
        " (the API would refuse it)",
    )


def test_a_second_backfill_while_one_runs_is_ignored_with_a_warning() -> None:
    rows, result = _paused_span(backfill(6.75, 1, 6), backfill(7, 2, 3))
    assert len([r for r in rows if r.origin == "backfill"]) == 4
    (warning,) = result.warnings
    assert "a backfill of this schedule is still running" in warning


def test_a_delete_ends_the_backfill() -> None:
    rows, result = _paused_span(backfill(6.75, 1, 6), action(7.5, "delete"))
    assert [hour(r.instant) for r in rows if r.origin == "backfill"] == [2.0, 3.0]
    assert result.summary["schedules"]["s"]["backfill"]["state"] == "cancelled"


def test_the_engine_keeps_decided_instants_only_inside_ranges_still_to_come() -> None:
    scenario = parse_scenario(
        {
            "start": z(0),
            "end": z(10),
            "schedules": [schedule(run={"duration": 60})],
            "events": [backfill(6, 2, 4), backfill(8, 3, 5)],
        }
    )
    decided = engine._DecidedInstants(scenario.events)
    for hours in range(10):
        decided.note("s", at(hours))
    assert decided._kept == {"s": {at(2), at(3), at(4)}}
    assert decided.take("s", at(2), at(4)) == frozenset({at(2), at(3)})
    assert decided._kept == {"s": {at(3), at(4)}}  # 02:00 is in no later range
    assert decided.take("s", at(3), at(5)) == frozenset({at(3), at(4)})
    assert decided._kept == {"s": set()}
    decided.note("s", at(3))
    assert decided._kept == {"s": set()}
    decided.note("other", at(3))  # a schedule without backfills keeps nothing


# --- output -------------------------------------------------------------------


def test_csv_and_table_name_each_rows_origin() -> None:
    scenario = parse_scenario(
        {
            "start": z(0),
            "end": z(10),
            "schedules": [schedule(run={"duration": 1800})],
            "events": [action(1.5, "pause"), action(5.5, "resume"), backfill(6.75, 4, 6)],
        }
    )
    stream = io.StringIO()
    run_simulation(scenario, OutputFormat.csv, stream)
    lines = list(csv.reader(io.StringIO(stream.getvalue())))
    assert lines[0][-2:] == ["reason", "origin"]
    by_instant = {(line[1], line[-1]) for line in lines[1:]}
    assert {(z(1), "schedule"), (z(4), "backfill"), (z(5), "backfill")} <= by_instant
    assert len(by_instant) == len(lines) - 1
    table = io.StringIO()
    run_simulation(scenario, OutputFormat.table, table)
    text = table.getvalue()
    assert "│ backfill │" in text
    assert "runs (2 backfill)" in text
    assert "s: backfill of [" + z(4) + ", " + z(6) + ") done, 2 of 2 admitted" in text


# --- validation ---------------------------------------------------------------


def _events(*events: dict[str, Any]) -> dict[str, Any]:
    return {
        "start": z(0),
        "end": z(24 * 60),
        "schedules": [schedule(trigger={"kind": "cron", "expression": "* * * * *"})],
        "events": list(events),
    }


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (backfill(5, 4, 3), [("events[1].end", "must be after start")]),
        (backfill(5, 1, 6), [("events[1].end", "must not be in the future")]),
        ({**action(5, "backfill"), "end": z(4)}, [("events[1].start", "is required")]),
        (
            {**trigger(5), "start": z(4)},
            [("events[1].start", "only allowed with action 'backfill'")],
        ),
        (
            {**action(5, "pause"), "overlap": "allow"},
            [("events[1].overlap", "only allowed with action 'trigger' or 'backfill'")],
        ),
        (
            {**trigger(5), "changes": {}},
            [("events[1].changes", "only allowed with action 'update'")],
        ),
        (trigger(5, overlap="never"), [("events[1].overlap", "must be 'allow'")]),
    ],
    ids=[
        "upside down",
        "future end",
        "no start",
        "start on a trigger",
        "overlap on a pause",
        "changes on a trigger",
        "bad overlap",
    ],
)
def test_bad_operator_events_name_the_field(
    event: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_scenario(_events(trigger(1), event))
    problems = [(p.field, p.reason) for p in caught.value.problems]
    assert [field for field, _ in problems] == [field for field, _ in expected]
    for (_, reason), (_, fragment) in zip(problems, expected, strict=True):
        assert fragment in reason


def test_a_backfill_beyond_the_limit_is_refused_with_its_count() -> None:
    # A minutely schedule: 1001 instants in [00:00, 16:41), one too many.
    too_many = backfill(20, 0, 16 + 41 / 60)
    exactly = backfill(20, 0, 16 + 40 / 60)
    with pytest.raises(InvalidInput) as caught:
        parse_scenario(_events(trigger(1), too_many))
    (problem,) = caught.value.problems
    assert problem.field == "events[1].end"
    assert problem.reason == (
        f"the range holds 1001 calendar instants; a backfill takes at most {BACKFILL_LIMIT}:"
        " split it into smaller ranges"
    )
    assert parse_scenario(_events(trigger(1), exactly)).events[1].action == "backfill"


def test_the_limit_counts_the_definition_current_at_the_request() -> None:
    # Minutely at first, hourly from 01:00: two days then hold 48 instants.
    update = {
        "at": z(1),
        "action": "update",
        "schedule_id": "s",
        "changes": {"trigger": {"kind": "cron", "expression": "0 * * * *"}},
    }
    scenario = parse_scenario(_events(update, backfill(48, 0, 48)))
    assert [e.action for e in scenario.events] == ["update", "backfill"]
    with pytest.raises(InvalidInput) as caught:
        parse_scenario(_events(backfill(48, 0, 48)))
    (problem,) = caught.value.problems
    assert problem.field == "events[0].end"
    assert "2880 calendar instants" in problem.reason
