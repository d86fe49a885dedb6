"""Deterministic simulation: the real scheduler loop and file stores over a
simulated disk, a simulated run API and seeded faults (`shell.sim`, docs/reliability-sim.md).

Each seed runs a few virtual hours of random schedules, operator actions,
crashes, write errors and refused preflights, checking every invariant after
every step. A failure names its seed; replay it alone with

    WF_SIM_SEED=<seed> uv run pytest tests/reliability/test_deterministic_sim.py

and run more seeds with `WF_SIM_SEEDS=<count>` (seeds 1..count).
"""

from __future__ import annotations

import importlib
import json
import os
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from core.errors import StoreUnavailable
from core.events import ScheduleResumed
from core.operator_actions import Backfill, plan_backfill
from shell.clock import ManualClock
from shell.config import SchedulerServiceConfig
from shell.durable import set_fault_injector
from shell.file_backend import FileBackend
from shell.journal import CommitJournal
from shell.schedules_api import SchedulesApi
from shell.service import SchedulerService
from shell.sim import (
    SIM_START,
    SIM_STORE_ROOT,
    FaultRates,
    InjectedWriteError,
    MemoryLock,
    RunBehaviour,
    SimDisk,
    SimFaults,
    SimHost,
    SimulationFailure,
    SimulationReport,
    Timeline,
    simulate_service,
)

from .figures import record
from .planted import drop_completed_rows

pytestmark = pytest.mark.expected_errors  # injected faults make the service log errors

DEFAULT_SEEDS = 10
# Seeds past the default range that once found a defect (docs/reliability-sim.md,
# "What it found"), run with them. They were found before the workload held
# operators' triggers and backfills and clock steps, so they run without them:
# the same workload, the same interleaving.
REGRESSION_SEEDS = (157, 284, 376)
# Seeds that once found a defect (or a wrong check) at a higher fault rate
# (without operator actions or clock steps, as above).
REGRESSION_SEEDS_AT_RATES = ((50, 0.03), (71, 0.03), (2050, 0.01))
DETERMINISM_SEED = 7
REPLAY = os.environ.get("WF_SIM_SEED")
_RANGE = list(range(1, int(os.environ.get("WF_SIM_SEEDS", DEFAULT_SEEDS)) + 1))
SEEDS = (
    [int(REPLAY)]
    if REPLAY
    else [*_RANGE, *(seed for seed in REGRESSION_SEEDS if seed not in _RANGE)]
)

_REPORTS: dict[int, SimulationReport] = {}


async def _simulate(seed: int, **options: Any) -> SimulationReport:
    try:
        return await simulate_service(seed, **options)
    except SimulationFailure as failure:
        rate = options.get("fault_rate")
        replay = (
            f"WF_SIM_SEED={seed} uv run pytest tests/reliability/test_deterministic_sim.py"
            if rate is None and options.get("operator_actions", True)
            else f"uv run python -m shell.sim {seed}"
            + (f" --fault-rate {rate}" if rate is not None else "")
            + ("" if options.get("operator_actions", True) else " --no-operator-actions")
            + ("" if options.get("clock_steps", True) else " --no-clock-steps")
        )
        pytest.fail(f"{failure}\nreplay: {replay}", pytrace=False)


@pytest.mark.skipif(bool(REPLAY), reason="replaying one seed")
@pytest.mark.parametrize(("seed", "rate"), REGRESSION_SEEDS_AT_RATES)
async def test_every_invariant_holds_at_higher_fault_rates(seed: int, rate: float) -> None:
    report = await _simulate(seed, fault_rate=rate, operator_actions=False, clock_steps=False)
    assert report.crashes > 0 and report.admissions > 0


@pytest.mark.parametrize("seed", SEEDS)
async def test_every_invariant_holds_under_faults(seed: int) -> None:
    found_before = seed in REGRESSION_SEEDS and seed not in _RANGE and not REPLAY
    report = await _simulate(seed, operator_actions=not found_before, clock_steps=not found_before)
    _REPORTS[seed] = report
    assert report.admissions > 0 and report.runs > 0
    assert report.fault_points > 0
    _record_figures()


def _record_figures() -> None:
    reports = list(_REPORTS.values())
    total = {
        name: sum(getattr(r, name) for r in reports)
        for name in (
            "steps",
            "api_calls",
            "admissions",
            "trigger_rows",
            "backfill_admissions",
            "runs",
            "history_rows",
            "fault_points",
            "crashes",
            "write_errors",
            "preflight_failures",
            "admission_refusals",
            "clean_restarts",
            "clock_steps_back",
            "clock_steps_forward",
        )
    }
    minutes = sum(r.virtual_minutes for r in reports)
    record(
        "deterministic simulation",
        f"{len(reports)} seeds, {minutes // 60} virtual hours, {total['steps']} steps,"
        f" {total['admissions']} admissions ({total['backfill_admissions']} by backfills),"
        f" {total['trigger_rows']} triggers decided, {total['history_rows']} history rows;"
        f" faults: {total['crashes']} crashes, {total['write_errors']} write errors,"
        f" {total['preflight_failures']} refused preflights,"
        f" {total['admission_refusals']} refused admissions over {total['fault_points']}"
        f" fault points; {total['clean_restarts']} clean restarts,"
        f" clock set {total['clock_steps_back']} times back and"
        f" {total['clock_steps_forward']} forward",
    )


