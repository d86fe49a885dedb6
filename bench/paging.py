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

`--store postgres`: the same history in a fresh database of a PostgreSQL
server the bench starts (`bench/pgstore.py`: durable settings, data on the
same disk), one table row per occurrence (its decision row and its latest
transition row: 333,333 rows for 1,000,000 file rows). The first 3,000
occurrences are written through the real stores and the first 1,000 runs
created, run and completed by the host; the rest of both is generated with
`INSERT ... SELECT generate_series(...)`, and the SQL must regenerate what
the stores and the host wrote, column for column, before anything is
measured; then VACUUM ANALYZE. The walk over every page reads every
generated row back through the API (row rules, run records) before the
timed samples. A page is three transactions (the schedule exists, the keyset
scan, on the first page the runtime record).

    uv run --frozen --group bench python bench/paging.py
    uv run --frozen --group bench python bench/paging.py --rows 100000 --limit 100
    uv run --frozen --group bench python bench/paging.py --store postgres

Not a test: it prints figures and asserts nothing. Target: p99 <= 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import harness
import pgstore

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
    await server.close()  # the store's lock: the measured server takes it
    return {"rows": 3 * occurrences + (1 if extra else 0), "setup_s": time.perf_counter() - began}


# Written through the stores and the host on PostgreSQL; the rest generated like them.
PG_THROUGH_STORES = 3000
PG_THROUGH_HOST = 1000


async def generate_postgres(url: str, rows: int) -> dict[str, Any]:
    """`generate` in the PostgreSQL database at `url` (see the module docstring)."""
    clock = ManualClock(START)
    server = await pgstore.open_server(url, clock=clock.now)
    api = server.api
    api.schedules.clock = clock
    occurrences = rows // 3
    instants = [START + timedelta(minutes=1 + i) for i in range(occurrences)]
    began = time.perf_counter()
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
    skipped = instants[-1] + timedelta(minutes=1) if extra else None
    stored = min(PG_THROUGH_STORES, occurrences)
    await pgstore.write_history(server, SCHEDULE, instants[:stored], 1, runtime=False)
    generated = await pgstore.insert_occurrences(
        server, [SCHEDULE], instants, 1, seqs=range(stored, occurrences), skipped=skipped
    )
    last = skipped if skipped is not None else instants[-1]
    await pgstore.write_runtime(server, [SCHEDULE], last)
    checked = await pgstore.check_generated(server, [SCHEDULE], instants, 1, seqs=range(stored))
    hosted = min(PG_THROUGH_HOST, occurrences)
    await pgstore.completed_runs(api, SCHEDULE, instants[:hosted], 1)
    # Run 1 is the template: the host's record of every other run differs
    # from it in the run id and the origin's instant only.
    runs = await pgstore.insert_runs(server, instants, 1, range(hosted, occurrences), template=1)
    checked_runs = await pgstore.check_runs(server, instants, 1, range(1, hosted), template=1)
    vacuum_s = await pgstore.vacuum_analyze(server)
    await server.close()
    return {
        "rows": 3 * occurrences + (1 if extra else 0),
        "table_rows": occurrences + (1 if extra else 0),
        "generated_rows": generated,
        "checked_rows": checked,
        "generated_runs": runs,
        "checked_runs": checked_runs,
        "vacuum_s": vacuum_s,
        "setup_s": time.perf_counter() - began,
    }


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


