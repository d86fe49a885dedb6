"""Moving a filesystem store into PostgreSQL (`wf-store copy`, `adapters.store_copy`).

A store with history in every shape (completed, failed, interrupted runs,
missed instants, a paused and a deleted schedule, a manual run) is copied;
the copy reads back row for row, a server opened on it shows the same
schedules, pages and runs, issues the next run id after the last one, and
its scheduler goes on without deciding any instant twice. A store a live
scheduler owns, a damaged store and a target that is not empty are refused.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from adapters.host.run_log_index import INDEX_FILE
from adapters.store_copy import TABLES, CopyRefused, copy_store
from core.errors import SchedulerUnavailable
from shell import ManualClock
from shell.lock import SchedulerLock
from shell.pg.database import Database
from tests import run_log_files

from .conftest import CONSTANT_PLAN, GATE_PLAN, START, Harness


def hour(h: int, minute: int = 0) -> datetime:
    return START.replace(hour=h, minute=minute)


FAILING_PLAN: dict[str, Any] = {
    "name": "fails",
    "input_schema": {"type": "object"},
    "start": "boom",
    "nodes": [
        {"id": "boom", "kind": "call", "capability": "wf.std.fail", "params": {"message": "no"}}
    ],
    "edges": {},
    "output": {},
}


async def _populate(root: Path) -> Harness:
    """A file store with history in every shape, stopped cleanly."""
    files = Harness(root, ManualClock(START))
    await files.boot()
    await files.deploy("report.default", CONSTANT_PLAN)
    await files.deploy("gate.default", GATE_PLAN)
    await files.deploy("fails.default", FAILING_PLAN)
    for schedule_id, deployment, options in (
        ("hourly", "report.default", {"misfire": "latest", "inputs": {"when": "hourly"}}),
        ("gated", "gate.default", {}),
        ("failing", "fails.default", {}),
        ("paused", "report.default", {"inputs": {"when": "paused"}}),
        ("gone", "report.default", {"inputs": {"when": "gone"}}),
    ):
        await files.schedules.create_schedule(
            schedule_id=schedule_id,
            deployment_id=deployment,
            trigger={"kind": "cron", "expression": "0 * * * *"},
            **options,
        )
    await files.at(hour(10))
    await files.schedules.pause_schedule(schedule_id="paused")
    await files.schedules.delete_schedule(schedule_id="gone")
    await files.at(hour(11))
    await files.api.run_deployment("report.default", {"when": "by hand"})
    await files.shutdown()
    # Down for three hours: "hourly" coalesces what it missed at the next start.
    files.clock = ManualClock(hour(14, 30))
    await files.boot()
    await files.shutdown()
    return files


async def _view(harness: Harness) -> dict[str, Any]:
    """What the API shows of a store."""
    listed = await harness.schedules.list_schedules(include_deleted=True)
    pages = {s["schedule_id"]: await harness.occurrences(s["schedule_id"]) for s in listed}
    runs = (await harness.api.list_runs(limit=100))["runs"]
    return {"schedules": listed, "occurrences": pages, "runs": runs}


async def test_a_file_store_copied_into_postgresql_reads_the_same_and_goes_on(
    tmp_path: Path, pg_url: str
) -> None:
    files = await _populate(tmp_path / "store")
    files.clock = ManualClock(hour(14, 30))
    await files.build_server()
    before = await _view(files)
    statuses = {r["status"] for rows in before["occurrences"].values() for r in rows}
    assert {"completed", "failed", "interrupted", "coalesced", "skipped-overlap"} <= statuses
    # A copy takes the store: its server stops first.
    await files.shutdown()
    report = await copy_store(tmp_path / "store", pg_url)
    assert set(report.tables) == set(TABLES)
    assert report.tables["wf_occurrences"].rows == sum(
        len(rows) for rows in before["occurrences"].values()
    )
    assert report.tables["wf_runs"].rows == len(before["runs"])
    assert report.run_id_last_issued == len(before["runs"])
    copied = Harness(tmp_path / "unused", ManualClock(hour(14, 30)), store_url=pg_url)
    try:
        await copied.build_server()
        assert await _view(copied) == before
        await copied.boot()
        await copied.at(hour(15))
        rows = await copied.occurrences("hourly")
        assert (rows[-1]["instant"], rows[-1]["status"]) == ("2026-03-02T15:00:00Z", "completed")
        # The next run id comes after every one the file store issued.
        assert int(rows[-1]["run_id"].removeprefix("run-")) > report.run_id_last_issued
        decided = [r["instant"] for r in rows]
        assert len(decided) == len(set(decided))
    finally:
        await copied.shutdown()


async def test_the_command_copies_and_prints_what_it_verified(tmp_path: Path, pg_url: str) -> None:
    await _populate(tmp_path / "store")
    done = subprocess.run(
        [sys.executable, "-m", "adapters.store_cli", "copy", "--store-root", "store",
         "--store-url", pg_url],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "copied store and verified it, table by table:"
    tables = [line.split() for line in lines[1:-1]]
    assert [t[0] for t in tables] == list(TABLES)
    assert all(t[2:4] == ["rows", "sha256"] and len(t[4]) == 64 for t in tables), done.stdout
    assert lines[-1].split() == ["wf_run_number", "last", "issued", "run-000009"]


async def test_a_target_that_is_not_empty_is_refused(tmp_path: Path, pg_url: str) -> None:
    await _populate(tmp_path / "store")
    await copy_store(tmp_path / "store", pg_url)
    with pytest.raises(CopyRefused, match="is not empty: wf_artifacts"):
        await copy_store(tmp_path / "store", pg_url)


async def test_a_store_a_live_scheduler_owns_is_refused_naming_it(
    tmp_path: Path, pg_url: str
) -> None:
    await _populate(tmp_path / "store")
    owner = SchedulerLock(tmp_path / "store")
    owner.acquire()
    try:
        with pytest.raises(SchedulerUnavailable, match="owned by pid"):
            await copy_store(tmp_path / "store", pg_url)
    finally:
        owner.release()
    database = Database(pg_url)
    await database.open()
    try:
        counts = await database.fetch_all(
            "count", " UNION ALL ".join(f"SELECT count(*) FROM {t}" for t in TABLES)
        )
        assert all(count == 0 for (count,) in counts)
    finally:
        await database.close()


async def test_a_damaged_source_is_refused_naming_the_record(tmp_path: Path, pg_url: str) -> None:
    await _populate(tmp_path / "store")
    history = tmp_path / "store" / "schedules" / "hourly" / "history.jsonl"
    lines = history.read_bytes().splitlines(keepends=True)
    history.write_bytes(b"".join([lines[0], b'{"seq": 1, "broken": true}\n', *lines[2:]]))
    with pytest.raises(CopyRefused, match=r"schedule 'hourly' cannot be read.*line 2"):
        await copy_store(tmp_path / "store", pg_url)


async def test_a_finished_run_damaged_in_place_is_refused_naming_it(
    tmp_path: Path, pg_url: str
) -> None:
    """The source's clean stop left the run log's index, so a start does not
    check the finished runs' frames; the copy reads every record and refuses
    one damaged in place, as it refuses any damage."""
    root = tmp_path / "store"
    await _populate(root)
    assert (root / INDEX_FILE).exists()
    finished = run_log_files.records(root)
    run_id = next(r for r, doc in sorted(finished.items()) if doc["status"] == "completed")
    run_log_files.damage_last_frame(root, run_id, at=40)
    with pytest.raises(CopyRefused, match=rf"cannot use: .*\({run_id}\).*damaged in place"):
        await copy_store(root, pg_url)
