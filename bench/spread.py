"""Benchmark: spread load, side by side with APScheduler 3.x on the wall clock.

N cron schedules (default: 1,000 and then 10,000) fire for a few minutes of
real time; each occurrence starts a trivial one-step run. For each system and
size a fresh child process sets up, waits for a minute boundary, and measures
whole minutes:

- ours: the real scheduler service and host on real stores in a temp dir,
  SystemClock, `max_concurrent_runs` = N and overlap `parallel` (neither
  binds). Lateness = the instant the `admitted` history row is durable (the
  flush of its group commit returned: the commit journal's fsync) - the
  occurrence instant.
- APScheduler 3.x: AsyncIOScheduler, MemoryJobStore, CronTrigger, a trivial
  async job. Lateness = the instant the job starts - its scheduled run time.

The first minute boundary after set-up is not measured (warm-up; for us it
is the schedules' first firing, which creates their files: see herd.py).
Both report p50/p99/max lateness, CPU seconds (user + system) per minute of
the window and peak RSS. Our scheduler's running checkpoint (on files: the
history indexes published, the journal emptied, the startup checkpoint
written) comes at the first quiet moment after the first firing and then
every `checkpoint_interval_s` (300 s): a window of fewer than five minutes
holds none of it, `--minutes 5` holds one, as every five minutes of a
longer run do. Our cron has minute resolution (five fields, no
seconds), so "spread evenly" is what a minute-resolution calendar allows:

- `--pattern minute` (default): every schedule fires every minute
  (`* * * * *`): N occurrences per minute, all at second 0.
- `--pattern hour`: schedule i fires hourly at minute i mod 60: N/60
  occurrences per minute, at second 0. Our schedules are created an hour
  before the start (their clock set back 61 minutes), so the start decides
  each one's instant of the last hour (missed: a `skipped-misfire` row) and
  the window measures schedules whose files exist, as after their first
  hour; otherwise every occurrence of the window would be its schedule's
  first firing.

APScheduler gets the very same triggers (second 0 of the same minutes).

`--store postgres`: ours runs on a fresh database (one per size) of a
PostgreSQL server the bench starts (`bench/pgstore.py`: durable settings,
data on the same disk). Lateness = the instant the COMMIT of the round's
transaction holding the `admitted` row returned. CPU per minute is our
process's plus the PostgreSQL server's (both shown); peak RSS is our
process's only.

    uv run --frozen --group bench python bench/spread.py                  # 1,000 and 10,000, 2 min
    uv run --frozen --group bench python bench/spread.py --store postgres
    uv run --frozen --group bench python bench/spread.py --schedules 1000 --minutes 1
    uv run --frozen --group bench python bench/spread.py --pattern hour --schedules 10000
    uv run --frozen --group bench python bench/spread.py --schedules 1000 --rounds 3
    uv run --frozen --group bench python bench/spread.py --schedules 1000 --minutes 5 --rounds 2

`--rounds N` runs N children of each system per size, alternating (ours
first), prints each pair and shows the means in the table: CPU time swings
by up to a fifth between runs here, so the ratio of CPU per minute is read
from the means of alternating children, not from one of each.

Not a test: it prints figures and asserts nothing. Targets: our p99 <= its
p99, our CPU per minute <= its CPU per minute.
"""

from __future__ import annotations

import argparse
import asyncio
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

from adapters.collector import freeze_startup_objects, tune_collector
from adapters.process_limits import raise_open_file_limit

PATTERNS = ("minute", "hour")


def expression(pattern: str, index: int) -> str:
    return "* * * * *" if pattern == "minute" else f"{index % 60} * * * *"


