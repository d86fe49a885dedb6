"""Rounds prepared ahead of their instant (`shell.service`, "Prepared rounds").

A round the loop decides and stages before its instant writes nothing
before it, is committed at it only if nothing happened meanwhile that the
round at the instant would have seen, and otherwise is dropped without a
trace: the round is decided again, as if it had never been prepared. On a
manual clock the loop prepares a minute ahead (`prepare_ahead_s`=60), so
each test sets up an instant's round at START and moves the clock to it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import pytest

from core.errors import AlreadyExists
from shell import ManualClock, SchedulerService, SchedulerServiceConfig, build_scheduler_service
from shell.observer import Decision, NullObserver

from .conftest import CONSTANT_PLAN, START, Harness

MINUTE = timedelta(minutes=1)
EVERY_MINUTE = {"kind": "cron", "expression": "* * * * *", "timezone": "UTC"}


class Watcher(NullObserver):
    """Records what the service tells its observer about prepared rounds."""

    def __init__(self) -> None:
        self.outcomes: list[str] = []
        self.durable_at: list[tuple[datetime, datetime]] = []

    def prepared(self, outcome: Literal["committed", "dropped"]) -> None:
        self.outcomes.append(outcome)

    def decided(self, decisions: Any, now: datetime) -> None:
        self.durable_at.extend((d.instant, now) for d in decisions if isinstance(d, Decision))


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[Harness, Watcher]]:
    h = Harness(tmp_path / "store", ManualClock(START))
    await h.build_server()
    await h.deploy("report.default", CONSTANT_PLAN)
    yield h, Watcher()
    await h.shutdown()


async def start(h: Harness, watcher: Watcher, **config: Any) -> SchedulerService:
    assert h.server is not None
    settings = {"enabled": True, "prepare_ahead_s": 60.0, **config}
    h.service = build_scheduler_service(
        h.server, SchedulerServiceConfig(**settings), clock=h.clock, observer=watcher
    )
    await h.service.start()
    await h.service.settle()
    return h.service


async def every_minute(h: Harness, schedule_id: str = "s", **fields: Any) -> None:
    await h.schedules.create_schedule(
        schedule_id=schedule_id,
        deployment_id="report.default",
        trigger=EVERY_MINUTE,
        inputs={"when": {"$bind": "occurrence.instant"}},
        **fields,
    )
    assert h.service is not None
    await h.service.settle()


async def prepared(world: tuple[Harness, Watcher], **fields: Any) -> tuple[Harness, Watcher]:
    """A service on `world` and an every-minute schedule `s` (with `fields`)
    created at 09:30: the loop has prepared the round of 09:31."""
    h, watcher = world
    await start(h, watcher)
    await every_minute(h, **fields)
    return h, watcher


def history_bytes(h: Harness, schedule_id: str) -> bytes:
    path = h.root / "schedules" / schedule_id / "history.jsonl"
    return path.read_bytes() if path.exists() else b""


async def run_of(h: Harness, schedule_id: str, minute: str) -> dict[str, Any]:
    rows = [r for r in await h.occurrences(schedule_id) if r["instant"][11:16] == minute]
    assert len(rows) == 1, rows
    record: dict[str, Any] = await h.api.inspect_run(rows[0]["run_id"])
    return record


async def test_a_prepared_round_writes_nothing_before_its_instant_and_commits_at_it(
    world: tuple[Harness, Watcher],
) -> None:
    h, watcher = await prepared(world)
    # Prepared at 09:30 for 09:31: nothing of it is in the history or the runs.
    assert await h.occurrences("s") == []
    assert history_bytes(h, "s") == b""
    assert (await h.api.list_runs())["runs"] == []

    await h.at(START + MINUTE)
    await h.until_runs_ended("s")
    assert await h.statuses("s") == [("09:31", "completed")]
    assert watcher.outcomes[0] == "committed"
    run = await run_of(h, "s", "09:31")
    # Created as of the instant it was decided for, not when it was staged.
    assert run["created_at"] == "2026-03-02T09:31:00Z"
    assert run["output"] == {"result": "report for 2026-03-02T09:31:00Z"}
    # Durable at the instant: the lateness the metrics see is the commit's.
    assert (START + MINUTE, START + MINUTE) in watcher.durable_at


async def test_waking_before_the_instant_with_nothing_new_keeps_the_prepared_round(
    world: tuple[Harness, Watcher],
) -> None:
    h, watcher = await prepared(world)
    assert h.service is not None
    service = h.service
    for seconds in (10, 20, 59):
        await h.at(START + timedelta(seconds=seconds))
    await service.settle()
    await h.at(START + MINUTE)
    await h.until_runs_ended("s")
    await h.at(START + 2 * MINUTE)
    await h.until_runs_ended("s")
    assert await h.statuses("s") == [("09:31", "completed"), ("09:32", "completed")]
    assert watcher.outcomes[:2] == ["committed", "committed"]
    # No run id was reserved and thrown away.
    first = (await run_of(h, "s", "09:31"))["run_id"]
    second = (await run_of(h, "s", "09:32"))["run_id"]
    assert int(second.rsplit("-", 1)[1]) == int(first.rsplit("-", 1)[1]) + 1


async def test_a_pause_before_the_instant_drops_the_prepared_round(
    world: tuple[Harness, Watcher],
) -> None:
    h, watcher = await prepared(world)
    await h.at(START + timedelta(seconds=30))
    await h.schedules.pause_schedule(schedule_id="s")
    await h.at(START + MINUTE)
    await h.at(START + 2 * MINUTE)
    assert watcher.outcomes[0] == "dropped"
    # Nothing of the dropped round reached the history, and nothing ran.
    assert await h.occurrences("s") == []
    assert history_bytes(h, "s") == b""
    assert (await h.api.list_runs())["runs"] == []


async def test_a_deployment_saved_before_the_instant_drops_the_prepared_round(
    world: tuple[Harness, Watcher],
) -> None:
    h, watcher = await prepared(world)
    await h.at(START + timedelta(seconds=30))
    signed = {
        **CONSTANT_PLAN,
        "nodes": [
            {**CONSTANT_PLAN["nodes"][0], "params": {"template": "signed report for {input.when}"}}
        ],
    }
    await h.api.create_artifact_from_plan("report", 2, signed)
    await h.api.save_deployment(
        {"deployment_id": "report.default", "artifact_id": "report", "artifact_version": 2}
    )
    await h.at(START + MINUTE)
    await h.until_runs_ended("s")
    assert watcher.outcomes[0] == "dropped"
    run = await run_of(h, "s", "09:31")
    # The run the instant admitted pins the deployment as it is at the instant.
    assert run["snapshot"]["artifact_version"] == 2
    assert run["output"] == {"result": "signed report for 2026-03-02T09:31:00Z"}


async def test_a_clock_past_the_allowance_drops_the_prepared_round_and_misses_the_instant(
    world: tuple[Harness, Watcher],
) -> None:
    h, watcher = await prepared(world, lateness_allowance_s=0.0)
    # Half a second late with no allowance: the round at 09:31:00.5 misses
    # 09:31, as it would have with nothing prepared.
    await h.at(START + MINUTE + timedelta(milliseconds=500))
    assert watcher.outcomes[0] == "dropped"
    assert await h.statuses("s") == [("09:31", "skipped-misfire")]


async def test_a_clock_that_jumped_past_the_instant_gets_a_round_decided_when_it_woke(
    world: tuple[Harness, Watcher],
) -> None:
    h, watcher = await prepared(world, lateness_allowance_s=3600.0)
    woke = START + MINUTE + timedelta(seconds=5)
    await h.at(woke)
    await h.until_runs_ended("s")
    assert watcher.outcomes[0] == "dropped"
    rows = await h.occurrences("s")
    assert [(r["instant"][11:16], r["status"]) for r in rows] == [("09:31", "completed")]
    # Decided at 09:31:05, on time within the allowance, not "at 09:31".
    assert (START + MINUTE, woke) in watcher.durable_at


async def test_runs_that_write_while_the_round_waits_and_its_staged_run_records_both_survive(
    world: tuple[Harness, Watcher],
) -> None:
    """The prepared round's run records go at the run log's end as it is at
    the instant: runs that stop while the round waits append there first."""
    h, watcher = await prepared(world)
    await h.at(START + timedelta(seconds=30))
    # A run of no schedule (the scheduler hears nothing of it) executes and
    # stops while the round waits, appending its records to the run log.
    manual = await h.api.admit_run("report.default", {"when": "now"})
    await h.api.launch_run(manual)
    for _ in range(100):
        if (await h.api.inspect_run(manual))["status"] == "completed":
            break
        await h.service.settle()  # type: ignore[union-attr]
    assert (await h.api.inspect_run(manual))["status"] == "completed"
    await h.at(START + MINUTE)
    await h.until_runs_ended("s")
    assert watcher.outcomes[0] == "committed"
    scheduled = (await run_of(h, "s", "09:31"))["run_id"]

    # Both read back after a restart, from the log alone.
    await h.shutdown()
    await h.boot()
    assert (await h.api.inspect_run(manual))["output"] == {"result": "report for now"}
    assert (await h.api.inspect_run(scheduled))["status"] == "completed"
    assert await h.statuses("s") == [("09:31", "completed")]


async def test_a_run_id_the_waiting_round_holds_cannot_be_admitted_meanwhile(
    world: tuple[Harness, Watcher],
) -> None:
    h, watcher = await prepared(world)
    # The round prepared at 09:30 reserved the next id and staged its record.
    held = f"run-{1:06d}"
    with pytest.raises(AlreadyExists):
        await h.api.admit_run("report.default", {"when": "now"}, run_id=held)
    await h.at(START + MINUTE)
    await h.until_runs_ended("s")
    assert watcher.outcomes[0] == "committed"
    assert (await run_of(h, "s", "09:31"))["run_id"] == held


async def test_a_dropped_round_leaves_no_gap_between_run_ids(
    world: tuple[Harness, Watcher],
) -> None:
    """The run id the dropped round had reserved goes to the next admission,
    as the README's quickstart expects of a new store's first run."""
    h, watcher = await prepared(world)
    await h.at(START + timedelta(seconds=30))
    await every_minute(h, "t")  # a change: the round of 09:31 is dropped
    await h.at(START + MINUTE)
    await h.until_runs_ended("s")
    await h.until_runs_ended("t")
    assert watcher.outcomes[0] == "dropped"
    ids = {(await run_of(h, name, "09:31"))["run_id"] for name in ("s", "t")}
    assert ids == {f"run-{1:06d}", f"run-{2:06d}"}
