"""Schedule definition rules, one table row per rule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from core.definitions import (
    CronTrigger,
    OneShotTrigger,
    ScheduleDefinition,
    SchedulePatch,
    apply_patch,
    check_oneshot_in_future,
    definition_to_payload,
    parse_definition,
    parse_patch,
)
from core.errors import InvalidDefinition, Problem

CRON = {"kind": "cron", "expression": "0 * * * *", "timezone": "Europe/Berlin"}
ONESHOT = {"kind": "oneshot", "at": "2026-03-29T02:30:00+01:00"}
BASE: dict[str, Any] = {"schedule_id": "nightly", "deployment_id": "etl", "trigger": CRON}


def payload(**changes: Any) -> dict[str, Any]:
    merged = {**BASE, **changes}
    return {key: value for key, value in merged.items() if value is not _DROP}


_DROP = object()


def problems_of(exc: InvalidDefinition) -> dict[str, str]:
    return {p.field: p.reason for p in exc.problems}


# --- accepted definitions: (id, payload, expected attribute values) ----------

VALID_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "defaults",
        payload(),
        {
            "schedule_id": "nightly",
            "deployment_id": "etl",
            "trigger": CronTrigger(expression="0 * * * *", timezone="Europe/Berlin"),
            "inputs": {},
            "overlap": "skip",
            "max_active_runs": None,
            "misfire": "skip",
            "lateness_allowance_s": 60.0,
            "max_steps": None,
            "active_run_limit": 1,
        },
    ),
    (
        "cron timezone defaults to UTC",
        payload(trigger={"kind": "cron", "expression": "*/5 * * * *"}),
        {"trigger": CronTrigger(expression="*/5 * * * *", timezone="UTC")},
    ),
    (
        "cron whitespace is normalized",
        payload(trigger={"kind": "cron", "expression": "  0   9 * *  1-5 "}),
        {"trigger": CronTrigger(expression="0 9 * * 1-5")},
    ),
    (
        "sunday as 7",
        payload(trigger={"kind": "cron", "expression": "0 0 * * 7"}),
        {"trigger": CronTrigger(expression="0 0 * * 7")},
    ),
    (
        "names and day-of-month with day-of-week",
        payload(trigger={"kind": "cron", "expression": "0 12 1,15 jan-mar mon"}),
        {"trigger": CronTrigger(expression="0 12 1,15 jan-mar mon")},
    ),
    (
        "one-shot with offset is normalized to UTC",
        payload(trigger=ONESHOT),
        {"trigger": OneShotTrigger(at=datetime(2026, 3, 29, 1, 30, tzinfo=UTC))},
    ),
    (
        "one-shot with Z",
        payload(trigger={"kind": "oneshot", "at": "2026-01-01T00:00:00Z"}),
        {"trigger": OneShotTrigger(at=datetime(2026, 1, 1, tzinfo=UTC))},
    ),
    (
        "one-shot from an aware datetime",
        payload(
            trigger={
                "kind": "oneshot",
                "at": datetime(2026, 1, 1, 5, tzinfo=timezone(timedelta(hours=5))),
            }
        ),
        {"trigger": OneShotTrigger(at=datetime(2026, 1, 1, tzinfo=UTC))},
    ),
    (
        "parallel with a limit",
        payload(overlap="parallel", max_active_runs=3),
        {"overlap": "parallel", "max_active_runs": 3, "active_run_limit": 3},
    ),
    (
        "skip with an explicit 1",
        payload(max_active_runs=1),
        {"overlap": "skip", "max_active_runs": 1, "active_run_limit": 1},
    ),
    (
        "every policy field",
        payload(misfire="latest", lateness_allowance_s=0, max_steps=50),
        {"misfire": "latest", "lateness_allowance_s": 0.0, "max_steps": 50},
    ),
    (
        "literal and bound inputs",
        payload(inputs={"n": 1, "when": {"$bind": "occurrence.instant"}, "l": [None, "x"]}),
        {"inputs": {"n": 1, "when": {"$bind": "occurrence.instant"}, "l": [None, "x"]}},
    ),
    (
        "id characters",
        payload(schedule_id="A.b_c-9", deployment_id="_dep.1-x"),
        {"schedule_id": "A.b_c-9", "deployment_id": "_dep.1-x"},
    ),
    (
        "id of 128 characters",
        payload(schedule_id="a" * 128),
        {"schedule_id": "a" * 128},
    ),
]


@pytest.mark.parametrize(("case", "raw", "expected"), VALID_CASES, ids=[c[0] for c in VALID_CASES])
def test_valid_definitions(case: str, raw: dict[str, Any], expected: dict[str, Any]) -> None:
    definition = parse_definition(raw)
    for name, value in expected.items():
        assert getattr(definition, name) == value, name


# --- rejected definitions: (id, payload, {field: reason fragment}) -----------
# The expected mapping is the complete set of problems: nothing more is reported.

INVALID_CASES: list[tuple[str, dict[str, Any], dict[str, str]]] = [
    ("missing schedule_id", payload(schedule_id=_DROP), {"schedule_id": "is required"}),
    ("missing trigger", payload(trigger=_DROP), {"trigger": "is required"}),
    ("empty schedule_id", payload(schedule_id=""), {"schedule_id": "1-128 characters"}),
    ("schedule_id ..", payload(schedule_id=".."), {"schedule_id": "starting with a letter"}),
    ("schedule_id slash", payload(schedule_id="a/b"), {"schedule_id": "1-128 characters"}),
    ("schedule_id NUL", payload(schedule_id="a\x00b"), {"schedule_id": "1-128 characters"}),
    ("schedule_id 129", payload(schedule_id="a" * 129), {"schedule_id": "1-128 characters"}),
    ("schedule_id leading dash", payload(schedule_id="-a"), {"schedule_id": "starting with"}),
    ("schedule_id not a string", payload(schedule_id=7), {"schedule_id": "valid string"}),
    ("deployment_id slash", payload(deployment_id="../x"), {"deployment_id": "1-200"}),
    ("deployment_id 201", payload(deployment_id="d" * 201), {"deployment_id": "1-200"}),
    ("unknown field", payload(colour="red"), {"colour": "unknown field"}),
    (
        "naive one-shot",
        payload(trigger={"kind": "oneshot", "at": "2026-03-29T02:30:00"}),
        {"trigger.at": "must include a UTC offset"},
    ),
    (
        "one-shot as a number",
        payload(trigger={"kind": "oneshot", "at": 1_700_000_000}),
        {"trigger.at": "ISO-8601"},
    ),
    (
        "one-shot garbage",
        payload(trigger={"kind": "oneshot", "at": "tomorrow"}),
        {"trigger.at": "valid datetime"},
    ),
    (
        "one-shot missing at",
        payload(trigger={"kind": "oneshot"}),
        {"trigger.at": "is required"},
    ),
    (
        "one-shot with timezone field",
        payload(trigger={"kind": "oneshot", "at": "2026-01-01T00:00:00Z", "timezone": "UTC"}),
        {"trigger.timezone": "unknown field"},
    ),
    (
        "six-field cron",
        payload(trigger={"kind": "cron", "expression": "0 0 * * * *"}),
        {
            "trigger.expression": (
                "exactly five fields (minute hour day-of-month month day-of-week), got 6"
            )
        },
    ),
    (
        "seven-field cron",
        payload(trigger={"kind": "cron", "expression": "0 0 * * * * 2026"}),
        {"trigger.expression": "got 7"},
    ),
    (
        "nickname cron",
        payload(trigger={"kind": "cron", "expression": "@hourly"}),
        {"trigger.expression": "got 1"},
    ),
    (
        "out of range minute",
        payload(trigger={"kind": "cron", "expression": "61 * * * *"}),
        {"trigger.expression": "not a valid cron expression"},
    ),
    (
        "day-of-week 8",
        payload(trigger={"kind": "cron", "expression": "0 0 * * 8"}),
        {"trigger.expression": "not a valid cron expression"},
    ),
    (
        "zero step",
        payload(trigger={"kind": "cron", "expression": "*/0 * * * *"}),
        {"trigger.expression": "not a valid cron expression"},
    ),
    (
        "never matches",
        payload(trigger={"kind": "cron", "expression": "0 0 31 4 *"}),
        {"trigger.expression": "never matches any date"},
    ),
    (
        "random cron",
        payload(trigger={"kind": "cron", "expression": "R 0 * * *"}),
        {"trigger.expression": "random values"},
    ),
    (
        "unknown zone",
        payload(trigger={"kind": "cron", "expression": "0 * * * *", "timezone": "Mars/Olympus"}),
        {"trigger.timezone": "unknown time zone 'Mars/Olympus'"},
    ),
    (
        "wrong-case zone",
        payload(trigger={"kind": "cron", "expression": "0 * * * *", "timezone": "europe/berlin"}),
        {"trigger.timezone": "unknown time zone"},
    ),
    (
        # Longer than a file name may be: zoneinfo's lookup raises OSError.
        "zone name too long for the filesystem",
        payload(trigger={"kind": "cron", "expression": "0 * * * *", "timezone": "x" * 300}),
        {"trigger.timezone": "unknown time zone"},
    ),
    (
        "directory as zone",
        payload(trigger={"kind": "cron", "expression": "0 * * * *", "timezone": "America"}),
        {"trigger.timezone": "unknown time zone"},
    ),
    (
        "path as zone",
        payload(trigger={"kind": "cron", "expression": "0 * * * *", "timezone": "../etc/x"}),
        {"trigger.timezone": "unknown time zone"},
    ),
    (
        "host zone",
        payload(trigger={"kind": "cron", "expression": "0 * * * *", "timezone": "localtime"}),
        {"trigger.timezone": "host's configuration"},
    ),
    (
        "missing expression",
        payload(trigger={"kind": "cron"}),
        {"trigger.expression": "is required"},
    ),
    ("unknown trigger kind", payload(trigger={"kind": "rate"}), {"trigger.kind": "got 'rate'"}),
    ("missing trigger kind", payload(trigger={"at": "x"}), {"trigger.kind": "is required"}),
    ("trigger not an object", payload(trigger="hourly"), {"trigger": "must be an object"}),
    ("bad overlap", payload(overlap="queue"), {"overlap": "'skip' or 'parallel'"}),
    ("bad misfire", payload(misfire="all"), {"misfire": "'skip' or 'latest'"}),
    (
        "parallel without limit",
        payload(overlap="parallel"),
        {"max_active_runs": "is required with overlap 'parallel'"},
    ),
    (
        "skip with limit 3",
        payload(max_active_runs=3),
        {"max_active_runs": "must be absent or 1 with overlap 'skip', got 3"},
    ),
    (
        "zero limit",
        payload(overlap="parallel", max_active_runs=0),
        {"max_active_runs": "at least 1"},
    ),
    ("limit as text", payload(max_active_runs="2"), {"max_active_runs": "valid integer"}),
    ("negative allowance", payload(lateness_allowance_s=-1), {"lateness_allowance_s": ">= 0"}),
    (
        "infinite allowance",
        payload(lateness_allowance_s=float("inf")),
        {"lateness_allowance_s": "finite"},
    ),
    ("allowance as bool", payload(lateness_allowance_s=True), {"lateness_allowance_s": "number"}),
    ("zero max_steps", payload(max_steps=0), {"max_steps": "at least 1"}),
    ("bool max_steps", payload(max_steps=True), {"max_steps": "valid integer"}),
    (
        "unknown binding",
        payload(inputs={"when": {"$bind": "occurrence.date"}}),
        {"inputs.when": "unknown binding 'occurrence.date'"},
    ),
    (
        "nested unknown binding",
        payload(inputs={"cfg": {"dates": [1, {"$bind": "nope"}]}}),
        {"inputs.cfg": "unknown binding 'nope' at dates[1]"},
    ),
    (
        "binding with extra key",
        payload(inputs={"x": {"$bind": "schedule.id", "default": 1}}),
        {"inputs.x": "exactly one key '$bind'"},
    ),
    (
        "binding name not a string",
        payload(inputs={"x": {"$bind": 3}}),
        {"inputs.x": "binding name must be a string"},
    ),
    ("inputs not an object", payload(inputs=[1, 2]), {"inputs": "must be an object"}),
    (
        "several problems at once",
        payload(
            schedule_id="bad id",
            trigger={"kind": "cron", "expression": "0 0 * * * *", "timezone": "Nowhere"},
            overlap="parallel",
            lateness_allowance_s=-5,
            extra=1,
        ),
        {
            "schedule_id": "1-128 characters",
            "trigger.expression": "got 6",
            "trigger.timezone": "unknown time zone",
            "lateness_allowance_s": ">= 0",
            "extra": "unknown field",
            "max_active_runs": "is required with overlap 'parallel'",
        },
    ),
    (
        "huge numbers",
        payload(
            overlap="parallel",
            max_active_runs=int("9" * 4001),
            max_steps=10**9 + 1,
            inputs={"n": [2**53]},
        ),
        {
            "max_active_runs": "at most 100000",
            "max_steps": "at most 1000000000",
            "inputs.n": "integer at [0] is outside ±9007199254740991",
        },
    ),
    (
        "negative zero allowance",
        payload(lateness_allowance_s=-0.0),
        {"lateness_allowance_s": "-0.0"},
    ),
    (
        "cross-field not judged when its field is bad",
        payload(overlap="parallel", max_active_runs=-1),
        {"max_active_runs": "at least 1"},
    ),
]


@pytest.mark.parametrize(
    ("case", "raw", "expected"), INVALID_CASES, ids=[c[0] for c in INVALID_CASES]
)
def test_invalid_definitions(case: str, raw: dict[str, Any], expected: dict[str, str]) -> None:
    with pytest.raises(InvalidDefinition) as caught:
        parse_definition(raw)
    found = problems_of(caught.value)
    assert set(found) == set(expected), found
    for field, fragment in expected.items():
        assert fragment in found[field], (field, found[field])
    assert caught.value.message.startswith("invalid schedule definition: ")
    for field in expected:
        assert f"{field}: " in caught.value.message
    assert caught.value.to_dict()["problems"] == [p.as_dict() for p in caught.value.problems]


def test_payload_that_is_not_an_object() -> None:
    with pytest.raises(InvalidDefinition) as caught:
        parse_definition([1, 2])  # type: ignore[arg-type]
    assert caught.value.problems == (
        Problem(field="(definition)", reason="must be an object, got list"),
    )


# --- round trip, hashing, immutability ---------------------------------------

ROUND_TRIP_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "cron",
        payload(inputs={"a": {"$bind": "schedule.revision"}, "b": [1.5, True]}, max_steps=9),
        {
            "schedule_id": "nightly",
            "deployment_id": "etl",
            "trigger": {"kind": "cron", "expression": "0 * * * *", "timezone": "Europe/Berlin"},
            "inputs": {"a": {"$bind": "schedule.revision"}, "b": [1.5, True]},
            "overlap": "skip",
            "max_active_runs": None,
            "misfire": "skip",
            "lateness_allowance_s": 60.0,
            "max_steps": 9,
        },
    ),
    (
        "one-shot in UTC with Z",
        payload(trigger=ONESHOT, overlap="parallel", max_active_runs=2, misfire="latest"),
        {
            "schedule_id": "nightly",
            "deployment_id": "etl",
            "trigger": {"kind": "oneshot", "at": "2026-03-29T01:30:00Z"},
            "inputs": {},
            "overlap": "parallel",
            "max_active_runs": 2,
            "misfire": "latest",
            "lateness_allowance_s": 60.0,
            "max_steps": None,
        },
    ),
]


@pytest.mark.parametrize(
    ("case", "raw", "expected"), ROUND_TRIP_CASES, ids=[c[0] for c in ROUND_TRIP_CASES]
)
def test_round_trip(case: str, raw: dict[str, Any], expected: dict[str, Any]) -> None:
    definition = parse_definition(raw)
    dumped = definition_to_payload(definition)
    assert dumped == expected
    assert parse_definition(dumped) == definition


def test_definitions_are_frozen_and_hashable() -> None:
    first = parse_definition(payload(inputs={"x": [1, {"y": 2}]}))
    second = parse_definition(payload(inputs={"x": [1, {"y": 2}]}))
    assert first == second
    assert hash(first) == hash(second)
    assert len({first, second, first.trigger}) == 2
    with pytest.raises(ValueError, match="frozen"):
        first.overlap = "parallel"  # type: ignore[misc]
    with pytest.raises(ValueError, match="frozen"):
        first.trigger.expression = "* * * * *"  # type: ignore[union-attr]


def test_direct_construction_enforces_cross_field_rules() -> None:
    with pytest.raises(ValueError, match="max_active_runs: is required"):
        ScheduleDefinition(
            schedule_id="s",
            deployment_id="d",
            trigger=CronTrigger(expression="0 * * * *"),
            overlap="parallel",
        )


# --- patches -------------------------------------------------------------------

PARALLEL = parse_definition(payload(overlap="parallel", max_active_runs=3, max_steps=10))

PATCH_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("empty patch changes nothing", {}, {}),
    (
        "null means unpatched",
        {"max_steps": None, "max_active_runs": None, "trigger": None, "inputs": None},
        {},
    ),
    ("new limit", {"max_active_runs": 5}, {"max_active_runs": 5}),
    (
        "new trigger",
        {"trigger": {"kind": "oneshot", "at": "2030-01-01T00:00:00+02:00"}},
        {"trigger": OneShotTrigger(at=datetime(2029, 12, 31, 22, tzinfo=UTC))},
    ),
    (
        "switch to skip drops the parallel limit",
        {"overlap": "skip"},
        {"overlap": "skip", "max_active_runs": None},
    ),
    (
        "switch to skip with explicit 1",
        {"overlap": "skip", "max_active_runs": 1},
        {"overlap": "skip", "max_active_runs": 1},
    ),
    (
        "policies and inputs",
        {"misfire": "latest", "lateness_allowance_s": 5, "inputs": {"k": "v"}, "max_steps": 2},
        {"misfire": "latest", "lateness_allowance_s": 5.0, "inputs": {"k": "v"}, "max_steps": 2},
    ),
    ("deployment", {"deployment_id": "etl-v2"}, {"deployment_id": "etl-v2"}),
]


@pytest.mark.parametrize(("case", "raw", "changed"), PATCH_CASES, ids=[c[0] for c in PATCH_CASES])
def test_apply_patch(case: str, raw: dict[str, Any], changed: dict[str, Any]) -> None:
    updated = apply_patch(PARALLEL, parse_patch(raw))
    for name in ScheduleDefinition.model_fields:
        expected = changed.get(name, getattr(PARALLEL, name))
        assert getattr(updated, name) == expected, name


PATCH_REJECTIONS: list[tuple[str, ScheduleDefinition, dict[str, Any], dict[str, str]]] = [
    (
        "skip schedule given a limit of 3",
        parse_definition(payload()),
        {"max_active_runs": 3},
        {"max_active_runs": "must be absent or 1 with overlap 'skip', got 3"},
    ),
    (
        "parallel without a limit",
        parse_definition(payload()),
        {"overlap": "parallel"},
        {"max_active_runs": "is required with overlap 'parallel'"},
    ),
]


@pytest.mark.parametrize(
    ("case", "definition", "raw", "expected"),
    PATCH_REJECTIONS,
    ids=[c[0] for c in PATCH_REJECTIONS],
)
def test_apply_patch_rejects_cross_field(
    case: str, definition: ScheduleDefinition, raw: dict[str, Any], expected: dict[str, str]
) -> None:
    with pytest.raises(InvalidDefinition) as caught:
        apply_patch(definition, parse_patch(raw))
    found = problems_of(caught.value)
    assert set(found) == set(expected)
    for field, fragment in expected.items():
        assert fragment in found[field]
    assert caught.value.message.startswith("invalid schedule update: ")


PARSE_PATCH_REJECTIONS: list[tuple[str, dict[str, Any], dict[str, str]]] = [
    ("schedule_id is not patchable", {"schedule_id": "other"}, {"schedule_id": "unknown field"}),
    ("unknown field", {"paused": True}, {"paused": "unknown field"}),
    (
        "bad trigger and policy together",
        {"trigger": {"kind": "cron", "expression": "0 0 * *"}, "misfire": "never", "max_steps": 0},
        {
            "trigger.expression": "got 4",
            "misfire": "'skip' or 'latest'",
            "max_steps": "at least 1",
        },
    ),
    (
        "naive one-shot",
        {"trigger": {"kind": "oneshot", "at": "2030-01-01T00:00:00"}},
        {"trigger.at": "must include a UTC offset"},
    ),
    (
        "unknown binding",
        {"inputs": {"x": {"$bind": "schedule.name"}}},
        {"inputs.x": "unknown binding 'schedule.name'"},
    ),
]


@pytest.mark.parametrize(
    ("case", "raw", "expected"), PARSE_PATCH_REJECTIONS, ids=[c[0] for c in PARSE_PATCH_REJECTIONS]
)
def test_parse_patch_rejections(case: str, raw: dict[str, Any], expected: dict[str, str]) -> None:
    with pytest.raises(InvalidDefinition) as caught:
        parse_patch(raw)
    found = problems_of(caught.value)
    assert set(found) == set(expected), found
    for field, fragment in expected.items():
        assert fragment in found[field]
    assert caught.value.message.startswith("invalid schedule update: ")


def test_patch_fields_default_to_unpatched() -> None:
    assert SchedulePatch() == parse_patch({})
    assert all(value is None for _, value in SchedulePatch())


# --- one-shot in the past ------------------------------------------------------

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)

PAST_CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("future one-shot", {"kind": "oneshot", "at": "2026-06-01T12:00:01Z"}, True),
    ("exactly now", {"kind": "oneshot", "at": "2026-06-01T14:00:00+02:00"}, False),
    ("past one-shot", {"kind": "oneshot", "at": "2026-05-31T00:00:00Z"}, False),
    ("cron always passes", {"kind": "cron", "expression": "0 0 1 1 *"}, True),
]


@pytest.mark.parametrize(
    ("case", "trigger", "accepted"), PAST_CASES, ids=[c[0] for c in PAST_CASES]
)
def test_check_oneshot_in_future(case: str, trigger: dict[str, Any], accepted: bool) -> None:
    definition = parse_definition(payload(trigger=trigger))
    if accepted:
        check_oneshot_in_future(definition, NOW)
        return
    with pytest.raises(InvalidDefinition) as caught:
        check_oneshot_in_future(definition, NOW)
    (problem,) = caught.value.problems
    assert problem.field == "trigger.at"
    assert problem.reason.startswith("is in the past")
    assert "2026-06-01T12:00:00Z" in problem.reason
