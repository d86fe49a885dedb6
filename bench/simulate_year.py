"""Benchmark: how fast `wf-schedule simulate` decides occurrences, next to
croniter's own cost of producing the same instants.

Simulates N hourly schedules over D days (default: 1,000 schedules over 365
days, about 8.8 M instants) with trivial runs (zero seconds, completed), then
iterates croniter over the same expressions, zone and horizon. Prints both
rates and their ratio; the target is a ratio of at least 0.5, meaning that
`decide` and the engine add no more than croniter itself costs.

    uv run --frozen python bench/simulate_year.py                 # the full year
    uv run --frozen python bench/simulate_year.py --schedules 100 --days 30
    uv run --frozen python bench/simulate_year.py --sink jsonl    # stream rows to /dev/null

Not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from croniter import croniter

from adapters.simulation.engine import simulate
from adapters.simulation.output import CsvSink, JsonlSink, Row, RowSink
from adapters.simulation.scenario import Scenario, parse_scenario

START = datetime(2026, 1, 1, tzinfo=UTC)
EXPRESSION = "0 * * * *"
ZONE = "UTC"


class CountingSink:
    """Counts instants and keeps nothing (the engine's own cost only)."""

    def __init__(self) -> None:
        self.rows = 0
        self.instants = 0

    def row(self, row: Row) -> None:
        self.rows += 1
        self.instants += row.count

    def finish(self, summary: Any) -> None:
        del summary


class CountingTee:
    def __init__(self, counter: CountingSink, sink: RowSink) -> None:
        self.counter = counter
        self.sink = sink

    def row(self, row: Row) -> None:
        self.counter.row(row)
        self.sink.row(row)

    def finish(self, summary: Any) -> None:
        self.sink.finish(summary)


def build_scenario(schedules: int, days: float) -> Scenario:
    end = START + timedelta(days=days)
    return parse_scenario(
        {
            "title": f"{schedules} hourly schedules over {days:g} days",
            "start": START.isoformat(),
            "end": end.isoformat(),
            "max_concurrent_runs": schedules,
            "schedules": [
                {
                    "schedule_id": f"hourly-{index:05d}",
                    "deployment_id": "bench.default",
                    "trigger": {"kind": "cron", "expression": EXPRESSION, "timezone": ZONE},
                    "run": {"duration": 0, "outcome": "completed"},
                }
                for index in range(schedules)
            ],
        }
    )


def croniter_instants(schedules: int, start: datetime, end: datetime) -> int:
    """Iterate croniter as the calendar would: per schedule, from the creation
    instant, in the schedule's zone, to the end of the horizon (exclusive)."""
    zone = ZoneInfo(ZONE)
    count = 0
    for _ in range(schedules):
        iterator = croniter(EXPRESSION, start.astimezone(zone), day_or=True)
        while iterator.get_next(datetime) < end:
            count += 1
    return count


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--days", type=float, default=365.0)
    parser.add_argument(
        "--sink",
        choices=("count", "jsonl", "csv"),
        default="count",
        help="count rows only, or also stream them as jsonl/csv to /dev/null",
    )
    args = parser.parse_args(argv)

    scenario = build_scenario(args.schedules, args.days)
    counter = CountingSink()
    devnull: TextIO | None = None
    sink: RowSink = counter
    if args.sink != "count":
        devnull = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
        streamed: RowSink = JsonlSink(devnull) if args.sink == "jsonl" else CsvSink(devnull)
        sink = CountingTee(counter, streamed)
    rss_before = _max_rss_mib()
    # CPU time of this process: other load on the machine does not skew the ratio.
    began = time.process_time()
    wall = time.perf_counter()
    result = simulate(scenario, sink)
    simulated_s = time.process_time() - began
    simulated_wall = time.perf_counter() - wall
    if devnull is not None:
        devnull.close()

    began = time.process_time()
    wall = time.perf_counter()
    raw = croniter_instants(args.schedules, scenario.start, scenario.end)
    croniter_s = time.process_time() - began
    croniter_wall = time.perf_counter() - wall

    sim_rate = counter.instants / simulated_s
    raw_rate = raw / croniter_s
    print(f"scenario      {args.schedules} hourly schedules x {args.days:g} days, sink {args.sink}")
    print(f"instants      simulated {counter.instants:,} (rows {counter.rows:,}), croniter {raw:,}")
    print(f"decide calls  {result.decide_calls:,}")
    print(
        f"simulate      {simulated_s:9.2f} s CPU ({simulated_wall:.2f} s wall)"
        f"  {sim_rate:12,.0f} occurrences/s"
    )
    print(
        f"croniter      {croniter_s:9.2f} s CPU ({croniter_wall:.2f} s wall)"
        f"  {raw_rate:12,.0f} instants/s"
    )
    print(
        f"ratio         {sim_rate / raw_rate:9.2f}  (simulate rate / croniter rate; target >= 0.5)"
    )
    print(f"max RSS       {_max_rss_mib():9.1f} MiB (before simulating: {rss_before:.1f} MiB)")


if __name__ == "__main__":
    main()
