"""How long an idle scheduler sleeps (`SchedulerService._look_interval_s`):
until its next instant, and no longer than `poll_interval_s`, unless its
clock tells it of its steps and the store is its alone; then no longer than
`quiet_poll_interval_s`. A step of the clock wakes it at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shell import ManualClock, SchedulerServiceConfig, build_scheduler_service

from .conftest import CONSTANT_PLAN, START, Harness

HOURLY = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}


class SleepRecordingClock(ManualClock):
    """A manual clock that notes until when the loop sleeps each time."""

    def __init__(self, start: datetime, *, tells_steps: bool) -> None:
        super().__init__(start, tells_steps=tells_steps)
        self.deadlines: list[datetime] = []

    async def sleep_until(self, deadline: datetime, wake: asyncio.Event) -> None:
        self.deadlines.append(deadline)
        await super().sleep_until(deadline, wake)


async def _idle_service(h: Harness, **config: Any) -> None:
    assert h.server is not None
    h.service = build_scheduler_service(
        h.server, SchedulerServiceConfig(enabled=True, **config), clock=h.clock
    )
    await h.service.start()
    await h.schedules.create_schedule(
        schedule_id="hourly", deployment_id="report.default", trigger=HOURLY
    )
    await h.service.settle()


async def _sleeps_again(clock: SleepRecordingClock, seen: int) -> None:
    for _ in range(1000):
        if len(clock.deadlines) > seen:
            return
        await asyncio.sleep(0)
    raise AssertionError("the loop did not go to sleep again")


async def _world(root: Path, *, tells_steps: bool) -> Harness:
    h = Harness(root, SleepRecordingClock(START, tells_steps=tells_steps))
    await h.build_server()
    await h.deploy("report.default", CONSTANT_PLAN)
    return h


@pytest.fixture(params=[True, False], ids=["steps-told", "steps-untold"])
async def world(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    h = await _world(tmp_path / "store", tells_steps=request.param)
    yield h
    await h.shutdown()


async def test_an_idle_loop_looks_every_poll_unless_its_clock_tells_of_steps(
    world: Harness,
) -> None:
    clock = world.clock
    assert isinstance(clock, SleepRecordingClock)
    await _idle_service(world, poll_interval_s=1.0, quiet_poll_interval_s=10.0)
    # Next instant 10:00: half an hour away, so the look interval decides.
    expected = timedelta(seconds=10 if clock.tells_steps else 1)
    assert clock.deadlines[-1] == START + expected
    seen = len(clock.deadlines)
    await clock.set(START + expected)
    await _sleeps_again(clock, seen)
    assert clock.deadlines[-1] == START + 2 * expected


async def test_a_longer_poll_interval_is_kept_when_steps_are_told(world: Harness) -> None:
    clock = world.clock
    assert isinstance(clock, SleepRecordingClock)
    await _idle_service(world, poll_interval_s=30.0, quiet_poll_interval_s=10.0)
    assert clock.deadlines[-1] == START + timedelta(seconds=30)


async def test_the_next_instant_comes_first_when_it_is_sooner(world: Harness) -> None:
    clock = world.clock
    assert isinstance(clock, SleepRecordingClock)
    await clock.set(START + timedelta(minutes=29, seconds=55))
    await _idle_service(world, poll_interval_s=30.0, prepare_ahead_s=0)
    assert clock.deadlines[-1] == datetime(2026, 3, 2, 10, 0, tzinfo=START.tzinfo)


async def test_a_step_of_the_clock_wakes_the_loop_at_once(tmp_path: Path) -> None:
    world = await _world(tmp_path / "store", tells_steps=True)
    try:
        clock = world.clock
        assert isinstance(clock, SleepRecordingClock)
        await _idle_service(world, poll_interval_s=1.0, quiet_poll_interval_s=10.0)
        seen = len(clock.deadlines)
        # Before the loop's deadline (START + 10 s): only the step's telling
        # wakes it, and it sleeps the look interval from the new time.
        await clock.step(START + timedelta(seconds=4))
        await _sleeps_again(clock, seen)
        assert clock.deadlines[-1] == START + timedelta(seconds=14)
    finally:
        await world.shutdown()
