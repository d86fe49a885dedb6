"""Benchmark: the machine and its disk, as the other figures depend on them.

Prints the CPU count and model, Python, the load average, and for a
directory on the disk under test (default: the system temp dir, where the
other benches put their stores): fsync latency after a small append, the
cost of creating a file, of rewriting an existing one in place, of a rename,
and of one syncfs.

    uv run --frozen --group bench python bench/disk.py
    uv run --frozen --group bench python bench/disk.py --dir /var/lib/wf

Not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import harness

from shell.durable import sync_paths, syncfs_available


def _per_op_us(action: Any, count: int) -> float:
    began = time.perf_counter()
    for index in range(count):
        action(index)
    return (time.perf_counter() - began) / count * 1e6


def measure(directory: Path, count: int) -> dict[str, Any]:
    fsync_p50, fsync_p99 = harness.fsync_latency_ms(directory)
    payload = b"x" * 900

    def create(index: int) -> None:
        fd = os.open(directory / f"c{index}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, payload)
        os.close(fd)

    def rewrite(index: int) -> None:
        fd = os.open(directory / f"c{index}", os.O_WRONLY)
        os.pwrite(fd, payload, 0)
        os.ftruncate(fd, len(payload))
        os.close(fd)

    def rename(index: int) -> None:
        os.rename(directory / f"c{index}", directory / f"r{index}")

    created = _per_op_us(create, count)
    os.sync()
    rewritten = _per_op_us(rewrite, count)
    renamed = _per_op_us(rename, count)
    syncfs: list[float] = []
    if syncfs_available():
        for index in range(5):
            rewrite_target = directory / f"r{index}"
            rewrite_target.write_bytes(payload)
            began = time.perf_counter()
            sync_paths([directory / f"r{i}" for i in range(9)], mode="syncfs")
            syncfs.append((time.perf_counter() - began) * 1000)
    return {
        **harness.machine(),
        "loadavg": harness.loadavg(),
        "directory": str(directory),
        "fsync_p50_ms": fsync_p50,
        "fsync_p99_ms": fsync_p99,
        "create_us": created,
        "rewrite_us": rewritten,
        "rename_us": renamed,
        "syncfs_median_ms": statistics.median(syncfs) if syncfs else None,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="wf-bench-disk-", dir=args.dir) as tmp:
        result = measure(Path(tmp), args.count)
    if args.json:
        print(json.dumps(result))
        return
    print(f"machine   {result['cpus']} CPUs, {result['cpu_model']}, Python {result['python']}")
    print(f"load      {result['loadavg']} (1, 5, 15 min)")
    print(f"disk      {result['directory']}")
    print(f"  fsync after a small append   p50 {result['fsync_p50_ms']:.2f} ms"
          f"  p99 {result['fsync_p99_ms']:.2f} ms")  # fmt: skip
    print(f"  create a file (900 B)        {result['create_us']:8.1f} us")
    print(f"  rewrite it in place          {result['rewrite_us']:8.1f} us")
    print(f"  rename                       {result['rename_us']:8.1f} us")
    if result["syncfs_median_ms"] is not None:
        print(f"  syncfs (whole filesystem)    {result['syncfs_median_ms']:8.2f} ms median")


if __name__ == "__main__":
    main()
