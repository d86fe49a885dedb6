"""A store with a day of real scheduling history, for the console's tests and
its documentation's screenshots.

`build_world` runs the real host, schedules API and scheduler service on a
`ManualClock` from 26 hours ago up to a minute ago, so that every kind of row
the console shows exists, made by the real code (nothing is written by hand):
completed, failed, interrupted and resumed runs, parallel runs of one
schedule, skipped-overlap, skipped-misfire and coalesced rows from a
downtime, preflight rejections, a paused span, a finished one-shot, a deleted
schedule, a cron in Europe/Berlin whose next instants cross a DST gap and a
fold, and a manual run cut off at a stop (the next start fails it as
abandoned). Then the store is closed, and the test starts a real
`wf-rpc-server` on it.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from core.decide import next_wakeup
from shell import ManualClock, SchedulerServiceConfig, build_scheduler_service

QUICKSTART: Final = Path(__file__).resolve().parents[2] / "docs" / "examples" / "quickstart"

APPROVAL_PLAN: Final[dict[str, Any]] = {
    "name": "approval",
    "input_schema": {"type": "object"},
    "start": "approve",
    "nodes": [
        {
            "id": "approve",
            "kind": "interrupt",
            "prompt": "Approve the report?",
            "resume_schema": {
                "type": "object",
                "properties": {"approved": {"type": "boolean"}},
                "required": ["approved"],
                "additionalProperties": False,
            },
            "state_key": "decision",
        },
        {
            "id": "done",
            "kind": "call",
            "capability": "wf.std.format",
            "params": {"template": "approved: {state.decision.approved}"},
        },
    ],
    "edges": {"approve": {"ok": "done"}, "done": {"ok": "__end__"}},
    "output": {"summary": "state.done"},
}

FAILING_PLAN: Final[dict[str, Any]] = {
    "name": "flaky",
    "input_schema": {"type": "object"},
    "start": "fetch",
    "nodes": [
        {
            "id": "fetch",
            "kind": "call",
            "capability": "wf.std.fail",
            "params": {"message": "upstream unavailable"},
        }
    ],
    "edges": {},
    "output": {"result": "state.fetch"},
}

SLOW_PLAN: Final[dict[str, Any]] = {
    "name": "slow",
    "input_schema": {"type": "object"},
    "start": "work",
    "nodes": [
        {"id": "work", "kind": "call", "capability": "wf.std.sleep", "params": {"seconds": 60}},
    ],
    "edges": {"work": {"ok": "__end__"}},
    "output": {"slept": "state.work"},
}

# The schedules of the world, by id: what the tests look for.
CRON_BERLIN_HOURLY: Final = "hourly-report"
APPROVALS: Final = "approvals"
GATED: Final = "gated-export"
FLAKY: Final = "flaky-sync"
CATCH_UP: Final = "catch-up-latest"
MAINTENANCE: Final = "maintenance-window"
NIGHTLY: Final = "nightly-cleanup"
ONCE: Final = "once-migration"
RETIRED: Final = "retired-report"
DST: Final = "dst-berlin"
ORPHAN: Final = "orphaned-export"


@dataclass
class World:
    """What `build_world` made: the run ids the tests look at."""

    start: datetime
    end: datetime
    interrupted_run: str = ""
    completed_run: str = ""
    failed_run: str = ""
    abandoned_run: str = ""
    notes: dict[str, Any] = field(default_factory=dict)


def _quickstart(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((QUICKSTART / name).read_text(encoding="utf-8"))
    return loaded


async def _deploy(api: Any) -> None:
    artifact = _quickstart("artifact.json")
    await api.create_artifact_from_plan(
        artifact["artifact_id"], artifact["version"], artifact["plan"]
    )
    await api.save_deployment(_quickstart("deployment.json"))
    for artifact_id, plan in (
        ("approval", APPROVAL_PLAN),
        ("flaky", FAILING_PLAN),
        ("slow", SLOW_PLAN),
        ("temp", copy.deepcopy(FAILING_PLAN)),
    ):
        await api.create_artifact_from_plan(artifact_id, 1, plan)
        await api.save_deployment(
            {
                "deployment_id": f"{artifact_id}.default",
                "artifact_id": artifact_id,
                "artifact_version": 1,
            }
        )


async def build_world(open_server: Callable[[Callable[[], datetime]], Any]) -> World:
    """Build the world in the store `open_server(clock)` opens (an async
    context manager yielding a server built with that clock)."""
    real_now = datetime.now(UTC).replace(second=0, microsecond=0)
    start = (real_now - timedelta(hours=26)).replace(minute=2)
    end = real_now - timedelta(minutes=1)
    clock = ManualClock(start)
    world = World(start=start, end=end)
    async with open_server(clock.now) as server:
        api = server.api
        schedules = api.schedules
        schedules.clock = clock
        await _deploy(api)
        hello = {"name": "console"}

        async def create(schedule_id: str, deployment: str, trigger: Any, **options: Any) -> None:
            await schedules.create_schedule(
                schedule_id=schedule_id, deployment_id=deployment, trigger=trigger, **options
            )

        def cron(expression: str, zone: str = "UTC") -> dict[str, str]:
            return {"kind": "cron", "expression": expression, "timezone": zone}

        await create(
            CRON_BERLIN_HOURLY, "hello.default", cron("0 * * * *", "Europe/Berlin"), inputs=hello
        )
        await create(
            APPROVALS,
            "approval.default",
            cron("0 */3 * * *"),
            overlap="parallel",
            max_active_runs=3,
        )
        await create(GATED, "approval.default", cron("30 * * * *"))
        await create(FLAKY, "flaky.default", cron("20 */2 * * *"))
        await create(
            CATCH_UP, "hello.default", cron("*/30 * * * *"), inputs=hello, misfire="latest"
        )
        await create(MAINTENANCE, "hello.default", cron("45 * * * *"), inputs=hello)
        await create(NIGHTLY, "hello.default", cron("15 3 * * *"), inputs=hello)
        await create(
            ONCE,
            "hello.default",
            {"kind": "oneshot", "at": (start + timedelta(hours=1, minutes=5)).isoformat()},
            inputs=hello,
        )
        await create(RETIRED, "hello.default", cron("5 * * * *"), inputs=hello)
        await create(DST, "hello.default", cron("30 2 * 3,10 0", "Europe/Berlin"), inputs=hello)
        await create(ORPHAN, "temp.default", cron("10 * * * *"))

        config = SchedulerServiceConfig(
            enabled=True, poll_interval_s=3600, max_concurrent_runs=4, drain_grace_s=5
        )
        service = build_scheduler_service(server, config, clock=clock)
        await service.start()

        async def run_until(target: datetime) -> None:
            # The first round takes in what recovery found before due is known.
            await service.settle()
            while True:
                due = next_wakeup(service.state)
                step = target if due is None or due > target else max(due, clock.now())
                await clock.set(step)
                await service.settle()
                if step >= target:
                    return

        async def interrupted_of(schedule_id: str) -> list[str]:
            page = await schedules.list_schedule_occurrences(
                schedule_id=schedule_id, limit=100, newest_first=True
            )
            return [r["run_id"] for r in page["occurrences"] if r["status"] == "interrupted"]

        # Hour 2: a one-off maintenance pause of four hours.
        await run_until(start + timedelta(hours=2, minutes=10))
        await schedules.pause_schedule(schedule_id=MAINTENANCE)
        await run_until(start + timedelta(hours=6, minutes=10))
        await schedules.resume_schedule(schedule_id=MAINTENANCE)
        await schedules.delete_schedule(schedule_id=RETIRED)
        # Hour 10: an operator approves the oldest approval and the gated export.
        await run_until(start + timedelta(hours=10, minutes=5))
        for schedule_id in (APPROVALS, GATED):
            waiting = await interrupted_of(schedule_id)
            if waiting:
                await api.resume_run(waiting[-1], {"approved": True})
        # Hours 12 to 14: the server is down; misfire policies decide on the way back.
        await run_until(start + timedelta(hours=12))
        await service.stop()
        await clock.set(start + timedelta(hours=14, minutes=40))
        service = build_scheduler_service(server, config, clock=clock)
        await service.start()
        await service.settle()
        # Hour 16: the temp deployment is removed under its schedule (preflight rejects).
        await run_until(start + timedelta(hours=16, minutes=15))
        await api.delete_deployment("temp.default", force=True)
        await run_until(start + timedelta(hours=20, minutes=5))
        waiting = await interrupted_of(APPROVALS)
        if waiting:
            await api.resume_run(waiting[-1], {"approved": False})
        await run_until(end)
        await schedules.pause_schedule(schedule_id=NIGHTLY)
        await service.settle()

        world.interrupted_run = (await interrupted_of(APPROVALS))[0]
        runs = await api.list_runs(status="completed", limit=1, newest_first=True)
        world.completed_run = runs["runs"][0]["run_id"]
        runs = await api.list_runs(status="failed", limit=1, newest_first=True)
        world.failed_run = runs["runs"][0]["run_id"]
        # Every scheduled run ends before the stop (a loaded machine could
        # make one outlast the drain): the one run cut off is the manual one.
        for _ in range(600):
            if not api.executing_runs():
                break
            await asyncio.sleep(0.05)
        await service.stop()
        # A manual run cut off by a stop: the next start fails it as abandoned.
        world.abandoned_run = await api.start_run("slow.default", {})
        await api.note_stopped("drain-cut", 0.0)
        await api.cancel_executing()
    return world
