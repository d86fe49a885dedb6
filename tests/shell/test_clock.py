"""The clocks' steps (`shell.clock`): the system clock tells the service when
it is set, so that an idle service can sleep until its next instant; a clock
read from elsewhere cannot, and says so."""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import UTC, datetime

import pytest

from shell.clock import ManualClock, ReadClock, SystemClock, system_now, watch_wall_clock

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")


def _set_the_wall_clock_to_itself() -> None:
    """A step of (almost) nothing: the kernel tells every watcher of a set of
    the clock, whatever its size. Skips where the process may not set it."""
    try:
        time.clock_settime_ns(time.CLOCK_REALTIME, time.clock_gettime_ns(time.CLOCK_REALTIME))
    except PermissionError:
        pytest.skip("this process may not set the wall clock (CAP_SYS_TIME)")


@linux_only
async def test_a_set_of_the_wall_clock_is_told_and_so_is_the_next() -> None:
    stepped = asyncio.Event()
    stop = watch_wall_clock(stepped.set)
    assert stop is not None
    try:
        # Time passing is no step.
        await asyncio.sleep(0.05)
        assert not stepped.is_set()
        _set_the_wall_clock_to_itself()
        await asyncio.wait_for(stepped.wait(), timeout=5)
        # Armed again: the next set is told too.
        stepped.clear()
        _set_the_wall_clock_to_itself()
        await asyncio.wait_for(stepped.wait(), timeout=5)
    finally:
        stop()


@linux_only
async def test_the_system_clock_and_a_server_on_it_watch_steps_other_sources_do_not() -> None:
    for clock in (SystemClock(), ReadClock(system_now)):
        stop = clock.watch_steps(lambda: None)
        assert stop is not None
        stop()
    # A server's own clock (a test's frozen time, say) is not the wall clock.
    assert ReadClock(lambda: datetime(2026, 1, 1, tzinfo=UTC)).watch_steps(lambda: None) is None


async def test_a_manual_clock_tells_of_steps_only_when_asked_to() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert ManualClock(start).watch_steps(lambda: None) is None
    clock = ManualClock(start, tells_steps=True)
    told: list[datetime] = []
    stop = clock.watch_steps(lambda: told.append(clock.now()))
    assert stop is not None
    await clock.set(datetime(2026, 1, 1, 0, 1, tzinfo=UTC))
    assert told == []
    await clock.step(datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC))
    assert told == [datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)]
    stop()
    await clock.step(datetime(2026, 1, 1, 0, 2, tzinfo=UTC))
    assert len(told) == 1
