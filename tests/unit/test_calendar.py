"""Trigger resolution with exact instants, including both DST days in two zones."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import core.calendar as calendar_module
from core.calendar import CompiledCron, CompiledOneShot, compile_trigger
from core.definitions import CronTrigger, OneShotTrigger
from core.errors import CoreMisuse


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


# (id, expression, zone, after, [(UTC instant, local wall time with offset, DST note)])
# The lists are what croniter resolves; the calendar must neither drop nor add one.
DST_CASES: list[tuple[str, str, str, str, list[tuple[str, str, str | None]]]] = [
    (
        "berlin spring hourly",
        "0 * * * *",
        "Europe/Berlin",
        "2026-03-28T23:30:00Z",
        [
            ("2026-03-29T00:00:00Z", "2026-03-29T01:00:00+01:00", None),
            ("2026-03-29T01:00:00Z", "2026-03-29T03:00:00+02:00", None),
            ("2026-03-29T02:00:00Z", "2026-03-29T04:00:00+02:00", None),
        ],
    ),
    (
        "berlin spring half-hourly",
        "*/30 * * * *",
        "Europe/Berlin",
        "2026-03-28T23:30:00Z",
        [
            ("2026-03-29T00:00:00Z", "2026-03-29T01:00:00+01:00", None),
            ("2026-03-29T00:30:00Z", "2026-03-29T01:30:00+01:00", None),
            ("2026-03-29T01:00:00Z", "2026-03-29T03:00:00+02:00", None),
            ("2026-03-29T01:30:00Z", "2026-03-29T03:30:00+02:00", None),
        ],
    ),
    (
        "berlin spring 02:30 moves to 03:00",
        "30 2 * * *",
        "Europe/Berlin",
        "2026-03-27T23:00:00Z",
        [
            ("2026-03-28T01:30:00Z", "2026-03-28T02:30:00+01:00", None),
            ("2026-03-29T01:00:00Z", "2026-03-29T03:00:00+02:00", "gap"),
            ("2026-03-30T00:30:00Z", "2026-03-30T02:30:00+02:00", None),
        ],
    ),
    (
        "berlin fall hourly fires both 02:00",
        "0 * * * *",
        "Europe/Berlin",
        "2026-10-24T22:30:00Z",
        [
            ("2026-10-24T23:00:00Z", "2026-10-25T01:00:00+02:00", None),
            ("2026-10-25T00:00:00Z", "2026-10-25T02:00:00+02:00", "fold"),
            ("2026-10-25T01:00:00Z", "2026-10-25T02:00:00+01:00", "fold"),
            ("2026-10-25T02:00:00Z", "2026-10-25T03:00:00+01:00", None),
        ],
    ),
    (
        "berlin fall half-hourly walks the repeated hour twice",
        "*/30 * * * *",
        "Europe/Berlin",
        "2026-10-24T23:45:00Z",
        [
            ("2026-10-25T00:00:00Z", "2026-10-25T02:00:00+02:00", "fold"),
            ("2026-10-25T00:30:00Z", "2026-10-25T02:30:00+02:00", "fold"),
            ("2026-10-25T01:00:00Z", "2026-10-25T02:00:00+01:00", "fold"),
            ("2026-10-25T01:30:00Z", "2026-10-25T02:30:00+01:00", "fold"),
            ("2026-10-25T02:00:00Z", "2026-10-25T03:00:00+01:00", None),
        ],
    ),
    (
        "berlin fall 02:30 fires on both passes",
        "30 2 * * *",
        "Europe/Berlin",
        "2026-10-24T12:00:00Z",
        [
            ("2026-10-25T00:30:00Z", "2026-10-25T02:30:00+02:00", "fold"),
            ("2026-10-25T01:30:00Z", "2026-10-25T02:30:00+01:00", "fold"),
            ("2026-10-26T01:30:00Z", "2026-10-26T02:30:00+01:00", None),
        ],
    ),
    (
        "new york spring hourly",
        "0 * * * *",
        "America/New_York",
        "2026-03-08T05:30:00Z",
        [
            ("2026-03-08T06:00:00Z", "2026-03-08T01:00:00-05:00", None),
            ("2026-03-08T07:00:00Z", "2026-03-08T03:00:00-04:00", None),
            ("2026-03-08T08:00:00Z", "2026-03-08T04:00:00-04:00", None),
        ],
    ),
    (
        "new york spring half-hourly",
        "*/30 * * * *",
        "America/New_York",
        "2026-03-08T06:15:00Z",
        [
            ("2026-03-08T06:30:00Z", "2026-03-08T01:30:00-05:00", None),
            ("2026-03-08T07:00:00Z", "2026-03-08T03:00:00-04:00", None),
            ("2026-03-08T07:30:00Z", "2026-03-08T03:30:00-04:00", None),
        ],
    ),
    (
        "new york spring 02:30 moves to 03:00",
        "30 2 * * *",
        "America/New_York",
        "2026-03-07T05:00:00Z",
        [
            ("2026-03-07T07:30:00Z", "2026-03-07T02:30:00-05:00", None),
            ("2026-03-08T07:00:00Z", "2026-03-08T03:00:00-04:00", "gap"),
            ("2026-03-09T06:30:00Z", "2026-03-09T02:30:00-04:00", None),
        ],
    ),
    (
        "new york fall hourly fires both 01:00",
        "0 * * * *",
        "America/New_York",
        "2026-11-01T03:30:00Z",
        [
            ("2026-11-01T04:00:00Z", "2026-11-01T00:00:00-04:00", None),
            ("2026-11-01T05:00:00Z", "2026-11-01T01:00:00-04:00", "fold"),
            ("2026-11-01T06:00:00Z", "2026-11-01T01:00:00-05:00", "fold"),
            ("2026-11-01T07:00:00Z", "2026-11-01T02:00:00-05:00", None),
        ],
    ),
    (
        "new york fall half-hourly walks the repeated hour twice",
        "*/30 * * * *",
        "America/New_York",
        "2026-11-01T04:45:00Z",
        [
            ("2026-11-01T05:00:00Z", "2026-11-01T01:00:00-04:00", "fold"),
            ("2026-11-01T05:30:00Z", "2026-11-01T01:30:00-04:00", "fold"),
            ("2026-11-01T06:00:00Z", "2026-11-01T01:00:00-05:00", "fold"),
            ("2026-11-01T06:30:00Z", "2026-11-01T01:30:00-05:00", "fold"),
            ("2026-11-01T07:00:00Z", "2026-11-01T02:00:00-05:00", None),
        ],
    ),
    (
        "new york fall 02:30 is not repeated",
        "30 2 * * *",
        "America/New_York",
        "2026-10-31T12:00:00Z",
        [
            ("2026-11-01T07:30:00Z", "2026-11-01T02:30:00-05:00", None),
            ("2026-11-02T07:30:00Z", "2026-11-02T02:30:00-05:00", None),
        ],
    ),
    (
        "new york fall 01:30 fires on both passes",
        "30 1 * * *",
        "America/New_York",
        "2026-10-31T12:00:00Z",
        [
            ("2026-11-01T05:30:00Z", "2026-11-01T01:30:00-04:00", "fold"),
            ("2026-11-01T06:30:00Z", "2026-11-01T01:30:00-05:00", "fold"),
            ("2026-11-02T06:30:00Z", "2026-11-02T01:30:00-05:00", None),
        ],
    ),
]
DST_IDS = [case[0] for case in DST_CASES]


def _cron(expression: str, zone: str) -> CompiledCron:
    compiled = compile_trigger(CronTrigger(expression=expression, timezone=zone))
    assert isinstance(compiled, CompiledCron)
    return compiled


def _fresh(expression: str, zone: str) -> CompiledCron:
    # Bypass the cache so no memo from another test can answer.
    return CompiledCron(CronTrigger(expression=expression, timezone=zone))


@pytest.mark.parametrize(
    ("case", "expression", "zone", "after", "expected"), DST_CASES, ids=DST_IDS
)
def test_iter_after_exact_instants_and_notes(
    case: str,
    expression: str,
    zone: str,
    after: str,
    expected: list[tuple[str, str, str | None]],
) -> None:
    compiled = _fresh(expression, zone)
    iterator = compiled.iter_after(utc(after))
    produced = [next(iterator) for _ in expected]
    assert produced == [utc(instant) for instant, _, _ in expected]
    for instant in produced:
        assert instant.tzinfo is UTC
    assert [compiled.local(i).isoformat() for i in produced] == [local for _, local, _ in expected]
    assert [compiled.dst_note(i) for i in produced] == [note for _, _, note in expected]
    assert compiled.timezone == zone


@pytest.mark.parametrize(
    ("case", "expression", "zone", "after", "expected"), DST_CASES, ids=DST_IDS
)
def test_next_after_chain_matches_iteration(
    case: str,
    expression: str,
    zone: str,
    after: str,
    expected: list[tuple[str, str, str | None]],
) -> None:
    compiled = _fresh(expression, zone)
    chained: list[datetime] = []
    cursor = utc(after)
    for _ in expected:
        found = compiled.next_after(cursor)
        assert found is not None
        chained.append(found)
        cursor = found
    assert chained == [utc(instant) for instant, _, _ in expected]


@pytest.mark.parametrize(
    ("case", "expression", "zone", "after", "expected"), DST_CASES, ids=DST_IDS
)
def test_restart_from_any_point_neither_loops_nor_skips(
    case: str,
    expression: str,
    zone: str,
    after: str,
    expected: list[tuple[str, str, str | None]],
) -> None:
    # Starting a fresh croniter from anywhere in the window, including inside
    # the repeated hour, gives the next instant of the single iteration.
    instants = [utc(after)] + [utc(instant) for instant, _, _ in expected]
    step = timedelta(minutes=5)
    cursor = instants[0]
    while cursor < instants[-1]:
        want_next = next(i for i in instants[1:] if i > cursor)
        want_last = [i for i in instants[1:] if i <= cursor]
        assert _fresh(expression, zone).next_after(cursor) == want_next, cursor
        assert _fresh(expression, zone).next_after(cursor + timedelta(seconds=1)) == next(
            i for i in instants[1:] if i > cursor + timedelta(seconds=1)
        )
        if want_last:
            assert _fresh(expression, zone).last_at_or_before(cursor) == want_last[-1], cursor
        assert _fresh(expression, zone).count_between(instants[0], cursor) == len(want_last)
        near = any(abs(i - cursor) <= timedelta(hours=2) for i in instants)
        cursor += step if near else timedelta(hours=1)


# --- the calendar beyond DST ---------------------------------------------------

# (id, expression, zone, after, expected UTC instants)
PLAIN_CASES: list[tuple[str, str, str, str, list[str]]] = [
    (
        "brief example: 30 2 from Berlin midnight",
        "30 2 * * *",
        "Europe/Berlin",
        "2026-03-27T23:00:00Z",
        ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"],
    ),
    (
        "strictly after an instant",
        "0 * * * *",
        "UTC",
        "2026-01-01T10:00:00Z",
        ["2026-01-01T11:00:00Z", "2026-01-01T12:00:00Z"],
    ),
    (
        "sub-second after",
        "0 * * * *",
        "UTC",
        "2026-01-01T09:59:59.999999Z",
        ["2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z"],
    ),
    (
        "non-UTC after is the same instant",
        "0 * * * *",
        "UTC",
        "2026-01-01T11:30:00+01:00",
        ["2026-01-01T11:00:00Z", "2026-01-01T12:00:00Z"],
    ),
    (
        "day-of-month OR day-of-week (13th or Friday)",
        "0 0 13 * 5",
        "UTC",
        "2026-02-01T00:00:00Z",
        ["2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z"],
    ),
    (
        "sunday as 0",
        "0 9 * * 0",
        "UTC",
        "2026-01-01T00:00:00Z",
        ["2026-01-04T09:00:00Z", "2026-01-11T09:00:00Z"],
    ),
    (
        "sunday as 7",
        "0 9 * * 7",
        "UTC",
        "2026-01-01T00:00:00Z",
        ["2026-01-04T09:00:00Z", "2026-01-11T09:00:00Z"],
    ),
    (
        "zone shifts the UTC instant",
        "0 9 * * 1-5",
        "America/New_York",
        "2026-01-02T00:00:00Z",
        ["2026-01-02T14:00:00Z", "2026-01-05T14:00:00Z", "2026-01-06T14:00:00Z"],
    ),
    (
        "leap day",
        "0 0 29 2 *",
        "UTC",
        "2026-01-01T00:00:00Z",
        ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"],
    ),
]


@pytest.mark.parametrize(
    ("case", "expression", "zone", "after", "expected"),
    PLAIN_CASES,
    ids=[c[0] for c in PLAIN_CASES],
)
def test_plain_calendar(
    case: str, expression: str, zone: str, after: str, expected: list[str]
) -> None:
    compiled = _fresh(expression, zone)
    iterator = compiled.iter_after(utc(after))
    assert [next(iterator) for _ in expected] == [utc(i) for i in expected]
    assert compiled.next_after(utc(after)) == utc(expected[0])


# (id, expression, zone, bound, expected newest instant <= bound)
LAST_CASES: list[tuple[str, str, str, str, str]] = [
    ("bound is an instant", "0 * * * *", "UTC", "2026-01-01T10:00:00Z", "2026-01-01T10:00:00Z"),
    ("just before", "0 * * * *", "UTC", "2026-01-01T09:59:59.999999Z", "2026-01-01T09:00:00Z"),
    ("just after", "0 * * * *", "UTC", "2026-01-01T10:00:00.000001Z", "2026-01-01T10:00:00Z"),
    ("years back", "0 0 29 2 *", "UTC", "2027-06-01T00:00:00Z", "2024-02-29T00:00:00Z"),
    (
        "second pass of the fold",
        "30 2 * * *",
        "Europe/Berlin",
        "2026-10-25T01:45:00Z",
        "2026-10-25T01:30:00Z",
    ),
    (
        "between the passes",
        "30 2 * * *",
        "Europe/Berlin",
        "2026-10-25T01:00:00Z",
        "2026-10-25T00:30:00Z",
    ),
    (
        "moved gap instant",
        "30 2 * * *",
        "Europe/Berlin",
        "2026-03-29T01:00:00Z",
        "2026-03-29T01:00:00Z",
    ),
]


@pytest.mark.parametrize(
    ("case", "expression", "zone", "bound", "expected"),
    LAST_CASES,
    ids=[c[0] for c in LAST_CASES],
)
def test_last_at_or_before(
    case: str, expression: str, zone: str, bound: str, expected: str
) -> None:
    assert _fresh(expression, zone).last_at_or_before(utc(bound)) == utc(expected)


# (id, expression, zone, after, upto, count of instants in (after, upto])
COUNT_CASES: list[tuple[str, str, str, str, str, int]] = [
    ("empty span", "0 * * * *", "UTC", "2026-01-01T10:00:00Z", "2026-01-01T10:00:00Z", 0),
    ("reversed span", "0 * * * *", "UTC", "2026-01-02T00:00:00Z", "2026-01-01T00:00:00Z", 0),
    ("end inclusive", "0 * * * *", "UTC", "2026-01-01T10:00:00Z", "2026-01-01T12:00:00Z", 2),
    # Every UTC hour is a whole local hour in Berlin, so DST changes nothing here.
    ("hourly year in Berlin", "0 * * * *", "Europe/Berlin", "2025-12-31T23:00:00Z",
     "2026-12-31T23:00:00Z", 8760),
    # 365 days, plus the second pass of 02:30 on 25 October.
    ("02:30 for a year in Berlin", "30 2 * * *", "Europe/Berlin", "2025-12-31T23:00:00Z",
     "2026-12-31T23:00:00Z", 366),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "expression", "zone", "after", "upto", "expected"),
    COUNT_CASES,
    ids=[c[0] for c in COUNT_CASES],
)
def test_count_between(
    case: str, expression: str, zone: str, after: str, upto: str, expected: int
) -> None:
    assert _fresh(expression, zone).count_between(utc(after), utc(upto)) == expected


# --- one-shot --------------------------------------------------------------------

AT = utc("2026-05-01T08:00:00Z")

# (id, method, arguments, expected)
ONESHOT_CASES: list[tuple[str, str, tuple[datetime, ...], object]] = [
    ("next before", "next_after", (AT - timedelta(seconds=1),), AT),
    ("next at", "next_after", (AT,), None),
    ("next after", "next_after", (AT + timedelta(days=1),), None),
    ("last before", "last_at_or_before", (AT - timedelta(seconds=1),), None),
    ("last at", "last_at_or_before", (AT,), AT),
    ("last after", "last_at_or_before", (AT + timedelta(days=1),), AT),
    ("count containing", "count_between", (AT - timedelta(hours=1), AT), 1),
    ("count excluding start", "count_between", (AT, AT + timedelta(hours=1)), 0),
    ("count before", "count_between", (AT - timedelta(hours=2), AT - timedelta(hours=1)), 0),
    ("dst note", "dst_note", (AT,), None),
    ("local", "local", (AT,), AT),
]


@pytest.mark.parametrize(
    ("case", "method", "args", "expected"), ONESHOT_CASES, ids=[c[0] for c in ONESHOT_CASES]
)
def test_oneshot(case: str, method: str, args: tuple[datetime, ...], expected: object) -> None:
    compiled = compile_trigger(OneShotTrigger(at=AT))
    assert isinstance(compiled, CompiledOneShot)
    assert getattr(compiled, method)(*args) == expected
    assert compiled.timezone == "UTC"


def test_oneshot_iteration() -> None:
    compiled = compile_trigger(OneShotTrigger(at=AT))
    assert list(compiled.iter_after(AT - timedelta(days=1))) == [AT]
    assert list(compiled.iter_after(AT)) == []


# --- caching, memo purity, misuse -----------------------------------------------


def test_compile_is_cached_by_value() -> None:
    first = compile_trigger(CronTrigger(expression="0 * * * *", timezone="Europe/Berlin"))
    second = compile_trigger(CronTrigger(expression="0 * * * *", timezone="Europe/Berlin"))
    assert first is second
    assert first is not compile_trigger(CronTrigger(expression="0 * * * *"))


def test_interleaved_queries_do_not_disturb_each_other() -> None:
    compiled = _fresh("*/30 * * * *", "Europe/Berlin")
    a = utc("2026-10-24T23:45:00Z")
    b = utc("2026-01-01T00:10:00Z")
    answers: list[datetime | None] = []
    for _ in range(4):
        a_next = compiled.next_after(a)
        b_next = compiled.next_after(b)
        assert a_next is not None and b_next is not None
        answers += [a_next, b_next]
        a, b = a_next, b_next
    # A second iterator running in between must not move the memo either.
    side = compiled.iter_after(utc("2026-10-25T00:00:00Z"))
    assert next(side) == utc("2026-10-25T00:30:00Z")
    assert compiled.next_after(a) == utc("2026-10-25T02:00:00Z")
    assert next(side) == utc("2026-10-25T01:00:00Z")
    assert answers == [
        utc("2026-10-25T00:00:00Z"),
        utc("2026-01-01T00:30:00Z"),
        utc("2026-10-25T00:30:00Z"),
        utc("2026-01-01T01:00:00Z"),
        utc("2026-10-25T01:00:00Z"),
        utc("2026-01-01T01:30:00Z"),
        utc("2026-10-25T01:30:00Z"),
        utc("2026-01-01T02:00:00Z"),
    ]
    # Asking again about an old instant answers the same as the first time.
    assert compiled.next_after(utc("2026-10-25T00:00:00Z")) == utc("2026-10-25T00:30:00Z")


def test_a_herd_asking_one_question_walks_the_calendar_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Schedules sharing an expression share its compiled trigger: ten thousand
    # of them due at once ask it the same questions in one wake-up.
    compiled = _fresh("* * * * *", "Europe/Berlin")
    built: list[object] = []
    real = calendar_module.croniter

    class Counting(real):  # type: ignore[misc,valid-type]
        def __init__(self, *args: object, **kwargs: object) -> None:
            built.append(args)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(calendar_module, "croniter", Counting)
    at = utc("2026-03-02T09:31:00Z")
    assert {compiled.next_after(at) for _ in range(1000)} == {utc("2026-03-02T09:32:00Z")}
    assert {compiled.dst_note(at) for _ in range(1000)} == {None}
    assert len(built) == 1
    # The fall-back fold is still labelled, whoever asks first.
    fold = utc("2026-10-25T00:30:00Z")
    assert [compiled.dst_note(fold) for _ in range(3)] == ["fold"] * 3


def test_iterators_are_independent() -> None:
    compiled = _fresh("0 * * * *", "UTC")
    first = compiled.iter_after(utc("2026-01-01T00:00:00Z"))
    second = compiled.iter_after(utc("2026-01-01T00:00:00Z"))
    assert next(first) == utc("2026-01-01T01:00:00Z")
    assert next(first) == utc("2026-01-01T02:00:00Z")
    assert next(second) == utc("2026-01-01T01:00:00Z")


NAIVE = datetime(2026, 1, 1, 12, 0)

MISUSE_CASES: list[tuple[str, str, tuple[datetime, ...]]] = [
    ("next_after", "next_after", (NAIVE,)),
    ("last_at_or_before", "last_at_or_before", (NAIVE,)),
    ("count_between", "count_between", (NAIVE, AT)),
    ("dst_note", "dst_note", (NAIVE,)),
    ("local", "local", (NAIVE,)),
]


@pytest.mark.parametrize("trigger", [OneShotTrigger(at=AT), CronTrigger(expression="0 * * * *")])
@pytest.mark.parametrize(("case", "method", "args"), MISUSE_CASES, ids=[c[0] for c in MISUSE_CASES])
def test_naive_arguments_are_misuse(
    trigger: OneShotTrigger | CronTrigger, case: str, method: str, args: tuple[datetime, ...]
) -> None:
    compiled = compile_trigger(trigger)
    with pytest.raises(CoreMisuse, match="must be an aware datetime"):
        getattr(compiled, method)(*args)
    with pytest.raises(CoreMisuse):
        next(iter(compiled.iter_after(NAIVE)))
