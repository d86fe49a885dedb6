"""Real crashes: a child process runs the crash scenario and SIGKILLs itself at
one fault point; the parent restarts on the same store and checks recovery.

The in-process injection (test_crash_points.py) covers every point; this
samples one point of each kind (the first time the scenario finishes each
kind of write) to show that the in-process simulation of a death is
faithful: here nothing is flushed, cleaned up or released except by the
kernel. The child is forked from the test process, which has everything
imported already, so a sample costs a scenario run, not an interpreter start.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from shell import ManualClock, startup_checkpoint
from shell.durable import set_fault_injector
from shell.startup_checkpoint import CHECKPOINT_FILE
from tests.service.conftest import START

from .figures import record
from .points import crash_points
from .scenario import GO, clock_during, hour, run_scenario
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

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork and SIGKILL")

_NEVER_REACHED = 3


def samples() -> list[CrashPoint]:
    """The first occurrence of every distinct kind of write, just after it:
    a write on disk and nothing after it is the state a death leaves (just
    before a write is just after the one before it)."""
    first: dict[str, CrashPoint] = {}
    points = crash_points()
    for point in points:
        if point.point.startswith("after:"):
            first.setdefault(point.point, point)
    chosen = list(first.values())
    # And a start that went by the stop's startup checkpoint, killed after its
    # first commit, before it writes a checkpoint of its own: a start leaves
    # the one it went by, so the restart goes by it too.
    chosen += [p for p in points if p.phase == "stop-start" and p.point == "after:commit"][:1]
    return chosen


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "sample" in metafunc.fixturenames:
        chosen = samples()
        metafunc.parametrize("sample", chosen, ids=[p.label for p in chosen])


def _child(root: Path, point: CrashPoint) -> None:
    """Run the scenario and SIGKILL this process at `point`. Never returns."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)

        def die() -> None:
            os.kill(os.getpid(), signal.SIGKILL)

        injector = PhasedCrash(point, on_crash=die)
        set_fault_injector(injector)
        # The enumeration's simulated files are as old as its manual clock
        # says, so every running checkpoint takes each schedule; real files
        # written a moment ago are not taken for `_SETTLE_NS`, and a
        # checkpoint then holds fewer entries: it would append its sections
        # in other phases than the enumeration saw. Nothing else writes
        # these files, so the margin guards against nothing here.
        startup_checkpoint._SETTLE_NS = 0
        asyncio.run(run_scenario(World(root, ManualClock(START), injector), injector))
    finally:
        os._exit(_NEVER_REACHED)


def _run_and_kill(root: Path, point: CrashPoint) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(root, point)
    _, status = os.waitpid(pid, 0)
    return status


async def _recover_and_check(root: Path, point: CrashPoint) -> None:
    before = disk_runs(root)
    admitted_before = disk_admissions(root)
    world = World(root, ManualClock(clock_during(point.phase)), None)
    try:
        await world.boot()
        await check_recovered(world, before, admitted_before)
        await world.at(hour(13))
        await finish_and_check(world, GO)
        await check_every_instant_decided(world, hour(13))
    finally:
        await world.shutdown()


_killed: list[str] = []


def test_sigkill_at_point_then_recover(store_root: Path, sample: CrashPoint) -> None:
    # A plain (not async) test: the fork must happen with no event loop running.
    status = _run_and_kill(store_root, sample)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
        f"the child was not killed at {sample.label} (wait status {status})"
    )
    if sample.phase == "stop-start" and sample.point == "after:commit":
        # The checkpoint the killed start went by is there for the restart.
        assert (store_root / CHECKPOINT_FILE).exists()
    asyncio.run(_recover_and_check(store_root, sample))
    _killed.append(sample.label)
    record(
        "crash points covered (SIGKILL, one after each kind of write)",
        f"{len(_killed)} of {len(samples())}",
    )
