"""Benchmark: a thundering herd. N schedules (default 10,000) share one due
instant; how long until every one is durably decided (its history row
flushed), and until every run is created and launched?

The scheduler runs on a ManualClock so that the herd instant is reached by
moving the clock, not by waiting for a minute boundary; everything else is
real: the host, the stores in a temp dir, fsync/syncfs, the run tasks.
Durable = the flush of the group commit holding the row returned: the
commit journal's fsync (see AdmissionProbe and docs/storage.md); the schedule
files are written after it, inside the same commit.

Two herds are measured, one minute apart: the *first* instant the schedules
ever fire (every history and runtime file is created in that commit), and
the *next* one (steady state: the files exist). A breakdown shows where the
time to "decided" goes. For comparison, APScheduler 3.x (AsyncIOScheduler,
MemoryJobStore, a trivial async job) fires N jobs sharing one DateTrigger
instant, in a child process: time from the instant until the last job starts.

`--store postgres`: the same on a fresh database of a PostgreSQL server the
bench starts (`bench/pgstore.py`: durable settings, data on the same disk).
Durable = the COMMIT of the round's transaction returned (`PgBatch.commit`
runs its `on_commit` callbacks then; see AdmissionProbe); the first firing
inserts every history and runtime row, the next one inserts and upserts
them again. CPU is this process's plus the PostgreSQL server's.

    uv run --frozen --group bench python bench/herd.py
    uv run --frozen --group bench python bench/herd.py --schedules 1000 --no-apscheduler
    uv run --frozen --group bench python bench/herd.py --store postgres

The scheduler prepares each herd's round `prepare_ahead_s` before its
instant (docs/operations.md, "Prepared rounds"), as on the system clock: the
clock is first moved there, and the preparation's time and CPU are printed
apart; `--prepare-ahead 0` decides each herd at its instant.

Not a test: it prints figures and asserts nothing. Target: <= 1 s at 10,000.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import harness
import pgstore

import shell.durable
import shell.journal
import shell.service
from adapters.collector import freeze_startup_objects, tune_collector
from adapters.process_limits import raise_open_file_limit
from shell import ManualClock, SchedulerServiceConfig, build_scheduler_service

START = datetime(2026, 3, 2, 9, 30, 30, tzinfo=UTC)
FIRST = datetime(2026, 3, 2, 9, 31, tzinfo=UTC)
NEXT = FIRST + timedelta(minutes=1)


def _timers(api: Any, postgres: bool) -> harness.Timers:
    timers = harness.Timers()
    timers.wrap(shell.service, "decide", "decide (core)")
    timers.wrap(api, "preflight", "host preflight")
    timers.wrap(api, "reserve_run_ids", "host reserve_run_ids")
    timers.wrap(api.schedules.history, "append_decision", "history append_decision")
    timers.wrap(api.schedules.history, "stage_admitted", "history stage_admitted")
    timers.wrap(api.schedules.history, "append_transition", "history append_transition")
    timers.wrap(api.schedules.runtime, "stage", "runtime stage")
    if postgres:
        import psycopg

        from shell.pg.batch import PgBatch
        from shell.pg.database import Fence

        timers.wrap(PgBatch, "commit", "round transaction (PgBatch.commit)")
        timers.wrap(Fence, "check", "  ownership fence check, every transaction")
        timers.wrap(psycopg.AsyncCursor, "executemany", "  executemany, every transaction")
        timers.wrap(psycopg.AsyncTransaction, "__aexit__", "  COMMIT, every transaction")
        if hasattr(api, "stage_admit_runs"):
            # The host's new run records, staged into the round's transaction.
            timers.wrap(api, "stage_admit_runs", "host stage_admit_runs")
    else:
        timers.wrap(shell.durable.GroupCommit, "commit", "group commit (whole)")
        timers.wrap(shell.journal.CommitJournal, "write", "  of which journal append + fsync")
    for name in ("admit_run", "launch_run", "admit_runs", "launch_runs"):
        if hasattr(api, name):
            timers.wrap(api, name, f"host {name}")
    return timers


async def _herd(
    service: Any,
    api: Any,
    clock: ManualClock,
    instant: datetime,
    schedules: int,
    profile: str | None,
    launched: list[float],
    postgres_pid: int | None = None,
) -> dict[str, Any]:
    """Move the clock to `instant` and wait for every decision and launch."""
    profiler = cProfile.Profile() if profile else None
    decided_cpu: list[float] = []
    breakdown: dict[str, tuple[float, int]] = {}
    cpu = harness.cpu_seconds()
    server_cpu = pgstore.server_cpu_seconds(postgres_pid) if postgres_pid else 0.0

    def on_durable() -> None:
        # Runs inside the commit that made the last row durable: the cut-off.
        if probe.decided >= schedules and not decided_cpu:
            decided_cpu.append(harness.cpu_seconds() - cpu)
            if postgres_pid:
                decided_cpu.append(pgstore.server_cpu_seconds(postgres_pid) - server_cpu)
            breakdown.update(timers.report())
            if profiler is not None and profile is not None:
                profiler.disable()
                profiler.dump_stats(profile)

    # Before a preparation: its rows are staged then, and durable at the commit.
    probe = harness.AdmissionProbe(api.schedules.history, on_durable)
    prepared: dict[str, float] = {}
    ahead = service.prepare_ahead_s
    if ahead > 0 and postgres_pid is None:
        # As on the system clock: the loop wakes `prepare_ahead_s` before the
        # instant and prepares its round; only its commit is left at it.
        prepared_cpu, prepared_wall = harness.cpu_seconds(), time.perf_counter()
        await clock.set(instant - timedelta(seconds=ahead))
        await service.settle()
        prepared["cpu_s"] = harness.cpu_seconds() - prepared_cpu
        prepared["wall_s"] = time.perf_counter() - prepared_wall
        cpu = harness.cpu_seconds()
    launched.clear()
    timers = _timers(api, postgres_pid is not None)
    if profiler is not None:
        profiler.enable()
    began_wall = time.time()
    began = time.perf_counter()
    await clock.set(instant)
    deadline = time.perf_counter() + 600
    while probe.decided < schedules:
        if time.perf_counter() > deadline:
            # A probe that misses the store's rows would otherwise wait forever.
            raise RuntimeError(f"{probe.decided} of {schedules} occurrences decided in 600 s")
        await asyncio.sleep(0.001)
    while len(launched) < probe.admitted and time.perf_counter() < deadline:
        await asyncio.sleep(0.005)
    launch_breakdown = {
        key: (seconds - breakdown.get(key, (0.0, 0))[0], calls - breakdown.get(key, (0.0, 0))[1])
        for key, (seconds, calls) in timers.report().items()
    }
    timers.restore()
    probe.restore()
    assert probe.last_durable is not None
    figures: dict[str, Any] = {}
    if postgres_pid:
        figures["decided_server_cpu_s"] = decided_cpu[1] if decided_cpu else float("nan")
    if prepared:
        figures["prepared"] = prepared
    return {
        **figures,
        "decided_s": probe.last_durable - began_wall,
        "decided_cpu_s": decided_cpu[0] if decided_cpu else float("nan"),
        "launched_s": (max(launched) - began) if launched else float("nan"),
        "launched": len(launched),
        "admitted": probe.admitted,
        "commits": probe.commits,
        "breakdown": breakdown,
        "after_decided": launch_breakdown,
    }


async def measure(
    schedules: int,
    root: Path,
    profile: str | None = None,
    postgres: pgstore.BenchPostgres | None = None,
    prepare_ahead_s: float = SchedulerServiceConfig().prepare_ahead_s,
) -> dict[str, Any]:
    """On the files under `root`, or on a fresh database of `postgres`."""
    clock = ManualClock(START)
    if postgres is None:
        server = harness.build_server(root, clock=clock.now)
    else:
        server = await pgstore.open_server(postgres.database("herd"), clock=clock.now)
    pid = postgres.pid if postgres is not None else None
    api = server.api
    # Built first: it hands its clock to the schedules API, so creation reads it too.
    service = build_scheduler_service(
        server,
        SchedulerServiceConfig(
            enabled=True,
            max_concurrent_runs=schedules,
            drain_grace_s=60,
            prepare_ahead_s=prepare_ahead_s,
        ),
        clock=clock,
    )
    await harness.create_cron_schedules(
        server,
        schedules,
        lambda _: "* * * * *",
        prefix="herd",
        overlap="parallel",
        max_active_runs=1,
    )
    launched: list[float] = []

    def count_launch(run_id: str, status: str, origin: Any, message: str | None) -> None:
        del run_id, origin, message
        if status == "running":
            launched.append(time.perf_counter())

    api.add_run_listener(count_launch)
    await service.start()
    freeze_startup_objects()
    await service.settle()
    first = await _herd(service, api, clock, FIRST, schedules, None, launched, pid)
    # Let every run of the first herd finish and be recorded before the next.
    while api.executing_runs():
        await asyncio.sleep(0.05)
    await service.settle()
    second = await _herd(service, api, clock, NEXT, schedules, profile, launched, pid)
    await service.stop()
    await api.cancel_executing()
    await server.close()
    return {"schedules": schedules, "first": first, "next": second}


# --- APScheduler ----------------------------------------------------------------------


async def apscheduler_herd(schedules: int) -> dict[str, Any]:
    from apscheduler.jobstores.memory import MemoryJobStore
    from apscheduler.schedulers.asyncio import AsyncIOScheduler
    from apscheduler.triggers.date import DateTrigger

    started: list[float] = []

    async def job() -> None:
        started.append(time.time())

    scheduler = AsyncIOScheduler(
        jobstores={"default": MemoryJobStore()},
        timezone=UTC,
        job_defaults={"misfire_grace_time": None, "coalesce": False},
    )
    at = datetime.fromtimestamp(int(time.time()) + 3, tz=UTC)
    for index in range(schedules):
        scheduler.add_job(job, DateTrigger(run_date=at, timezone=UTC), id=f"herd-{index:05d}")
    scheduler.start()
    cpu = harness.cpu_seconds()
    while len(started) < schedules:
        await asyncio.sleep(0.01)
    cpu = harness.cpu_seconds() - cpu
    scheduler.shutdown(wait=False)
    return {"all_started_s": max(started) - at.timestamp(), "cpu_s": cpu}


def _apscheduler_child(schedules: int) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__)), "--child", "--schedules", str(schedules)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _print_breakdown(title: str, breakdown: dict[str, tuple[float, int]]) -> None:
    print(f"    {title}")
    for key, (seconds, calls) in breakdown.items():
        if calls:
            print(f"      {key:34} {seconds:8.3f} s  {calls:7,} calls")


def main(argv: list[str] | None = None) -> None:
    tune_collector()
    raise_open_file_limit()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--profile", metavar="FILE", help="cProfile stats of the next herd")
    parser.add_argument("--no-apscheduler", action="store_true", help="skip the comparison")
    parser.add_argument(
        "--prepare-ahead",
        type=float,
        default=SchedulerServiceConfig().prepare_ahead_s,
        metavar="S",
        help="the scheduler's prepare_ahead_s (0: each round decided at its instant)",
    )
    harness.add_store_option(parser)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(asyncio.run(apscheduler_herd(args.schedules))))
        return
    with (
        tempfile.TemporaryDirectory(prefix="wf-bench-herd-") as tmp,
        pgstore.maybe_postgres(args.store) as postgres,
    ):
        settings = postgres.settings() if postgres is not None else None
        result = asyncio.run(
            measure(args.schedules, Path(tmp) / "store", args.profile, postgres, args.prepare_ahead)
        )
    result["store"] = args.store
    result["machine"] = harness.machine()
    if settings is not None:
        result["postgres"] = settings
    if not args.no_apscheduler:
        result["apscheduler"] = _apscheduler_child(args.schedules)
    result["loadavg"] = harness.loadavg()
    if args.json:
        print(json.dumps(result))
        return
    count = result["schedules"]
    print(
        f"herd of {count:,} schedules due at one instant, store {args.store}"
        f" (load {result['loadavg']})"
    )
    machine = result["machine"]
    print(f"  {machine['cpus']} CPUs, {machine['cpu_model']}, Python {machine['python']}")
    if settings is not None:
        print(f"  {pgstore.describe(settings)}")
    first_title = "first firing (files created)" if settings is None else "first firing"
    for key, title in (("first", first_title), ("next", "next minute")):
        herd = result[key]
        print(f"  {title}")
        if "prepared" in herd:
            print(
                f"    prepared before it   {herd['prepared']['wall_s']:8.3f} s"
                f"  (CPU {herd['prepared']['cpu_s']:.3f} s; not in the figures below)"
            )
        print(f"    all durably decided  {herd['decided_s']:8.3f} s  (target <= 1 s)")
        print(f"    CPU until decided    {herd['decided_cpu_s']:8.3f} s")
        if "decided_server_cpu_s" in herd:
            print(f"      and PostgreSQL's   {herd['decided_server_cpu_s']:8.3f} s")
        print(f"    all runs launched    {herd['launched_s']:8.3f} s")
        print(f"    admitted {herd['admitted']:,} in {herd['commits']} group commit(s)")
        _print_breakdown("until decided:", herd["breakdown"])
        _print_breakdown("then, until launched:", herd["after_decided"])
    if "apscheduler" in result:
        theirs = result["apscheduler"]
        print(
            f"  APScheduler 3.x: all {result['schedules']:,} jobs started"
            f" {theirs['all_started_s']:.3f} s after the instant (CPU {theirs['cpu_s']:.3f} s)"
        )


if __name__ == "__main__":
    main()
