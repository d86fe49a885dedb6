"""Several servers on one PostgreSQL store, in one process: each server is
its own host server, database pool and scheduler service, as two processes
would have them, on one manual clock.

What is checked: the roles (one leads, a standby waits and names the
leader), schedule changes made on a standby reaching the leader through
LISTEN/NOTIFY (never a poll: the services poll once an hour here), the same
occurrence rows on every server (pending instants included), a clean stop
handing over at once, a crash replaced once the lease lapses with the gap
decided by the misfire policy, the runs of a dead server failed with the
disclosure by whoever leads, and a resume on another server tracked by the
leader. The same with real processes and real signals is in
tests/reliability/test_pg_failover.py.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from shell import ManualClock
from shell.pg.servers import ProcessIdentity, surely_dead
from tests.pgdeath import die_on_the_database

from .conftest import CONSTANT_PLAN, GATE_PLAN, START, Harness, sleep_plan

# Short enough for a test to see a lease lapse, long enough for a slow machine.
FAST = {"lease_s": 1.5, "renew_s": 0.3, "heartbeat_s": 0.3, "silence_s": 1.5}
# The services never poll on their own: the manual clock only moves when a
# test moves it, so whatever a server learns between two moves, a notice told it.
QUIET = {"poll_interval_s": 3600}


def hour(h: int, minute: int = 0) -> datetime:
    return START.replace(hour=h, minute=minute)


async def until(check: Callable[[], Any], what: str, timeout_s: float = 15.0) -> None:
    """Wait (real time) until `check()` is true; the notices are asynchronous."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        outcome = check()
        if asyncio.iscoroutine(outcome):
            outcome = await outcome
        if outcome:
            return
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.02)


@dataclass
class Pair:
    """Two servers of one store, `a` booted first (it leads)."""

    a: Harness
    b: Harness
    clock: ManualClock

    async def boot(self, **config: Any) -> None:
        await self.a.boot(**{**QUIET, **config})
        await self.b.boot(**{**QUIET, **config, "standby": True})

    async def at(self, instant: datetime) -> None:
        await self.clock.set(instant)
        for harness in (self.a, self.b):
            if harness.service is not None and harness.service.running:
                await harness.service.settle()


@pytest.fixture
async def pair(tmp_path: Path, pg_url: str) -> AsyncIterator[Pair]:
    clock = ManualClock(START)
    servers = Pair(
        Harness(tmp_path / "a", clock, store_url=pg_url, pg_options=FAST),
        Harness(tmp_path / "b", clock, store_url=pg_url, pg_options=FAST),
        clock,
    )
    yield servers
    await servers.b.shutdown()
    await servers.a.shutdown()


def _known(harness: Harness, schedule_id: str) -> bool:
    service = harness.service
    return service is not None and schedule_id in service._state.schedules


def _paused(harness: Harness, schedule_id: str) -> bool:
    service = harness.service
    if service is None or schedule_id not in service._state.schedules:
        return False
    return bool(service._state.schedules[schedule_id].paused)


async def _hourly(on: Harness, plan: dict[str, Any] = CONSTANT_PLAN, **options: Any) -> None:
    await on.deploy("report.default", plan)
    await on.schedules.create_schedule(
        schedule_id="hourly",
        deployment_id="report.default",
        trigger={"kind": "cron", "expression": "0 * * * *"},
        **options,
    )


async def test_a_standby_names_the_leader_and_its_changes_reach_the_leader_at_once(
    pair: Pair,
) -> None:
    await pair.boot()
    a, b = pair.a, pair.b
    assert a.service is not None and b.service is not None
    assert (a.service.role, b.service.role) == ("leader", "standby")
    assert a.database is not None and b.database is not None
    assert b.service.leadership["server_id"] == a.database.server_id
    assert b.service.leadership["epoch"] == a.service.leadership["epoch"] == 1
    assert b.service.leadership["pid"] == os.getpid() and b.service.leadership["since"]

    # Created on the standby: the leader hears of it without a poll.
    await _hourly(b, inputs={"when": {"$bind": "occurrence.instant"}})
    await until(lambda: _known(a, "hourly"), "the leader knows the new schedule")
    await pair.at(hour(10))
    [row] = await b.occurrences("hourly")
    assert row["instant"] == "2026-03-02T10:00:00Z"
    assert row["status"] in {"admitted", "running", "completed"}
    run_id = row["run_id"]
    # Scheduled runs execute on the leader; any server reads them.
    await until(
        _status_is(b, run_id, "completed"), "the standby reads the run completed by the leader"
    )
    await until(_rows_are(a, [("10:00", "completed")]), "the leader tracked its run to the end")
    assert await a.occurrences("hourly") == await b.occurrences("hourly")

    # Paused on the standby: the leader admits nothing at 11:00.
    await b.schedules.pause_schedule(schedule_id="hourly")
    await until(lambda: _paused(a, "hourly"), "the leader knows the pause")
    await pair.at(hour(11))
    assert await a.statuses("hourly") == [("10:00", "completed")]
    # Resumed on the standby: never replayed, the next instant is admitted.
    await b.schedules.resume_schedule(schedule_id="hourly")
    await until(lambda: not _paused(a, "hourly"), "the leader knows the resume")
    await pair.at(hour(12))
    await until(
        _rows_are(b, [("10:00", "completed"), ("12:00", "completed")]),
        "12:00 admitted after the resume, 11:00 not replayed",
    )


