"""Benchmark: what the running scheduler's housekeeping costs its event loop.
N schedules (default 10,000) and R history rows on disk, set up as
`bench/restart.py` does; the real service and host on the SystemClock, with
`checkpoint_interval_s` = 1 so that a checkpoint follows every change.

Measured: how long `_housekeeping_if_quiet` holds the loop when it writes a
checkpoint (the event loop runs nothing else meanwhile: JSON-RPC calls wait),
first at the first quiet moment after the start (temp-file sweep, every
schedule examined), then after K schedules were touched (paused through the
schedules API, which appends to their lifecycle logs; then resumed, which is
timed too). A schedule that only fired since changes its runtime record and
history, which costs less to examine than a lifecycle change.

    uv run --frozen --group bench python bench/running_checkpoint.py
    uv run --frozen --group bench python bench/running_checkpoint.py --touched 10 --touched 833

Not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
import restart

import shell.service
from shell import SchedulerServiceConfig, SystemClock, build_scheduler_service


async def measure(root: Path, schedules: int, rows: int, touched: list[int]) -> dict[str, Any]:
    await restart.generate(root, schedules, rows, 0)
    server = harness.build_server(root)
    config = SchedulerServiceConfig(enabled=True, max_concurrent_runs=100, checkpoint_interval_s=1)
    service = build_scheduler_service(server, config, clock=SystemClock())
    held: list[float] = []
    real = shell.service.SchedulerService._housekeeping_if_quiet

    def timed(self: shell.service.SchedulerService) -> None:
        before = self._housekeeping.checkpointed_at
        began = time.perf_counter()
        real(self)
        if self._housekeeping.checkpointed_at != before:
            held.append(time.perf_counter() - began)

    async def next_checkpoint() -> float:
        count = len(held)
        while len(held) == count:
            await asyncio.sleep(0.05)
        return held[-1]

    shell.service.SchedulerService._housekeeping_if_quiet = timed  # type: ignore[method-assign]
    try:
        await service.start()
        result: dict[str, Any] = {"first_quiet_moment_s": await next_checkpoint(), "touched": {}}
        api = server.api.schedules
        for count in touched:
            ids = [f"s-{index:05d}" for index in range(min(count, schedules))]
            for schedule_id in ids:
                await api.pause_schedule(schedule_id=schedule_id)
            paused = await next_checkpoint()
            for schedule_id in ids:
                await api.resume_schedule(schedule_id=schedule_id)
            result["touched"][len(ids)] = {"paused_s": paused, "resumed_s": await next_checkpoint()}
        await service.stop()
    finally:
        shell.service.SchedulerService._housekeeping_if_quiet = real  # type: ignore[method-assign]
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=1_000_000, help="history rows in all")
    parser.add_argument(
        "--touched", type=int, action="append", help="repeatable; default 10, 833 and 10000"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    touched = args.touched or [10, 833, 10_000]
    with tempfile.TemporaryDirectory(prefix="wf-bench-checkpoint-") as tmp:
        result = asyncio.run(measure(Path(tmp) / "store", args.schedules, args.rows, touched))
    if args.json:
        print(json.dumps(result))
        return
    print(f"running checkpoint, {args.schedules:,} schedules: how long it holds the event loop")
    print(f"  load average at the end: {harness.loadavg()}")
    first = result["first_quiet_moment_s"]
    print(f"  first quiet moment after the start (sweep, every schedule)  {first:6.3f} s")
    for count, figures in result["touched"].items():
        print(
            f"  {count:>6,} schedules touched since the last:"
            f" paused {figures['paused_s']:6.3f} s, resumed {figures['resumed_s']:6.3f} s"
        )


if __name__ == "__main__":
    main()
