"""The operator's requests over JSON-RPC, the client `App` and `wf-schedule`:
trigger a schedule now, backfill a past range, cancel a backfill.

A real server (files and PostgreSQL) with the scheduler service running on a
ManualClock, as in test_live_schedules.py: the calendar moves only when the
test says, runs execute for real, and the test polls (bounded) over RPC.
What is checked is what a caller sees: the answers, the occurrences that
follow (their origin and run), the schedule's backfill progress, and the
errors, each naming its field.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from adapters.client import App
from adapters.host import build_local_static_workflow_server
from adapters.rpc.app import create_app
from adapters.rpc.protocol import INVALID_PARAMS, InvalidParams
from core.errors import InvalidInput, InvalidState, NotFound, SchedulerUnavailable
from shell import ManualClock, SchedulerService, SchedulerServiceConfig, build_scheduler_service
from tests.rpc.live import BACKENDS, server_on, serving, wait_until
from tests.rpc.test_admin_cli import make_cli
from tests.rpc.test_live_host_methods import ASK_PLAN

QUICKSTART = Path(__file__).resolve().parents[2] / "docs" / "examples" / "quickstart"
MONDAY = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)
HOURLY = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}


def hour(h: int, minute: int = 0) -> datetime:
    return MONDAY.replace(hour=h, minute=minute)


def utc_text(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def quickstart(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((QUICKSTART / name).read_text(encoding="utf-8"))
    return payload


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

    async def settled_rows(self, schedule_id: str) -> list[dict[str, Any]]:
        """The history once no occurrence's run is admitted or running (a
        run's end reaches the history a round later)."""

        async def settled() -> list[dict[str, Any]] | None:
            await self.service.settle()
            rows = await self.rows(schedule_id)
            busy = any(row["status"] in ("admitted", "running") for row in rows)
            return None if busy else rows

        rows: list[dict[str, Any]] = await wait_until(settled)
        return rows

    async def backfill(self, schedule_id: str) -> dict[str, Any]:
        schedule = await self.app.get_schedule(schedule_id=schedule_id)
        backfill: dict[str, Any] = schedule["backfill"]
        return backfill


def by_origin(rows: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(row["instant"], row["origin"], row["status"]) for row in rows]


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
                # A run of "ask" waits for input: it keeps its schedule busy.
                await app.create_artifact_from_plan("ask", 1, ASK_PLAN)
                await app.save_deployment(
                    {"deployment_id": "ask.default", "artifact_id": "ask", "artifact_version": 1}
                )
                yield Live(app=app, clock=clock, service=service)
        finally:
            await service.stop()


async def test_a_trigger_over_rpc_runs_the_schedule_now(live: Live) -> None:
    app = live.app
    await app.create_schedule(
        schedule_id="hourly",
        deployment_id="hello.default",
        trigger=HOURLY,
        inputs={"name": {"$bind": "occurrence.instant"}},
    )
    answer = await app.trigger_schedule(schedule_id="hourly")
    assert answer["schedule_id"] == "hourly"
    assert (answer["instant"], answer["requested_at"], answer["overlap"]) == (
        utc_text(MONDAY),
        utc_text(MONDAY),
        None,
    )
    # The answer is the occurrence as the scheduler decided it: admitted, and
    # its run may have got further by the time the answer was read.
    assert answer["status"] in ("admitted", "running", "completed")
    assert answer["run_id"]
    rows = await live.settled_rows("hourly")
    assert by_origin(rows) == [(utc_text(MONDAY), "trigger", "completed")]
    assert rows[0]["run_id"] == answer["run_id"]
    run = await app.inspect_run(answer["run_id"])
    assert run["origin"]["action"] == "trigger"
    assert run["origin"]["schedule_id"] == "hourly"
    # Its bindings resolved for the moment of the trigger.
    assert run["output"] == {"result": f"hello {utc_text(MONDAY)}, on a schedule"}

    # The calendar goes on as before, the trigger's row among its own.
    await live.advance_to(hour(10))
    rows = await live.settled_rows("hourly")
    assert by_origin(rows) == [
        (utc_text(MONDAY), "trigger", "completed"),
        (utc_text(hour(10)), "schedule", "completed"),
    ]
    assert (await app.get_schedule(schedule_id="hourly"))["next_instant"] == utc_text(hour(11))

    # The raw JSON-RPC answer is the same object.
    await live.clock.set(hour(10, 15))
    raw = await app.call("workflow.schedules.trigger", {"schedule_id": "hourly"})
    assert set(raw) == {"schedule_id", "requested_at", "instant", "status", "run_id", "overlap"}
    assert raw["instant"] == utc_text(hour(10, 15))


