"""The scheduler's commit journal seen from outside: a wake-up that died after
its journal record was flushed, before any schedule file was written, is not
lost, whichever process opens the store next."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from shell import ManualClock
from shell.durable import CrashAt, SimulatedCrash, set_fault_injector
from shell.history_index import HEADER_SIZE, Checkpoint
from shell.journal import JOURNAL_FILE, journal_supported
from tests.reliability.world import World
from tests.shell.test_journal import Recorder

from .conftest import CONSTANT_PLAN, START, Harness, sleep_plan


@pytest.fixture
async def harness(file_harness: Harness) -> Harness:
    """These tests are about the files of the file backend."""
    return file_harness


pytestmark = pytest.mark.skipif(not journal_supported(), reason="the journal needs syncfs")

MINUTE = timedelta(minutes=1)


def _ignore_crashed_tasks(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    if isinstance(context.get("exception"), SimulatedCrash):
        return
    loop.default_exception_handler(context)


async def _every_minute_schedules(harness: Harness, count: int, plan: dict[str, Any]) -> None:
    """Boot, deploy `plan` and create `count` every-minute schedules `s0`, ...
    running it; settled (their first runtime records written)."""
    await harness.boot()
    await harness.deploy("report.default", plan)
    for number in range(count):
        await harness.schedules.create_schedule(
            schedule_id=f"s{number}",
            deployment_id="report.default",
            trigger={"kind": "cron", "expression": "* * * * *", "timezone": "UTC"},
            inputs={"when": {"$bind": "occurrence.instant"}},
        )
    assert harness.service is not None
    await harness.service.settle()


async def _die_after_the_journal_flush(
    harness: Harness,
    count: int,
    point: str = "after:append:commit.journal",
    plan: dict[str, Any] = CONSTANT_PLAN,
) -> None:
    """Create `count` every-minute schedules (running `plan`), then let the
    service reach the next minute and die at `point`, by default right after
    its journal record is durable (any point before its history files are
    written)."""
    await _every_minute_schedules(harness, count, plan)
    asyncio.get_running_loop().set_exception_handler(_ignore_crashed_tasks)
    previous = set_fault_injector(CrashAt(point))
    try:
        service = harness.service
        assert service is not None and service._task is not None
        await harness.clock.set(START + MINUTE)
        # The loop task is the "process": it dies of the crash, nobody stops it.
        with pytest.raises(SimulatedCrash):
            await asyncio.wait_for(service._task, timeout=30)
    finally:
        set_fault_injector(previous)
    await World.abandon(harness)  # type: ignore[arg-type]  # the process is gone: its lock too
    # The dead process wrote its journal record and no history file.
    assert (harness.root / JOURNAL_FILE).stat().st_size > 0
    for number in range(count):
        history = harness.root / "schedules" / f"s{number}" / "history.jsonl"
        assert not history.exists() or history.stat().st_size == 0


async def test_a_server_without_the_scheduler_replays_the_dead_schedulers_journal(
    tmp_path: Path,
) -> None:
    harness = Harness(tmp_path / "store", _clock())
    await _die_after_the_journal_flush(harness, 3)
    survivor = Harness(harness.root, harness.clock)
    server = await survivor.build_server()  # no scheduler: the host opens the store
    for number in range(3):
        rows = await survivor.occurrences(f"s{number}")
        assert [(r["instant"], r["status"]) for r in rows] == [("2026-03-02T09:31:00Z", "admitted")]
    assert (harness.root / JOURNAL_FILE).stat().st_size == 0
    await server.api.cancel_executing()


# (where the process dies, the plan its runs run, how they end after the restart)
DEATHS: list[tuple[str, dict[str, Any], str]] = [
    # Right after the journal's fsync, before the runs are launched: the next
    # scheduler runs what was admitted.
    ("after:append:commit.journal", CONSTANT_PLAN, "completed"),
    # After the launch, before the history files are written, the runs still
    # executing (a real process takes its runs with it; here the dead
    # process's tasks are cancelled): the rows come from the journal and the
    # runs fail as abandoned, with the disclosure.
    ("before:apply:history.jsonl", sleep_plan(30), "failed"),
]


@pytest.mark.parametrize(("point", "plan", "final"), DEATHS, ids=[d[0] for d in DEATHS])
async def test_the_next_scheduler_replays_it_and_loses_no_row(
    tmp_path: Path, point: str, plan: dict[str, Any], final: str
) -> None:
    harness = Harness(tmp_path / "store", _clock())
    await _die_after_the_journal_flush(harness, 2, point, plan)
    successor = Harness(harness.root, harness.clock)
    try:
        await successor.boot()
        for number in range(2):
            rows = await successor.occurrences(f"s{number}")
            assert [(r["instant"], r["status"]) for r in rows] == [("2026-03-02T09:31:00Z", final)]
            run = await successor.api.inspect_run(rows[0]["run_id"])
            if final == "completed":
                assert run["output"] == {"result": "report for 2026-03-02T09:31:00Z"}
            else:
                assert run["status"] == "failed"
                assert "external effects may already have occurred" in run["error"]["message"]
    finally:
        await successor.shutdown()


async def _points_of_the_next_minute(harness: Harness, count: int) -> list[str]:
    """The write points passed while `count` every-minute schedules fire once
    and their runs end (the points of their creation left out)."""
    await _every_minute_schedules(harness, count, CONSTANT_PLAN)
    assert harness.service is not None
    recorder = Recorder()
    previous = set_fault_injector(recorder)
    try:
        await harness.at(START + MINUTE)
        for number in range(count):
            await harness.until_runs_ended(f"s{number}")
        await harness.service.settle()
    finally:
        set_fault_injector(previous)
    for number in range(count):
        rows = await harness.occurrences(f"s{number}")
        assert [(r["instant"], r["status"]) for r in rows] == [
            ("2026-03-02T09:31:00Z", "completed")
        ]
    return recorder.points


async def test_a_rounds_runs_start_before_its_history_files_are_written(
    harness: Harness,
) -> None:
    """The runs whose records a round's batch holds are launched as soon as
    the journal's fsync returns: a herd's first firing does not wait for its
    schedules' history files to be created and written."""
    points = await _points_of_the_next_minute(harness, 3)
    durable = points.index("after:append:commit.journal")
    launched = points.index("after:run:executing-mark", durable)
    written = points.index("before:apply:history.jsonl", durable)
    assert durable < launched < written


