"""Schedule ids as directory names, and instants at rest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from core.errors import InvalidInput
from shell.store_format import (
    canonical_instant,
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
