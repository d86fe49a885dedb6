"""The service's hold on the cyclic garbage collector (`shell.service`,
`_CollectorPause`): off while a round runs, its pass deferred to the loop's
quiet moment, the older generations still collected, and the collector on
again whenever the loop is quiet or stopped."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from shell import ManualClock, service
from shell.service import _collect_due, _CollectorPause

from .conftest import CONSTANT_PLAN, START, Harness


@pytest.fixture
def passes() -> Iterator[list[int]]:
    """The generations of the collector's passes while the test runs; the
    collector's switch and thresholds as they were afterwards."""
    seen: list[int] = []

    def heard(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    was_on, thresholds = gc.isenabled(), gc.get_threshold()
    # No pass of the collector's own in between (the server's threshold is 50,000).
    gc.set_threshold(1_000_000, *thresholds[1:])
    # Every generation's count from zero: which pass is due depends on how
    # many young passes the imports and earlier tests left counted.
    gc.collect()
    gc.callbacks.append(heard)
    try:
        yield seen
    finally:
        gc.callbacks.remove(heard)
        gc.set_threshold(*thresholds)
        if was_on:
            gc.enable()
        else:
            gc.disable()


def _young_garbage(count: int) -> list[object]:
    return [[] for _ in range(count)]


def _enough_for_a_quiet_pass() -> int:
    """More young objects than the quiet moment's pass waits for."""
    return 2 * max(service._QUIET_MIN, gc.get_threshold()[0] // 10)


def test_the_pass_after_a_hold_waits_for_the_quiet_moment(passes: list[int]) -> None:
    gc.enable()
    pause = _CollectorPause()
    with pause.paused():
        assert not gc.isenabled()
        kept = _young_garbage(_enough_for_a_quiet_pass())
    # Released, but the loop is not quiet yet: the runs the round launched
    # are executing, and no pass scans them.
    assert not gc.isenabled()
    assert passes == []
    pause.collect_deferred()
    assert gc.isenabled()
    assert passes == [0]
    # Nothing deferred any more: a second quiet moment runs nothing.
    pause.collect_deferred()
    assert passes == [0]
    del kept


def test_a_quiet_moment_with_few_young_objects_leaves_them_to_the_trigger(
    passes: list[int],
) -> None:
    gc.enable()
    gc.collect(0)
    pause = _CollectorPause()
    with pause.paused():
        pass
    pause.collect_deferred()
    assert gc.isenabled() and passes == [0]  # the test's own pass only


def test_a_quiet_moment_under_a_hold_runs_nothing(passes: list[int]) -> None:
    gc.enable()
    pause = _CollectorPause()
    pause.hold()  # a round prepared ahead of its instant, waiting for it
    with pause.paused():
        pass
    pause.collect_deferred()
    assert not gc.isenabled() and passes == []
    pause.release()
    pause.collect_deferred()
    assert gc.isenabled()


def test_a_loop_that_never_goes_quiet_still_collects(
    passes: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "_DEFERRED_MOST", 5_000)
    gc.enable()
    pause = _CollectorPause()
    with pause.paused():
        pass
    kept = _young_garbage(10_000)
    with pause.paused():  # the next round, with no quiet moment between
        assert passes == [0]
    assert not gc.isenabled()
    del kept


def test_a_collector_turned_off_by_the_process_stays_off(passes: list[int]) -> None:
    gc.disable()
    pause = _CollectorPause()
    with pause.paused():
        kept = _young_garbage(_enough_for_a_quiet_pass())
    pause.collect_deferred()
    assert not gc.isenabled() and passes == []
    del kept


def test_the_deferred_pass_is_the_generation_cpythons_trigger_would_pick(
    passes: list[int],
) -> None:
    gc.disable()  # only the passes run here
    gc.collect()
    young, _, old = gc.get_threshold()
    # A middle pass is due once more young passes ran than its threshold.
    gc.set_threshold(young, 1, old)
    _collect_due()
    gc.collect(0)
    gc.collect(0)
    _collect_due()
    # An old pass once more middle passes ran than its threshold.
    gc.set_threshold(young, 1_000, 1)
    gc.collect(1)
    gc.collect(1)
    _collect_due()
    assert passes == [2, 0, 0, 0, 1, 1, 1, 2]


async def test_a_running_service_leaves_the_collector_on_when_quiet_and_stopped(
    tmp_path: Path, passes: list[int]
) -> None:
    gc.enable()
    h = Harness(tmp_path / "store", ManualClock(START))
    await h.build_server()
    await h.deploy("report.default", CONSTANT_PLAN)
    try:
        # Nothing prepared ahead: a prepared round holds the pause until its
        # instant (tested above), and here the loop's quiet moments are watched.
        await h.boot(prepare_ahead_s=0)
        await h.schedules.create_schedule(
            schedule_id="every-minute",
            deployment_id="report.default",
            trigger={"kind": "cron", "expression": "* * * * *", "timezone": "UTC"},
            inputs={"when": {"$bind": "occurrence.instant"}},
        )
        for minute in range(1, 4):
            await h.at(START + timedelta(minutes=minute))
            await h.until_runs_ended("every-minute")
            # Quiet: the runs reported, the deferred pass ran.
            assert gc.isenabled()
        assert [row["status"] for row in await h.occurrences("every-minute")] == ["completed"] * 3
    finally:
        await h.shutdown()
    assert gc.isenabled()
