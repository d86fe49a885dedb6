"""Benchmark: CPU per occurrence over whole lifecycles, on a manual clock.

N every-minute schedules (default 1,000, overlap `parallel`, slots for all)
on the real service and host and real stores in a temp dir; the clock is a
`ManualClock` the script moves: a second before each minute (the round is
prepared ahead), to the minute (committed, its runs launched and stopped),
then 30 s on (the runs' ends committed). The first minute is a warm-up (the
schedules' files are created); then M measured minutes. No idle wake-ups
and no wall-clock waits: what is measured is the work of the occurrences
themselves, the part of `bench/spread.py`'s CPU per minute that grows with
the schedules.

    uv run --frozen python bench/lifecycle.py                       # 1,000 x 6 minutes
    uv run --frozen python bench/lifecycle.py --schedules 300 --minutes 3 --callgrind

`--callgrind` runs the measurement under `valgrind --tool=callgrind` with
instrumentation on for the measured minutes only and prints the instructions
executed per occurrence (user space only: the system calls' own cost is not
in it). Unlike CPU time, which swings by 10-20% between runs on a shared
machine, the count repeats within about 0.2%, so it tells a change of a few
percent from noise; it needs the `valgrind` package.

`--system apscheduler` measures APScheduler 3.x the same way: the spread
bench's scheduler (AsyncIOScheduler, MemoryJobStore, the same trivial async
job and listener) with N jobs at second 0 of every minute, on a manual
clock: the name `datetime` in the two APScheduler modules that read the
wall clock (`apscheduler.schedulers.base`, `apscheduler.executors.base`)
is a subclass whose `now()` answers the script's instant, and the script
wakes the scheduler at each minute and waits for every job to have run.
`--system both` measures the two in turn and prints the ratio: with
`--callgrind`, a ratio of instructions that does not swing with the
machine as the CPU time of `bench/spread.py` does (user space only: our
writes' system calls are not in it, and APScheduler makes none). It needs
the bench group (`--group bench`).

Not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import harness

from adapters.collector import freeze_startup_objects, tune_collector

# The child under callgrind writes its pid here once set up, and `.done`
# beside it after the measured minutes: the parent turns instrumentation on
# and off around them.
_MARK_ENV = "WF_LIFECYCLE_MARK"


async def measure(schedules: int, minutes: int) -> dict[str, Any]:
    from shell import SchedulerServiceConfig, build_scheduler_service
    from shell.clock import ManualClock

    start = datetime(2026, 3, 2, 9, 0, 30, tzinfo=UTC)
    clock = ManualClock(start)
    with tempfile.TemporaryDirectory(prefix="wf-bench-lifecycle-") as tmp:
        server = harness.build_server(Path(tmp) / "store")
        service = build_scheduler_service(
            server,
            SchedulerServiceConfig(enabled=True, max_concurrent_runs=schedules, drain_grace_s=120),
            clock=clock,
        )
        await harness.create_cron_schedules(
            server, schedules, lambda _: "* * * * *", overlap="parallel", max_active_runs=10
        )
        await service.start()
        freeze_startup_objects()

        async def minute(instant: datetime) -> None:
            await clock.set(instant - timedelta(seconds=1))
            await service.settle()
            await clock.set(instant)
            await service.settle()
            # The runs' tasks and the rounds their ends wake.
            await asyncio.sleep(0.05)
            await service.settle()
            await clock.set(instant + timedelta(seconds=30))
            await service.settle()

        figures = await _measured(minute, start, schedules, minutes)
        await service.stop()
        await server.api.cancel_executing()
        await server.close()
    return figures


async def _measured(
    minute: Callable[[datetime], Awaitable[None]], start: datetime, schedules: int, minutes: int
) -> dict[str, Any]:
    """A warm-up minute, then `minutes` measured ones (under callgrind, the
    parent turns instrumentation on and off around them); the figures."""
    mark = os.environ.get(_MARK_ENV)
    first = start.replace(second=0) + timedelta(minutes=1)
    await minute(first)
    if mark is not None:
        Path(mark).write_text(str(os.getpid()))
        while not Path(mark + ".on").exists():
            await asyncio.sleep(0.05)
    cpu = harness.cpu_seconds()
    began = time.perf_counter()
    for index in range(1, minutes + 1):
        await minute(first + timedelta(minutes=index))
    cpu = harness.cpu_seconds() - cpu
    wall = time.perf_counter() - began
    if mark is not None:
        Path(mark + ".done").write_text("done")
        while not Path(mark + ".off").exists():
            await asyncio.sleep(0.05)
    occurrences = schedules * minutes
    return {
        "schedules": schedules,
        "minutes": minutes,
        "occurrences": occurrences,
        "cpu_s": cpu,
        "wall_s": wall,
        "cpu_per_occurrence_ms": cpu / occurrences * 1000,
    }


async def measure_apscheduler(schedules: int, minutes: int) -> dict[str, Any]:
    import apscheduler.executors.base
    import apscheduler.schedulers.base
    from apscheduler.triggers.cron import CronTrigger

    start = datetime(2026, 3, 2, 9, 0, 30, tzinfo=UTC)
    instant = [start]

    class ManualDatetime(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return instant[0] if tz is None else instant[0].astimezone(tz)

    for module in (apscheduler.schedulers.base, apscheduler.executors.base):
        module.datetime = ManualDatetime  # type: ignore[attr-defined, misc]
    # The spread bench's scheduler, job and listener.
    jobs = harness.apscheduler_with_jobs(
        [CronTrigger(second=0, timezone=UTC) for _ in range(schedules)]
    )
    jobs.scheduler.start()
    freeze_startup_objects()

    async def minute(at: datetime) -> None:
        instant[0] = at
        target = jobs.ran + schedules
        jobs.scheduler.wakeup()
        while jobs.ran < target:
            await asyncio.sleep(0)
        jobs.started.clear()

    figures = await _measured(minute, start, schedules, minutes)
    jobs.scheduler.shutdown(wait=False)
    submitted = sum(len(times) for times in jobs.scheduled.values())
    if submitted != schedules * (minutes + 1):
        raise SystemExit(
            f"APScheduler submitted {submitted:,} runs, not {schedules * (minutes + 1):,}"
        )
    return figures


_MEASURES = {"ours": measure, "apscheduler": measure_apscheduler}


def under_callgrind(schedules: int, minutes: int, system: str = "ours") -> dict[str, Any]:
    """The measurement in a child under callgrind, instrumented only while it
    measures; its figures plus `instructions_per_occurrence`."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("--callgrind needs valgrind (Debian: apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="wf-bench-callgrind-") as tmp:
        mark = os.path.join(tmp, "mark")
        output = os.path.join(tmp, "callgrind.out")
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={output}",
            *_child_command(schedules, minutes, system),
        ]
        child = subprocess.Popen(
            command,
            env={**os.environ, _MARK_ENV: mark},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        pid = _wait_for(mark, child)
        _control("-i", "on", pid)
        Path(mark + ".on").write_text("on")
        _wait_for(mark + ".done", child)
        _control("-i", "off", pid)
        Path(mark + ".off").write_text("off")
        stdout, _ = child.communicate()
        if child.returncode != 0:
            raise SystemExit(f"the child under callgrind failed ({child.returncode})")
        figures = dict(json.loads(stdout.strip().splitlines()[-1]))
        totals = [
            line for line in Path(output).read_text().splitlines() if line.startswith("totals:")
        ]
        instructions = int(totals[0].split()[1])
    figures["instructions_per_occurrence"] = instructions / figures["occurrences"]
    return figures


def _wait_for(path: str, child: subprocess.Popen[str]) -> str:
    while not os.path.exists(path):
        if child.poll() is not None:
            raise SystemExit(f"the child under callgrind ended ({child.returncode})")
        time.sleep(0.1)
    return Path(path).read_text()


def _control(*arguments: str) -> None:
    subprocess.run(["callgrind_control", *arguments], check=True, capture_output=True)


def main(argv: list[str] | None = None) -> None:
    tune_collector()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--minutes", type=int, default=6, help="measured minutes")
    parser.add_argument(
        "--callgrind", action="store_true", help="count instructions per occurrence"
    )
    parser.add_argument(
        "--system",
        choices=("ours", "apscheduler", "both"),
        default="ours",
        help="what to measure; both: ours, then APScheduler 3.x, and the ratio",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        run = _MEASURES[args.system]
        print(json.dumps(asyncio.run(run(args.schedules, args.minutes))))
        return
    systems = ["ours", "apscheduler"] if args.system == "both" else [args.system]
    results: dict[str, dict[str, Any]] = {}
    for system in systems:
        if args.callgrind:
            results[system] = under_callgrind(args.schedules, args.minutes, system)
        else:
            results[system] = _in_child(args.schedules, args.minutes, system)
    if args.json:
        print(json.dumps(results if len(results) > 1 else results[systems[0]]))
        return
    print(
        f"lifecycle: {args.schedules:,} every-minute schedules, {args.minutes} measured"
        f" minute(s) on a manual clock ({args.schedules * args.minutes:,} occurrences)"
    )
    for system, result in results.items():
        name = "ours" if system == "ours" else "APScheduler 3.x"
        print(f"  {name:<16} CPU per occurrence  {result['cpu_per_occurrence_ms']:.4f} ms")
        if "instructions_per_occurrence" in result:
            print(
                f"  {name:<16} instructions per occurrence (callgrind, user space)"
                f"  {result['instructions_per_occurrence'] / 1e6:.4f} M"
            )
    if len(results) == 2:
        ours, theirs = results["ours"], results["apscheduler"]
        key = (
            "instructions_per_occurrence"
            if "instructions_per_occurrence" in ours
            else "cpu_per_occurrence_ms"
        )
        what = "instructions" if key.startswith("instructions") else "CPU"
        print(f"  ratio, ours / APScheduler ({what})  {ours[key] / theirs[key]:.2f}")


def _in_child(schedules: int, minutes: int, system: str) -> dict[str, Any]:
    """One measurement in a fresh process, so that the two systems share
    nothing (modules, collector, allocator)."""
    command = _child_command(schedules, minutes, system)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the {system} child failed ({done.returncode}): {done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _child_command(schedules: int, minutes: int, system: str) -> list[str]:
    return [
        sys.executable, str(Path(__file__)), "--child", "--system", system,
        "--schedules", str(schedules), "--minutes", str(minutes),
    ]  # fmt: skip


if __name__ == "__main__":
    main()