def _status_is(on: Harness, run_id: str, status: str) -> Callable[[], Any]:
    async def check() -> bool:
        return bool((await on.api.inspect_run(run_id))["status"] == status)

    return check


def _rows_are(on: Harness, expected: list[tuple[str, str]]) -> Callable[[], Any]:
    async def check() -> bool:
        return bool(await on.statuses("hourly") == expected)

    return check


async def test_every_server_lists_the_same_occurrences_pending_included(pair: Pair) -> None:
    await pair.boot(max_concurrent_runs=1, drain_grace_s=0.01)
    a, b = pair.a, pair.b
    # b's 10:01 and 10:02 wait for the only slot, which a's long run holds.
    await a.deploy("sleeper.default", sleep_plan(30))
    await a.deploy("report.default", CONSTANT_PLAN)
    await b.schedules.create_schedule(
        schedule_id="a",
        deployment_id="sleeper.default",
        trigger={"kind": "oneshot", "at": hour(10).isoformat()},
    )
    await b.schedules.create_schedule(
        schedule_id="b",
        deployment_id="report.default",
        trigger={"kind": "cron", "expression": "1-2 10 * * *"},
        inputs={"when": "now"},
        lateness_allowance_s=300,
    )
    await until(lambda: _known(a, "a") and _known(a, "b"), "the leader knows both schedules")
    for minute in (0, 1, 2):
        await pair.at(hour(10, minute))
    assert await a.statuses("b") == [("10:01", "pending"), ("10:02", "pending")]
    for schedule_id in ("a", "b"):
        assert await b.occurrences(schedule_id) == await a.occurrences(schedule_id)
    listed_a = await a.schedules.get_schedule(schedule_id="b")
    listed_b = await b.schedules.get_schedule(schedule_id="b")
    assert listed_b["next_instant"] == listed_a["next_instant"]


async def test_a_clean_stop_hands_the_leadership_over_at_once(pair: Pair) -> None:
    await pair.boot()
    a, b = pair.a, pair.b
    await _hourly(a, inputs={"when": "x"})
    await pair.at(hour(10))
    assert a.service is not None and b.service is not None
    epoch = a.service.leadership["epoch"]
    # The standby polls once an hour of a clock that stands still: only the
    # notice of the stop can wake it.
    await a.shutdown()
    await until(lambda: b.service is not None and b.service.role == "leader", "b leads")
    assert b.database is not None
    assert b.service.leadership["epoch"] == epoch + 1
    assert b.service.leadership["server_id"] == b.database.server_id
    await pair.at(hour(11))
    await until(
        _rows_are(b, [("10:00", "completed"), ("11:00", "completed")]),
        "the new leader admits 11:00",
    )


async def test_a_crashed_leader_is_replaced_and_the_gap_decided_by_the_misfire_policy(
    pair: Pair,
) -> None:
    await pair.boot()
    a, b = pair.a, pair.b
    await _hourly(a, inputs={"when": "x"}, misfire="latest")
    await pair.at(hour(10))
    assert b.service is not None and a.service is not None
    epoch = a.service.leadership["epoch"]
    # The leader dies without a word: no release, no stop, its lease and
    # heartbeat left to lapse (`die_on_the_database` makes the lapse have
    # happened: the process is this one, alive by its pid).
    await _die(a)
    # 10:00, 11:00 and 12:00 pass with no leader; the standby's next poll
    # finds the lease lapsed and takes over.
    await pair.at(hour(12, 30))
    await until(lambda: b.service is not None and b.service.role == "leader", "b takes over")
    await b.service.settle()
    assert b.service.leadership["epoch"] == epoch + 1
    rows = await b.statuses("hourly")
    # Every instant has its row: the missed ones decided by `latest` (the
    # newest admitted late, the one before it coalesced into it), none dropped.
    assert [instant for instant, _ in rows] == ["10:00", "11:00", "12:00"]
    assert rows[0] == ("10:00", "completed")
    assert rows[1][1] == "coalesced"
    await until(
        _rows_are(b, [("10:00", "completed"), ("11:00", "coalesced"), ("12:00", "completed")]),
        "12:00 runs on the new leader",
    )


async def _die(harness: Harness, how: str = "exited") -> None:
    """The process of `harness` dies: its tasks stop, nothing is written;
    `how` the database learns it (`tests.pgdeath`)."""
    service = harness.service
    assert service is not None and harness.database is not None
    task = service._task
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await service._backend.ownership.step_down()
    service._running = False
    assert harness.server is not None
    await harness.server.api.cancel_executing()
    await die_on_the_database(harness.database, how=how)  # type: ignore[arg-type]
    await harness._close_database()
    harness.service = None
    harness.server = None


