"""SIGKILL of a scheduler on PostgreSQL at every step of an admission.

A real child process (`pg_admission_child.py`) kills itself with SIGKILL at
one step of the admission of 10:00: before the round's transaction commits,
right after it (the occurrence and its run record durable, nothing
launched), after the run's executing mark, after the first of its two steps
(the second is written with the checkpoint), after its checkpoint. The
parent then starts a scheduler on the same database at 10:00:30 and checks
what the seed promises: the instant is decided exactly once, never admitted
twice, and a run is either started afresh (nothing happened yet), finished
as it finished, or failed as abandoned with the disclosure that external
effects may already have occurred.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from shell import ManualClock
from tests.pgserver import PostgresServer

from .conftest import START, Harness

ABANDONED = "external effects may already have occurred"

# (the step the child dies at, what the 10:00 row says after the restart)
STEPS: list[tuple[str, str]] = [
    ("before:commit", "completed"),
    ("after:commit", "completed"),
    ("after:run:executing-mark", "failed"),
    ("after:run:progress", "failed"),
    ("after:run:checkpoint", "completed"),
]


@pytest.mark.parametrize(("point", "final"), STEPS, ids=[p for p, _ in STEPS])
async def test_a_scheduler_killed_during_an_admission_decides_the_instant_once(
    tmp_path: Path, pg_url: str, pg_server: PostgresServer, point: str, final: str
) -> None:
    repo = Path(__file__).resolve().parents[2]
    child = subprocess.run(
        [sys.executable, "-m", "tests.service.pg_admission_child", pg_url, point],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    dbname = urlsplit(pg_url).path.lstrip("/")
    before = pg_server.query("SELECT count(*) FROM wf_runs", dbname=dbname)[0][0]
    harness = Harness(
        tmp_path / "store",
        ManualClock(START.replace(hour=10, minute=0, second=30)),
        store_url=pg_url,
    )
    try:
        await harness.boot()
        await harness.at(START.replace(hour=10, minute=1))
        await harness.until_runs_ended("hourly")
        rows = await harness.occurrences("hourly")
        assert [(r["instant"], r["status"]) for r in rows] == [("2026-03-02T10:00:00Z", final)]
        run = await harness.api.inspect_run(rows[0]["run_id"])
        assert run["status"] == final
        if final == "failed":
            assert ABANDONED in run["error"]["message"] and ABANDONED in rows[0]["reason"]
        else:
            assert run["output"] == {"result": "report for 2026-03-02T10:00:00Z"}
        runs = await harness.api.list_runs()
        # One run for the one instant; a run the child created is the one kept.
        assert [r["run_id"] for r in runs["runs"]] == [rows[0]["run_id"]]
        assert before == (0 if point == "before:commit" else 1)
    finally:
        await harness.shutdown()
