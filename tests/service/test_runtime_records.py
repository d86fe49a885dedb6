"""When the service writes a schedule's runtime record, and that a record it
leaves out (the history already says the same) changes nothing a start reads."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from shell.store_format import ScheduleFiles

from .conftest import CONSTANT_PLAN, START, Harness


@pytest.fixture
async def harness(file_harness: Harness) -> Harness:
    """These tests are about the files of the file backend."""
    return file_harness


def hour(h: int, minute: int = 0) -> datetime:
    return START.replace(hour=h, minute=minute)


def runtime_records(root: Path, schedule_id: str) -> list[dict[str, Any]]:
    path = ScheduleFiles.of(str(root), schedule_id).runtime
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


async def hourly(harness: Harness) -> None:
    await harness.deploy("report.default", CONSTANT_PLAN)
    await harness.schedules.create_schedule(
        schedule_id="hourly",
        deployment_id="report.default",
        trigger={"kind": "cron", "expression": "0 * * * *"},
        inputs={"when": {"$bind": "occurrence.instant"}},
    )


async def test_admissions_that_only_move_the_watermark_append_no_runtime_record(
    harness: Harness,
) -> None:
    await harness.boot()
    await hourly(harness)
    await harness.at(hour(10))
    written = runtime_records(harness.root, "hourly")
    for h in (11, 12, 13):
        await harness.at(hour(h))
    assert runtime_records(harness.root, "hourly") == written
    assert await harness.statuses("hourly") == [(f"{h}:00", "completed") for h in (10, 11, 12, 13)]


async def test_a_start_reads_the_watermark_from_the_history_and_replays_nothing(
    harness: Harness,
) -> None:
    await harness.boot()
    await hourly(harness)
    for h in (10, 11, 12):
        await harness.at(hour(h))
    assert runtime_records(harness.root, "hourly")[-1]["watermark"] < "2026-03-02T12:00:00Z"

    await harness.shutdown()
    await harness.clock.set(hour(12, 30))
    await harness.boot()
    await harness.at(hour(13))
    assert await harness.statuses("hourly") == [(f"{h}:00", "completed") for h in (10, 11, 12, 13)]
    schedule = await harness.schedules.get_schedule(schedule_id="hourly")
    assert schedule["next_instant"] == "2026-03-02T14:00:00Z"


async def test_a_watermark_moved_without_a_row_is_written(harness: Harness) -> None:
    # A resume moves the watermark past the paused span with no row: only the
    # runtime record says so, and a start must not replay the span.
    await harness.boot()
    await hourly(harness)
    await harness.at(hour(10))
    await harness.schedules.pause_schedule(schedule_id="hourly")
    await harness.at(hour(12, 30))
    await harness.schedules.resume_schedule(schedule_id="hourly")
    await harness.at(hour(12, 31))
    last = runtime_records(harness.root, "hourly")[-1]
    assert (last["watermark"], last["lifecycle_seq"]) == ("2026-03-02T12:30:00Z", 3)

    await harness.shutdown()
    await harness.boot()
    await harness.at(hour(13))
    assert await harness.statuses("hourly") == [("10:00", "completed"), ("13:00", "completed")]
