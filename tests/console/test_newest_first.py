"""Newest-first pages (the console's ledger and runs list) on both backends:
the same rows as the oldest-first pages, reversed, with cursors that belong
to their own order only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from core.errors import InvalidInput
from shell import ManualClock, SchedulerServiceConfig, build_scheduler_service
from tests.rpc.live import BACKENDS, server_on

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
PLAN: dict[str, Any] = {
    "name": "constant",
    "input_schema": {"type": "object"},
    "start": "emit",
    "nodes": [
        {"id": "emit", "kind": "call", "capability": "wf.std.constant", "params": {"value": 1}}
    ],
    "edges": {"emit": {"ok": "__end__"}},
    "output": {"result": "state.emit"},
}


async def _pages(schedules: Any, schedule_id: str, *, newest_first: bool) -> list[list[Any]]:
    pages: list[list[Any]] = []
    cursor = None
    while True:
        page = await schedules.list_schedule_occurrences(
            schedule_id=schedule_id, limit=7, cursor=cursor, newest_first=newest_first
        )
        pages.append([(r["instant"], r["status"]) for r in page["occurrences"]])
        cursor = page["next_cursor"]
        if cursor is None:
            return pages


@pytest.mark.parametrize("backend", BACKENDS)
async def test_newest_first_pages(backend: str, tmp_path: Path, request: Any) -> None:
    pg_url = request.getfixturevalue("pg_url") if backend == "pg" else None
    async with server_on(backend, tmp_path / "store", pg_url) as server:
        api = server.api
        clock = ManualClock(START)
        api.schedules.clock = clock
        await api.create_artifact_from_plan("constant", 1, PLAN)
        await api.save_deployment(
            {"deployment_id": "c.default", "artifact_id": "constant", "artifact_version": 1}
        )
        await api.schedules.create_schedule(
            schedule_id="every-minute",
            deployment_id="c.default",
            trigger={"kind": "cron", "expression": "* * * * *"},
        )
        service = build_scheduler_service(
            server, SchedulerServiceConfig(enabled=True, poll_interval_s=3600), clock=clock
        )
        await service.start()
        try:
            for minute in range(1, 24):
                await clock.set(START + timedelta(minutes=minute))
                await service.settle()
        finally:
            await service.stop()
        schedules = api.schedules
        assert await schedules.history.length("every-minute") == 23
        oldest = [row for page in await _pages(schedules, "every-minute", newest_first=False)
                  for row in page]  # fmt: skip
        newest_pages = await _pages(schedules, "every-minute", newest_first=True)
        assert [len(p) for p in newest_pages] == [7, 7, 7, 2]
        assert [row for page in newest_pages for row in page] == list(reversed(oldest))
        assert newest_pages[0][0] == ("2026-01-05T09:23:00Z", "completed")

        # A cursor of one order is refused by the other, naming the field.
        first = await schedules.list_schedule_occurrences(
            schedule_id="every-minute", limit=7, newest_first=True
        )
        with pytest.raises(InvalidInput) as refused:
            await schedules.list_schedule_occurrences(
                schedule_id="every-minute", limit=7, cursor=first["next_cursor"]
            )
        assert refused.value.problems[0].field == "cursor"
        with pytest.raises(InvalidInput) as refused:
            await schedules.list_schedule_occurrences(
                schedule_id="every-minute", newest_first="yes"
            )
        assert refused.value.problems[0].field == "newest_first"

        # Runs newest first: the oldest-first list reversed, page by page.
        forward: list[str] = []
        cursor = None
        while True:
            page = await api.list_runs(cursor=cursor, limit=10)
            forward += [r["run_id"] for r in page["runs"]]
            if (cursor := page["next_cursor"]) is None:
                break
        backward: list[str] = []
        cursor = None
        while True:
            page = await api.list_runs(cursor=cursor, limit=10, newest_first=True)
            backward += [r["run_id"] for r in page["runs"]]
            if (cursor := page["next_cursor"]) is None:
                break
        assert backward == list(reversed(forward)) and len(forward) == 23
        newest_cursor = (await api.list_runs(limit=10, newest_first=True))["next_cursor"]
        with pytest.raises(InvalidInput):
            await api.list_runs(cursor=newest_cursor, limit=10)