def test_the_seeds_inject_every_kind_of_fault() -> None:
    if REPLAY or len(_REPORTS) < len(SEEDS):
        pytest.skip("needs the whole seed run")
    assert sum(r.crashes for r in _REPORTS.values()) > 0
    assert sum(r.write_errors for r in _REPORTS.values()) > 0
    assert sum(r.preflight_failures for r in _REPORTS.values()) > 0
    # The operators' requests are decided: triggers run now, backfills admit.
    assert sum(r.trigger_rows for r in _REPORTS.values()) > 0
    assert sum(r.backfill_admissions for r in _REPORTS.values()) > 0
    crash_points = {p for r in _REPORTS.values() for p in r.crash_points}
    # Crashes land inside group commits, in the API's writes and in the run API's.
    assert crash_points & {"before:sync", "after:sync", "after:commit", "before:commit"}
    assert any(p.startswith(("before:run:", "after:run:")) for p in crash_points)


async def test_one_seed_twice_gives_byte_identical_disks() -> None:
    first = await _simulate(DETERMINISM_SEED, minutes=120)
    second = await _simulate(DETERMINISM_SEED, minutes=120)
    assert first.crashes + first.write_errors > 0
    assert first.dump == second.dump
    assert first.summary() == second.summary()


async def test_a_scheduler_that_misses_pauses_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # A schedules API that never tells the service about a pause: the service
    # goes on admitting a paused schedule until a restart replays the log.
    original = SchedulesApi._lifecycle

    async def forgetful(self: SchedulesApi, schedule_id: str, kind: Any) -> dict[str, Any]:
        if kind != "paused":
            return await original(self, schedule_id, kind)
        service, self._service = self._service, None
        try:
            return await original(self, schedule_id, kind)
        finally:
            self._service = service

    monkeypatch.setattr(SchedulesApi, "_lifecycle", forgetful)
    with pytest.raises(SimulationFailure, match="paused"):
        await simulate_service(3, rates=FaultRates())


async def test_a_history_that_drops_terminal_rows_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    drop_completed_rows(monkeypatch)
    with pytest.raises(SimulationFailure, match="completed"):
        await simulate_service(3, rates=FaultRates())


async def test_a_backfill_that_admits_an_admitted_instant_again_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A planner that forgets what the history shows admitted (rule Q): the
    # backfill runs a calendar instant that ran already.
    def careless(instants: Any, **known: Any) -> Any:
        return plan_backfill(instants, **{**known, "admitted": ()})

    monkeypatch.setattr(importlib.import_module("core.decide"), "plan_backfill", careless)
    with pytest.raises(SimulationFailure, match=r"admitted again|remains, and was decided already"):
        await simulate_service(6, rates=FaultRates())


async def test_a_trigger_past_the_overlap_policy_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # Neither the API nor `decide` applies the overlap policy to a trigger
    # (rule P): a schedule runs more than its max_active_runs.
    monkeypatch.setattr(importlib.import_module("core.decide"), "overlap_refusal", _no_refusal)
    monkeypatch.setattr(
        importlib.import_module("shell.schedules_api"), "trigger_refusal", _no_refusal
    )
    with pytest.raises(SimulationFailure, match="the limit is"):
        await simulate_service(4, rates=FaultRates())


async def test_a_backfill_that_miscounts_its_progress_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Its admissions go on, but `get_schedule` would show none of them.
    def forgetful(self: Backfill, now: datetime) -> Backfill:
        return replace(original(self, now), admitted=self.admitted)

    original = Backfill.admitting
    monkeypatch.setattr(Backfill, "admitting", forgetful)
    with pytest.raises(SimulationFailure, match=r"admitted and .* remaining of .* planned"):
        await simulate_service(5, rates=FaultRates())


async def test_a_resume_behind_the_clock_that_replays_decided_instants_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Rule L: a resume made while the clock is set back moves the watermark
    # to its time only when that is newer. One that takes the clock's word
    # decides again the instants decided before the step.
    decider = importlib.import_module("core.decide")
    resumed = decider._HANDLERS[ScheduleResumed]

    def trusting(self: Any, event: ScheduleResumed) -> None:
        resumed(self, event)
        draft = self.drafts[event.schedule_id]
        if not draft.paused and event.at < draft.watermark:
            draft.watermark = event.at
            draft.next_instant = decider._next_after(draft.trigger, event.at)
            self.reindex(draft)

    monkeypatch.setitem(decider._HANDLERS, ScheduleResumed, trusting)
    with pytest.raises(SimulationFailure, match=r"not after the previous decision|decided again"):
        await simulate_service(5, rates=FaultRates())


def _no_refusal(*_: Any) -> None:
    return None


# --- the simulation's pieces, one fault at a time -------------------------------------


