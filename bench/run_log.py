"""Benchmark: the run log at a million runs. How long does a server take to
load R run records (default 1,000,000) from the segment files of
`<store>/run-log/`, how much memory do they take, and how fast are
`inspect_run` and `list_runs` then?

Set-up: one trivial run is executed through the real host (admitted,
executed, completed), and its record is the template: the log is then
generated with R completed records, each the template with its own run id
(frames written as the log writes them, `adapters.host.run_log.encode_frame`),
plus, for every fourth run, an earlier superseded frame (its admitted
record), as a log that was not compacted yet holds; the counter says R.
The page cache is warm (the files were just written).

Measured, in this process (the collector tuned and the loaded objects
frozen, as `wf-rpc-server` does): `build_local_static_workflow_server` on
that store (reads and checks every record: "load"); the RSS it added; then
`--samples` calls each of `inspect_run` on random run ids, `list_runs`
(50 a page) from random cursors oldest first, newest first, and newest first
filtered by a status no run has (the bounded scan of `NEWEST_SCAN` records),
timed one by one: p50 / p99 / max. Last, the server is closed (its run log
writes its index, `adapters/host/run_log_index.py`) and built again: the
load a start after a clean stop pays; and every run's claim is listed
through `list_run_claims`, as a scheduler's start with no startup
checkpoint to go by asks for it.

    uv run --frozen --group bench python bench/run_log.py
    uv run --frozen --group bench python bench/run_log.py --runs 100000

Not a test: it prints figures and asserts nothing. Target (issue 21):
inspect and list p99 <= 5 ms at 1,000,000 runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import harness

from adapters import build_local_static_workflow_server
from adapters.collector import freeze_startup_objects, tune_collector
from adapters.host.identifiers import format_run_id
from adapters.host.run_log import LOG_DIR, encode_frame
from adapters.host.runs import _encode_cursor
from adapters.process_limits import raise_open_file_limit

_PER_SEGMENT = 30_000


async def _template(root: Path) -> dict[str, Any]:
    """The record of one trivial run executed through the real host."""
    server = harness.build_server(root)
    await harness.deploy_trivial(server)
    result = await server.api.run_deployment(harness.DEPLOYMENT, {})
    record: dict[str, Any] = server.api._runs.get(result["run_id"]).to_json()
    for path in (root / LOG_DIR).iterdir():
        path.unlink()
    return record


def _generate(root: Path, template: dict[str, Any], runs: int) -> float:
    began = time.perf_counter()
    log = root / LOG_DIR
    log.mkdir(exist_ok=True)
    admitted = {
        **template,
        "status": "admitted",
        "attempt": 0,
        "executing": None,
        "progress": None,
        "trace": [],
        "checkpoint": None,
        "output": None,
        "error": None,
    }
    segment = 1
    chunk: list[bytes] = []
    for number in range(1, runs + 1):
        run_id = format_run_id(number)
        if number % 4 == 0:
            payload = json.dumps({**admitted, "run_id": run_id}, separators=(",", ":"))
            chunk.append(encode_frame(number, payload.encode()))
        payload = json.dumps({**template, "run_id": run_id}, separators=(",", ":"))
        chunk.append(encode_frame(number, payload.encode()))
        if number % _PER_SEGMENT == 0 or number == runs:
            (log / f"{segment:08d}.seg").write_bytes(b"".join(chunk))
            chunk = []
            segment += 1
    (root / "counters" / "run_id").write_text(json.dumps({"last_issued": runs}))
    return time.perf_counter() - began


def _timed(samples: list[float], began: float) -> None:
    samples.append((time.perf_counter() - began) * 1000)


def _figures(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": harness.percentile(samples, 50),
        "p99_ms": harness.percentile(samples, 99),
        "max_ms": max(samples),
    }


async def measure(runs: int, samples: int, root: Path) -> dict[str, Any]:
    template = await _template(root)
    generated_s = _generate(root, template, runs)
    rss = harness.current_rss_mib()
    began = time.perf_counter()
    server = build_local_static_workflow_server(root)
    load_s = time.perf_counter() - began
    api = server.api
    assert server.recovery_report == [], server.recovery_report[:3]
    # As `wf-rpc-server` does once its stores are loaded.
    freeze_startup_objects()
    rss_added = harness.current_rss_mib() - rss
    chance = random.Random(7)
    inspect: list[float] = []
    oldest: list[float] = []
    newest: list[float] = []
    absent: list[float] = []
    for _ in range(samples):
        run_id = format_run_id(chance.randint(1, runs))
        began = time.perf_counter()
        view = await api.inspect_run(run_id)
        _timed(inspect, began)
        assert view["status"] == "completed"
        after = _encode_cursor(chance.randint(0, runs - 60))
        began = time.perf_counter()
        page = await api.list_runs(cursor=after, limit=50)
        _timed(oldest, began)
        assert len(page["runs"]) == 50
        before = _encode_cursor(chance.randint(60, runs), "before")
        began = time.perf_counter()
        page = await api.list_runs(cursor=before, limit=50, newest_first=True)
        _timed(newest, began)
        assert len(page["runs"]) == 50
        began = time.perf_counter()
        await api.list_runs(status="interrupted", cursor=before, limit=50, newest_first=True)
        _timed(absent, began)
    # The server's clean close writes the run log's index; a start after it
    # takes each run's place from the index instead of scanning.
    await server.close()
    began = time.perf_counter()
    again = build_local_static_workflow_server(root)
    indexed_load_s = time.perf_counter() - began
    assert again.recovery_report == [], again.recovery_report[:3]
    view = await again.api.inspect_run(format_run_id(runs))
    assert view["status"] == "completed"
    # What a scheduler's start with no checkpoint to go by asks of the host:
    # every run's claim, a page of 100 at a time (`shell.recovery`).
    began = time.perf_counter()
    cursor: str | None = None
    listed = 0
    while True:
        page = await again.api.list_run_claims(cursor=cursor, limit=100)
        listed += len(page["runs"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    claims_s = time.perf_counter() - began
    assert listed == runs, listed
    return {
        "runs": runs,
        "indexed_load_s": indexed_load_s,
        "claims_s": claims_s,
        "segments": len(list((root / LOG_DIR).iterdir())),
        "log_mib": sum(p.stat().st_size for p in (root / LOG_DIR).iterdir()) / 2**20,
        "generate_s": generated_s,
        "load_s": load_s,
        "rss_added_mib": rss_added,
        "inspect_run": _figures(inspect),
        "list_runs oldest first": _figures(oldest),
        "list_runs newest first": _figures(newest),
        "list_runs newest first, absent status": _figures(absent),
    }


def main(argv: list[str] | None = None) -> None:
    tune_collector()
    raise_open_file_limit()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="wf-bench-run-log-") as tmp:
        result = asyncio.run(measure(args.runs, args.samples, Path(tmp) / "store"))
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{result['runs']:,} runs in {result['segments']} segments ({result['log_mib']:.0f} MiB);"
        f" generated in {result['generate_s']:.1f} s"
    )
    print(
        f"server build (load and check every record): {result['load_s']:.1f} s;"
        f" RSS added {result['rss_added_mib']:.0f} MiB"
    )
    print(
        "server build after its clean close (the run log's index):"
        f" {result['indexed_load_s']:.2f} s"
    )
    print(
        "every run's claim listed (a scheduler's start with no checkpoint):"
        f" {result['claims_s']:.2f} s, {result['claims_s'] / result['runs'] * 1e6:.1f} us a run"
    )
    for name in ("inspect_run", *(k for k in result if k.startswith("list_runs"))):
        figures = result[name]
        print(
            f"{name}: p50 {figures['p50_ms']:.3f} ms, p99 {figures['p99_ms']:.3f} ms,"
            f" max {figures['max_ms']:.3f} ms"
        )


if __name__ == "__main__":
    main()
