"""Schedule ids as directory names, instants at rest, and canonical JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import InvalidInput
from shell.store_format import (
    canonical_instant,
    canonical_json,
    check_schedule_id,
    encode_json_line,
    format_instant,
    parse_instant,
)

BAD_IDS = [
    ("", "1-128"),
    ("../x", "path separators"),
    ("a/b", "path separators"),
    ("a\\b", "path separators"),
    ("a\x00b", "path separators"),
    ("a..b", "'..'"),
    ("..", "'..'"),
    (".hidden", "starting with a letter or digit"),
    ("-x", "starting with a letter or digit"),
    ("x" * 129, "1-128"),
    ("sp ace", "1-128"),
    ("ünï", "1-128"),
]


@pytest.mark.parametrize(("schedule_id", "reason"), BAD_IDS)
def test_unsafe_ids_are_refused_naming_the_field(schedule_id: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_schedule_id(schedule_id)
    assert [p.field for p in caught.value.problems] == ["schedule_id"]
    assert reason in caught.value.problems[0].reason


def test_non_string_id_is_refused() -> None:
    with pytest.raises(InvalidInput):
        check_schedule_id(42)


@pytest.mark.parametrize("schedule_id", ["a", "A.b-c_d", "9" * 128, "x.y"])
def test_good_ids_pass(schedule_id: str) -> None:
    assert check_schedule_id(schedule_id) == schedule_id


INSTANTS = [
    (datetime(2024, 3, 1, 12, 0, tzinfo=UTC), "2024-03-01T12:00:00Z"),
    (
        datetime(2024, 3, 1, 13, 0, 0, 5, tzinfo=timezone(timedelta(hours=1))),
        "2024-03-01T12:00:00.000005Z",
    ),
]


@pytest.mark.parametrize(("value", "text"), INSTANTS)
def test_instants_format_as_utc_z_and_round_trip(value: datetime, text: str) -> None:
    assert format_instant(value) == text
    assert parse_instant(text) == value
    assert canonical_instant(text) == text
    assert canonical_instant(value) == text


def test_plus_zero_offset_is_accepted() -> None:
    assert canonical_instant("2024-03-01T12:00:00+00:00") == "2024-03-01T12:00:00Z"


@pytest.mark.parametrize("text", ["2024-03-01T12:00:00", "yesterday", ""])
def test_naive_or_garbage_instants_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_instant(text)


def test_naive_datetime_cannot_be_formatted() -> None:
    with pytest.raises(ValueError):
        format_instant(datetime(2024, 1, 1))


def test_json_line_is_canonical() -> None:
    assert encode_json_line({"b": 1, "a": "é"}) == b'{"a":"\\u00e9","b":1}\n'


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(_JSON)
def test_canonical_json_is_what_json_dumps_writes(value: object) -> None:
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    assert canonical_json(value) == expected.encode("ascii")


def test_canonical_json_refuses_what_json_cannot_hold() -> None:
    looped: list[object] = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular"):
        canonical_json({"a": looped})
    with pytest.raises(ValueError, match="not JSON compliant"):
        canonical_json({"x": float("nan")})
    with pytest.raises(TypeError, match="set is not JSON serializable"):
        canonical_json({"x": {1}})
    # A refusal leaves nothing behind: the same value encodes afterwards.
    assert canonical_json({"a": [1]}) == b'{"a":[1]}'