async def measure(
    root: Path,
    limit: int,
    samples: int,
    pg_url: str | None = None,
    profile: str | None = None,
) -> dict[str, Any]:
    """On the files under `root`, or on the PostgreSQL database at `pg_url`.
    After the timed samples, an untimed pass splits a page's time between
    its parts (`harness.Timers`), and with `profile` another one writes
    cProfile stats of the middle page there."""
    if pg_url is None:
        server = harness.build_server(root)
        schedules = server.api.schedules
        # Owner's view after a restart: load the history as the scheduler would.
        schedules.backend.history_store.recover(SCHEDULE)
    else:
        server = await pgstore.open_server(pg_url)
        schedules = server.api.schedules
        await schedules.history.recover(SCHEDULE)

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
    # Where a page's time goes: mean ms per page of each part (not timed above).
    parts = {
        "definitions.exists": (schedules.definitions, "exists"),
        "history.page": (schedules.history, "page"),
        "run records checked": (schedules, "_run_disagreement"),
        "runtime.load (first page)": (schedules.runtime, "load"),
    }
    breakdown: dict[str, dict[str, float]] = {}
    for name, where in chosen.items():
        timers = harness.Timers()
        for label, (owner, method) in parts.items():
            timers.wrap(owner, method, label)
        began = time.perf_counter()
        for _ in range(samples):
            await page(where)
        total = time.perf_counter() - began
        timers.restore()
        breakdown[name] = {
            "page": 1000 * total / samples,
            **{label: 1000 * sec / samples for label, (sec, _) in timers.report().items()},
        }
    figures["breakdown_ms"] = breakdown
    if profile is not None:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(samples):
            await page(chosen["middle"])
        profiler.disable()
        profiler.dump_stats(profile)
    if pg_url is not None:
        figures["round_trip_ms"] = await pgstore.round_trips(server.database)
    await server.close()
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--limit", type=int, default=50, help="page size (the API default is 50)")
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="cProfile stats of the middle page, in a pass of its own after the timed ones",
    )
    harness.add_store_option(parser)
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="wf-bench-paging-") as tmp,
        pgstore.maybe_postgres(args.store) as postgres,
    ):
        root = Path(tmp) / "store"
        settings = None
        if postgres is not None:
            settings = postgres.settings()
            url = postgres.database("paging")
            setup = asyncio.run(generate_postgres(url, args.rows))
            figures = asyncio.run(measure(root, args.limit, args.samples, url, args.profile))
        else:
            setup = asyncio.run(generate(root, args.rows))
            figures = asyncio.run(measure(root, args.limit, args.samples, profile=args.profile))
    result = {
        **setup,
        "store": args.store,
        "machine": harness.machine(),
        "loadavg": harness.loadavg(),
        "limit": args.limit,
        **figures,
    }
    if settings is not None:
        result["postgres"] = settings
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"history paging: one schedule, {setup['rows']:,} rows, pages of {args.limit}"
        f" ({figures['pages']:,} pages; set-up {setup['setup_s']:.0f} s), store {args.store}"
    )
    machine = result["machine"]
    print(f"  {machine['cpus']} CPUs, {machine['cpu_model']}, Python {machine['python']}")
    if settings is not None:
        print(f"  {pgstore.describe(settings)}")
        print(
            f"  {setup['table_rows']:,} rows in wf_occurrences ({setup['generated_rows']:,}"
            f" generated by SQL, {setup['checked_rows']:,} regenerated and equal to the stores'"
            f" rows); {setup['generated_runs']:,} run records generated"
            f" ({setup['checked_runs']:,} regenerated and equal to the host's);"
            f" VACUUM ANALYZE {setup['vacuum_s']:.1f} s"
        )
    print(f"  load average at the end: {result['loadavg']}")
    for name in ("first", "middle", "last"):
        entry = figures[name]
        print(
            f"  {name:7} page  p50 {entry['p50_ms']:6.3f} ms  p99 {entry['p99_ms']:6.3f} ms"
            "  (target p99 <= 5 ms)"
        )
    print(f"  walking every page: {figures['walk_ms_per_page']:.3f} ms per page on average")
    print("  where a page's time goes (another pass, mean ms per page):")
    breakdown = figures["breakdown_ms"]
    labels = list(breakdown["first"])
    print("    " + f"{'':28}" + "".join(f"{name:>9}" for name in breakdown))
    for label in labels:
        cells = "".join(f"{breakdown[name][label]:9.3f}" for name in breakdown)
        print(f"    {label:28}{cells}")
    if "round_trip_ms" in figures:
        trips = figures["round_trip_ms"]
        print(
            f"  one round trip to PostgreSQL (SELECT 1, autocommit):"
            f" p50 {trips['select_p50_ms']:.3f} ms, p99 {trips['select_p99_ms']:.3f} ms;"
            f" an empty read transaction (pool checkout, BEGIN, SELECT 1, COMMIT):"
            f" p50 {trips['transaction_p50_ms']:.3f} ms, p99 {trips['transaction_p99_ms']:.3f} ms"
        )


if __name__ == "__main__":
    main()
