"""Benchmark: the operator console's pages at scale. One store with S
schedules (default 10,000 hourly cron schedules) plus one every-minute
schedule with R history rows (default 1,000,000: 333,333 occurrences, each
admitted, running and completed, and their 333,333 completed run records),
served by the real console app with the scheduler running on the real clock.

Each page is requested `--samples` times (default 200) through the ASGI app
in this process (no socket: what is measured is the server's own time, the
`Server-Timing` the console sets, and the request's time around it); p50,
p99 and max per page. Pages: the overview, the schedules list (by id, by
next instant, by last occurrence, filtered to a state, a page in the
middle), the busy schedule (its first page with its timelines, and a page
of its ledger in the middle), the runs (newest, a status filter that
matches nothing, so the whole run list is scanned), a run, and /metrics.

The schedule catalog (adapters/console/catalog.py) is renewed once before
the samples; its full renewal and its longest slice (the longest a request
can wait behind it) are printed too.

    uv run --frozen --group bench python bench/console.py
    uv run --frozen --group bench python bench/console.py --schedules 1000 --rows 30000

Set-up reuses bench/paging.py's generation (history through the real stores,
runs through the real host) and adds the schedules through the real API
with fsyncs deferred (harness.fast_setup). Not a test: it prints figures and
asserts nothing. Target: p99 <= 100 ms per page.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
import httpx
import paging

from adapters.console import Console
from adapters.metrics import SchedulerMetrics
from adapters.rpc.app import create_app, default_health
from shell import SchedulerServiceConfig, build_scheduler_service


async def add_schedules(root: Path, count: int) -> float:
    server = harness.build_server(root)
    began = time.perf_counter()
    with harness.fast_setup():
        for index in range(count):
            await server.api.schedules.create_schedule(
                schedule_id=f"s-{index:05d}",
                deployment_id=harness.DEPLOYMENT,
                trigger={"kind": "cron", "expression": f"{index % 60} * * * *"},
            )
    elapsed = time.perf_counter() - began
    await server.close()  # the store's lock: the measured server takes it
    return elapsed


async def _timed(client: httpx.AsyncClient, path: str) -> tuple[float, float, int]:
    began = time.perf_counter()
    response = await client.get(path)
    wall = (time.perf_counter() - began) * 1000
    timing = response.headers.get("server-timing", "")
    server = float(timing.split("dur=")[1]) if "dur=" in timing else wall
    return server, wall, response.status_code


async def measure(root: Path, samples: int) -> dict[str, Any]:
    server = harness.build_server(root)
    metrics = SchedulerMetrics()
    metrics.watch_host(server.api, server.recovery_report)
    console = Console(server.api, health=default_health(server.api), token=None)
    metrics.set_schedule_counts(console.schedule_counts)
    console.watch(server.api)
    metrics.decision_listeners.append(console.decided)
    service = build_scheduler_service(
        server, SchedulerServiceConfig(enabled=True, max_concurrent_runs=4), observer=metrics
    )
    await service.start()
    began = time.perf_counter()
    # The busy schedule's last instant is long past: the first rounds decide
    # the gap (one skipped-misfire row) before anything is measured.
    await service.settle()
    first_rounds_s = time.perf_counter() - began
    console.attach_service(service)
    metrics.attach_service(service)
    app = create_app(server.api, console=console, metrics=metrics)
    transport = httpx.ASGITransport(app=app)
    figures: dict[str, Any] = {"first_rounds_s": round(first_rounds_s, 1)}
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", timeout=600
        ) as client:
            assert console.catalog is not None
            began = time.perf_counter()
            await console.catalog.snapshot()
            figures["catalog_cold_s"] = round(time.perf_counter() - began, 2)
            # The longest one slice of a renewal blocks the loop: time them.
            slices: list[float] = []
            catalog = console.catalog
            ids = await server.api.schedules.definitions.list_ids()
            for start in range(0, len(ids), 25):
                began = time.perf_counter()
                for schedule_id in ids[start : start + 25]:
                    await catalog._read(schedule_id)
                slices.append((time.perf_counter() - began) * 1000)
            figures["catalog_renewal_s"] = round(sum(slices) / 1000, 2)
            figures["catalog_slice_ms_max"] = round(max(slices), 1)
            figures["catalog_max_age_s"] = round(catalog.max_age_s, 1)
            ledger = await server.api.schedules.list_schedule_occurrences(
                schedule_id=paging.SCHEDULE, limit=100, newest_first=True
            )
            middle = ledger["next_cursor"]
            for _ in range(1600):  # ~160,000 rows back: the middle of the history
                page = await server.api.schedules.list_schedule_occurrences(
                    schedule_id=paging.SCHEDULE, limit=100, cursor=middle, newest_first=True
                )
                middle = page["next_cursor"] or middle
            runs = await server.api.list_runs(limit=1, newest_first=True)
            run_id = runs["runs"][0]["run_id"]
            pages = {
                "overview": "/",
                "schedules (by id)": "/schedules",
                "schedules (by next)": "/schedules?sort=next",
                "schedules (by last)": "/schedules?sort=last",
                "schedules (active, page 50)": "/schedules?state=active&page=50",
                "schedule, 1M rows": f"/schedules/{paging.SCHEDULE}",
                "schedule, ledger middle": f"/schedules/{paging.SCHEDULE}?cursor={middle}",
                "runs": "/runs",
                "runs (exhausted: none)": "/runs?status=exhausted",
                "run": f"/runs/{run_id}",
                "metrics": "/metrics",
            }
            table = {}
            for name, path in pages.items():
                status = (await _timed(client, path))[2]  # warm: templates compiled
                server_ms: list[float] = []
                wall_ms: list[float] = []
                for _ in range(samples):
                    one, wall, status = await _timed(client, path)
                    server_ms.append(one)
                    wall_ms.append(wall)
                table[name] = {
                    "status": status,
                    "server_p50_ms": round(statistics.median(server_ms), 1),
                    "server_p99_ms": round(harness.percentile(server_ms, 99), 1),
                    "server_max_ms": round(max(server_ms), 1),
                    "request_p99_ms": round(harness.percentile(wall_ms, 99), 1),
                }
                print(f"  {name:30s} {json.dumps(table[name])}", flush=True)
            figures["pages"] = table
            figures["catalog_renewing_at_end"] = catalog.peek().renewing
    finally:
        await console.close()
        await service.stop()
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args(argv)
    print(json.dumps(harness.machine()))
    with tempfile.TemporaryDirectory(prefix="wf-bench-console-") as directory:
        root = Path(directory)
        began = time.perf_counter()
        generated = asyncio.run(paging.generate(root, args.rows))
        added = asyncio.run(add_schedules(root, args.schedules))
        print(
            json.dumps(
                {
                    "schedules": args.schedules + 1,
                    "history_rows": generated["rows"],
                    "setup_s": round(time.perf_counter() - began, 1),
                    "schedules_setup_s": round(added, 1),
                }
            ),
            flush=True,
        )
        figures = asyncio.run(measure(root, args.samples))
    print(json.dumps({k: v for k, v in figures.items() if k != "pages"}))


if __name__ == "__main__":
    main()
