"""Benchmark: the pure core alone deciding a herd.

N schedules (default 10,000) share one every-minute trigger; `decide` is
called at each minute with no events, and each call decides N instants (N
admissions and N runtime commands). Between two minutes (not measured) it is
told that every run was created and completed, as the service would. The
figure is CPU
time (`time.process_time`) of each call, so a busy neighbour on a shared
machine skews it less than a wall-clock figure. No disk, no host: this is
the `decide (core)` line of `bench/herd.py` on its own.

    uv run --frozen python bench/decide_herd.py
    uv run --frozen python bench/decide_herd.py --schedules 1000 --minutes 10

Not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--minutes", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

    from core.commands import AdmitOccurrence
    from core.decide import decide
    from core.definitions import parse_definition
    from core.events import Event, OccurrenceAdmitted, RunStatusChanged, ScheduleCreated
    from core.state import initial_state

    count = args.schedules
    start = datetime(2026, 3, 2, 9, 30, 30, tzinfo=UTC)
    trigger = {"kind": "cron", "expression": "* * * * *", "timezone": "UTC"}
    created: list[Event] = [
        ScheduleCreated(
            definition=parse_definition(
                {"schedule_id": f"s{i:06d}", "deployment_id": "bench.default", "trigger": trigger}
            ),
            at=start,
        )
        for i in range(count)
    ]
    state, _ = decide(initial_state(max_concurrent_runs=count * 10), start, created)
    del created
    calls: list[dict[str, float]] = []
    for minute in range(1, args.minutes + 1):
        instant = start.replace(second=0) + timedelta(minutes=minute)
        gc.collect()
        began = time.process_time()
        state, commands = decide(state, instant, [])
        cpu = time.process_time() - began
        admits = [c for c in commands if isinstance(c, AdmitOccurrence)]
        calls.append({"minute": minute, "cpu_s": cpu, "admitted": len(admits)})
        reports: list[Event] = []
        for number, admit in enumerate(admits):
            run_id = f"run-{minute}-{number}"
            reports.append(
                OccurrenceAdmitted(schedule_id=admit.schedule_id, instant=instant, run_id=run_id)
            )
            reports.append(
                RunStatusChanged(
                    schedule_id=admit.schedule_id,
                    instant=instant,
                    run_id=run_id,
                    status="completed",
                )
            )
        state, _ = decide(state, instant + timedelta(seconds=5), reports)
    if args.json:
        print(json.dumps({"schedules": count, "calls": calls}))
        return
    print(f"decide over a herd of {count:,} schedules, one call per minute (CPU time)")
    for call in calls:
        per = call["cpu_s"] / max(call["admitted"], 1) * 1e6
        print(
            f"  minute {call['minute']:3d}  {call['cpu_s']:.3f} s"
            f"  ({call['admitted']:,.0f} admitted, {per:.0f} us each)"
        )


if __name__ == "__main__":
    main()
