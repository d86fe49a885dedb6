"""Schedules over JSON-RPC with the scheduler service running.

The service and the schedules API share a ManualClock, so calendar time moves
only when the test says; runs execute for real in the server process and the
test polls (bounded) over RPC for their outcome.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from adapters.client import App
from adapters.host import build_local_static_workflow_server
from adapters.rpc.app import create_app
from adapters.rpc.protocol import InvalidParams
from core.errors import (
    AlreadyExists,
    InvalidDefinition,
    InvalidInput,
    InvalidState,
    NotFound,
    RevisionConflict,
    SchedulerUnavailable,
)
from shell import ManualClock, SchedulerService, SchedulerServiceConfig, build_scheduler_service
from tests.rpc.live import BACKENDS, server_on, serving, wait_until
from tests.rpc.test_cli_subprocess import CLI_BIN, wf_schedule

QUICKSTART = Path(__file__).resolve().parents[2] / "docs" / "examples" / "quickstart"
MONDAY = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)
HOURLY = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}


@dataclass
class Live:
    app: App
    clock: ManualClock
    service: SchedulerService

    async def advance_to(self, instant: datetime) -> None:
        await self.clock.set(instant)
        await self.service.settle()

    async def rows(self, schedule_id: str) -> list[dict[str, Any]]:
        return [row async for row in self.app.iter_schedule_occurrences(schedule_id=schedule_id)]

    async def row_at(self, schedule_id: str, instant: datetime, status: str) -> Any:
        for row in await self.rows(schedule_id):
            if row["status"] == status and row["instant"] == utc_text(instant):
                return row
        return None


def utc_text(instant: datetime) -> str:
    """Instants on the wire: UTC ISO-8601 ending in Z."""
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def quickstart(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((QUICKSTART / name).read_text(encoding="utf-8"))
    return payload


@pytest.fixture(params=BACKENDS)
async def live(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Live]:
    pg_url = request.getfixturevalue("pg_url") if request.param == "pg" else None
    async with server_on(request.param, tmp_path / "store", pg_url) as server:
        clock = ManualClock(MONDAY)
        service = build_scheduler_service(
            server,
            SchedulerServiceConfig(enabled=True, poll_interval_s=60, max_concurrent_runs=4),
            clock=clock,
        )
        await service.start()
        try:
            async with serving(create_app(server.api)) as base, App(base) as app:
                await app.create_artifact_from_plan(**quickstart("artifact.json"))
                await app.save_deployment(quickstart("deployment.json"))
                yield Live(app=app, clock=clock, service=service)
        finally:
            await service.stop()


async def test_illustrative_week_over_rpc(live: Live) -> None:
    app = live.app
    # Monday: an hourly report, latest-wins catch-up, at most two at once.
    created = await app.create_schedule(
        schedule_id="hourly-report",
        deployment_id="hello.default",
        trigger=HOURLY,
        misfire="latest",
        overlap="parallel",
        max_active_runs=2,
    )
    assert created["revision"] == 1
    assert (created["misfire"], created["overlap"], created["max_active_runs"]) == (
        "latest",
        "parallel",
        2,
    )
    assert created["next_instant"] == "2026-01-05T10:00:00Z"
    ten = MONDAY.replace(hour=10, minute=0)
    await live.advance_to(ten)
    done = await wait_until(lambda: live.row_at("hourly-report", ten, "completed"))
    run = await app.inspect_run(done["run_id"])
    assert run["origin"]["kind"] == "schedule"
    assert run["origin"]["schedule_id"] == "hourly-report"
    assert run["output"] == {"result": "hello world, on a schedule"}

    # Friday: pause for maintenance; nothing is admitted while paused.
    paused = await app.pause_schedule(schedule_id="hourly-report")
    assert paused["paused"] is True
    assert paused["next_instant"] is None
    assert (await app.pause_schedule(schedule_id="hourly-report"))["paused"] is True
    await live.advance_to(ten + timedelta(hours=2, minutes=30))  # 12:30, past 11:00 and 12:00
    statuses = [row["status"] for row in await live.rows("hourly-report")]
    assert statuses == ["completed"]

    # Monday: resume from the next hour; the paused hours are not replayed.
    resumed = await app.resume_schedule(schedule_id="hourly-report")
    assert resumed["paused"] is False
    thirteen = ten + timedelta(hours=3)
    assert resumed["next_instant"] == utc_text(thirteen)
    await live.advance_to(thirteen)
    await wait_until(lambda: live.row_at("hourly-report", thirteen, "completed"))
    instants = [row["instant"] for row in await live.rows("hourly-report")]
    assert instants == [utc_text(ten), utc_text(thirteen)]

    # An accepted edit bumps the revision; a stale one and a bad one change nothing.
    edited = await app.update_schedule(
        schedule_id="hourly-report", expected_revision=1, max_active_runs=3
    )
    assert edited["revision"] == 2
    before = await app.get_schedule(schedule_id="hourly-report")
    with pytest.raises(RevisionConflict) as stale:
        await app.update_schedule(
            schedule_id="hourly-report", expected_revision=1, max_active_runs=1
        )
    assert stale.value.to_dict()["code"] == "revision_conflict"
    with pytest.raises(InvalidDefinition) as bad:
        await app.update_schedule(
            schedule_id="hourly-report", expected_revision=2, max_active_runs=0
        )
    assert [p.field for p in bad.value.problems] == ["max_active_runs"]
    assert await app.get_schedule(schedule_id="hourly-report") == before
    assert before["max_active_runs"] == 3


async def test_every_schedule_method_round_trips(live: Live) -> None:
    app = live.app
    due = MONDAY + timedelta(minutes=10)
    once = await app.create_schedule(
        schedule_id="once",
        deployment_id="hello.default",
        trigger={"kind": "oneshot", "at": due.isoformat()},
        inputs={"name": "Ada"},
        lateness_allowance_s=120,
        max_steps=10,
    )
    assert once["inputs"] == {"name": "Ada"}
    assert once["max_steps"] == 10
    assert await app.get_schedule(schedule_id="once") == once
    assert [s["schedule_id"] for s in await app.list_schedules()] == ["once"]
    await live.advance_to(due)
    row = await wait_until(lambda: live.row_at("once", due, "completed"))
    assert row["revision"] == 1
    assert (await app.inspect_run(row["run_id"]))["output"] == {
        "result": "hello Ada, on a schedule"
    }
    page = await app.list_schedule_occurrences(schedule_id="once", limit=1)
    assert [r["status"] for r in page["occurrences"]] == ["completed"]
    assert page["next_cursor"] is None
    deleted = await app.delete_schedule(schedule_id="once")
    assert deleted["deleted"] is True
    assert await app.list_schedules() == []
    assert [s["schedule_id"] for s in await app.list_schedules(include_deleted=True)] == ["once"]
    # History survives deletion.
    assert [r["status"] for r in await live.rows("once")] == ["completed"]


async def test_every_domain_error_class_over_rpc(live: Live) -> None:
    app = live.app
    await app.create_schedule(schedule_id="s", deployment_id="hello.default", trigger=HOURLY)
    cases: list[tuple[Any, type[Exception], str]] = [
        (app.get_schedule(schedule_id="nope"), NotFound, "not_found"),
        (
            app.create_schedule(schedule_id="s", deployment_id="hello.default", trigger=HOURLY),
            AlreadyExists,
            "already_exists",
        ),
        (
            app.update_schedule(schedule_id="s", expected_revision=5, misfire="latest"),
            RevisionConflict,
            "revision_conflict",
        ),
        (
            app.create_schedule(
                schedule_id="t",
                deployment_id="hello.default",
                trigger={"kind": "cron", "expression": "61 * * * *"},
            ),
            InvalidDefinition,
            "invalid_definition",
        ),
        (
            app.list_schedule_occurrences(schedule_id="s", limit=500),
            InvalidInput,
            "invalid_input",
        ),
        (app.resume_run("run-000001", {}), NotFound, "not_found"),
        (app.call("workflow.schedules.get", {"schedule_id": "s", "x": 1}), InvalidParams, ""),
    ]
    for call, cls, code in cases:
        with pytest.raises(cls) as caught:
            await call
        assert type(caught.value) is cls
        if code:
            assert caught.value.to_dict()["code"] == code  # type: ignore[attr-defined]
    run_id = await app.start_run("hello.default")
    await wait_until(lambda: _completed(app, run_id))
    with pytest.raises(InvalidState) as state:
        await app.resume_run(run_id, "again")
    assert state.value.to_dict()["code"] == "invalid_state"
    # A deployment the schedule needs is checked at creation.
    with pytest.raises(InvalidDefinition) as missing:
        await app.create_schedule(schedule_id="u", deployment_id="ghost", trigger=HOURLY)
    assert [p.field for p in missing.value.problems] == ["deployment_id"]


async def _completed(app: App, run_id: str) -> bool:
    return (await app.inspect_run(run_id))["status"] == "completed"


async def test_server_without_schedules_is_unavailable(tmp_path: Path) -> None:
    server = build_local_static_workflow_server(tmp_path / "store", schedules=False)
    async with serving(create_app(server.api)) as base, App(base) as app:
        for call in (
            app.create_schedule(schedule_id="s", deployment_id="d", trigger=HOURLY),
            app.get_schedule(schedule_id="s"),
            app.list_schedules(),
            app.update_schedule(schedule_id="s", expected_revision=1, misfire="skip"),
            app.pause_schedule(schedule_id="s"),
            app.resume_schedule(schedule_id="s"),
            app.delete_schedule(schedule_id="s"),
            app.list_schedule_occurrences(schedule_id="s"),
        ):
            with pytest.raises(SchedulerUnavailable):
                await call


async def _cli_json(app: App, *args: str) -> Any:
    code, out, err = await wf_schedule(*args, "--json", url=app.url)
    assert (code, err) == (0, ""), err
    return json.loads(out)


async def test_occurrences_last_is_newest_first_and_watch_follows_new_rows(live: Live) -> None:
    app = live.app
    await app.create_schedule(schedule_id="hourly", deployment_id="hello.default", trigger=HOURLY)
    ten, eleven, noon = (MONDAY.replace(hour=h, minute=0) for h in (10, 11, 12))
    for instant in (ten, eleven):
        await live.advance_to(instant)
        await wait_until(lambda at=instant: live.row_at("hourly", at, "completed"))

    newest = await _cli_json(app, "occurrences", "hourly", "--last", "1")
    assert [r["instant"] for r in newest["occurrences"]] == [utc_text(eleven)]
    both = await _cli_json(app, "occurrences", "hourly", "--last", "2")
    assert [r["instant"] for r in both["occurrences"]] == [utc_text(eleven), utc_text(ten)]

    env = {k: v for k, v in os.environ.items() if not k.startswith("WF_")}
    watcher = await asyncio.create_subprocess_exec(
        str(CLI_BIN),
        *("occurrences", "hourly", "--watch", "--last", "1", "--json", "--url", app.url),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert watcher.stdout is not None
    try:
        seen = [json.loads(await asyncio.wait_for(watcher.stdout.readline(), timeout=30))]
        assert [(r["instant"], r["status"]) for r in seen] == [(utc_text(eleven), "completed")]
        await live.advance_to(noon)
        while (seen[-1]["instant"], seen[-1]["status"]) != (utc_text(noon), "completed"):
            seen.append(json.loads(await asyncio.wait_for(watcher.stdout.readline(), timeout=30)))
    finally:
        watcher.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(watcher.communicate(), timeout=30)
    assert watcher.returncode == 0, err.decode()
    # Only rows about noon follow, each (status) shown once.
    later = [(r["instant"], r["status"]) for r in seen[1:]]
    assert {instant for instant, _ in later} == {utc_text(noon)}
    assert len(later) == len(set(later))


async def test_get_and_list_show_a_fired_oneshot_finished_and_when_it_was_paused(
    live: Live,
) -> None:
    app = live.app
    at = MONDAY + timedelta(minutes=5)
    await app.create_schedule(
        schedule_id="once",
        deployment_id="hello.default",
        trigger={"kind": "oneshot", "at": utc_text(at)},
    )
    got = await _cli_json(app, "get", "once")
    assert (got["state"], got["paused_at"], got["resumed_at"], got["deleted_at"]) == (
        "active",
        None,
        None,
        None,
    )
    await live.advance_to(at)
    await wait_until(lambda: live.row_at("once", at, "completed"))
    await live.service.settle()  # the run's end reaches the scheduler
    got = await _cli_json(app, "get", "once")
    assert (got["state"], got["paused"], got["next_instant"]) == ("finished", False, None)

    paused_at = at + timedelta(minutes=1)
    await live.clock.set(paused_at)
    paused = await _cli_json(app, "pause", "once")
    assert (paused["state"], paused["paused_at"]) == ("finished", utc_text(paused_at))
    got = await _cli_json(app, "get", "once")
    assert (got["state"], got["paused"], got["paused_at"]) == (
        "finished",
        True,
        utc_text(paused_at),
    )
    [listed] = await _cli_json(app, "list")
    assert (listed["schedule_id"], listed["state"]) == ("once", "finished")

    code, out, err = await wf_schedule("get", "once", url=app.url)
    assert (code, err) == (0, "")
    lines = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
    assert lines["state"] == ["finished"] and lines["paused_at"] == [utc_text(paused_at)]
    code, out, err = await wf_schedule("list", url=app.url)
    assert (code, err) == (0, "")
    header, row = out.splitlines()[:2]
    assert header.split()[3] == "STATE"
    assert row.split()[:6] == ["once", "hello.default", "once", "at", utc_text(at), "finished"]
