"""The simulation's two times: the wall clock and the moment.

The scheduler reads a wall clock, which the simulation may set back or
forward (an operator or NTP setting the host clock, rule L). Its records
carry that clock's readings: a lifecycle record's `at`, a decision row's
`recorded_at`. After a step back a reading no longer says what came first,
so the checker orders what happened by the *moment*: the simulation's own
time, which only goes forward.

A reading identifies its moment because the simulation never shows the
same reading twice: a move onto a reading shown before is moved on by a
microsecond (`show`). A stamp that is not a reading (a prepared round's
rows carry their instant) is placed at the last moment the wall clock
reached it (`decided_at`).

A step, back or forward, takes a microsecond of the moment: the workload's
times are moments, so what operators do next comes at its usual pace on a
clock that jumped. Without a step the moment is the reading, and every
conversion here is the identity.
"""

from __future__ import annotations

import bisect
from datetime import datetime, timedelta
from typing import Final

__all__ = ["Timeline"]

_TICK: Final = timedelta(microseconds=1)


class Timeline:
    """Every reading the simulation's clock showed, with its moment."""

    def __init__(self, start: datetime) -> None:
        self._moments: list[datetime] = [start]
        self._readings: list[datetime] = [start]
        self._moment_of: dict[datetime, datetime] = {start: start}
        self.steps_back = 0
        self.steps_forward = 0

    @property
    def now(self) -> datetime:
        """The current moment."""
        return self._moments[-1]

    def show(self, wanted: datetime) -> datetime:
        """Time passes up to `wanted` (or a microsecond past each reading
        shown before it); returns the reading to set. `wanted` equal to the
        reading now moves nothing; one before it is a step (`step`)."""
        current = self._readings[-1]
        if wanted == current:
            return current
        if wanted < current:
            return self.step(wanted)
        return self._move(wanted, wanted - current)

    def step(self, wanted: datetime) -> datetime:
        """The clock is set to `wanted` (or a microsecond past each reading
        shown before it) and a microsecond passes; returns the reading to
        set. Counted in `steps_back` or `steps_forward`."""
        if wanted < self._readings[-1]:
            self.steps_back += 1
        else:
            self.steps_forward += 1
        return self._move(wanted, _TICK)

    def _move(self, wanted: datetime, passed: timedelta) -> datetime:
        reading = wanted
        while reading in self._moment_of:
            reading += _TICK
        moment = self._moments[-1] + passed
        self._moments.append(moment)
        self._readings.append(reading)
        self._moment_of[reading] = moment
        return reading

    def moment_of(self, reading: datetime) -> datetime | None:
        """The moment the clock showed `reading`; None if it never did."""
        return self._moment_of.get(reading)

    def reached(self, value: datetime, upto: datetime) -> datetime | None:
        """The moment the wall clock last came to `value` or past it by the
        moment `upto` (the start of the last stretch of readings at or past
        it, which may have ended in a step back before `upto`); None if it
        never did."""
        index = bisect.bisect_right(self._moments, upto) - 1
        while index >= 0 and self._readings[index] < value:
            index -= 1
        found = None
        while index >= 0 and self._readings[index] >= value:
            found = self._moments[index]
            index -= 1
        return found

    def decided_at(self, stamp: datetime, upto: datetime) -> datetime | None:
        """The moment of a decision stamped `stamp` that became durable at the
        moment `upto`: the moment of that reading, unless the clock went
        back behind it since. A decision that waits so long is a round
        prepared ahead (stamped with its instant: `SchedulerService`), as is
        one stamped with no reading; it is decided when the clock last came
        to its stamp. (A round is otherwise durable in the step that decided
        it, or, replayed from the journal, at the next start, and the
        simulation steps the clock only from a settled service.)"""
        moment = self._moment_of.get(stamp)
        if moment is None or moment > upto or self.went_behind(stamp, moment, upto):
            return self.reached(stamp, upto)
        return moment

    def went_behind(self, value: datetime, since: datetime, upto: datetime) -> bool:
        """Whether the clock read earlier than `value` after the moment
        `since`, up to the moment `upto`."""
        first = bisect.bisect_right(self._moments, since)
        last = bisect.bisect_right(self._moments, upto)
        return any(reading < value for reading in self._readings[first:last])

    def readings(self) -> list[tuple[datetime, datetime]]:
        """Every (moment, reading), in moment order."""
        return list(zip(self._moments, self._readings, strict=True))
