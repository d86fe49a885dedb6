"""The clock port: the only place the shell reads time.

The service asks the clock for `now()` and sleeps through it, so tests can drive
time with a `ManualClock` instead of sleeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "ManualClock", "ReadClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, aware UTC."""
        ...

    async def sleep_until(self, deadline: datetime, wake: asyncio.Event) -> None:
        """Return at `deadline` or as soon as `wake` is set, whichever comes first."""
        ...


class SystemClock:
    """Wall-clock time. Steps of the wall clock are handled by the core (clamped)."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep_until(self, deadline: datetime, wake: asyncio.Event) -> None:
        delay = (deadline - self.now()).total_seconds()
        if delay <= 0 or wake.is_set():
            return
        try:
            # Not `wait_for`, which (before Python 3.12) runs the wait in a
            # task of its own: the loop sleeps here every `poll_interval_s`.
            async with asyncio.timeout(delay):
                await wake.wait()
        except TimeoutError:
            return


class ReadClock(SystemClock):
    """The system clock's sleeps, with another source for the time: a
    server's `clock` callable (aware datetimes)."""

    def __init__(self, read: Callable[[], datetime]) -> None:
        self._read = read

    def now(self) -> datetime:
        return self._read()


class ManualClock:
    """A clock that only moves when a test says so.

    Sleepers wake when `advance`/`set` moves time to or past their deadline, or
    when their wake event is set.
    """

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware start instant")
        self._now = start.astimezone(UTC)
        self._moved = asyncio.Condition()

    def now(self) -> datetime:
        return self._now

    async def set(self, instant: datetime) -> None:
        """Jump to `instant` (backwards too: tests use it for clock steps)."""
        self._now = instant.astimezone(UTC)
        async with self._moved:
            self._moved.notify_all()

    async def advance(self, delta: timedelta | float) -> None:
        step = delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        await self.set(self._now + step)

    async def sleep_until(self, deadline: datetime, wake: asyncio.Event) -> None:
        async def wait_for_time() -> None:
            async with self._moved:
                await self._moved.wait_for(lambda: self._now >= deadline)

        if self._now >= deadline or wake.is_set():
            return
        timer = asyncio.ensure_future(wait_for_time())
        waker = asyncio.ensure_future(wake.wait())
        try:
            await asyncio.wait({timer, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (timer, waker):
                task.cancel()
            await asyncio.gather(timer, waker, return_exceptions=True)