async def test_a_trigger_the_overlap_policy_refuses_answers_invalid_state(live: Live) -> None:
    app = live.app
    await app.create_schedule(schedule_id="ask", deployment_id="ask.default", trigger=HOURLY)
    first = await app.trigger_schedule(schedule_id="ask")
    await wait_until(lambda: _run_status(app, first["run_id"], "interrupted"))
    # Its run waits for input: overlap "skip" refuses another, and records nothing.
    with pytest.raises(InvalidState) as refused:
        await app.trigger_schedule(schedule_id="ask")
    assert 'overlap "skip": the schedule has an active run' in refused.value.message
    assert refused.value.data["schedule_id"] == "ask"
    assert refused.value.to_dict()["code"] == "invalid_state"
    assert len(await live.rows("ask")) == 1
    # overlap "allow" runs it anyway.
    await live.clock.set(MONDAY + timedelta(minutes=1))
    allowed = await app.trigger_schedule(schedule_id="ask", overlap="allow")
    assert allowed["overlap"] == "allow" and allowed["run_id"] not in (None, first["run_id"])
    rows = await wait_until(lambda: _rows_with_runs(live, "ask", 2))
    assert [row["origin"] for row in rows] == ["trigger", "trigger"]

    # A deleted schedule cannot be triggered; an unknown one is not found.
    await app.delete_schedule(schedule_id="ask")
    with pytest.raises(InvalidState, match="deleted"):
        await app.trigger_schedule(schedule_id="ask")
    with pytest.raises(NotFound):
        await app.trigger_schedule(schedule_id="nope")


async def _run_status(app: App, run_id: str, wanted: str) -> bool:
    run = await app.inspect_run(run_id)
    return bool(run["status"] == wanted)


async def _rows_with_runs(live: Live, schedule_id: str, count: int) -> list[dict[str, Any]] | None:
    rows = [row for row in await live.rows(schedule_id) if row["run_id"]]
    return rows if len(rows) == count else None


async def test_a_backfill_answers_its_plan_and_the_schedule_shows_its_progress(
    live: Live,
) -> None:
    app = live.app
    await app.create_schedule(schedule_id="hourly", deployment_id="hello.default", trigger=HOURLY)
    await live.advance_to(hour(10))
    await live.settled_rows("hourly")
    await live.advance_to(hour(10, 30))
    # 06:00-09:00 came before the schedule existed; 10:00 ran.
    answer = await app.backfill_schedule(
        schedule_id="hourly", start=hour(6), end="2026-01-05T10:30:00Z"
    )
    assert answer == {
        "schedule_id": "hourly",
        "backfill": {
            "start": "2026-01-05T06:00:00Z",
            "end": "2026-01-05T10:30:00Z",
            "overlap": None,
            "requested_at": "2026-01-05T10:30:00Z",
            "state": "requested",
            "instants": 5,
            "planned": 4,
            "already_admitted": 1,
            "left_to_calendar": 0,
            "first": "2026-01-05T06:00:00Z",
            "last": "2026-01-05T09:00:00Z",
        },
    }

    async def done() -> dict[str, Any] | None:
        await live.service.settle()
        backfill = await live.backfill("hourly")
        return backfill if backfill["state"] == "done" else None

    backfill = await wait_until(done)
    assert backfill | {"ended_at": None} == {
        "start": "2026-01-05T06:00:00Z",
        "end": "2026-01-05T10:30:00Z",
        "overlap": None,
        "requested_at": "2026-01-05T10:30:00Z",
        "state": "done",
        "planned": 4,
        "admitted": 4,
        "remaining": 0,
        "next": None,
        "already_admitted": 1,
        "left_to_calendar": 0,
        "ended_at": None,
    }
    rows = await live.settled_rows("hourly")
    assert by_origin(rows) == [
        ("2026-01-05T10:00:00Z", "schedule", "completed"),
        ("2026-01-05T06:00:00Z", "backfill", "completed"),
        ("2026-01-05T07:00:00Z", "backfill", "completed"),
        ("2026-01-05T08:00:00Z", "backfill", "completed"),
        ("2026-01-05T09:00:00Z", "backfill", "completed"),
    ]
    run = await app.inspect_run(rows[1]["run_id"])
    assert (run["origin"]["action"], run["origin"]["instant"]) == (
        "backfill",
        "2026-01-05T06:00:00Z",
    )
    # Asked again, nothing is left: every instant of the range ran once.
    again = await app.backfill_schedule(schedule_id="hourly", start=hour(6), end=hour(10, 30))
    assert (again["backfill"]["planned"], again["backfill"]["already_admitted"]) == (0, 5)


