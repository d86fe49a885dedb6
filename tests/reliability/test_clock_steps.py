"""Clock steps: the wall clock jumps backwards and forwards under a running
service (an NTP step), and across a restart. Nothing is replayed; instants a
forward step skips over are decided by each schedule's misfire policy, as a
downtime would be; a backward step is logged once, and each schedule decides
only instants after its watermark, on the wall clock."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from shell import ManualClock
from shell.startup_checkpoint import CHECKPOINT_FILE
from tests.service.conftest import CONSTANT_PLAN, START

from .world import World

STEPPED_BACK = "clock stepped back"


def at(h: int, m: int = 0, s: int = 0) -> datetime:
    return START.replace(hour=h, minute=m, second=s)


@pytest.fixture
async def world(store_root: Path) -> AsyncIterator[World]:
    w = World(store_root, ManualClock(START), None)
    await w.boot()
    await w.deploy("report.default", CONSTANT_PLAN)
    for schedule_id, misfire in (("skip", "skip"), ("latest", "latest")):
        await w.schedules.create_schedule(
            schedule_id=schedule_id,
            deployment_id="report.default",
            trigger={"kind": "cron", "expression": "0 * * * *"},
            inputs={"when": {"$bind": "occurrence.instant"}},
            misfire=misfire,
        )
    await w.schedules.create_schedule(
        schedule_id="once",
        deployment_id="report.default",
        trigger={"kind": "oneshot", "at": at(12).isoformat()},
        inputs={"when": "noon"},
    )
    await w.settle()
    yield w
    await w.shutdown()


async def history(world: World) -> dict[str, list[tuple[str, str, int]]]:
    return {
        schedule_id: [
            (row["instant"][11:16], row["status"], row["count"])
            for row in await world.decided(schedule_id)
        ]
        for schedule_id in ("skip", "latest", "once")
    }


async def runs_per_occurrence(world: World) -> Counter[tuple[str, str]]:
    return Counter(
        (run["origin"]["schedule_id"], run["origin"]["instant"][11:16])
        for run in await world.runs()
    )


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("shell") and r.levelno == logging.WARNING
    ]


async def test_a_step_back_replays_nothing_and_is_logged_once(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    await world.at(at(10))
    await world.at(at(11, 0, 30))
    decided = await history(world)
    assert decided["skip"] == [("10:00", "completed", 1), ("11:00", "completed", 1)]
    assert decided["latest"] == decided["skip"]

    # NTP steps the clock back 90 minutes; time then runs on from there.
    caplog.clear()
    for moment in (at(9, 30), at(9, 59, 59), at(10), at(10, 0, 30), at(10, 30), at(11)):
        await world.at(moment)
    # Pause and resume while the clock is behind: still nothing to replay.
    await world.schedules.pause_schedule(schedule_id="skip")
    await world.at(at(11, 0, 10))
    await world.schedules.resume_schedule(schedule_id="skip")
    await world.at(at(11, 0, 20))
    assert await history(world) == decided
    stepped = [m for m in warnings(caplog) if STEPPED_BACK in m]
    assert len(stepped) == 1, stepped
    assert "from 2026-03-02T11:00:30Z to 2026-03-02T09:30:00Z" in stepped[0]

    # Once the clock is past the newest time seen, scheduling goes on.
    await world.at(at(12))
    after = await history(world)
    assert after["skip"][-1] == ("12:00", "completed", 1)
    assert after["latest"][-1] == ("12:00", "completed", 1)
    assert after["once"] == [("12:00", "completed", 1)]
    assert set((await runs_per_occurrence(world)).values()) == {1}


async def test_with_the_clock_behind_the_next_instant_is_not_one_decided_already(
    world: World,
) -> None:
    await world.at(at(10))
    await world.at(at(11, 0, 30))
    await world.at(at(10, 30))  # NTP steps the clock back 30 minutes
    # 11:00 was decided (it ran): the next after now would name it again.
    for schedule_id in ("skip", "latest"):
        shown = await world.schedules.get_schedule(schedule_id=schedule_id)
        assert shown["next_instant"] == "2026-03-02T12:00:00Z"
    # A resume while behind lands after the decided instants too.
    await world.schedules.pause_schedule(schedule_id="skip")
    await world.schedules.resume_schedule(schedule_id="skip")
    await world.settle()
    shown = await world.schedules.get_schedule(schedule_id="skip")
    assert shown["next_instant"] == "2026-03-02T12:00:00Z"
    # Across a restart, from what the stores say.
    await world.shutdown()
    await world.boot()
    await world.at(at(10, 40))
    for schedule_id in ("skip", "latest"):
        shown = await world.schedules.get_schedule(schedule_id=schedule_id)
        assert shown["next_instant"] == "2026-03-02T12:00:00Z"
    await world.at(at(12))
    assert (await history(world))["skip"][-1] == ("12:00", "completed", 1)
    assert set((await runs_per_occurrence(world)).values()) == {1}


async def test_a_trigger_made_while_the_clock_is_behind_runs(world: World) -> None:
    await world.at(at(10))
    await world.at(at(11, 0, 30))
    await world.at(at(10, 30))  # NTP steps the clock back 30 minutes
    # Made a moment ago on the wall clock, not 30 minutes before the newest
    # time seen: it is not refused as read late (rules P and L).
    answer = await world.schedules.trigger_schedule(schedule_id="skip")
    assert answer["instant"] == "2026-03-02T10:30:00Z"
    await world.settle()
    rows = await world.decided("skip")
    assert [(r["instant"][11:16], r["origin"], r["status"]) for r in rows] == [
        ("10:00", "schedule", "completed"),
        ("11:00", "schedule", "completed"),
        ("10:30", "trigger", "completed"),
    ]


async def test_a_restart_with_the_clock_behind_replays_nothing(world: World) -> None:
    await world.at(at(10))
    await world.at(at(11))
    decided = await history(world)
    await world.shutdown()

    # The process comes back on a clock two hours behind what it last saw.
    await world.clock.set(at(9))
    await world.boot()
    for moment in (at(9, 30), at(10), at(10, 30), at(11), at(11, 30)):
        await world.at(moment)
    assert await history(world) == decided
    await world.at(at(12))
    assert (await history(world))["skip"][-1] == ("12:00", "completed", 1)
    assert set((await runs_per_occurrence(world)).values()) == {1}


async def test_a_step_forward_is_decided_by_the_misfire_policy_and_its_correction_replays_nothing(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    await world.at(at(10))
    # The clock jumps forward five and a half hours.
    await world.at(at(15, 30))
    decided = await history(world)
    # misfire=skip: one row for the five missed instants.
    assert decided["skip"] == [("10:00", "completed", 1), ("15:00", "skipped-misfire", 5)]
    # misfire=latest: the older ones coalesced, the newest run once (no burst).
    assert decided["latest"] == [
        ("10:00", "completed", 1),
        ("14:00", "coalesced", 4),
        ("15:00", "completed", 1),
    ]
    assert decided["once"] == [("12:00", "skipped-misfire", 1)]
    assert set((await runs_per_occurrence(world)).values()) == {1}

    # The step was wrong: NTP corrects it back. The instants the clock passes
    # again were decided already.
    caplog.clear()
    for h in (10, 11, 12, 13, 14, 15):
        await world.at(at(h, 5))
    assert await history(world) == decided
    assert len([m for m in warnings(caplog) if STEPPED_BACK in m]) == 1

    await world.at(at(16))
    after = await history(world)
    assert after["skip"][-1] == ("16:00", "completed", 1)
    assert after["latest"][-1] == ("16:00", "completed", 1)
    assert set((await runs_per_occurrence(world)).values()) == {1}


async def test_small_steps_around_an_instant_admit_it_once(world: World) -> None:
    await world.at(at(10, 0, 30))
    for seconds in (-40, 10, -5, 45, -50, 61):
        await world.at(at(10) + timedelta(seconds=seconds))
    await world.at(at(10, 30))
    decided = await history(world)
    assert decided["skip"] == [("10:00", "completed", 1)]
    assert decided["latest"] == [("10:00", "completed", 1)]
    assert (await runs_per_occurrence(world))[("skip", "10:00")] == 1


async def create_a_one_shot_while_behind(world: World) -> None:
    """The clock at 11:00:30, then stepped back 70 minutes; on it, a one-shot
    for 10:30, 40 minutes ahead on the wall clock."""
    await world.at(at(11, 0, 30))
    await world.at(at(9, 50))
    await world.schedules.create_schedule(
        schedule_id="later",
        deployment_id="report.default",
        trigger={"kind": "oneshot", "at": at(10, 30).isoformat()},
        inputs={"when": "later"},
    )
    await world.settle()


async def test_a_schedule_created_while_the_clock_is_behind_fires_at_its_wall_time(
    world: World,
) -> None:
    """Before 2026-12-07 the scheduler decided as of the newest time it had
    seen until the clock caught up: this one-shot, 40 minutes ahead on the
    wall clock, was recorded `skipped-misfire` at its creation."""
    await create_a_one_shot_while_behind(world)
    assert await world.decided("later") == []
    shown = await world.schedules.get_schedule(schedule_id="later")
    assert shown["next_instant"] == "2026-03-02T10:30:00Z"
    await world.at(at(10, 29, 59))
    assert await world.decided("later") == []
    await world.at(at(10, 30))
    assert [r["status"] for r in await world.decided("later")] == ["completed"]
    # The schedules decided before the step replay nothing meanwhile.
    await world.at(at(11, 30))
    assert set((await runs_per_occurrence(world)).values()) == {1}
    assert [row[0] for row in (await history(world))["skip"]] == ["10:00", "11:00"]


async def test_a_schedule_resumed_while_behind_fires_what_the_wall_clock_reaches_first(
    world: World,
) -> None:
    """Paused before the step: an instant the clock reached while it was
    paused is not decided again; the first one the wall clock reaches after
    the resume that no decision covers runs on time, not as missed."""
    await world.at(at(10, 0, 30))
    await world.schedules.pause_schedule(schedule_id="skip")
    await world.at(at(11, 0, 30))  # 11:00 passes while paused
    await world.at(at(10, 20))  # NTP steps the clock back 40 minutes
    await world.schedules.resume_schedule(schedule_id="skip")
    await world.settle()
    shown = await world.schedules.get_schedule(schedule_id="skip")
    assert shown["next_instant"] == "2026-03-02T11:00:00Z"
    await world.at(at(11))
    await world.at(at(12))
    rows = (await history(world))["skip"]
    assert rows == [("10:00", "completed", 1), ("11:00", "completed", 1), ("12:00", "completed", 1)]
    assert set((await runs_per_occurrence(world)).values()) == {1}


async def test_a_schedule_edited_while_behind_fires_its_new_calendar_on_the_wall_clock(
    world: World,
) -> None:
    """An edit lands after the instants decided already: the new calendar's
    first instant after them runs when the wall clock reaches it, and none
    decided before the step is decided again."""
    await world.at(at(10))
    await world.at(at(11, 0, 30))
    await world.at(at(10, 10))  # NTP steps the clock back 50 minutes
    current = await world.schedules.get_schedule(schedule_id="skip")
    await world.schedules.update_schedule(
        schedule_id="skip",
        expected_revision=current["revision"],
        trigger={"kind": "cron", "expression": "*/20 * * * *"},
    )
    await world.settle()
    shown = await world.schedules.get_schedule(schedule_id="skip")
    assert shown["next_instant"] == "2026-03-02T11:20:00Z"
    for moment in (at(10, 20), at(10, 40), at(11), at(11, 20)):
        await world.at(moment)
    rows = (await history(world))["skip"]
    assert rows == [("10:00", "completed", 1), ("11:00", "completed", 1), ("11:20", "completed", 1)]
    assert set((await runs_per_occurrence(world)).values()) == {1}


async def test_a_one_shot_created_while_behind_survives_a_restart_still_behind(
    world: World,
) -> None:
    """What the stores say after a restart still behind: the one-shot made
    on the stepped-back clock is still to come, and runs once at its time."""
    await create_a_one_shot_while_behind(world)
    await world.shutdown()
    await world.clock.set(at(10))
    await world.boot()
    await world.settle()
    assert await world.decided("later") == []
    await world.at(at(10, 30))
    await world.at(at(11, 30))
    assert [r["status"] for r in await world.decided("later")] == ["completed"]
    assert set((await runs_per_occurrence(world)).values()) == {1}


async def test_a_trigger_made_behind_the_previous_trigger_comes_after_it_across_a_restart(
    world: World, store_root: Path
) -> None:
    """Triggers strictly increase (rule P): one requested while the clock is
    set back behind the previous trigger is placed just after it, also
    when the process that decides it read the history through its index
    alone (the newest trigger is in the index header), and the history
    stays valid row by row."""
    await world.at(at(10, 20))
    first = await world.schedules.trigger_schedule(schedule_id="skip")
    assert first["instant"] == "2026-03-02T10:20:00Z"
    await world.at(at(10, 40))
    await world.shutdown()
    # No startup checkpoint: the next start reads every history through its index.
    (store_root / CHECKPOINT_FILE).unlink()
    await world.clock.set(at(10, 5))  # and the clock was set back meanwhile
    await world.boot()
    second = await world.schedules.trigger_schedule(schedule_id="skip")
    assert second["instant"] == "2026-03-02T10:20:00.000001Z"
    await world.at(at(10, 10))
    rows = [(r["instant"][11:], r["origin"]) for r in await world.decided("skip")]
    assert rows == [
        ("10:00:00Z", "schedule"),
        ("10:20:00Z", "trigger"),
        ("10:20:00.000001Z", "trigger"),
    ]
    # A start that reads every row (no index) finds nothing out of order.
    await world.shutdown()
    for index in store_root.glob("schedules/*/history.idx"):
        index.unlink()
    await world.boot()
    assert (await world.schedules.get_schedule(schedule_id="skip"))["blocked"] is None
