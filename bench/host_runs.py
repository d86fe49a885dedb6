"""Benchmark: the host's side of an admission. N runs (default 1,000) are
created, launched and executed to completion (one trivial step each), once
per run (`admit_run` + `launch_run`, as the scheduler used to) and once in
batches (`admit_runs` + `launch_runs`, steps and stops group-committed), on
fresh stores in one process, alternating `--repeat` times. Each store first
runs one unmeasured round of N runs (a store that has written records
before, as a running server's has); the second round is measured.

    uv run --frozen --group bench python bench/host_runs.py
    uv run --frozen --group bench python bench/host_runs.py --runs 200 --repeat 1

Not a test: it prints figures and asserts nothing.
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


async def _one_by_one(api: Any, ids: list[str]) -> None:
    for run_id in ids:
        await api.admit_run(harness.DEPLOYMENT, {}, run_id=run_id)
        await api.launch_run(run_id)


async def _batched(api: Any, ids: list[str]) -> None:
    await api.admit_runs(
        [{"deployment_id": harness.DEPLOYMENT, "inputs": {}, "run_id": run_id} for run_id in ids]
    )
    await api.launch_runs(ids)


async def measure(runs: int, batched: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="wf-bench-host-") as tmp:
        server = harness.build_server(Path(tmp) / "store")
        api = server.api
        await harness.deploy_trivial(server)
        # The first round warms the store up (a run store that has written
        # records before, as a running server's has); the second is measured.
        for measured in (False, True):
            ids: list[str] = []
            while len(ids) < runs:
                ids.extend(await api.reserve_run_ids(min(1000, runs - len(ids))))
            cpu = harness.cpu_seconds()
            began = time.perf_counter()
            await (_batched if batched else _one_by_one)(api, ids)
            launched = time.perf_counter() - began
            assert await api.drain(600) == []
            finished = time.perf_counter() - began
            cpu = harness.cpu_seconds() - cpu
            statuses = {(await api.inspect_run(run_id))["status"] for run_id in ids}
            assert statuses == {"completed"}, statuses
            if measured:
                return {"launched_s": launched, "completed_s": finished, "cpu_s": cpu}
        raise AssertionError("unreachable")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results: dict[str, list[dict[str, float]]] = {"one_by_one": [], "batched": []}
    for _ in range(args.repeat):
        for mode in results:
            results[mode].append(asyncio.run(measure(args.runs, mode == "batched")))
    if args.json:
        print(json.dumps({"runs": args.runs, **results}))
        return
    print(f"host: {args.runs:,} runs created, launched and completed (median of {args.repeat})")
    for mode, samples in results.items():

        def median(key: str, samples: list[dict[str, float]] = samples) -> float:
            return statistics.median(s[key] for s in samples)

        print(
            f"  {mode:10} all launched {median('launched_s'):7.3f} s,"
            f" all completed {median('completed_s'):7.3f} s,"
            f" CPU {median('cpu_s'):6.3f} s"
            f" ({1000 * median('completed_s') / args.runs:.2f} ms per run)"
        )


if __name__ == "__main__":
    main()