async def test_a_running_backfill_refuses_another_and_can_be_cancelled(live: Live) -> None:
    app = live.app
    await app.create_schedule(schedule_id="ask", deployment_id="ask.default", trigger=HOURLY)
    await live.advance_to(hour(10, 30))
    answer = await app.backfill_schedule(schedule_id="ask", start=hour(6), end=hour(9))
    assert answer["backfill"]["planned"] == 3
    # One run at a time: 06:00's run waits for input, the rest wait for it.
    progress = await wait_until(lambda: _admitted(live, "ask", 1))
    assert (progress["state"], progress["remaining"], progress["next"]) == (
        "running",
        2,
        "2026-01-05T07:00:00Z",
    )
    with pytest.raises(InvalidState, match="has a backfill running") as busy:
        await app.backfill_schedule(schedule_id="ask", start=hour(7), end=hour(8))
    assert busy.value.data["backfill"]["admitted"] == 1

    await live.clock.set(hour(10, 40))
    cancelled = await app.cancel_backfill(schedule_id="ask")
    assert cancelled["schedule_id"] == "ask"
    assert cancelled["cancelled_at"] == "2026-01-05T10:40:00Z"
    assert (cancelled["backfill"]["admitted"], cancelled["backfill"]["remaining"]) == (1, 2)

    async def stopped() -> dict[str, Any] | None:
        await live.service.settle()
        backfill = await live.backfill("ask")
        return backfill if backfill["state"] == "cancelled" else None

    backfill = await wait_until(stopped)
    assert (backfill["admitted"], backfill["ended_at"]) == (1, "2026-01-05T10:40:00Z")
    with pytest.raises(InvalidState, match="no backfill running"):
        await app.cancel_backfill(schedule_id="ask")
    assert [(row["instant"], row["status"]) for row in await live.rows("ask") if row["run_id"]] == [
        ("2026-01-05T06:00:00Z", "interrupted")
    ]


async def _admitted(live: Live, schedule_id: str, count: int) -> dict[str, Any] | None:
    await live.service.settle()
    backfill = await live.backfill(schedule_id)
    return backfill if backfill is not None and backfill["admitted"] == count else None


BAD_BACKFILLS: list[tuple[dict[str, Any], type[Exception], str, str]] = [
    # (params, error class, the field named, part of its reason)
    (
        {"start": "2026-01-05T08:00:00Z", "end": "2026-01-05T06:00:00Z"},
        InvalidInput,
        "end",
        "after",
    ),
    (
        {"start": "2026-01-05T08:00:00Z", "end": "2026-01-06T06:00:00Z"},
        InvalidInput,
        "end",
        "future",
    ),
    ({"start": "yesterday", "end": "2026-01-05T06:00:00Z"}, InvalidInput, "start", "instant"),
    ({"start": "2026-01-05T06:00:00", "end": "2026-01-05T08:00:00Z"}, InvalidInput, "start", ""),
    (
        {"start": "2025-01-01T00:00:00Z", "end": "2026-01-05T00:00:00Z"},
        InvalidInput,
        "end",
        "the range holds 8856 calendar instants; a backfill takes at most 1000",
    ),
    (
        {"start": "2026-01-05T06:00:00Z", "end": "2026-01-05T08:00:00Z", "overlap": "parallel"},
        InvalidInput,
        "overlap",
        '"allow"',
    ),
    ({"end": "2026-01-05T08:00:00Z"}, InvalidParams, "start", "required"),
    ({"start": 1767592800, "end": "2026-01-05T08:00:00Z"}, InvalidParams, "start", "string"),
    (
        {"start": "2026-01-05T06:00:00Z", "end": "2026-01-05T08:00:00Z", "colour": "red"},
        InvalidParams,
        "colour",
        "unknown parameter",
    ),
]


