"""Scenario validation: every problem is reported at the path of its field."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.simulation.runmodel import FixedDuration, RunModelSpec
from adapters.simulation.scenario import parse_scenario
from core.errors import InvalidInput

BASE: dict[str, Any] = {
    "start": "2026-03-02T00:00:00Z",
    "end": "2026-03-09T00:00:00Z",
    "schedules": [
        {
            "schedule_id": "hourly",
            "deployment_id": "report.default",
            "trigger": {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"},
        }
    ],
}


def _with(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data.update(changes)
    return data


def _schedule(**changes: Any) -> dict[str, Any]:
    schedule = copy.deepcopy(BASE["schedules"][0])
    schedule.update(changes)
    return _with(schedules=[schedule])


def _event(**event: Any) -> dict[str, Any]:
    return _with(events=[{"at": "2026-03-03T00:00:00Z", "schedule_id": "hourly", **event}])


# (name, scenario, [(field, text the reason contains)])
BAD_CASES: list[tuple[str, object, list[tuple[str, str]]]] = [
    ("not an object", [1, 2], [("(scenario)", "must be an object")]),
    ("missing start", {k: v for k, v in BASE.items() if k != "start"}, [("start", "required")]),
    ("naive end", _with(end="2026-03-09T00:00:00"), [("end", "UTC offset")]),
    ("end before start", _with(end="2026-03-01T00:00:00Z"), [("end", "after start")]),
    ("unknown top-level key", _with(horizon=3), [("horizon", "unknown field")]),
    ("zero capacity", _with(max_concurrent_runs=0), [("max_concurrent_runs", "or equal to 1")]),
    ("no schedules", _with(schedules=[]), [("schedules", "must not be empty")]),
    (
        "bad cron",
        _schedule(trigger={"kind": "cron", "expression": "0 * * *"}),
        [("schedules[0].trigger.expression", "five fields")],
    ),
    (
        "unknown zone",
        _schedule(trigger={"kind": "cron", "expression": "0 * * * *", "timezone": "Mars/Base"}),
        [("schedules[0].trigger.timezone", "unknown time zone")],
    ),
    ("unknown schedule key", _schedule(colour="red"), [("schedules[0].colour", "unknown field")]),
    (
        "parallel without limit",
        _schedule(overlap="parallel"),
        [("schedules[0].max_active_runs", "required with overlap 'parallel'")],
    ),
    (
        "created before the horizon",
        _schedule(created_at="2026-03-01T00:00:00Z"),
        [("schedules[0].created_at", "inside the horizon")],
    ),
    (
        "one-shot before creation",
        _schedule(trigger={"kind": "oneshot", "at": "2026-03-02T00:00:00Z"}),
        [("schedules[0].trigger.at", "in the past")],
    ),
    (
        "duplicate id",
        _with(schedules=[BASE["schedules"][0], BASE["schedules"][0]]),
        [("schedules[1].schedule_id", "already used by schedules[0]")],
    ),
    (
        "negative duration",
        _schedule(run={"duration": -5}),
        [("schedules[0].run.duration", "greater than or equal to 0")],
    ),
    (
        "unknown duration kind",
        _schedule(run={"duration": {"kind": "poisson"}}),
        [("schedules[0].run.duration.kind", "unknown kind 'poisson'")],
    ),
    (
        "uniform upside down",
        _schedule(run={"duration": {"kind": "uniform", "low_s": 9, "high_s": 1}}),
        [("schedules[0].run.duration", "high_s must be >= low_s")],
    ),
    (
        "list missing seconds",
        _schedule(run={"duration": {"kind": "list"}}),
        [("schedules[0].run.duration.seconds", "required")],
    ),
    (
        "interrupted as a word",
        _schedule(run={"outcome": "interrupted"}),
        [("schedules[0].run.outcome", "an interrupted outcome is an object")],
    ),
    (
        "interrupted without for_s",
        _schedule(run={"outcome": ["completed", {"kind": "interrupted", "after_s": 5}]}),
        [("schedules[0].run.outcome[1].for_s", "required")],
    ),
    (
        "unknown outcome",
        _schedule(run={"outcome": "crashed"}),
        [("schedules[0].run.outcome", "'completed', 'failed' or 'exhausted'")],
    ),
    (
        "unknown action",
        _event(action="stop"),
        [
            (
                "events[0].action",
                "'pause', 'resume', 'update', 'delete', 'trigger', 'backfill' or 'cancel-backfill'",
            )
        ],
    ),
    (
        "event for an unknown schedule",
        _event(action="pause", schedule_id="nightly"),
        [("events[0].schedule_id", "no schedule 'nightly'")],
    ),
    (
        "event outside the horizon",
        _event(action="pause", at="2026-04-01T00:00:00Z"),
        [("events[0].at", "inside the horizon")],
    ),
    ("update without changes", _event(action="update"), [("events[0].changes", "required")]),
    (
        "changes on a pause",
        _event(action="pause", changes={"misfire": "latest"}),
        [("events[0].changes", "only allowed with action 'update'")],
    ),
    (
        "bad update",
        _event(action="update", changes={"misfire": "sometimes", "schedule_id": "x"}),
        [
            ("events[0].changes.misfire", "'skip' or 'latest'"),
            ("events[0].changes.schedule_id", "unknown field"),
        ],
    ),
    (
        "update breaking a cross-field rule",
        _event(action="update", changes={"overlap": "parallel"}),
        [("events[0].changes.max_active_runs", "required with overlap 'parallel'")],
    ),
    (
        "action after delete",
        _with(
            events=[
                {"at": "2026-03-03T00:00:00Z", "action": "delete", "schedule_id": "hourly"},
                {"at": "2026-03-04T00:00:00Z", "action": "resume", "schedule_id": "hourly"},
            ]
        ),
        [("events[1].schedule_id", "deleted by events[0]")],
    ),
    (
        "downtime upside down",
        _with(downtime=[{"from": "2026-03-03T00:00:00Z", "to": "2026-03-02T00:00:00Z"}]),
        [("downtime[0].to", "after from")],
    ),
    (
        "overlapping downtime",
        _with(
            downtime=[
                {"from": "2026-03-03T00:00:00Z", "to": "2026-03-03T06:00:00Z"},
                {"from": "2026-03-03T05:00:00Z", "to": "2026-03-03T07:00:00Z"},
            ]
        ),
        [("downtime[1].from", "overlaps downtime[0]")],
    ),
    (
        "downtime key typo",
        _with(downtime=[{"from": "2026-03-03T00:00:00Z", "until": 3}]),
        [
            ("downtime[0].to", "required"),
            ("downtime[0].until", "unknown field"),
        ],
    ),
    (
        "outage upside down",
        _with(
            missing_deployments=[
                {
                    "deployment_id": "report.default",
                    "from": "2026-03-04T00:00:00Z",
                    "to": "2026-03-03T00:00:00Z",
                }
            ]
        ),
        [("missing_deployments[0].to", "after from")],
    ),
]


@pytest.mark.parametrize(
    ("data", "expected"), [(c[1], c[2]) for c in BAD_CASES], ids=[c[0] for c in BAD_CASES]
)
def test_invalid_scenarios_name_each_bad_field(
    data: object, expected: list[tuple[str, str]]
) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_scenario(data)
    problems = [(p.field, p.reason) for p in caught.value.problems]
    assert [field for field, _ in problems] == [field for field, _ in expected]
    for (_, reason), (_, fragment) in zip(problems, expected, strict=True):
        assert fragment in reason
    assert caught.value.code == "invalid_input"
    assert caught.value.message.startswith("invalid scenario: ")


def test_problems_across_sections_are_reported_together() -> None:
    data = _with(end="soon", max_concurrent_runs=-1)
    data["schedules"][0]["misfire"] = "never"
    with pytest.raises(InvalidInput) as caught:
        parse_scenario(data)
    fields = {p.field for p in caught.value.problems}
    assert fields == {"end", "max_concurrent_runs", "schedules[0].misfire"}


def test_a_valid_scenario_is_compiled() -> None:
    data = _schedule(
        created_at="2026-03-02T01:30:00+01:00",
        run={"duration": 30, "outcome": ["completed", "failed"]},
    )
    data["events"] = [
        {"at": "2026-03-05T00:00:00Z", "action": "resume", "schedule_id": "hourly"},
        {
            "at": "2026-03-04T00:00:00Z",
            "action": "update",
            "schedule_id": "hourly",
            "changes": {"overlap": "parallel", "max_active_runs": 3},
        },
        {"at": "2026-03-04T00:00:00Z", "action": "pause", "schedule_id": "hourly"},
    ]
    data["downtime"] = [
        {"from": "2026-03-07T00:00:00Z", "to": "2026-03-07T02:00:00Z"},
        {"from": "2026-03-06T00:00:00Z", "to": "2026-03-06T02:00:00Z"},
    ]
    scenario = parse_scenario(data)
    assert scenario.max_concurrent_runs == 4
    (schedule,) = scenario.schedules
    assert schedule.created_at == datetime(2026, 3, 2, 0, 30, tzinfo=UTC)
    assert schedule.run.duration == FixedDuration(seconds=30)
    assert schedule.run.outcome == ["completed", "failed"]
    # Sorted by time, same-instant events kept in the given order.
    assert [(e.action, e.revision) for e in scenario.events] == [
        ("update", 2),
        ("pause", None),
        ("resume", None),
    ]
    update = scenario.events[0].definition
    assert update is not None and update.max_active_runs == 3
    assert [w.start.day for w in scenario.downtime] == [6, 7]


def test_defaults() -> None:
    scenario = parse_scenario(BASE)
    (schedule,) = scenario.schedules
    assert schedule.created_at == scenario.start
    assert schedule.run == RunModelSpec()
    assert scenario.events == () and scenario.downtime == ()


def test_deployment_outages() -> None:
    data = _with(
        missing_deployments=[
            {"deployment_id": "report.default", "from": "2026-03-03T00:00:00Z"},
            {"deployment_id": "other", "to": "2026-03-03T00:00:00Z"},
        ]
    )
    scenario = parse_scenario(data)
    day = datetime(2026, 3, 2, tzinfo=UTC)
    later = datetime(2026, 3, 4, tzinfo=UTC)
    assert not scenario.deployment_missing("report.default", day)
    assert scenario.deployment_missing("report.default", later)
    assert scenario.deployment_missing("other", day)
    assert not scenario.deployment_missing("other", later)


def _passed_oneshot(changes: dict[str, Any]) -> dict[str, Any]:
    """A one-shot that fires on the first day, then an update on the second."""
    data = _schedule(trigger={"kind": "oneshot", "at": "2026-03-02T06:00:00Z"})
    data["events"] = [
        {
            "at": "2026-03-03T00:00:00Z",
            "action": "update",
            "schedule_id": "hourly",
            "changes": changes,
        }
    ]
    return data


def test_an_update_that_keeps_the_trigger_of_a_passed_oneshot_is_accepted() -> None:
    # As update_schedule: only a patched trigger must lie in the future.
    scenario = parse_scenario(_passed_oneshot({"max_steps": 5}))
    (event,) = scenario.events
    assert event.definition is not None
    assert event.definition.max_steps == 5
    assert event.revision == 2


def test_an_update_that_moves_a_oneshot_into_the_past_is_rejected() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_scenario(
            _passed_oneshot({"trigger": {"kind": "oneshot", "at": "2026-03-02T12:00:00Z"}})
        )
    [problem] = caught.value.problems
    assert problem.field == "events[0].changes.trigger.at"
    assert "in the past" in problem.reason


def test_an_update_that_changes_nothing_is_rejected_as_update_schedule_does() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_scenario(_passed_oneshot({"max_steps": None}))
    [problem] = caught.value.problems
    assert problem.field == "events[0].changes"
    assert problem.reason.startswith("give at least one of deployment_id, trigger")
