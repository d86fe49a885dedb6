"""The soak: 500 every-minute schedules under churn, invariants throughout.

A bounded run for CI (`WF_SOAK_MINUTES`, default below, keeps it well under
a minute); set `WF_SOAK_MINUTES=240` (and `WF_SOAK_SEED`) for a longer one.
The seed is printed so a failing soak can be replayed.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shell import durable
from tests.reliability.figures import record
from tests.reliability.soak_world import MINUTE, START, Soak

SCHEDULES = int(os.environ.get("WF_SOAK_SCHEDULES", "500"))
MINUTES = int(os.environ.get("WF_SOAK_MINUTES", "8"))
SEED = int(os.environ.get("WF_SOAK_SEED", "20260302"))
CAPACITY = 8


@pytest.fixture
def no_flush(monkeypatch: pytest.MonkeyPatch) -> None:
    """The soak checks scheduling under churn, not the disk (the crash tests
    do): flushes become no-ops, so that thousands of runs fit in CI."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    monkeypatch.setattr(durable, "_syncfs_directory", lambda directory: None)


@pytest.fixture
def soak_root(tmp_path: Path) -> Iterator[Path]:
    """A store in memory (tmpfs) where there is one: a rename there costs
    microseconds, on a busy disk milliseconds."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="wf-soak-") as directory:
            yield Path(directory) / "store"
    else:
        yield tmp_path / "store"


async def test_soak(soak_root: Path, no_flush: None) -> None:
    print(f"soak seed {SEED}: {SCHEDULES} schedules, {MINUTES} minutes")
    began = time.monotonic()
    soak = Soak(soak_root, seed=SEED, schedules=SCHEDULES, capacity=CAPACITY)
    try:
        await soak.start()
        for m in range(1, MINUTES + 1):
            await soak.minute(m)
            assert not soak.violations, soak.violations[:10]
            await soak.sample_check(10)
            if m == MINUTES // 2:
                await soak.restart()
        await soak.finish_runs()
        await soak.final_check(START + MINUTES * MINUTE)
        assert not soak.violations, soak.violations[:10]
    finally:
        await soak.harness.shutdown()
    figures = soak.figures
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(figures.outcomes.items()))
    record(
        "soak",
        f"{figures.schedules} schedules x {figures.minutes} simulated minutes (seed {SEED}):"
        f" {figures.runs} runs ({outcomes}),"
        f" {figures.rows} history rows, {figures.pauses} pauses, {figures.edits} edits,"
        f" {figures.deletes} deletes, {figures.resumes} resumes, {figures.restarts} restart"
        f" after a power cut ({figures.unsynced_at_cut} unflushed writes at stake);"
        f" at most {figures.max_slots} of {CAPACITY} slots held;"
        f" {time.monotonic() - began:.0f} s",
    )
