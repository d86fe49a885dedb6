"""Crash-point injection: crash just before and just after every durable write
of the scenario (admission, run start and stop, run resume, create, update,
pause, resume-schedule, delete, start-up and recovery), restart on the same
store, and check what recovery promises.

The points are enumerated, not listed by hand: a recording injector runs the
scenario once at collection time and every `(phase, point, n-th time)` it sees
becomes one test. A new durable write therefore gets its crash tests without
anyone editing this file. The SIGKILL variant is in test_crash_sigkill.py.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from shell import ManualClock
from shell.durable import SimulatedCrash, set_fault_injector
from shell.sim.disk import PowerCut, SimFileSystem
from tests.service.conftest import START

from .figures import record
from .points import all_points, crash_points, record_points, without_empty_commits
from .scenario import GO, PHASES, clock_during, hour, run_scenario
from .world import (
    CrashPoint,
    PhasedCrash,
    World,
    check_every_instant_decided,
    check_recovered,
    disk_admissions,
    disk_runs,
    finish_and_check,
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "crash_point" in metafunc.fixturenames:
        points = crash_points()
        metafunc.parametrize("crash_point", points, ids=[p.label for p in points])


def _ignore_crashed_tasks(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    # Tasks of the dead "process" end in SimulatedCrash; nobody awaits them.
    if isinstance(context.get("exception"), SimulatedCrash):
        return
    loop.default_exception_handler(context)


_covered: Counter[str] = Counter()


def _power_cut_of(point: CrashPoint) -> PowerCut:
    # Each point gets one of the three cuts, in turn along the scenario, so
    # that every kind of write is crashed under each of them somewhere.
    return _CUTS[crash_points().index(point) % len(_CUTS)]


_CUTS: tuple[PowerCut, ...] = ("none", "some", "all")
_cut_losses: Counter[str] = Counter()


async def test_crash_at_point_then_recover(store_root: Path, crash_point: CrashPoint) -> None:
    """The process dies at the point and the machine loses power: the
    schedule stores and the journal (on the simulated disk) lose none, some
    or all of their unflushed writes; the run store, on files, keeps what
    the process wrote (its writes are flushed before they count)."""
    asyncio.get_running_loop().set_exception_handler(_ignore_crashed_tasks)
    root = store_root
    disk = SimFileSystem()
    injector = PhasedCrash(crash_point)
    previous = set_fault_injector(injector)
    world = World(root, ManualClock(START), injector, disk=disk)
    try:
        crashed_in = await run_scenario(world, injector)
        await world.abandon()
    finally:
        set_fault_injector(previous)
    assert injector.crashed and crashed_in == crash_point.phase, crash_point
    cut = _power_cut_of(crash_point)
    at_stake = disk.unsynced()
    disk.power_cut(random.Random(crash_point.label), cut)
    if at_stake:
        _cut_losses[cut] += 1

    # What the dead process left on disk decides what recovery must do.
    before = disk_runs(root, disk)
    admitted_before = disk_admissions(root, disk)
    restarted = World(root, ManualClock(clock_during(crash_point.phase)), None, disk=disk)
    try:
        await restarted.boot()
        await check_recovered(restarted, before, admitted_before)
        # The service goes on: the next hour is decided for every live cron schedule.
        await restarted.at(hour(13))
        for schedule_id in await restarted.schedule_ids():
            schedule = await restarted.schedules.get_schedule(schedule_id=schedule_id)
            if schedule["trigger"]["kind"] != "cron" or schedule["paused"] or schedule["deleted"]:
                continue
            rows = await restarted.decided(schedule_id)
            assert rows and rows[-1]["instant"] == "2026-03-02T13:00:00Z", (schedule_id, rows)
        await finish_and_check(restarted, GO)
        await check_every_instant_decided(restarted, hour(13))
    finally:
        await restarted.shutdown()
    _covered[crash_point.phase] += 1
    total = sum(_covered.values())
    record(
        "crash points covered (in-process)",
        f"{total} of {len(crash_points())} in {len(PHASES)} phases;"
        f" power cuts with unflushed writes at stake: "
        + ", ".join(f"{cut} {_cut_losses[cut]}" for cut in _CUTS),
    )


async def test_the_scenario_is_deterministic(tmp_path: Path) -> None:
    """The parametrization names points by their order within a phase, which
    only means something if every run of the scenario reaches them in the
    same order."""
    assert await record_points(tmp_path / "store") == all_points()
    phases = {p.phase for p in crash_points()}
    assert phases == {p.name for p in PHASES}, "a phase made no durable write"
    names = {p.point.split(":", 1)[1] for p in crash_points()}
    record("durable write points (kinds)", f"{len(names)}: {', '.join(sorted(names))}")
    record(
        "no-op points of empty group commits (not crashed)", without_empty_commits(all_points())[1]
    )
