"""Benchmark: idle cost. N schedules (default 10,000) whose next instant is
about an hour away; CPU seconds per minute of the running scheduler (the
real service and host on the SystemClock with the default 1 s poll
interval), next to APScheduler 3.x holding the same N cron jobs. Each runs
in its own child process; CPU is the process's user + system time over the
measured window, after start-up.

    uv run --frozen --group bench python bench/idle.py
    uv run --frozen --group bench python bench/idle.py --schedules 1000 --minutes 0.5

Not a test: it prints figures and asserts nothing. Target: < 0.1 s per minute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import harness

from adapters.collector import freeze_startup_objects, tune_collector
from adapters.process_limits import raise_open_file_limit


def _far_minute() -> int:
    # Two minutes ago: the next instant of "M * * * *" is about 58 minutes away.
    return (datetime.now(UTC) - timedelta(minutes=2)).minute


async def ours(schedules: int, minutes: float) -> dict[str, Any]:
    from shell import SchedulerServiceConfig, SystemClock, build_scheduler_service

    with tempfile.TemporaryDirectory(prefix="wf-bench-idle-") as tmp:
        server = harness.build_server(Path(tmp) / "store")
        service = build_scheduler_service(
            server, SchedulerServiceConfig(enabled=True), clock=SystemClock()
        )
        minute = _far_minute()
        await harness.create_cron_schedules(server, schedules, lambda _: f"{minute} * * * *")
        await service.start()
        freeze_startup_objects()
        await service.settle()
        rounds = [0]
        real_round = service._round

        async def counted() -> None:
            rounds[0] += 1
            await real_round()

        service._round = counted  # type: ignore[method-assign]
        cpu = harness.cpu_seconds()
        await asyncio.sleep(minutes * 60)
        cpu = harness.cpu_seconds() - cpu
        await service.stop()
        return {"cpu_per_min_s": cpu / minutes, "rounds_per_min": rounds[0] / minutes}


async def apscheduler(schedules: int, minutes: float) -> dict[str, Any]:
    from apscheduler.jobstores.memory import MemoryJobStore
    from apscheduler.schedulers.asyncio import AsyncIOScheduler
    from apscheduler.triggers.cron import CronTrigger

    async def job() -> None:
        return None

    scheduler = AsyncIOScheduler(jobstores={"default": MemoryJobStore()}, timezone=UTC)
    minute = _far_minute()
    for index in range(schedules):
        scheduler.add_job(
            job, CronTrigger(minute=minute, second=0, timezone=UTC), id=f"s-{index:05d}"
        )
    scheduler.start()
    await asyncio.sleep(1)
    cpu = harness.cpu_seconds()
    await asyncio.sleep(minutes * 60)
    cpu = harness.cpu_seconds() - cpu
    scheduler.shutdown(wait=False)
    return {"cpu_per_min_s": cpu / minutes}


def _child(kind: str, schedules: int, minutes: float) -> dict[str, Any]:
    command = [
        sys.executable, str(Path(__file__)), "--child", kind,
        "--schedules", str(schedules), "--minutes", str(minutes),
    ]  # fmt: skip
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> None:
    tune_collector()
    raise_open_file_limit()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--minutes", type=float, default=1.0, help="measured window")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", choices=("ours", "apscheduler"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        runner = ours if args.child == "ours" else apscheduler
        print(json.dumps(asyncio.run(runner(args.schedules, args.minutes))))
        return
    result = {
        "schedules": args.schedules,
        "minutes": args.minutes,
        "ours": _child("ours", args.schedules, args.minutes),
        "apscheduler": _child("apscheduler", args.schedules, args.minutes),
    }
    if args.json:
        print(json.dumps(result))
        return
    mine, theirs = result["ours"], result["apscheduler"]
    print(f"idle: {args.schedules:,} schedules, next instant ~58 min away, {args.minutes:g} min")
    print(f"  load average at the end: {harness.loadavg()}")
    print(
        f"  ours         {mine['cpu_per_min_s']:7.4f} CPU s per minute"
        f" ({mine['rounds_per_min']:.0f} rounds per minute)  (target < 0.1)"
    )
    print(f"  APScheduler  {theirs['cpu_per_min_s']:7.4f} CPU s per minute")


if __name__ == "__main__":
    main()
