"""Trigger resolution: the UTC instants a trigger fires at.

A cron trigger is evaluated by croniter on aware datetimes in the trigger's
IANA zone; every result is converted to UTC. croniter owns DST: a wall time
that does not exist (spring forward) is resolved the way croniter resolves it
(`30 2 * * *` fires at 03:00 local that day), and a wall time that occurs
twice (fall back) fires on each pass croniter yields. Nothing here filters or
invents instants; `dst_note` only labels what croniter produced.

All methods take and return aware datetimes; UTC in, UTC out. A naive
argument is a caller bug and raises `CoreMisuse`.

Compiled triggers are cached by value (`compile_trigger`), and a cron trigger
keeps the croniter iterator of its last `next_after` answer, so a caller that
walks the calendar one instant at a time (`next_after(previous answer)`) pays
for one `get_next` per instant. It also remembers its last few answers of
`next_after` and `dst_note`: schedules sharing an expression share the
compiled trigger, so a herd of ten thousand `* * * * *` schedules asks the
same question ten thousand times in one wake-up and croniter answers once.
The memos never change an answer: a miss just asks croniter.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Final, Literal, TypeVar
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

from core.definitions import CronTrigger, OneShotTrigger, Trigger
from core.errors import CoreMisuse

__all__ = [
    "CompiledCron",
    "CompiledOneShot",
    "CompiledTrigger",
    "DstNote",
    "compile_trigger",
]

DstNote = Literal["gap", "fold"]

# A DST (or other offset) change further than this from an instant cannot
# have moved it or made its wall time ambiguous; real transitions are <= 2 h.
_TRANSITION_REACH: Final = timedelta(hours=6)
_MEMO_LIMIT: Final = 8
_TICK: Final = timedelta(microseconds=1)
_Key = TypeVar("_Key")
_Value = TypeVar("_Value")


def _remembered(memo: dict[_Key, _Value], key: _Key, compute: Callable[[_Key], _Value]) -> _Value:
    """`compute(key)`, answered from `memo` when it was asked lately (bounded)."""
    try:
        return memo[key]
    except KeyError:
        pass
    value = compute(key)
    if len(memo) >= _MEMO_LIMIT:
        memo.clear()
    memo[key] = value
    return value


def _require_aware(name: str, value: datetime) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise CoreMisuse(f"calendar: {name} must be an aware datetime, got naive {value!r}")


class CompiledTrigger(abc.ABC):
    """A trigger ready to answer calendar questions. Build with `compile_trigger`."""

    @property
    @abc.abstractmethod
    def timezone(self) -> str:
        """The IANA name instants are shown in ("UTC" for one-shots)."""

    @abc.abstractmethod
    def next_after(self, after: datetime) -> datetime | None:
        """The first instant strictly after `after`, or None when there is none."""

    @abc.abstractmethod
    def iter_after(self, after: datetime) -> Iterator[datetime]:
        """The instants strictly after `after`, strictly ascending (endless for cron)."""

    @abc.abstractmethod
    def last_at_or_before(self, bound: datetime) -> datetime | None:
        """The newest instant `<= bound`, or None when there is none."""

    @abc.abstractmethod
    def count_between(self, after: datetime, upto: datetime) -> int:
        """How many instants lie in `(after, upto]` (0 when `upto <= after`)."""

    @abc.abstractmethod
    def dst_note(self, instant: datetime) -> DstNote | None:
        """For an instant this trigger produced: "gap" when croniter moved a wall
        time that did not exist, "fold" when the instant's wall time occurs twice,
        else None."""

    @abc.abstractmethod
    def local(self, instant: datetime) -> datetime:
        """`instant` as an aware datetime in the trigger's zone."""


class CompiledOneShot(CompiledTrigger):
    """A one-shot trigger: exactly one instant."""

    __slots__ = ("_at",)

    def __init__(self, trigger: OneShotTrigger) -> None:
        self._at = trigger.at.astimezone(UTC)

    @property
    def timezone(self) -> str:
        return "UTC"

    @property
    def at(self) -> datetime:
        return self._at

    def next_after(self, after: datetime) -> datetime | None:
        _require_aware("after", after)
        return self._at if self._at > after else None

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        _require_aware("after", after)
        if self._at > after:
            yield self._at

    def last_at_or_before(self, bound: datetime) -> datetime | None:
        _require_aware("bound", bound)
        return self._at if self._at <= bound else None

    def count_between(self, after: datetime, upto: datetime) -> int:
        _require_aware("after", after)
        _require_aware("upto", upto)
        return 1 if after < self._at <= upto else 0

    def dst_note(self, instant: datetime) -> DstNote | None:
        _require_aware("instant", instant)
        return None

    def local(self, instant: datetime) -> datetime:
        _require_aware("instant", instant)
        return instant.astimezone(UTC)

    def __repr__(self) -> str:
        return f"CompiledOneShot(at={self._at.isoformat()})"


