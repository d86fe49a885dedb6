"""Benchmark: history paging. One schedule with R history rows (default
1,000,000); latency of `list_schedule_occurrences` (the schedules API call
the RPC method and the CLI use) for the first page, a middle page and the
last page, p50 and p99 over `--samples` calls each.

Set-up writes the rows through the real history store (admitted, running,
completed per occurrence: a million rows are 333,333 occurrences), closes the
index cleanly, creates and completes each occurrence's run (a page checks
every finished row it serves against its run record), then builds a fresh
server on the store as a restart would.
The cursors of the middle and last pages are found by walking every page
once (that walk is timed too, per page).

    uv run --frozen --group bench python bench/paging.py
    uv run --frozen --group bench python bench/paging.py --rows 100000 --limit 100

Not a test: it prints figures and asserts nothing. Target: p99 <= 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import harness

from shell import ManualClock

START = datetime(2026, 1, 1, tzinfo=UTC)
SCHEDULE = "busy"


async def generate(root: Path, rows: int) -> dict[str, Any]:
    clock = ManualClock(START)
    server = harness.build_server(root, clock=clock.now)
    api = server.api
    api.schedules.clock = clock
    occurrences = rows // 3
    instants = [START + timedelta(minutes=1 + i) for i in range(occurrences)]
    began = time.perf_counter()
    with harness.fast_setup():
        await harness.deploy_trivial(server)
        await api.schedules.create_schedule(
            schedule_id=SCHEDULE,
            deployment_id=harness.DEPLOYMENT,
            trigger={"kind": "cron", "expression": "* * * * *"},
        )
        issued = 0
        while issued < occurrences:
            issued += len(await api.reserve_run_ids(min(1000, occurrences - issued)))
        extra = rows - 3 * occurrences
        harness.write_history(
            api.schedules,
            SCHEDULE,
            instants,
            1,
            extra_skipped=instants[-1] + timedelta(minutes=1) if extra else None,
        )
        api.schedules.backend.history_store.close()
        await _completed_runs(api, instants)
    return {"rows": 3 * occurrences + (1 if extra else 0), "setup_s": time.perf_counter() - began}


async def _completed_runs(api: Any, instants: list[datetime]) -> None:
    """The completed run record of each occurrence (`run-<n>`, as the history
    names them): a page checks each finished row it serves against its run."""
    for first in range(0, len(instants), 1000):
        chunk = instants[first : first + 1000]
        ids = [f"run-{first + i + 1:06d}" for i in range(len(chunk))]
        await api.admit_runs(
            [
                {
                    "deployment_id": harness.DEPLOYMENT,
                    "inputs": {},
                    "max_steps": None,
                    "origin": {
                        "kind": "schedule",
                        "schedule_id": SCHEDULE,
                        "instant": instant.strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "revision": 1,
                    },
                    "run_id": run_id,
                }
                for run_id, instant in zip(ids, chunk, strict=True)
            ]
        )
        await api.launch_runs(ids)
        await api.drain(600)


async def measure(root: Path, limit: int, samples: int) -> dict[str, Any]:
    server = harness.build_server(root)
    schedules = server.api.schedules
    # Owner's view after a restart: load the history as the scheduler would.
    schedules.backend.history_store.recover(SCHEDULE)

    async def page(cursor: str | None) -> dict[str, Any]:
        result: dict[str, Any] = await schedules.list_schedule_occurrences(
            schedule_id=SCHEDULE, limit=limit, cursor=cursor
        )
        return result

    cursors: list[str | None] = [None]
    walk: list[float] = []
    cursor: str | None = None
    while True:
        began = time.perf_counter()
        result = await page(cursor)
        walk.append(time.perf_counter() - began)
        cursor = result["next_cursor"]
        if cursor is None:
            break
        cursors.append(cursor)
    chosen = {"first": None, "middle": cursors[len(cursors) // 2], "last": cursors[-1]}
    figures: dict[str, Any] = {
        "pages": len(cursors),
        "walk_ms_per_page": 1000 * statistics.mean(walk),
    }
    for name, where in chosen.items():
        timings = []
        for _ in range(samples):
            began = time.perf_counter()
            await page(where)
            timings.append(time.perf_counter() - began)
        figures[name] = {
            "p50_ms": 1000 * harness.percentile(timings, 50),
            "p99_ms": 1000 * harness.percentile(timings, 99),
        }
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--limit", type=int, default=50, help="page size (the API default is 50)")
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="wf-bench-paging-") as tmp:
        root = Path(tmp) / "store"
        setup = asyncio.run(generate(root, args.rows))
        figures = asyncio.run(measure(root, args.limit, args.samples))
    result = {**setup, "limit": args.limit, **figures}
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"history paging: one schedule, {setup['rows']:,} rows, pages of {args.limit}"
        f" ({figures['pages']:,} pages; set-up {setup['setup_s']:.0f} s)"
    )
    print(f"  load average at the end: {harness.loadavg()}")
    for name in ("first", "middle", "last"):
        entry = figures[name]
        print(
            f"  {name:7} page  p50 {entry['p50_ms']:6.3f} ms  p99 {entry['p99_ms']:6.3f} ms"
            "  (target p99 <= 5 ms)"
        )
    print(f"  walking every page: {figures['walk_ms_per_page']:.3f} ms per page on average")


if __name__ == "__main__":
    main()
