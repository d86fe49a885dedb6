"""Benchmark: what a round's history rows cost to insert on PostgreSQL, by
the statement the store uses and by two set-based ones.

A herd's round on PostgreSQL inserts one `wf_occurrences` row per admission
in one transaction (`shell.pg.batch.PgBatch`: psycopg's `executemany`, which
pipelines one INSERT per row). This bench inserts N such rows (default
10,000: the admitted decision row of N schedules, the JSON the store writes)
into the real schema (migrated by `Database.open`) of a fresh database of a
durable PostgreSQL server it starts (`bench/pgstore.py`), each batch in one
transaction whose COMMIT is waited for, three ways:

- `executemany`: the store's statement, one INSERT per row, pipelined;
- `unnest`: one `INSERT ... SELECT FROM unnest(arrays)` for the whole batch;
- `copy`: `COPY wf_occurrences (...) FROM STDIN`.

The methods alternate, `--rounds` times each; every round inserts the next
seq of every schedule, as the next herd would. It prints p50 and max wall
time per method and the PostgreSQL server's CPU. Not a product change: it
measures what the statement costs, as evidence for `docs/performance.md`.

    uv run --frozen --group bench python bench/pg_insert.py
    uv run --frozen --group bench python bench/pg_insert.py --rows 1000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import harness
import pgstore

INSTANT = datetime(2026, 3, 2, 9, 31, tzinfo=UTC)
# The store's statement (shell/pg/history.py).
INSERT = (
    "INSERT INTO wf_occurrences (schedule_id, seq, instant, status, decision)"
    " VALUES (%s, %s, %s, %s, %s::jsonb)"
)
UNNEST = (
    "INSERT INTO wf_occurrences (schedule_id, seq, instant, status, decision)"
    " SELECT * FROM unnest(%s::text[], %s::int[], %s::timestamptz[], %s::text[], %s::jsonb[])"
)
COPY = "COPY wf_occurrences (schedule_id, seq, instant, status, decision) FROM STDIN"


def _rows(count: int, seq: int) -> list[tuple[Any, ...]]:
    """The admitted decision row of `count` schedules at `seq`, as staged."""
    instant = INSTANT + timedelta(minutes=seq)
    text = instant.strftime("%Y-%m-%dT%H:%M:%SZ")
    snapshot = {"deployment_id": harness.DEPLOYMENT, "inputs": {}, "max_steps": None, "revision": 1}
    rows = []
    for index in range(count):
        row = {
            "seq": seq,
            "instant": text,
            "status": "admitted",
            "recorded_at": text,
            "run_id": f"run-{seq * count + index + 1:06d}",
            "revision": 1,
            "snapshot": snapshot,
        }
        document = json.dumps(row, separators=(",", ":"), allow_nan=False)
        rows.append((f"h-{index:05d}", seq, instant, "admitted", document))
    return rows


async def _insert(database: Any, method: str, rows: list[tuple[Any, ...]]) -> float:
    began = time.perf_counter()
    async with database.transaction("insert a round's rows") as conn:
        if method == "executemany":
            async with conn.cursor() as cursor:
                await cursor.executemany(INSERT, rows)
        elif method == "unnest":
            columns = [list(column) for column in zip(*rows, strict=True)]
            await conn.execute(UNNEST, columns)
        else:
            async with conn.cursor() as cursor, cursor.copy(COPY) as copy:
                for row in rows:
                    await copy.write_row(row)
    return time.perf_counter() - began


async def measure(url: str, count: int, rounds: int, pid: int) -> dict[str, Any]:
    from shell.pg.database import Database

    database = Database(url)
    await database.open()
    async with database.transaction("create the schedules") as conn:
        await conn.execute(
            "INSERT INTO wf_schedules (schedule_id, lifecycle_seq, snapshot)"
            " SELECT 'h-' || lpad(i::text, 5, '0'), 1, '{}'::jsonb"
            " FROM generate_series(0, %s - 1) AS i",
            (count,),
        )
    methods = ("executemany", "unnest", "copy")
    seconds: dict[str, list[float]] = {method: [] for method in methods}
    server_cpu: dict[str, float] = dict.fromkeys(methods, 0.0)
    seq = 0
    for _ in range(rounds):
        for method in methods:
            rows = _rows(count, seq)
            seq += 1
            cpu = pgstore.server_cpu_seconds(pid)
            seconds[method].append(await _insert(database, method, rows))
            server_cpu[method] += pgstore.server_cpu_seconds(pid) - cpu
    await database.close()
    return {
        method: {
            "p50_s": statistics.median(seconds[method]),
            "max_s": max(seconds[method]),
            "server_cpu_s": server_cpu[method] / rounds,
        }
        for method in methods
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000, help="rows per transaction")
    parser.add_argument("--rounds", type=int, default=7, help="transactions per method")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with pgstore.BenchPostgres() as postgres:
        settings = postgres.settings()
        url = postgres.database("insert")
        figures = asyncio.run(measure(url, args.rows, args.rounds, postgres.pid))
    result = {
        "rows": args.rows,
        "rounds": args.rounds,
        "machine": harness.machine(),
        "postgres": settings,
        "loadavg": harness.loadavg(),
        "methods": figures,
    }
    if args.json:
        print(json.dumps(result))
        return
    machine = result["machine"]
    print(
        f"{args.rows:,} history rows in one transaction, {args.rounds} transactions per method"
        f" (load {result['loadavg']})"
    )
    print(f"  {machine['cpus']} CPUs, {machine['cpu_model']}, Python {machine['python']}")
    print(f"  {pgstore.describe(settings)}")
    for method, entry in figures.items():
        print(
            f"  {method:12} p50 {entry['p50_s']:7.3f} s  max {entry['max_s']:7.3f} s"
            f"  PostgreSQL CPU {entry['server_cpu_s']:6.3f} s per transaction"
        )


if __name__ == "__main__":
    main()
