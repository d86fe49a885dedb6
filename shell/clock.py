"""The clock port: the only place the shell reads time.

The service asks the clock for `now()` and sleeps through it, so tests can drive
time with a `ManualClock` instead of sleeping.

Sleeps run on the event loop's monotonic clock, so a step of the wall clock
(an operator's `date -s`, a virtual machine resumed, NTP stepping rather
than slewing) is not seen by a sleeper until it wakes: a step forward past a
due instant would make it that much late. A clock that can tell of steps
(`watch_steps`: the system clock, on Linux, through a `timerfd` armed with
`TFD_TIMER_CANCEL_ON_SET`, which the kernel cancels whenever the wall clock
is set) lets the service sleep until its next instant; one that cannot is
looked at every `poll_interval_s`.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Final, Protocol

__all__ = ["Clock", "ManualClock", "ReadClock", "SystemClock", "system_now", "watch_wall_clock"]


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, aware UTC."""
        ...

    async def sleep_until(self, deadline: datetime, wake: asyncio.Event) -> None:
        """Return at `deadline` or as soon as `wake` is set, whichever comes first."""
        ...

    def watch_steps(self, on_step: Callable[[], None]) -> Callable[[], None] | None:
        """Call `on_step` in the running loop whenever this clock is set (a
        step, not its steady run); the function that stops watching, or None
        when this clock cannot tell (its reader then looks again and again)."""
        ...


def system_now() -> datetime:
    """The system's wall clock, aware UTC."""
    return datetime.now(UTC)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_CLOCK_REALTIME: Final = 0
_TFD_TIMER_ABSTIME: Final = 1
_TFD_TIMER_CANCEL_ON_SET: Final = 2
# Far enough that the timer never expires: only a set of the clock ends it.
_ARMED_FOR_S: Final = 100 * 365 * 86_400


def _load_timerfd() -> tuple[Callable[..., int], Callable[..., int]] | None:
    """libc's `timerfd_create` and `timerfd_settime` (Linux), else None.
    Python has them as `os.timerfd_*` from 3.13 only."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        create, settime = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError):
        return None
    create.argtypes = [ctypes.c_int, ctypes.c_int]
    create.restype = ctypes.c_int
    settime.argtypes = [
        ctypes.c_int,
        ctypes.c_int,
        ctypes.POINTER(_Itimerspec),
        ctypes.c_void_p,
    ]
    settime.restype = ctypes.c_int
    return create, settime


_TIMERFD: Final = _load_timerfd()


def watch_wall_clock(on_step: Callable[[], None]) -> Callable[[], None] | None:
    """Call `on_step` in the running loop whenever the system's wall clock is
    set; the function that stops watching, or None where the platform cannot
    tell (not Linux, or the kernel refused the timer)."""
    if _TIMERFD is None:
        return None
    create, settime = _TIMERFD
    fd = create(_CLOCK_REALTIME, os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        return None

    def arm() -> bool:
        until = _Timespec(int(time.time()) + _ARMED_FOR_S, 0)
        spec = _Itimerspec(_Timespec(0, 0), until)
        flags = _TFD_TIMER_ABSTIME | _TFD_TIMER_CANCEL_ON_SET
        return settime(fd, flags, ctypes.byref(spec), None) == 0

    if not arm():
        os.close(fd)
        return None
    loop = asyncio.get_running_loop()

    def readable() -> None:
        try:
            os.read(fd, 8)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno != errno.ECANCELED:
                raise
        # Set (or, a century on, expired): armed again for the next step.
        arm()
        on_step()

    loop.add_reader(fd, readable)

    def stop() -> None:
        loop.remove_reader(fd)
        os.close(fd)

    return stop


class SystemClock:
    """Wall-clock time. Steps of the wall clock are handled by the core
    (clamped); where the platform can tell of them, they wake the sleeper."""

    now = staticmethod(system_now)

    def watch_steps(self, on_step: Callable[[], None]) -> Callable[[], None] | None:
        return watch_wall_clock(on_step)

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

    def watch_steps(self, on_step: Callable[[], None]) -> Callable[[], None] | None:
        # Only the system clock's steps can be watched.
        return watch_wall_clock(on_step) if self._read is system_now else None


class ManualClock:
    """A clock that only moves when a test says so.

    Sleepers wake when `advance`/`set` moves time to or past their deadline, or
    when their wake event is set.
    """

    def __init__(self, start: datetime, *, tells_steps: bool = False) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware start instant")
        self._now = start.astimezone(UTC)
        self._moved = asyncio.Condition()
        # Like the system clock on Linux when True: `step` calls the watchers.
        self._tells_steps = tells_steps
        self._watchers: list[Callable[[], None]] = []

    def now(self) -> datetime:
        return self._now

    @property
    def tells_steps(self) -> bool:
        """Whether `step` is told to the watchers (`watch_steps`)."""
        return self._tells_steps

    async def set(self, instant: datetime) -> None:
        """Jump to `instant` (backwards too: tests use it for clock steps)."""
        self._now = instant.astimezone(UTC)
        async with self._moved:
            self._moved.notify_all()

    async def advance(self, delta: timedelta | float) -> None:
        step = delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        await self.set(self._now + step)

    async def step(self, instant: datetime) -> None:
        """Jump to `instant` as a wall clock set by hand does: unlike `set`
        (time passing), a step is told to the watchers (`tells_steps`)."""
        await self.set(instant)
        for on_step in list(self._watchers):
            on_step()

    def watch_steps(self, on_step: Callable[[], None]) -> Callable[[], None] | None:
        if not self._tells_steps:
            return None
        self._watchers.append(on_step)
        return lambda: self._watchers.remove(on_step)

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