def test_the_timeline_names_each_reading_s_moment_across_a_step_back() -> None:
    timeline = Timeline(SIM_START)
    minutes = [SIM_START + timedelta(minutes=m) for m in range(12)]
    for reading in minutes[1:11]:
        assert timeline.show(reading) == reading
    # Set back five minutes: the readings shown before are not shown again.
    assert timeline.show(minutes[5]) == minutes[5] + timedelta(microseconds=1)
    assert timeline.steps_back == 1
    assert timeline.now == minutes[10] + timedelta(microseconds=1)
    assert timeline.show(minutes[6]) == minutes[6] + timedelta(microseconds=1)
    assert timeline.moment_of(minutes[6]) == minutes[6]
    assert timeline.moment_of(minutes[6] + timedelta(microseconds=1)) == timeline.now
    # An instant the clock came to twice: the last time before a moment.
    assert timeline.reached(minutes[6], upto=minutes[10]) == minutes[6]
    assert timeline.reached(minutes[6], upto=timeline.now) == timeline.now
    # A stamp the clock went behind before it became durable: a round
    # prepared ahead, decided when the clock last came to it.
    assert timeline.decided_at(minutes[6], upto=timeline.now) == timeline.now
    assert timeline.decided_at(minutes[3], upto=timeline.now) == minutes[3]
    assert timeline.reached(minutes[11], upto=timeline.now) is None


class FailOnce:
    """A fault injector that raises an I/O error the first time `point` is reached."""

    def __init__(self, point: str) -> None:
        self.point = point
        self.failed = False

    def __call__(self, point: str) -> None:
        if point == self.point and not self.failed:
            self.failed = True
            raise InjectedWriteError(5, f"[simulated] I/O error at {point}")


class World:
    """One simulated process over the file stores on a simulated disk."""

    def __init__(self) -> None:
        self.disk = SimDisk(deployments=["dep"])
        self.clock = ManualClock(SIM_START)
        faults = SimFaults(0, FaultRates(), self.disk)
        self.host = SimHost(self.disk, self.clock.now, behaviour=RunBehaviour(0), faults=faults)
        backend = FileBackend(
            SIM_STORE_ROOT,
            disk=self.disk,
            ownership=MemoryLock(self.disk, "p1", clock=self.clock.now),
            journal=CommitJournal(
                SIM_STORE_ROOT, disk=self.disk, monotonic=lambda: self.clock.now().timestamp()
            ),
        )
        self.api = SchedulesApi(backend=backend, host=self.host, clock=self.clock)
        self.service = SchedulerService(
            host=self.host,
            schedules=self.api,
            config=SchedulerServiceConfig(enabled=True, max_concurrent_runs=2),
            clock=self.clock,
        )

    async def at(self, minute: int, second: int = 0) -> None:
        await self.clock.set(SIM_START.replace(minute=minute, second=second))
        self.host.fire_due(self.clock.now())
        await self.service.settle()

    def rows(self, schedule_id: str) -> list[tuple[str, str]]:
        rows = [json.loads(line) for line in self.disk.schedules[schedule_id].history]
        return [(r["instant"][11:16], r["status"]) for r in rows]


async def test_a_pause_whose_snapshot_write_fails_still_stops_admissions() -> None:
    world = World()
    await world.service.start()
    try:
        await world.api.create_schedule(
            schedule_id="m",
            deployment_id="dep",
            trigger={"kind": "cron", "expression": "* * * * *"},
        )
        await world.at(1)
        previous = set_fault_injector(FailOnce("before:replace:definition.json"))
        try:
            with pytest.raises(StoreUnavailable) as failed:
                await world.api.pause_schedule(schedule_id="m")
            assert isinstance(failed.value.__cause__, InjectedWriteError)
        finally:
            set_fault_injector(previous)
        # The paused record is durable (the log is the truth), so nothing is admitted.
        assert (await world.api.get_schedule(schedule_id="m"))["paused"]
        await world.at(1, 30)
        for minute in (2, 3, 4):
            await world.at(minute)
        assert [row for row in world.rows("m") if row[1] == "admitted"] == [("08:01", "admitted")]
    finally:
        await world.service.stop()


async def test_a_run_whose_creation_fails_is_created_by_the_next_round() -> None:
    world = World()
    await world.service.start()
    try:
        await world.api.create_schedule(
            schedule_id="m",
            deployment_id="dep",
            trigger={"kind": "cron", "expression": "0 * * * *"},
        )
        previous = set_fault_injector(FailOnce("before:run:admitted"))
        try:
            await world.clock.set(SIM_START.replace(hour=9))
            await world.service.settle()
        finally:
            set_fault_injector(previous)
        # The admission was durable, its run not: the failed round was rebuilt
        # from the stores, and the run created from the admitted row.
        assert world.rows("m") == [("09:00", "admitted"), ("09:00", "running")]
        (run,) = [json.loads(data) for data in world.disk.runs.values()]
        assert run["status"] == "running"
        assert run["origin"]["instant"] == "2026-03-02T09:00:00Z"
    finally:
        await world.service.stop()