async def test_bad_params_name_the_field_and_change_nothing(live: Live) -> None:
    app = live.app
    await app.create_schedule(schedule_id="hourly", deployment_id="hello.default", trigger=HOURLY)
    await live.advance_to(hour(10, 30))
    for params, cls, field, reason in BAD_BACKFILLS:
        with pytest.raises(cls) as caught:
            await app.call("workflow.schedules.backfill", {"schedule_id": "hourly", **params})
        assert type(caught.value) is cls, params
        problems = caught.value.problems  # type: ignore[attr-defined]
        assert [p.field for p in problems] == [field], params
        assert reason in problems[0].reason, params
    for method, params, field in (
        ("workflow.schedules.trigger", {"schedule_id": "hourly", "overlap": "skip"}, "overlap"),
        ("workflow.schedules.trigger", {"schedule_id": "hourly", "overlap": True}, "overlap"),
        ("workflow.schedules.trigger", {}, "schedule_id"),
        ("workflow.schedules.backfill.cancel", {"schedule_id": "hourly", "x": 1}, "x"),
    ):
        with pytest.raises(InvalidInput) as caught:
            await app.call(method, params)
        assert [p.field for p in caught.value.problems] == [field], (method, params)
    # Nothing was recorded: no backfill, no occurrence but the calendar's
    # (10:00, missed by the clock's jump).
    assert await live.backfill("hourly") is None
    assert by_origin(await live.rows("hourly")) == [
        ("2026-01-05T10:00:00Z", "schedule", "skipped-misfire")
    ]

    # On the wire: -32602 for the params' shape, -32001 for the API's checks,
    # each naming the field in data.problems.
    base = app.url
    async with App(base) as raw:
        answers = await raw._post(
            [
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "workflow.schedules.backfill",
                    "params": {"schedule_id": "hourly", "start": 0, "end": "x"},
                },
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "workflow.schedules.backfill",
                    "params": {"schedule_id": "hourly", "start": "x", "end": "2026-01-05T08:00Z"},
                },
            ]
        )
    shape, value = sorted(answers, key=lambda answer: answer["id"])
    assert shape["error"]["code"] == INVALID_PARAMS
    assert shape["error"]["data"]["problems"] == [
        {"field": "start", "reason": "Input should be a valid string"}
    ]
    assert value["error"]["code"] == -32001
    assert value["error"]["data"]["code"] == "invalid_input"
    assert [p["field"] for p in value["error"]["data"]["problems"]] == ["start"]


async def test_the_requests_on_a_server_without_schedules_are_unavailable(tmp_path: Path) -> None:
    server = build_local_static_workflow_server(tmp_path / "store", schedules=False)
    async with serving(create_app(server.api)) as base, App(base) as app:
        for call in (
            app.trigger_schedule(schedule_id="s"),
            app.backfill_schedule(schedule_id="s", start=hour(6), end=hour(7)),
            app.cancel_backfill(schedule_id="s"),
        ):
            with pytest.raises(SchedulerUnavailable):
                await call


# -- wf-schedule ---------------------------------------------------------------------