def _window(minutes: int) -> tuple[float, float]:
    """Start and end of the measuring window: from 2 s before the second
    minute boundary from now to 2 s before the boundary `minutes` later
    (whole minutes, each holding one boundary's occurrences and the work that
    follows them)."""
    now = time.time()
    # The first boundary is a warm-up, not measured: it is the first time
    # our schedules fire, which creates their history files (a one-off cost
    # per schedule that bench/herd.py measures on its own).
    boundary = (int(now // 60) + 2) * 60
    if boundary - now < 65:
        boundary += 60
    return boundary - 2.0, boundary - 2.0 + 60.0 * minutes


def expected_fires(schedules: int, pattern: str, begin: float, end: float) -> int:
    """How many occurrences fall in [begin, end)."""
    boundaries = [m * 60 for m in range(int(begin // 60) + 1, int(end // 60) + 1)]
    boundaries = [b for b in boundaries if begin <= b < end]
    if pattern == "minute":
        return schedules * len(boundaries)
    return sum(
        sum(1 for index in range(schedules) if index % 60 == (b // 60) % 60) for b in boundaries
    )


async def _sleep_until(moment: float) -> None:
    delay = moment - time.time()
    if delay > 0:
        await asyncio.sleep(delay)


def _figures(
    lateness: list[float], cpu: float, minutes: int, fires: int, extra: dict[str, Any]
) -> dict[str, Any]:
    return {
        "fires": fires,
        "p50_s": harness.percentile(lateness, 50),
        "p99_s": harness.percentile(lateness, 99),
        "max_s": max(lateness) if lateness else float("nan"),
        "cpu_per_min_s": cpu / minutes,
        "peak_rss_mib": harness.peak_rss_mib(),
        **extra,
    }


# --- ours ---------------------------------------------------------------------------


async def run_ours(
    schedules: int,
    minutes: int,
    pattern: str,
    pg_url: str | None = None,
    pg_pid: int | None = None,
) -> dict[str, Any]:
    """On files in a temp dir, or on the PostgreSQL database at `pg_url`
    (whose server's postmaster is `pg_pid`)."""
    from shell import ManualClock, SchedulerServiceConfig, SystemClock, build_scheduler_service

    with tempfile.TemporaryDirectory(prefix="wf-bench-spread-") as tmp:
        if pg_url is None:
            server = harness.build_server(Path(tmp) / "store")
        else:
            server = await pgstore.open_server(pg_url)
        api = server.api
        service = build_scheduler_service(
            server,
            SchedulerServiceConfig(
                enabled=True, max_concurrent_runs=max(schedules, 1), drain_grace_s=120
            ),
            clock=SystemClock(),
        )
        schedules_api = api.schedules
        clock = schedules_api.clock
        if pattern == "hour":
            # Created an hour ago, so that each schedule's instant of the last
            # hour is decided at the start (missed: a `skipped-misfire` row)
            # and the window measures hourly schedules as they run for good,
            # their files there; created now, every occurrence of the first
            # hour would be its schedule's first firing, which creates its
            # files (bench/herd.py measures that on its own).
            schedules_api.clock = ManualClock(datetime.now(UTC) - timedelta(minutes=61))
        await harness.create_cron_schedules(
            server,
            schedules,
            lambda index: expression(pattern, index),
            overlap="parallel",
            max_active_runs=10,
        )
        schedules_api.clock = clock
        completed: list[int] = [0]

        def on_status(run_id: str, status: str, origin: Any, message: str | None) -> None:
            del run_id, origin, message
            if status == "completed":
                completed[0] += 1

        api.add_run_listener(on_status)
        await service.start()
        freeze_startup_objects()
        begin, end = _window(minutes)
        # Installed before the window: it begins as the loop wakes to prepare
        # the first measured instant's round (`prepare_ahead_s` before it), and
        # which of the two runs first at that moment is the event loop's
        # choice. A round staged before the probe went uncounted. Only the
        # instants of the window count (`probe.lateness(begin, end)`).
        probe = harness.AdmissionProbe(api.schedules.history)
        await _sleep_until(begin)
        completed[0] = 0
        commits_before = probe.commits
        server_cpu = pgstore.server_cpu_seconds(pg_pid) if pg_pid else 0.0
        cpu = harness.cpu_seconds()
        await _sleep_until(end)
        cpu = harness.cpu_seconds() - cpu
        server_cpu = pgstore.server_cpu_seconds(pg_pid) - server_cpu if pg_pid else 0.0
        commits = probe.commits - commits_before
        completed_in_window = completed[0]
        # Occurrences of the window still undecided at its end count too: wait
        # for them (not counted as CPU of the window), up to two minutes.
        expected = expected_fires(schedules, pattern, begin, end)
        deadline = time.time() + 120
        while len(probe.lateness(begin, end)) < expected and time.time() < deadline:
            await asyncio.sleep(0.05)
        probe.restore()
        lateness = probe.lateness(begin, end)
        extra: dict[str, Any] = {
            "expected": expected,
            "completed_runs": completed_in_window,
            "group_commits": commits,
        }
        if pg_pid:
            extra["process_cpu_per_min_s"] = cpu / minutes
            extra["server_cpu_per_min_s"] = server_cpu / minutes
        result = _figures(lateness, cpu + server_cpu, minutes, len(lateness), extra)
        await service.stop()
        await api.cancel_executing()
        await server.close()
        return result


# --- APScheduler ----------------------------------------------------------------------


async def run_apscheduler(schedules: int, minutes: int, pattern: str) -> dict[str, Any]:
    from apscheduler.triggers.cron import CronTrigger

    jobs = harness.apscheduler_with_jobs(
        [
            CronTrigger(second=0, timezone=UTC)
            if pattern == "minute"
            else CronTrigger(minute=index % 60, second=0, timezone=UTC)
            for index in range(schedules)
        ]
    )
    scheduler, started, scheduled = jobs.scheduler, jobs.started, jobs.scheduled
    scheduler.start()
    begin, end = _window(minutes)
    await _sleep_until(begin)
    cpu = harness.cpu_seconds()
    await _sleep_until(end)
    cpu = harness.cpu_seconds() - cpu
    expected = expected_fires(schedules, pattern, begin, end)

    def lateness() -> list[float]:
        found: list[float] = []
        for job_id, planned in scheduled.items():
            for planned_at, started_at in zip(planned, started.get(job_id, []), strict=False):
                if begin <= planned_at < end:
                    found.append(started_at - planned_at)
        return found

    deadline = time.time() + 120
    while len(lateness()) < expected and time.time() < deadline:
        await asyncio.sleep(0.25)
    scheduler.shutdown(wait=False)
    found = lateness()
    return _figures(found, cpu, minutes, len(found), {"expected": expected})


# --- driver ---------------------------------------------------------------------------


def child(
    system: str,
    schedules: int,
    minutes: int,
    pattern: str,
    postgres: pgstore.BenchPostgres | None = None,
) -> dict[str, Any]:
    """One configuration in a fresh process: its own CPU time and peak RSS
    (ours on a fresh database of `postgres`, if given)."""
    command = [
        sys.executable,
        str(Path(__file__)),
        "--child",
        system,
        "--schedules",
        str(schedules),
        "--minutes",
        str(minutes),
        "--pattern",
        pattern,
    ]
    if postgres is not None and system == "ours":
        command += ["--pg-url", postgres.database("spread"), "--pg-pid", str(postgres.pid)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def mean_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean of each numeric figure of `runs` (one child's figures when
    there is one run); other values as the first run gives them."""
    if len(runs) == 1:
        return runs[0]
    return {
        key: (
            sum(run[key] for run in runs) / len(runs)
            if isinstance(value, int | float) and not isinstance(value, bool)
            else value
        )
        for key, value in runs[0].items()
    }


def ratio(ours: float, theirs: float) -> float:
    return ours / theirs if theirs else float("inf")


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'metric':34} {'ours':>10} {'APScheduler':>12} {'ratio':>8} {'target':>14} {'met?':>5}"
    ]
    for row in rows:
        ours, theirs = row["ours"], row["theirs"]
        target = row.get("target", "")
        met = row.get("met")
        if theirs is None:  # a part of ours that APScheduler has no counterpart of
            lines.append(f"{row['metric']:34} {ours:10.3f} {'-':>12} {'-':>8}")
            continue
        lines.append(
            f"{row['metric']:34} {ours:10.3f} {theirs:12.3f} {ratio(ours, theirs):8.2f}"
            f" {target:>14} {'' if met is None else ('yes' if met else 'NO'):>5}"
        )
    return "\n".join(lines)


def compare(schedules: int, ours: dict[str, Any], theirs: dict[str, Any]) -> list[dict[str, Any]]:
    label = f"{schedules:,}"
    parts = []
    if "server_cpu_per_min_s" in ours:
        # On PostgreSQL "CPU per minute" is the process's and the server's.
        parts = [
            {"metric": "  of which our process", "ours": ours["process_cpu_per_min_s"],
             "theirs": None},
            {"metric": "  of which PostgreSQL", "ours": ours["server_cpu_per_min_s"],
             "theirs": None},
        ]  # fmt: skip
    return [
        {"metric": f"spread {label}: lateness p50 s", "ours": ours["p50_s"],
         "theirs": theirs["p50_s"]},
        {"metric": f"spread {label}: lateness p99 s", "ours": ours["p99_s"],
         "theirs": theirs["p99_s"], "target": "<= APS", "met": ours["p99_s"] <= theirs["p99_s"]},
        {"metric": f"spread {label}: lateness max s", "ours": ours["max_s"],
         "theirs": theirs["max_s"]},
        {"metric": f"spread {label}: CPU s per minute", "ours": ours["cpu_per_min_s"],
         "theirs": theirs["cpu_per_min_s"], "target": "<= APS",
         "met": ours["cpu_per_min_s"] <= theirs["cpu_per_min_s"]},
        *parts,
        {"metric": f"spread {label}: peak RSS MiB", "ours": ours["peak_rss_mib"],
         "theirs": theirs["peak_rss_mib"]},
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    tune_collector()
    raise_open_file_limit()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--schedules", type=int, action="append", help="repeatable; default 1000 and 10000"
    )
    parser.add_argument("--minutes", type=int, default=2, help="measured minutes per run")
    parser.add_argument("--pattern", choices=PATTERNS, default="minute")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="children of each system per size, alternating; the table shows their means",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    harness.add_store_option(parser)
    parser.add_argument("--child", choices=("ours", "apscheduler"), help=argparse.SUPPRESS)
    parser.add_argument("--pg-url", help=argparse.SUPPRESS)
    parser.add_argument("--pg-pid", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be 1 or more")
    sizes = args.schedules or [1000, 10_000]
    if args.child is not None:
        if args.child == "ours":
            coroutine = run_ours(sizes[0], args.minutes, args.pattern, args.pg_url, args.pg_pid)
        else:
            coroutine = run_apscheduler(sizes[0], args.minutes, args.pattern)
        print(json.dumps(asyncio.run(coroutine)))
        return
    results: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    with pgstore.maybe_postgres(args.store) as postgres:
        settings = postgres.settings() if postgres is not None else None
        for size in sizes:
            # Children alternate, ours first: a machine's CPU time swings by
            # a fifth from one run to the next, so one child of each does not
            # settle a ratio; the means of several alternating ones do.
            pairs = [
                (
                    child("ours", size, args.minutes, args.pattern, postgres),
                    child("apscheduler", size, args.minutes, args.pattern),
                )
                for _ in range(args.rounds)
            ]
            ours, theirs = mean_figures([p[0] for p in pairs]), mean_figures([p[1] for p in pairs])
            entry: dict[str, Any] = {"schedules": size, "ours": ours, "apscheduler": theirs}
            if args.rounds > 1:
                entry["rounds"] = [{"ours": o, "apscheduler": t} for o, t in pairs]
            results.append(entry)
            rows.extend(compare(size, ours, theirs))
    summary: dict[str, Any] = {
        "pattern": args.pattern,
        "minutes": args.minutes,
        "store": args.store,
        "machine": harness.machine(),
        "loadavg": harness.loadavg(),
        "results": results,
    }
    if settings is not None:
        summary["postgres"] = settings
    if args.json:
        print(json.dumps(summary))
        return
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    print(
        f"spread load, pattern {args.pattern}, {args.minutes} measured minute(s),"
        f" store {args.store}, {stamp}"
    )
    machine = summary["machine"]
    print(f"{machine['cpus']} CPUs, {machine['cpu_model']}, Python {machine['python']}")
    if settings is not None:
        print(pgstore.describe(settings))
    print(f"load average at the end: {summary['loadavg']}")
    print(table(rows))
    for entry in results:
        ours = entry["ours"]
        # Means when there are several rounds: a round may admit one fewer.
        each = f", means of {args.rounds} rounds" if args.rounds > 1 else ""
        print(
            f"  at {entry['schedules']:,}: ours admitted {ours['fires']:,.0f} of"
            f" {ours['expected']:,.0f} occurrences ({ours['completed_runs']:,.0f} runs completed"
            f" in the window, {ours['group_commits']:,.0f} group commits){each}; APScheduler"
            f" fired {entry['apscheduler']['fires']:,.0f} of"
            f" {entry['apscheduler']['expected']:,.0f}"
        )
        for index, pair in enumerate(entry.get("rounds", ()), 1):
            mine, its = pair["ours"]["cpu_per_min_s"], pair["apscheduler"]["cpu_per_min_s"]
            print(
                f"    round {index}: CPU s per minute ours {mine:.3f}, APScheduler {its:.3f}"
                f" ({ratio(mine, its):.2f}x); p99 ours {pair['ours']['p99_s']:.3f} s,"
                f" APScheduler {pair['apscheduler']['p99_s']:.3f} s"
            )


if __name__ == "__main__":
    main()