async def test_a_run_done_in_one_step_costs_one_row_in_one_more_batch(
    harness: Harness,
) -> None:
    """The round after a launch waits a few turns of the event loop: a run
    that finishes at once reports `running` and `completed` together, and
    the history moves from `admitted` straight to `completed` (rule N), in
    the batch after the admission's (two writes of the schedule's files per
    occurrence instead of three, two rows instead of three)."""
    points = await _points_of_the_next_minute(harness, 1)
    assert points.count("before:apply:history.jsonl") == 2
    history = harness.root / "schedules" / "s0" / "history.jsonl"
    # The first row created the file; the second waits in the journal
    # (`shell.write_back`) and reaches the file at its checkpoint.
    assert [json.loads(line)["status"] for line in history.read_text().splitlines()] == ["admitted"]
    assert harness.service is not None
    harness.service._backend.journal.checkpoint()  # type: ignore[attr-defined]
    rows = [json.loads(line) for line in history.read_text().splitlines()]
    assert [row["status"] for row in rows] == ["admitted", "completed"]


def _clock() -> ManualClock:
    return ManualClock(START)


async def test_a_quiet_moment_checkpoints_an_aged_journal_and_the_index_headers_follow(
    harness: Harness,
) -> None:
    """Once the journal's oldest record has aged, a quiet moment checkpoints
    it (the held appends written, then its `syncfs`), and the next commit
    publishes the index headers that waited for that flush: a start after a
    crash replays about an interval of rows, not everything since the last
    running checkpoint."""
    await _every_minute_schedules(harness, 1, CONSTANT_PLAN)
    assert harness.service is not None
    journal = harness.service._backend.journal  # type: ignore[attr-defined]
    await harness.at(START + MINUTE)
    await harness.until_runs_ended("s0")
    # 30 s before the next instant: quiet, but the records are not old yet.
    await harness.at(START + MINUTE + timedelta(seconds=30))
    assert journal.size > 0
    index = harness.root / "schedules" / "s0" / "history.idx"
    header = Checkpoint.unpack(index.read_bytes()[:HEADER_SIZE])
    assert isinstance(header, Checkpoint) and header.count == 0
    journal._quiet_checkpoint_after = 0.0  # the records have aged
    await harness.at(START + MINUTE + timedelta(seconds=31))
    assert journal.size == 0
    await harness.at(START + 2 * MINUTE)
    await harness.until_runs_ended("s0")
    header = Checkpoint.unpack(index.read_bytes()[:HEADER_SIZE])
    assert isinstance(header, Checkpoint) and header.count == 1
