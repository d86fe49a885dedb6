"""Input bindings: names, nesting, resolution per occurrence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from core.bindings import BINDING_NAMES, binding_problems, is_binding, resolve_inputs
from core.definitions import parse_definition

BERLIN_CRON = {"kind": "cron", "expression": "30 2 * * *", "timezone": "Europe/Berlin"}
# The 03:00 instant croniter resolves for 02:30 on Berlin's spring-forward day.
GAP_INSTANT = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)


def definition(inputs: dict[str, Any], trigger: dict[str, Any] | None = None) -> Any:
    return parse_definition(
        {
            "schedule_id": "daily.report",
            "deployment_id": "report",
            "trigger": trigger or BERLIN_CRON,
            "inputs": inputs,
        }
    )


def test_binding_names() -> None:
    assert BINDING_NAMES == (
        "occurrence.instant",
        "occurrence.local_instant",
        "occurrence.timezone",
        "schedule.id",
        "schedule.revision",
    )


# (id, inputs, revision, instant, trigger or None for Berlin cron, resolved inputs)
RESOLVE_CASES: list[tuple[str, dict[str, Any], int, datetime, dict[str, Any] | None, Any]] = [
    (
        "every name at the gap instant",
        {name.replace(".", "_"): {"$bind": name} for name in BINDING_NAMES},
        4,
        GAP_INSTANT,
        None,
        {
            "occurrence_instant": "2026-03-29T01:00:00Z",
            "occurrence_local_instant": "2026-03-29T03:00:00+02:00",
            "occurrence_timezone": "Europe/Berlin",
            "schedule_id": "daily.report",
            "schedule_revision": 4,
        },
    ),
    (
        "literals are copied",
        {"n": 1, "s": "x", "f": 1.5, "b": False, "z": None, "l": [1, "a"], "o": {"k": [True]}},
        1,
        GAP_INSTANT,
        None,
        {"n": 1, "s": "x", "f": 1.5, "b": False, "z": None, "l": [1, "a"], "o": {"k": [True]}},
    ),
    (
        "nested bindings resolve recursively",
        {"window": {"end": {"$bind": "occurrence.instant"}, "tags": [{"$bind": "schedule.id"}]}},
        2,
        datetime(2026, 10, 25, 1, 30, tzinfo=UTC),
        None,
        {"window": {"end": "2026-10-25T01:30:00Z", "tags": ["daily.report"]}},
    ),
    (
        "second pass of the fold shows the winter offset",
        {"local": {"$bind": "occurrence.local_instant"}},
        1,
        datetime(2026, 10, 25, 1, 30, tzinfo=UTC),
        None,
        {"local": "2026-10-25T02:30:00+01:00"},
    ),
    (
        "non-UTC instant argument is rendered in UTC",
        {"at": {"$bind": "occurrence.instant"}},
        1,
        datetime(2026, 1, 1, 9, 0, tzinfo=timezone(timedelta(hours=9))),
        None,
        {"at": "2026-01-01T00:00:00Z"},
    ),
    (
        "one-shot has UTC as its zone",
        {
            "at": {"$bind": "occurrence.instant"},
            "local": {"$bind": "occurrence.local_instant"},
            "tz": {"$bind": "occurrence.timezone"},
        },
        3,
        datetime(2030, 1, 1, 12, tzinfo=UTC),
        {"kind": "oneshot", "at": "2030-01-01T12:00:00Z"},
        {"at": "2030-01-01T12:00:00Z", "local": "2030-01-01T12:00:00+00:00", "tz": "UTC"},
    ),
]


@pytest.mark.parametrize(
    ("case", "inputs", "revision", "instant", "trigger", "expected"),
    RESOLVE_CASES,
    ids=[c[0] for c in RESOLVE_CASES],
)
def test_resolve_inputs(
    case: str,
    inputs: dict[str, Any],
    revision: int,
    instant: datetime,
    trigger: dict[str, Any] | None,
    expected: dict[str, Any],
) -> None:
    parsed = definition(inputs, trigger)
    assert resolve_inputs(parsed, revision, instant) == expected
    # The definition's own inputs are left untouched.
    assert parsed.inputs == inputs


def test_resolved_literals_are_copies() -> None:
    parsed = definition({"l": [1, {"k": 2}]})
    resolved = resolve_inputs(parsed, 1, GAP_INSTANT)
    resolved["l"][1]["k"] = 99
    assert parsed.inputs == {"l": [1, {"k": 2}]}


def test_naive_instant_is_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        resolve_inputs(definition({}), 1, datetime(2026, 1, 1))


# (id, value, expected problems)
PROBLEM_CASES: list[tuple[str, Any, list[str]]] = [
    ("literal", {"a": [1, {"b": "c"}]}, []),
    ("known", {"$bind": "schedule.id"}, []),
    (
        "unknown at top",
        {"$bind": "run.id"},
        ["unknown binding 'run.id'; known bindings: " + ", ".join(BINDING_NAMES)],
    ),
    (
        "two unknown nested",
        [{"$bind": "a"}, {"x": {"$bind": "b"}}],
        [
            "unknown binding 'a' at [0]; known bindings: " + ", ".join(BINDING_NAMES),
            "unknown binding 'b' at [1].x; known bindings: " + ", ".join(BINDING_NAMES),
        ],
    ),
    (
        "extra key",
        {"$bind": "schedule.id", "x": 1},
        ["a binding object must have exactly one key '$bind'"],
    ),
    ("non-string name", {"$bind": None}, ["binding name must be a string"]),
]


@pytest.mark.parametrize(
    ("case", "value", "expected"), PROBLEM_CASES, ids=[c[0] for c in PROBLEM_CASES]
)
def test_binding_problems(case: str, value: Any, expected: list[str]) -> None:
    assert binding_problems(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"$bind": "x"}, True),
        ({"$bind": "x", "y": 1}, True),
        ({"bind": "x"}, False),
        ("$bind", False),
    ],
)
def test_is_binding(value: Any, expected: bool) -> None:
    assert is_binding(value) is expected
