"""Trigger-now and backfill through the schedules API, on the real service
and stores (files and PostgreSQL), on a manual clock."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from core.errors import InvalidInput, InvalidState, NotFound
from shell.operator_requests import TRIGGER_WAIT_S
from shell.schedules_api import SchedulesApi

from .conftest import CONSTANT_PLAN, GATE_PLAN, START, Harness

RAN = ("admitted", "running", "interrupted", "completed")
HOURLY = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}


def hour(h: int, minute: int = 0) -> datetime:
    return START.replace(hour=h, minute=minute)


async def _hourly(
    harness: Harness, plan: dict[str, object] = CONSTANT_PLAN, **extra: object
) -> None:
    name = "gate.default" if plan is GATE_PLAN else "report.default"
    await harness.deploy(name, plan)
    await harness.schedules.create_schedule(
        schedule_id="hourly",
        deployment_id=name,
        trigger=HOURLY,
        inputs={"when": {"$bind": "occurrence.instant"}} if plan is CONSTANT_PLAN else {},
        **extra,
    )


def _by_origin(rows: list[dict[str, object]]) -> list[tuple[str, str, str]]:
    return [(str(r["instant"])[11:19], str(r["origin"]), str(r["status"])) for r in rows]


async def test_a_trigger_runs_the_schedule_now_and_leaves_the_calendar_alone(
    harness: Harness,
) -> None:
    await harness.boot()
    await _hourly(harness)
    await harness.at(hour(10))
    await harness.clock.set(hour(10, 20))
    answer = await harness.schedules.trigger_schedule(schedule_id="hourly")
    # The answer is the occurrence as the scheduler decided it (its run may
    # have finished already: a constant plan is quick).
    assert answer["status"] in RAN and answer["instant"] == "2026-03-02T10:20:00Z"
    await harness.until_runs_ended("hourly")
    run = await harness.api.inspect_run(answer["run_id"])
    # Its bindings resolved for the moment of the trigger; its origin says so.
    assert run["output"] == {"result": "report for 2026-03-02T10:20:00Z"}
    assert run["origin"]["action"] == "trigger"
    await harness.at(hour(11))
    await harness.until_runs_ended("hourly")
    assert _by_origin(await harness.occurrences("hourly")) == [
        ("10:00:00", "schedule", "completed"),
        ("10:20:00", "trigger", "completed"),
        ("11:00:00", "schedule", "completed"),
    ]
    schedule = await harness.schedules.get_schedule(schedule_id="hourly")
    assert schedule["next_instant"] == "2026-03-02T12:00:00Z"


async def test_a_trigger_on_a_calendar_instant_takes_the_next_microsecond(
    harness: Harness,
) -> None:
    await harness.boot()
    await _hourly(harness)
    await harness.at(hour(10))
    await harness.until_runs_ended("hourly")
    answer = await harness.schedules.trigger_schedule(schedule_id="hourly")
    again = await harness.schedules.trigger_schedule(schedule_id="hourly", overlap="allow")
    assert answer["instant"] == "2026-03-02T10:00:00.000001Z"
    # A second request in the same microsecond is a second occurrence, not
    # taken for the first one delivered again.
    assert again["instant"] == "2026-03-02T10:00:00.000002Z"
    assert answer["status"] in RAN and again["status"] in RAN, (answer, again)
    assert answer["run_id"] != again["run_id"]


async def test_overlap_refuses_a_trigger_and_records_nothing_unless_allowed(
    harness: Harness,
) -> None:
    await harness.boot()
    await _hourly(harness, GATE_PLAN)
    await harness.at(hour(10))  # its run waits at the gate: the schedule is busy
    with pytest.raises(InvalidState, match='overlap "skip": the schedule has an active run'):
        await harness.schedules.trigger_schedule(schedule_id="hourly")
    assert [r["origin"] for r in await harness.occurrences("hourly")] == ["schedule"]
    allowed = await harness.schedules.trigger_schedule(schedule_id="hourly", overlap="allow")
    assert allowed["status"] in RAN
    # The triggered run takes an overlap place: the next hour is skipped.
    await harness.at(hour(11))
    assert _by_origin(await harness.occurrences("hourly")) == [
        ("10:00:00", "schedule", "interrupted"),
        ("10:00:00", "trigger", "interrupted"),
        ("11:00:00", "schedule", "skipped-overlap"),
    ]


async def test_a_paused_schedule_can_be_triggered_a_deleted_one_cannot(harness: Harness) -> None:
    await harness.boot()
    await _hourly(harness)
    await harness.schedules.pause_schedule(schedule_id="hourly")
    answer = await harness.schedules.trigger_schedule(schedule_id="hourly")
    assert answer["status"] in RAN
    await harness.until_runs_ended("hourly")
    await harness.at(hour(11))
    assert _by_origin(await harness.occurrences("hourly")) == [("09:30:00", "trigger", "completed")]
    await harness.schedules.delete_schedule(schedule_id="hourly")
    with pytest.raises(InvalidState, match="deleted"):
        await harness.schedules.trigger_schedule(schedule_id="hourly")
    with pytest.raises(NotFound):
        await harness.schedules.trigger_schedule(schedule_id="nope")
    with pytest.raises(InvalidInput, match="overlap"):
        await harness.schedules.trigger_schedule(schedule_id="hourly", overlap="parallel")


async def test_the_wait_for_an_answer_is_zero_seconds_or_more(harness: Harness) -> None:
    await harness.boot()
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="answer_wait_s must be 0 or more"):
            SchedulesApi(backend=harness.schedules.backend, host=harness.api, answer_wait_s=bad)
    assert harness.schedules.answer_wait_s == TRIGGER_WAIT_S


async def test_a_backfill_admits_what_never_ran_oldest_first_one_at_a_time(
    harness: Harness,
) -> None:
    await harness.boot()
    await _hourly(harness)
    await harness.at(hour(10))
    await harness.until_runs_ended("hourly")
    await harness.at(hour(10, 30))
    await harness.schedules.pause_schedule(schedule_id="hourly")
    await harness.at(hour(13, 30))
    await harness.schedules.resume_schedule(schedule_id="hourly")
    await harness.at(hour(14))
    await harness.until_runs_ended("hourly")
    await harness.at(hour(14, 40))
    answer = await harness.schedules.backfill_schedule(
        schedule_id="hourly", start="2026-03-02T09:00:00Z", end="2026-03-02T14:30:00Z"
    )
    # 09:00 came before the schedule existed, 11:00-13:00 in the pause; 10:00
    # and 14:00 ran already.
    assert answer["backfill"] | {"requested_at": None} == {
        "start": "2026-03-02T09:00:00Z",
        "end": "2026-03-02T14:30:00Z",
        "overlap": None,
        "requested_at": None,
        "state": "requested",
        "instants": 6,
        "planned": 4,
        "already_admitted": 2,
        "left_to_calendar": 0,
        "first": "2026-03-02T09:00:00Z",
        "last": "2026-03-02T13:00:00Z",
    }
    seen: list[int] = []
    for _ in range(20):
        await harness.until_runs_ended("hourly")
        await harness.service.settle()  # type: ignore[union-attr]
        backfill = (await harness.schedules.get_schedule(schedule_id="hourly"))["backfill"]
        seen.append(backfill["admitted"])
        if backfill["state"] == "done":
            break
    assert backfill["state"] == "done" and backfill["planned"] == 4 and backfill["remaining"] == 0
    assert seen == sorted(seen)
    await harness.until_runs_ended("hourly")
    rows = _by_origin(await harness.occurrences("hourly"))
    assert [row for row in rows if row[1] == "backfill"] == [
        ("09:00:00", "backfill", "completed"),
        ("11:00:00", "backfill", "completed"),
        ("12:00:00", "backfill", "completed"),
        ("13:00:00", "backfill", "completed"),
    ]
    # Asked again, nothing is left to admit: every instant ran once.
    again = await harness.schedules.backfill_schedule(
        schedule_id="hourly", start="2026-03-02T09:00:00Z", end="2026-03-02T14:30:00Z"
    )
    assert again["backfill"]["planned"] == 0 and again["backfill"]["already_admitted"] == 6


async def test_a_backfill_survives_a_restart_and_can_be_cancelled(harness: Harness) -> None:
    await harness.boot()
    await _hourly(harness, GATE_PLAN)
    await harness.at(hour(10))  # 10:00 waits at its gate: the schedule is busy
    await harness.at(hour(13, 30))  # 11:00-13:00 skipped-overlap
    answer = await harness.schedules.backfill_schedule(
        schedule_id="hourly",
        start="2026-03-02T11:00:00Z",
        end="2026-03-02T13:30:00Z",
        overlap="allow",
    )
    assert answer["backfill"]["planned"] == 3
    await harness.service.settle()  # type: ignore[union-attr]
    # "allow": the backfill runs beside the busy 10:00, one at a time.
    backfill = (await harness.schedules.get_schedule(schedule_id="hourly"))["backfill"]
    assert (backfill["state"], backfill["admitted"], backfill["next"]) == (
        "running",
        1,
        "2026-03-02T12:00:00Z",
    )
    with pytest.raises(InvalidState, match="backfill running"):
        await harness.schedules.backfill_schedule(
            schedule_id="hourly", start="2026-03-02T11:00:00Z", end="2026-03-02T12:00:00Z"
        )
    await harness.shutdown()
    await harness.boot()
    backfill = (await harness.schedules.get_schedule(schedule_id="hourly"))["backfill"]
    assert (backfill["state"], backfill["admitted"], backfill["remaining"]) == ("running", 1, 2)
    cancelled = await harness.schedules.cancel_backfill(schedule_id="hourly")
    assert cancelled["backfill"]["remaining"] == 2
    await harness.service.settle()  # type: ignore[union-attr]
    backfill = (await harness.schedules.get_schedule(schedule_id="hourly"))["backfill"]
    assert backfill["state"] == "cancelled" and backfill["admitted"] == 1
    # The two it never admitted are counted; it admits no next one.
    assert (backfill["remaining"], backfill["next"]) == (2, None)
    with pytest.raises(InvalidState, match="no backfill running"):
        await harness.schedules.cancel_backfill(schedule_id="hourly")
    rows = _by_origin(await harness.occurrences("hourly"))
    assert [row for row in rows if row[1] == "backfill"] == [
        ("11:00:00", "backfill", "interrupted")
    ]


async def test_requests_written_before_the_scheduler_applies_them_count(
    harness: Harness,
) -> None:
    await harness.boot()
    await _hourly(harness, GATE_PLAN)
    await harness.at(hour(10))  # 10:00 waits at its gate: the schedule is busy
    await harness.at(hour(13, 30))  # 11:00-13:00 skipped-overlap
    schedules = harness.schedules
    window = {"start": "2026-03-02T11:00:00Z", "end": "2026-03-02T13:30:00Z"}
    # A cancel sent with the request waits until the scheduler starts it, and
    # answers its plan.
    requested, cancelled = await asyncio.gather(
        schedules.backfill_schedule(schedule_id="hourly", overlap="allow", **window),
        schedules.cancel_backfill(schedule_id="hourly"),
    )
    assert requested["backfill"]["planned"] == 3
    assert cancelled["backfill"]["planned"] == 3
    await harness.service.settle()  # type: ignore[union-attr]
    backfill = (await schedules.get_schedule(schedule_id="hourly"))["backfill"]
    assert (backfill["state"], backfill["planned"]) == ("cancelled", 3)

    # Two cancels at once: the second sees the first, written and not yet applied.
    await schedules.backfill_schedule(schedule_id="hourly", overlap="allow", **window)
    await harness.service.settle()  # type: ignore[union-attr]
    answers = await asyncio.gather(
        schedules.cancel_backfill(schedule_id="hourly"),
        schedules.cancel_backfill(schedule_id="hourly"),
        return_exceptions=True,
    )
    refused = [a for a in answers if isinstance(a, BaseException)]
    assert len(refused) == 1 and isinstance(refused[0], InvalidState), answers
    assert "no backfill running" in str(refused[0])

    # Two requests at once: the second sees the first.
    answers = await asyncio.gather(
        schedules.backfill_schedule(schedule_id="hourly", overlap="allow", **window),
        schedules.backfill_schedule(schedule_id="hourly", overlap="allow", **window),
        return_exceptions=True,
    )
    refused = [a for a in answers if isinstance(a, BaseException)]
    assert len(refused) == 1 and isinstance(refused[0], InvalidState), answers
    assert "cancel it first" in str(refused[0])
    await harness.service.settle()  # type: ignore[union-attr]
    kinds = [r["kind"] for r in await schedules.definitions.records_after("hourly", 0)]
    assert kinds.count("backfill") == 3 and kinds.count("backfill-cancelled") == 2


async def test_a_bad_backfill_request_names_the_field_and_writes_nothing(
    harness: Harness,
) -> None:
    await harness.boot()
    await _hourly(harness)
    await harness.at(hour(10))
    cases = [
        ({"start": "2026-03-02T11:00:00Z", "end": "2026-03-02T09:00:00Z"}, "end: must be after"),
        ({"start": "2026-03-02T09:00:00Z", "end": "2026-03-03T09:00:00Z"}, "end: must not be"),
        ({"start": "yesterday", "end": "2026-03-02T09:00:00Z"}, "start: must be an instant"),
        (
            {"start": "2025-01-01T00:00:00Z", "end": "2026-03-01T00:00:00Z"},
            # 424 days of hours.
            "end: the range holds 10176 calendar instants; a backfill takes at most 1000",
        ),
        (
            {"start": "2026-03-01T00:00:00Z", "end": "2026-03-02T00:00:00Z", "overlap": "x"},
            "overlap",
        ),
    ]
    for arguments, message in cases:
        with pytest.raises(InvalidInput, match=message):
            await harness.schedules.backfill_schedule(schedule_id="hourly", **arguments)
    schedule = await harness.schedules.get_schedule(schedule_id="hourly")
    assert schedule["backfill"] is None
    with pytest.raises(InvalidState, match="no backfill running"):
        await harness.schedules.cancel_backfill(schedule_id="hourly")
