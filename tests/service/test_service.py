"""The scheduler service on a manual clock: real stores, real host, no sleeping."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from core.errors import SchedulerUnavailable
from shell import SchedulerServiceConfig, build_scheduler_service

from .conftest import CONSTANT_PLAN, GATE_PLAN, START, Harness, sleep_plan

HOUR = timedelta(hours=1)


def hour(h: int, minute: int = 0) -> datetime:
    return START.replace(hour=h, minute=minute)


async def test_cron_schedule_over_simulated_hours(harness: Harness) -> None:
    await harness.boot()
    await harness.deploy("report.default", CONSTANT_PLAN)
    await harness.schedules.create_schedule(
        schedule_id="hourly",
        deployment_id="report.default",
        trigger={"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"},
        inputs={"when": {"$bind": "occurrence.instant"}},
    )
    for h in (10, 11, 12, 13):
        await harness.at(hour(h))
    rows = await harness.occurrences("hourly")
    assert [(r["instant"], r["status"]) for r in rows] == [
        (f"2026-03-02T{h}:00:00Z", "completed") for h in (10, 11, 12, 13)
    ]
    run = await harness.api.inspect_run(rows[1]["run_id"])
    assert run["output"] == {"result": "report for 2026-03-02T11:00:00Z"}
    assert run["origin"] == {
        "kind": "schedule",
        "schedule_id": "hourly",
        "instant": "2026-03-02T11:00:00Z",
        "revision": 1,
    }
    schedule = await harness.schedules.get_schedule(schedule_id="hourly")
    assert schedule["next_instant"] == "2026-03-02T14:00:00Z"


async def test_pause_consumes_the_span_and_resume_starts_from_the_next_instant(
    harness: Harness,
) -> None:
    await harness.boot()
    await harness.deploy("report.default", CONSTANT_PLAN)
    await harness.schedules.create_schedule(
        schedule_id="hourly",
        deployment_id="report.default",
        trigger={"kind": "cron", "expression": "0 * * * *"},
        inputs={"when": {"$bind": "occurrence.local_instant"}},
        misfire="latest",
    )
    await harness.at(hour(10))
    await harness.at(hour(10, 30))
    paused = await harness.schedules.pause_schedule(schedule_id="hourly")
    again = await harness.schedules.pause_schedule(schedule_id="hourly")
    assert paused["paused"] and again["paused"] and again["revision"] == 1
    for h in (11, 12, 13):
        await harness.at(hour(h))
    await harness.at(hour(13, 20))
    await harness.schedules.resume_schedule(schedule_id="hourly")
    await harness.at(hour(14))
    assert await harness.statuses("hourly") == [("10:00", "completed"), ("14:00", "completed")]


async def test_delete_keeps_tracking_the_active_run_to_its_end(harness: Harness) -> None:
    await harness.boot()
    await harness.deploy("gate.default", GATE_PLAN)
    await harness.schedules.create_schedule(
        schedule_id="gated",
        deployment_id="gate.default",
        trigger={"kind": "cron", "expression": "0 * * * *"},
    )
    await harness.at(hour(10))
    [row] = await harness.occurrences("gated")
    assert row["status"] == "interrupted"
    deleted = await harness.schedules.delete_schedule(schedule_id="gated")
    assert deleted["deleted"] is True
    assert [s["schedule_id"] for s in await harness.schedules.list_schedules()] == []
    listed = await harness.schedules.list_schedules(include_deleted=True)
    assert [s["schedule_id"] for s in listed] == ["gated"]

    await harness.at(hour(11))
    resumed = await harness.api.resume_run(row["run_id"], {"go": True})
    assert resumed["status"] == "completed"
    await harness.service.settle()  # type: ignore[union-attr]
    assert await harness.statuses("gated") == [("10:00", "completed")]


async def test_interrupted_run_holds_overlap_across_a_restart(harness: Harness) -> None:
    await harness.boot()
    await harness.deploy("gate.default", GATE_PLAN)
    await harness.schedules.create_schedule(
        schedule_id="gated",
        deployment_id="gate.default",
        trigger={"kind": "cron", "expression": "0 * * * *"},
    )
    await harness.at(hour(10))
    [row] = await harness.occurrences("gated")
    assert row["status"] == "interrupted"

    await harness.shutdown()
    await harness.boot()
    await harness.at(hour(11))
    assert await harness.statuses("gated") == [
        ("10:00", "interrupted"),
        ("11:00", "skipped-overlap"),
    ]

    await harness.api.resume_run(row["run_id"], {"go": True})
    await harness.service.settle()  # type: ignore[union-attr]
    await harness.at(hour(12))
    assert await harness.statuses("gated") == [
        ("10:00", "completed"),
        ("11:00", "skipped-overlap"),
        ("12:00", "interrupted"),
    ]


async def test_slots_bound_scheduled_runs_and_waiting_instants_show_as_pending(
    harness: Harness,
) -> None:
    await harness.boot(max_concurrent_runs=2)
    await harness.deploy("sleeper.default", sleep_plan(0.2))
    running: set[str] = set()
    most = 0

    def watch(run_id: str, status: str, origin: object, message: object) -> None:
        nonlocal most
        if status == "running":
            running.add(run_id)
        else:
            running.discard(run_id)
        most = max(most, len(running))

    harness.api.add_run_listener(watch)
    ids = [f"s{i}" for i in range(5)]
    for schedule_id in ids:
        await harness.schedules.create_schedule(
            schedule_id=schedule_id,
            deployment_id="sleeper.default",
            trigger={"kind": "cron", "expression": "0 * * * *"},
        )
    await harness.at(hour(10))
    pages = {s: await harness.occurrences(s) for s in ids}
    statuses = sorted(rows[0]["status"] for rows in pages.values())
    assert statuses.count("pending") == 3
    pending = next(rows for rows in pages.values() if rows[0]["status"] == "pending")
    assert pending[0]["instant"] == "2026-03-02T10:00:00Z"

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while loop.time() < deadline:
        await harness.service.settle()  # type: ignore[union-attr]
        done = [await harness.statuses(s) for s in ids]
        if all(d == [("10:00", "completed")] for d in done):
            break
        await asyncio.sleep(0.05)
    assert [await harness.statuses(s) for s in ids] == [[("10:00", "completed")]] * 5
    assert most == 2


async def test_stop_drains_then_leaves_the_executing_mark(harness: Harness) -> None:
    service = await harness.boot(drain_grace_s=0.05)
    await harness.deploy("sleeper.default", sleep_plan(30))
    await harness.schedules.create_schedule(
        schedule_id="long",
        deployment_id="sleeper.default",
        trigger={"kind": "cron", "expression": "0 * * * *"},
    )
    await harness.at(hour(10))
    [row] = await harness.occurrences("long")
    assert row["status"] == "running"
    still = await service.stop()
    assert still == [row["run_id"]]
    assert (await harness.api.inspect_run(row["run_id"]))["executing"] is not None
    await harness.api.cancel_executing()  # the process exits here

    await harness.boot()
    [after] = await harness.occurrences("long")
    assert after["status"] == "failed"
    assert "external effects may already have occurred" in after["reason"]


async def test_a_second_service_on_the_same_store_is_refused(harness: Harness) -> None:
    await harness.boot()
    assert harness.server is not None
    second = build_scheduler_service(
        harness.server, SchedulerServiceConfig(enabled=True), clock=harness.clock
    )
    with pytest.raises(SchedulerUnavailable) as refused:
        await second.start()
    assert "pid" in refused.value.message


async def test_held_candidate_is_a_pending_row_on_top_of_page_one(harness: Harness) -> None:
    await harness.boot()
    await harness.deploy("gate.default", GATE_PLAN)
    await harness.schedules.create_schedule(
        schedule_id="gated",
        deployment_id="gate.default",
        trigger={"kind": "cron", "expression": "0 * * * *"},
        misfire="latest",
    )
    await harness.at(hour(10))
    await harness.at(hour(11))
    page = await harness.schedules.list_schedule_occurrences(schedule_id="gated", limit=1)
    assert [(r["instant"][11:16], r["status"]) for r in page["occurrences"]] == [
        ("11:00", "pending"),
        ("10:00", "interrupted"),
    ]
    schedule = await harness.schedules.get_schedule(schedule_id="gated")
    assert schedule["held"] == "2026-03-02T11:00:00Z"
    # Pausing supersedes the held candidate.
    await harness.schedules.pause_schedule(schedule_id="gated")
    await harness.service.settle()  # type: ignore[union-attr]
    assert await harness.statuses("gated") == [("10:00", "interrupted"), ("11:00", "superseded")]


async def test_api_changes_wake_the_service_without_waiting_for_the_poll(
    harness: Harness,
) -> None:
    await harness.boot(poll_interval_s=3600)
    await harness.deploy("report.default", CONSTANT_PLAN)
    await harness.schedules.create_schedule(
        schedule_id="soon",
        deployment_id="report.default",
        trigger={"kind": "oneshot", "at": (START + timedelta(minutes=5)).isoformat()},
        inputs={"when": "now"},
    )
    await harness.at(START + timedelta(minutes=5))
    assert await harness.statuses("soon") == [("09:35", "completed")]


async def test_preflight_rejection_is_recorded_in_order_and_the_schedule_goes_on(
    harness: Harness,
) -> None:
    await harness.boot()
    await harness.deploy("gate.default", GATE_PLAN)
    await harness.schedules.create_schedule(
        schedule_id="gated",
        deployment_id="gate.default",
        trigger={"kind": "cron", "expression": "*/30 * * * *"},
        overlap="parallel",
        max_active_runs=3,
        lateness_allowance_s=3600,
    )
    await harness.api.delete_deployment("gate.default", force=True)
    await harness.at(hour(10, 1))
    rows = await harness.occurrences("gated")
    assert [(r["instant"][11:16], r["status"]) for r in rows] == [
        ("10:00", "preflight-rejected"),
    ]
    assert "gate.default" in rows[0]["reason"]
    await harness.deploy("gate.default", GATE_PLAN)
    await harness.at(hour(10, 30))
    assert await harness.statuses("gated") == [
        ("10:00", "preflight-rejected"),
        ("10:30", "interrupted"),
    ]


async def test_an_instant_waiting_for_a_slot_survives_a_restart_behind_a_skipped_one(
    harness: Harness,
) -> None:
    # b's 10:01 and 10:02 wait for the only slot (a's long run holds it). A
    # restart must keep both waiting; once a slot frees, 10:01 runs and 10:02,
    # decided after it (history stays in instant order), meets its overlap.
    await harness.boot(max_concurrent_runs=1, drain_grace_s=0.01)
    await harness.deploy("sleeper.default", sleep_plan(30))
    await harness.deploy("report.default", CONSTANT_PLAN)
    await harness.schedules.create_schedule(
        schedule_id="a",
        deployment_id="sleeper.default",
        trigger={"kind": "oneshot", "at": hour(10).isoformat()},
    )
    await harness.schedules.create_schedule(
        schedule_id="b",
        deployment_id="report.default",
        trigger={"kind": "cron", "expression": "1-2 10 * * *"},
        inputs={"when": "now"},
        lateness_allowance_s=300,
    )
    await harness.at(hour(10))
    await harness.at(hour(10, 1))
    await harness.at(hour(10, 2))
    assert await harness.statuses("b") == [("10:01", "pending"), ("10:02", "pending")]

    await harness.shutdown()  # a's run is cut off: abandoned at the next start
    await harness.boot(max_concurrent_runs=1)
    await harness.at(hour(10, 3))
    assert await harness.statuses("a") == [("10:00", "failed")]
    assert await harness.statuses("b") == [("10:01", "completed"), ("10:02", "skipped-overlap")]