async def test_wf_schedule_trigger_backfill_and_cancel(live: Live) -> None:
    app = live.app
    cli = make_cli(app.url)
    await app.create_schedule(schedule_id="hourly", deployment_id="hello.default", trigger=HOURLY)
    await app.create_schedule(schedule_id="ask", deployment_id="ask.default", trigger=HOURLY)

    # trigger: the occurrence it made, with its run.
    triggered = await cli("trigger", "hourly")
    assert triggered.exit_code == 0, triggered.output
    line = triggered.stdout.strip()
    assert line.startswith(f"triggered hourly: {utc_text(MONDAY)} ")
    run_id = line.rsplit(", run ", 1)[1]
    rows = await live.settled_rows("hourly")
    assert by_origin(rows) == [(utc_text(MONDAY), "trigger", "completed")]
    assert rows[0]["run_id"] == run_id

    # A refused trigger: exit 6 (invalid_state), the reason on stderr.
    first = _json(await cli("trigger", "ask", "--json"))
    assert first["run_id"] and first["overlap"] is None
    await wait_until(lambda: _run_status(app, first["run_id"], "interrupted"))
    refused = await cli("trigger", "ask")
    assert refused.exit_code == 6 and refused.stdout == ""
    assert refused.stderr.startswith("error: schedule 'ask' refuses a trigger now: overlap")
    machine = await cli("trigger", "ask", "--json")
    assert machine.exit_code == 6
    assert _json(machine)["error"]["code"] == "invalid_state"
    await live.clock.set(MONDAY + timedelta(seconds=1))
    allowed = await cli("trigger", "ask", "--allow-overlap")
    assert allowed.exit_code == 0, allowed.output
    assert allowed.stdout.startswith("triggered ask (overlap allowed): ")

    # occurrences: the origin of each row.
    history = await cli("occurrences", "hourly")
    header, row = history.stdout.splitlines()[:2]
    assert header.split()[:3] == ["INSTANT", "ORIGIN", "STATUS"]
    assert row.split()[:4] == [utc_text(MONDAY), "trigger", "completed", run_id]

    # backfill: the plan, then the progress `get` shows.
    await live.advance_to(hour(12, 30))
    await live.settled_rows("hourly")
    planned = await cli(
        "backfill", "hourly", "--start", "2026-01-05T06:00:00Z", "--end", "2026-01-05T09:00:00Z"
    )
    assert planned.exit_code == 0, planned.output
    assert planned.stdout.splitlines() == [
        "backfill of hourly requested: 3 to run, 2026-01-05T06:00:00Z to"
        " 2026-01-05T08:00:00Z, oldest first",
        "  range 2026-01-05T06:00:00Z to 2026-01-05T09:00:00Z (end excluded): 3 calendar"
        " instants, 0 already admitted, 0 left to the calendar",
        "  progress: `wf-schedule get hourly`",
    ]

    async def done() -> dict[str, Any] | None:
        await live.service.settle()
        backfill = await live.backfill("hourly")
        return backfill if backfill["state"] == "done" else None

    await wait_until(done)
    shown = await cli("get", "hourly")
    lines = {line.split()[0]: line.split(None, 1)[1] for line in shown.stdout.splitlines()}
    assert lines["backfill"].startswith(
        "done: 3 of 3 admitted; range 2026-01-05T06:00:00Z to 2026-01-05T09:00:00Z"
        " (end excluded) (requested 2026-01-05T12:30:00Z, ended "
    )
    assert _json(await cli("get", "hourly", "--json"))["backfill"]["admitted"] == 3
    rows = await live.settled_rows("hourly")
    assert [row["origin"] for row in rows].count("backfill") == 3
    # --last: the newest rows are the backfill's, recorded last.
    newest = _json(await cli("occurrences", "hourly", "--last", "3", "--json"))
    assert [(r["instant"][11:16], r["origin"]) for r in newest["occurrences"]] == [
        ("08:00", "backfill"),
        ("07:00", "backfill"),
        ("06:00", "backfill"),
    ]

    # A backfill of "gate" stays running (its first run waits for input).
    # ("ask" would admit none while its triggered runs wait.)
    await app.create_schedule(schedule_id="gate", deployment_id="ask.default", trigger=HOURLY)
    ask_range = ("--start", "2026-01-05T06:00:00+01:00", "--end", "2026-01-05T09:00:00+01:00")
    started = _json(await cli("backfill", "gate", *ask_range, "--json"))
    assert started == {
        "schedule_id": "gate",
        "backfill": {
            "start": "2026-01-05T05:00:00Z",
            "end": "2026-01-05T08:00:00Z",
            "overlap": None,
            "requested_at": "2026-01-05T12:30:00Z",
            "state": "requested",
            "instants": 3,
            "planned": 3,
            "already_admitted": 0,
            "left_to_calendar": 0,
            "first": "2026-01-05T05:00:00Z",
            "last": "2026-01-05T07:00:00Z",
        },
    }
    await wait_until(lambda: _admitted(live, "gate", 1))
    shown = await cli("get", "gate")
    lines = {line.split()[0]: line.split(None, 1)[1] for line in shown.stdout.splitlines()}
    assert lines["backfill"] == (
        "running: 1 of 3 admitted, next 2026-01-05T06:00:00Z; range 2026-01-05T05:00:00Z to"
        " 2026-01-05T08:00:00Z (end excluded) (requested 2026-01-05T12:30:00Z)"
    )
    again = await cli("backfill", "gate", *ask_range)
    assert again.exit_code == 6
    assert "has a backfill running (1 of 3 admitted): cancel it first" in again.stderr
    cancelled = await cli("backfill-cancel", "gate")
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.startswith("backfill of gate cancelled at ")
    assert ": 1 of 3 admitted, 2 not run (range " in cancelled.stdout
    none = await cli("backfill-cancel", "gate", "--json")
    assert none.exit_code == 6
    assert _json(none)["error"]["code"] == "invalid_state"


