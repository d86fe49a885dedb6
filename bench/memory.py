"""Benchmark: memory per schedule.

1. Core state: bytes per schedule that `decide` keeps, measured with
   tracemalloc around building the state from N `ScheduleCreated` events
   (distinct definitions, one shared cron trigger, as in the other benches;
   `--distinct-triggers` gives every schedule its own expression). Parsing the
   definitions is done before tracing starts: the events are the input, the
   state is what is measured (the events are dropped before the snapshot).
2. Process: resident set size of a process running the real scheduler
   service and host with N schedules (idle: next instant an hour away), in a
   child process, next to APScheduler 3.x holding N cron jobs (MemoryJobStore)
   in another child.

    uv run --frozen --group bench python bench/memory.py
    uv run --frozen --group bench python bench/memory.py --schedules 1000

Not a test: it prints figures and asserts nothing. Target: <= 2 KB per schedule
in the core state.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import harness

from adapters.collector import freeze_startup_objects, tune_collector
from adapters.process_limits import raise_open_file_limit
from core.decide import decide
from core.definitions import parse_definition
from core.events import ScheduleCreated
from core.state import initial_state

AT = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


def _expression(index: int, distinct: bool, base_minute: int) -> str:
    if distinct:
        return f"{index % 60} {index // 60 % 24} * * *"
    return f"{base_minute} * * * *"


def core_bytes_per_schedule(schedules: int, distinct: bool) -> dict[str, float]:
    events = [
        ScheduleCreated(
            definition=parse_definition(
                {
                    "schedule_id": f"s-{index:05d}",
                    "deployment_id": harness.DEPLOYMENT,
                    "trigger": {"kind": "cron", "expression": _expression(index, distinct, 30)},
                    "inputs": {"when": {"$bind": "occurrence.instant"}},
                }
            ),
            at=AT,
        )
        for index in range(schedules)
    ]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    baseline, _ = tracemalloc.get_traced_memory()
    state = initial_state(max_concurrent_runs=100)
    state, commands = decide(state, AT, events)
    del commands, events
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert len(state.schedules) == schedules
    return {
        "bytes_per_schedule": grown / schedules,
        "traced_bytes_per_schedule": (current - baseline) / schedules,
        "peak_bytes_per_schedule": (peak - baseline) / schedules,
    }


async def _service_rss(schedules: int) -> dict[str, float]:
    from shell import SchedulerServiceConfig, SystemClock, build_scheduler_service

    with tempfile.TemporaryDirectory(prefix="wf-bench-memory-") as tmp:
        server = harness.build_server(Path(tmp) / "store")
        service = build_scheduler_service(
            server, SchedulerServiceConfig(enabled=True), clock=SystemClock()
        )
        # Next instant about an hour away: nothing fires while we measure.
        minute = (datetime.now(UTC) - timedelta(minutes=2)).minute
        rss_empty = harness.current_rss_mib()
        await harness.create_cron_schedules(server, schedules, lambda _: f"{minute} * * * *")
        await service.start()
        freeze_startup_objects()
        await service.settle()
        gc.collect()
        rss = harness.current_rss_mib()
        await service.stop()
        return {"rss_mib": rss, "rss_before_schedules_mib": rss_empty}


async def _apscheduler_rss(schedules: int) -> dict[str, float]:
    from apscheduler.jobstores.memory import MemoryJobStore
    from apscheduler.schedulers.asyncio import AsyncIOScheduler
    from apscheduler.triggers.cron import CronTrigger

    async def job() -> None:
        return None

    rss_empty = harness.current_rss_mib()
    scheduler = AsyncIOScheduler(jobstores={"default": MemoryJobStore()}, timezone=UTC)
    minute = (datetime.now(UTC) - timedelta(minutes=2)).minute
    for index in range(schedules):
        scheduler.add_job(
            job, CronTrigger(minute=minute, second=0, timezone=UTC), id=f"s-{index:05d}"
        )
    scheduler.start()
    await asyncio.sleep(2)
    gc.collect()
    rss = harness.current_rss_mib()
    scheduler.shutdown(wait=False)
    return {"rss_mib": rss, "rss_before_schedules_mib": rss_empty}


def _child(kind: str, schedules: int) -> dict[str, float]:
    command = [sys.executable, str(Path(__file__)), "--child", kind, "--schedules", str(schedules)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> None:
    tune_collector()
    raise_open_file_limit()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--distinct-triggers", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", choices=("ours", "apscheduler"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        runner = _service_rss if args.child == "ours" else _apscheduler_rss
        print(json.dumps(asyncio.run(runner(args.schedules))))
        return
    began = time.perf_counter()
    core = core_bytes_per_schedule(args.schedules, args.distinct_triggers)
    ours = _child("ours", args.schedules)
    theirs = _child("apscheduler", args.schedules)
    result = {"schedules": args.schedules, "core": core, "ours": ours, "apscheduler": theirs}
    if args.json:
        print(json.dumps(result))
        return
    n = args.schedules
    took = time.perf_counter() - began
    print(f"memory at {n:,} schedules ({took:.0f} s; load {harness.loadavg()})")
    print(
        f"  core state        {core['bytes_per_schedule']:8.0f} B/schedule (target <= 2048);"
        f" peak while building {core['peak_bytes_per_schedule']:.0f} B/schedule"
    )
    for label, figures in (("ours", ours), ("APScheduler", theirs)):
        grown = (figures["rss_mib"] - figures["rss_before_schedules_mib"]) * (1 << 20) / n
        print(
            f"  {label:12} RSS {figures['rss_mib']:7.1f} MiB"
            f" ({figures['rss_before_schedules_mib']:.1f} MiB before the schedules;"
            f" {grown:,.0f} B/schedule)"
        )


if __name__ == "__main__":
    main()