class CompiledCron(CompiledTrigger):
    """A cron trigger evaluated by croniter in its IANA zone."""

    __slots__ = ("_answers", "_expression", "_memo", "_notes", "_timezone", "_zone")

    def __init__(self, trigger: CronTrigger) -> None:
        self._expression = trigger.expression
        self._timezone = trigger.timezone
        self._zone = ZoneInfo(trigger.timezone)
        # last answer of next_after -> the live iterator that produced it.
        # dict.pop hands an iterator to at most one caller at a time.
        self._memo: dict[datetime, croniter] = {}
        self._answers: dict[datetime, datetime | None] = {}
        self._notes: dict[datetime, DstNote | None] = {}

    @property
    def timezone(self) -> str:
        return self._timezone

    @property
    def expression(self) -> str:
        return self._expression

    def _iterator(self, start: datetime) -> croniter:
        return croniter(self._expression, start.astimezone(self._zone), day_or=True)

    @staticmethod
    def _step(it: croniter) -> datetime | None:
        try:
            value: datetime = it.get_next(datetime)
        except CroniterBadDateError:
            return None
        return value.astimezone(UTC)

    def next_after(self, after: datetime) -> datetime | None:
        _require_aware("after", after)
        return _remembered(self._answers, after.astimezone(UTC), self._next_after)

    def _next_after(self, after: datetime) -> datetime | None:
        it = self._memo.pop(after, None)
        if it is None:
            it = self._iterator(after)
        found = self._step(it)
        # Guard the strictly-after promise against a repeated croniter result.
        while found is not None and found <= after:
            found = self._step(it)
        if found is not None:
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            self._memo[found] = it
        return found

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        _require_aware("after", after)
        last = after.astimezone(UTC)
        it = self._iterator(last)
        while True:
            found = self._step(it)
            if found is None:
                return
            if found > last:
                yield found
                last = found

    def last_at_or_before(self, bound: datetime) -> datetime | None:
        _require_aware("bound", bound)
        bound = bound.astimezone(UTC)
        # croniter's get_prev is strictly before its start, so first ask
        # whether `bound` itself is an instant.
        at_bound = self.next_after(bound - _TICK)
        if at_bound is not None and at_bound <= bound:
            return at_bound
        try:
            before: datetime = self._iterator(bound).get_prev(datetime)
        except CroniterBadDateError:
            return None
        return before.astimezone(UTC)

    def count_between(self, after: datetime, upto: datetime) -> int:
        _require_aware("after", after)
        _require_aware("upto", upto)
        count = 0
        for instant in self.iter_after(after):
            if instant > upto:
                break
            count += 1
        return count

    def dst_note(self, instant: datetime) -> DstNote | None:
        _require_aware("instant", instant)
        return _remembered(self._notes, instant, self._dst_note)

    def _dst_note(self, instant: datetime) -> DstNote | None:
        local = instant.astimezone(self._zone)
        wall = local.replace(tzinfo=None)
        first = wall.replace(fold=0, tzinfo=self._zone).utcoffset()
        second = wall.replace(fold=1, tzinfo=self._zone).utcoffset()
        # `wall` came from a real instant, so differing offsets mean it is ambiguous.
        if first != second:
            return "fold"
        earlier = (instant - _TRANSITION_REACH).astimezone(self._zone).utcoffset()
        if earlier == local.utcoffset():
            return None
        # An offset change happened shortly before: if the wall time does not
        # satisfy the expression, croniter moved a nonexistent wall time here.
        if not croniter.match(self._expression, wall, day_or=True):
            return "gap"
        return None

    def local(self, instant: datetime) -> datetime:
        _require_aware("instant", instant)
        return instant.astimezone(self._zone)

    def __repr__(self) -> str:
        return f"CompiledCron(expression={self._expression!r}, timezone={self._timezone!r})"


@lru_cache(maxsize=4096)
def compile_trigger(trigger: Trigger) -> CompiledTrigger:
    """The compiled form of `trigger`, cached by value."""
    if isinstance(trigger, OneShotTrigger):
        return CompiledOneShot(trigger)
    return CompiledCron(trigger)