CLI_ERRORS: list[tuple[list[str], int, str, str]] = [
    # (arguments, exit status, error code, what stderr names); the clock is at 09:30.
    (["trigger", "nope"], 3, "not_found", "does not exist"),
    (["backfill-cancel", "nope"], 3, "not_found", "does not exist"),
    (
        ["backfill", "hourly", "--start", "2026-01-05T06:00Z", "--end", "2026-01-05T12:00Z"],
        5,
        "invalid_input",
        "end: must not be in the future",
    ),
    (
        ["backfill", "hourly", "--start", "soon", "--end", "2026-01-05T06:00Z"],
        5,
        "invalid_input",
        "start: must be an instant",
    ),
    (
        ["backfill", "hourly", "--start", "2026-01-05T06:00Z", "--end", "2026-01-05T05:00Z"],
        5,
        "invalid_input",
        "end: must be after start",
    ),
    (
        ["backfill", "hourly", "--start", "2025-01-01T00:00Z", "--end", "2026-01-05T00:00Z"],
        5,
        "invalid_input",
        "end: the range holds 8856 calendar instants; a backfill takes at most 1000: split it",
    ),
    (["backfill-cancel", "hourly"], 6, "invalid_state", "no backfill running"),
]


async def test_wf_schedule_errors_name_the_field_with_the_documented_exit_status(
    live: Live,
) -> None:
    app = live.app
    cli = make_cli(app.url)
    await app.create_schedule(schedule_id="hourly", deployment_id="hello.default", trigger=HOURLY)
    for args, code, name, named in CLI_ERRORS:
        human = await cli(*args)
        assert human.exit_code == code, (args, human.output)
        assert human.stdout == ""
        assert named in human.stderr, (args, human.stderr)
        machine = await cli(*args, "--json")
        assert machine.exit_code == code, args
        assert _json(machine)["error"]["code"] == name, args
    # A missing option is a usage error (exit 2) naming it.
    usage = await cli("backfill", "hourly", "--end", "2026-01-05T06:00Z")
    assert usage.exit_code == 2 and "--start" in usage.output
    assert await live.backfill("hourly") is None


def _json(result: Result) -> Any:
    return json.loads(result.stdout)


async def test_the_client_accepts_datetimes_and_sends_iso_text(live: Live) -> None:
    app = live.app
    await app.create_schedule(schedule_id="hourly", deployment_id="hello.default", trigger=HOURLY)
    await live.advance_to(hour(10, 30))
    berlin = timezone_offset(hours=1)
    answer = await app.backfill_schedule(
        schedule_id="hourly",
        start=datetime(2026, 1, 5, 7, 0, tzinfo=berlin),
        end=datetime(2026, 1, 5, 9, 0, tzinfo=berlin),
        overlap="allow",
    )
    assert (answer["backfill"]["start"], answer["backfill"]["end"]) == (
        "2026-01-05T06:00:00Z",
        "2026-01-05T08:00:00Z",
    )
    assert answer["backfill"]["overlap"] == "allow"
    # A naive datetime has no offset: refused, naming the field.
    with pytest.raises(InvalidInput) as naive:
        await app.backfill_schedule(
            schedule_id="hourly", start=datetime(2026, 1, 5, 6, 0), end=hour(8)
        )
    assert [p.field for p in naive.value.problems] == ["start"]


def timezone_offset(*, hours: int) -> Any:
    return timezone(timedelta(hours=hours))
