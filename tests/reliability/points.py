"""The crash points of the scenario, enumerated by running it once with a
recording injector (see test_crash_points.py)."""

from __future__ import annotations

import asyncio
import random
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from shell import ManualClock
from shell.durable import CrashAt, SimulatedCrash, set_fault_injector
from shell.sim.disk import PowerCut, SimDisk, SimFileSystem
from tests.service.conftest import START

from .scenario import run_scenario
from .world import CrashPoint, PhasedCrash, World

__all__ = [
    "all_points",
    "crash_and_cut",
    "crash_points",
    "record_points",
    "sync_points",
    "without_empty_commits",
]


def sync_points(scenario: Callable[[SimDisk], None]) -> list[tuple[str, int]]:
    """Each `(point, n-th time)` a synchronous scenario on a fresh simulated
    disk passes (the power-cut campaigns' cases)."""
    recorder = CrashAt(None)
    previous = set_fault_injector(recorder)
    try:
        scenario(SimDisk())
    finally:
        set_fault_injector(previous)
    counts: dict[str, int] = {}
    cases: list[tuple[str, int]] = []
    for point in recorder.seen:
        counts[point] = counts.get(point, 0) + 1
        cases.append((point, counts[point]))
    return cases


def crash_and_cut(
    scenario: Callable[[SimDisk], None], point: str, occurrence: int, mode: PowerCut
) -> SimDisk:
    """A fresh simulated disk after `scenario` crashed at the `occurrence`-th
    time of `point` and the machine lost the power (`mode`)."""
    disk = SimDisk()
    previous = set_fault_injector(CrashAt(point, occurrence=occurrence))
    try:
        try:
            scenario(disk)
        except SimulatedCrash:
            pass
        else:
            raise AssertionError(f"the scenario never reached {point} #{occurrence}")
    finally:
        set_fault_injector(previous)
    disk.power_cut(random.Random(f"{point}/{occurrence}"), mode)
    return disk


async def record_points(root: Path) -> list[CrashPoint]:
    injector = PhasedCrash()
    previous = set_fault_injector(injector)
    # On the simulated disk, as the in-process crash test runs (the points are
    # the same on files: the SIGKILL test reaches them there).
    world = World(root, ManualClock(START), injector, disk=SimFileSystem())
    try:
        crashed_in = await run_scenario(world, injector)
        assert crashed_in is None
    finally:
        set_fault_injector(previous)
        await world.shutdown()
    return injector.seen


# A group commit with nothing to write, flushing files or through the journal.
_EMPTY_COMMITS = (
    ["before:commit", "before:sync", "after:sync", "after:commit"],
    ["before:commit", "after:commit"],
)


def without_empty_commits(points: list[CrashPoint]) -> tuple[list[CrashPoint], int]:
    """The points minus those of group commits that had nothing to write (a
    round with no commands): a crash there leaves the disk exactly as a crash
    at the point before it. Returns the kept points and how many were dropped."""
    kept: list[CrashPoint] = []
    dropped = 0
    i = 0
    while i < len(points):
        for empty in _EMPTY_COMMITS:
            window = points[i : i + len(empty)]
            if [p.point for p in window] == empty and len({p.phase for p in window}) == 1:
                dropped += len(window)
                i += len(window)
                break
        else:
            kept.append(points[i])
            i += 1
    return kept, dropped


def _enumerate() -> list[CrashPoint]:
    found: list[CrashPoint] = []

    def run() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            found.extend(asyncio.run(record_points(Path(tmp) / "store")))

    # A thread of its own: the caller may be inside a running event loop.
    worker = threading.Thread(target=run, name="enumerate-crash-points")
    worker.start()
    worker.join()
    if not found:
        raise RuntimeError("enumerating the crash points failed (see the thread's traceback)")
    return found


_ALL_POINTS: list[CrashPoint] | None = None


def all_points() -> list[CrashPoint]:
    """Every fault point the scenario reaches, in order."""
    global _ALL_POINTS
    if _ALL_POINTS is None:
        _ALL_POINTS = _enumerate()
    return _ALL_POINTS


def crash_points() -> list[CrashPoint]:
    """The points the crash test covers: all but those of empty group commits."""
    return without_empty_commits(all_points())[0]