async def test_the_runs_of_a_dead_server_are_failed_with_the_disclosure_and_no_others(
    pair: Pair,
) -> None:
    await pair.boot(drain_grace_s=0.01)
    a, b = pair.a, pair.b
    await a.deploy("sleeper.default", sleep_plan(30))
    on_a = await a.api.start_run("sleeper.default", {})
    on_b = await b.api.start_run("sleeper.default", {})
    await until(_status_is(b, on_a, "running"), "a's run is running")
    await until(_status_is(a, on_b, "running"), "b's run is running")
    # a's machine is gone: b knows only that a fell silent.
    await _die(a, "silent")
    await pair.at(hour(10))
    await until(lambda: b.service is not None and b.service.role == "leader", "b takes over")
    await until(_status_is(b, on_a, "failed"), "the dead server's run is failed")
    failed = await b.api.inspect_run(on_a)
    assert "was declared gone" in failed["error"]["message"]
    assert "external effects may already have occurred" in failed["error"]["message"]
    assert failed["attempt"] == 1  # never retried
    assert (await b.api.inspect_run(on_b))["status"] == "running"


async def test_a_run_resumed_on_another_server_is_tracked_by_the_leader(pair: Pair) -> None:
    await pair.boot()
    a, b = pair.a, pair.b
    await _hourly(a, GATE_PLAN)
    await pair.at(hour(10))
    [row] = await a.occurrences("hourly")
    await until(_rows_are(a, [("10:00", "interrupted")]), "the run waits at its gate")
    # Resumed on the standby: it executes there; the leader hears the end.
    done = await b.api.resume_run(row["run_id"], {"go": True})
    assert (done["status"], done["attempt"]) == ("completed", 2)
    await until(_rows_are(a, [("10:00", "completed")]), "the leader records the completion")
    # A second resume of the same run from the leader is refused: it is done.
    with pytest.raises(Exception, match="completed"):
        await a.api.resume_run(row["run_id"], {"go": True})


def test_a_server_whose_process_is_gone_is_surely_dead_and_a_live_one_is_not() -> None:
    me = ProcessIdentity.of_this_process("here")
    child = subprocess.Popen(["sleep", "30"])
    try:
        alive = ProcessIdentity(
            "here", child.pid, me.boot_id, me.pid_namespace, _start_of(child.pid)
        )
        assert not surely_dead(alive, me)
        assert not surely_dead(me, me)
    finally:
        child.kill()
        child.wait()
    assert surely_dead(alive, me)  # reaped: no process has its pid
    # Its pid taken by another process (started at another time): dead.
    reused = ProcessIdentity("here", os.getpid(), me.boot_id, me.pid_namespace, 1)
    assert surely_dead(reused, me)
    # Another machine (or pid namespace): nothing here can tell.
    elsewhere = ProcessIdentity("there", child.pid, "another-boot", me.pid_namespace, 5)
    assert not surely_dead(elsewhere, me)


def _start_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])


async def test_a_trigger_and_a_backfill_made_on_a_standby_are_decided_by_the_leader(
    pair: Pair,
) -> None:
    await pair.boot()
    a, b = pair.a, pair.b
    await _hourly(b, inputs={"when": {"$bind": "occurrence.instant"}})
    await until(lambda: _known(a, "hourly"), "the leader knows the new schedule")
    await pair.at(hour(10, 20))
    # The standby has no live view: it writes the request and waits for the
    # leader's row, read through the database.
    answer = await b.schedules.trigger_schedule(schedule_id="hourly")
    assert answer["instant"] == "2026-03-02T10:20:00Z"
    assert answer["status"] in {"admitted", "running", "completed"} and answer["run_id"]
    await until(_status_is(b, answer["run_id"], "completed"), "the triggered run ran on the leader")
    # 09:00 came before the schedule existed: the backfill made on the
    # standby is planned and admitted by the leader.
    plan = await b.schedules.backfill_schedule(
        schedule_id="hourly", start=hour(9).isoformat(), end=hour(9, 30).isoformat()
    )
    assert plan["backfill"]["planned"] == 1
    await until(
        lambda: _backfill_state(b, "done"), "the leader admitted the backfill's one instant"
    )
    rows = [(r["instant"][11:19], r["origin"]) for r in await b.occurrences("hourly")]
    assert rows == [("10:00:00", "schedule"), ("10:20:00", "trigger"), ("09:00:00", "backfill")]
    assert await a.occurrences("hourly") == await b.occurrences("hourly")


async def _backfill_state(on: Harness, state: str) -> bool:
    backfill = (await on.schedules.get_schedule(schedule_id="hourly"))["backfill"]
    return backfill is not None and backfill["state"] == state
