"""`simulate_service`: the real scheduler loop, fully simulated, from a seed.

One simulation is a store root on a simulated disk (`SimDisk`), a virtual
clock (`ManualClock`), and a sequence of simulated *processes*. Each process
is what a server start builds: the run API (`SimHost`, after its startup
recovery), the real file stores and commit journal over the simulated disk,
the real `SchedulesApi` and the real `SchedulerService` with an in-memory
lock. The simulation then repeats one
step until the virtual time is up:

1. move the clock to the next moment something happens: an operator action,
   a run transition, the service's next wake-up, or a restart (sometimes a
   little or a lot later: a slow or stalled process makes instants late);
2. carry out the run transitions due, the operator actions due (through the
   real API), and let the service settle;
3. check the invariants (`shell.sim.invariants`);
4. when the workload says so, after a step with no fault that left the
   service settled, set the clock back or forward (`Workload.clock_steps`,
   as `ManualClock.step`: the service is told, as on Linux) and take a step
   there. The checker orders what happened by the moment, not the readings
   (`shell.sim.timeline`).

Faults (`shell.sim.faults`) are drawn at every durable write. A crash kills
the process: its loop task is cancelled, its lock released, every object but
the disk dropped, and a new process boots after a seeded downtime (runs that
were executing are abandoned by the new host's recovery). A write error
fails the call or the round that made it; the service must carry on
truthfully. At the end the faults stop, every schedule is paused or deleted,
every run is let run to its end, and the final invariants are checked.

Everything is derived from the seed: two simulations of one seed produce the
same disk, byte for byte (`SimulationReport.dump`). A failure raises
`SimulationFailure`, whose message says how to replay the seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import random
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from core.decide import next_wakeup
from core.errors import (
    AlreadyExists,
    InvalidDefinition,
    InvalidState,
    NotFound,
    RevisionConflict,
    StoreUnavailable,
)
from shell.clock import ManualClock
from shell.config import SchedulerServiceConfig
from shell.durable import SimulatedCrash, set_fault_injector
from shell.file_backend import FileBackend
from shell.journal import CommitJournal
from shell.schedules_api import SchedulesApi
from shell.service import SchedulerService
from shell.sim.disk import SIM_STORE_ROOT, SimDisk
from shell.sim.faults import SIMULATED, FaultRates, InjectedWriteError, SimFaults
from shell.sim.host import RunBehaviour, SimHost
from shell.sim.invariants import InvariantChecker
from shell.sim.lock import MemoryLock
from shell.sim.timeline import Timeline
from shell.sim.workload import DEPLOYMENTS, Action, plan_workload, random_patch
from shell.store_format import format_instant

__all__ = ["SIM_START", "SimulationFailure", "SimulationReport", "simulate_service"]

SIM_START: Final = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)  # a Monday
_LOOP_TASK: Final = "wf-scheduler-loop"
_TRACE: Final = 40
_SECOND: Final = timedelta(seconds=1)
_NO_TIME: Final = timedelta(0)
# A backfill reaches back to an hour before the simulation (before every
# schedule existed), no further, unless the clock was set back before it.
_EARLIEST_BACKFILL: Final = SIM_START - timedelta(hours=1)


class SimulationFailure(AssertionError):
    """An invariant broke. The message names the seed, the step, the virtual
    time, what broke and the last things the simulation did."""

    def __init__(self, seed: int, message: str) -> None:
        super().__init__(f"{message}\nreplay: WF_SIM_SEED={seed}")
        self.seed = seed


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationReport:
    """What one simulation did (figures for docs and test output) and its disk."""

    seed: int
    schedules: int
    virtual_minutes: int
    steps: int
    api_calls: int
    api_rejections: int
    admissions: int
    trigger_rows: int
    backfill_admissions: int
    history_rows: int
    runs: int
    run_outcomes: dict[str, int]
    fault_points: int
    crashes: int
    write_errors: int
    preflight_failures: int
    admission_refusals: int
    clean_restarts: int
    clock_steps_back: int
    clock_steps_forward: int
    crash_points: dict[str, int]
    dump: bytes = field(repr=False)

    @property
    def digest(self) -> str:
        """SHA-256 of the dump: equal digests mean identical disks."""
        return hashlib.sha256(self.dump).hexdigest()

    def summary(self) -> str:
        return (
            f"seed {self.seed}: {self.steps} steps over {self.virtual_minutes} virtual min,"
            f" {self.schedules} schedules, {self.api_calls} API calls"
            f" ({self.api_rejections} rejected), {self.admissions} admissions"
            f" ({self.backfill_admissions} by backfills), {self.trigger_rows} triggers decided,"
            f" {self.runs} runs, {self.history_rows} history rows; faults: {self.crashes}"
            f" crashes, {self.write_errors} write errors, {self.preflight_failures} preflight"
            f" failures, {self.admission_refusals} refused admissions over"
            f" {self.fault_points} fault points; {self.clean_restarts} clean restarts,"
            f" clock set {self.clock_steps_back} times back and {self.clock_steps_forward}"
            " forward"
        )


class _ErrorWatch(logging.Handler):
    """Errors the scheduler logs: each must come from a simulated fault."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.unexpected: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        exc = record.exc_info[1] if record.exc_info else None
        seen: set[int] = set()
        while exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            text += f" | {type(exc).__name__}: {exc}"
            exc = exc.__cause__ or exc.__context__
        if SIMULATED not in text:
            self.unexpected.append(text)


class _Died(Exception):
    """The simulated process crashed while the simulation waited for it."""


@dataclass(slots=True)
class _Process:
    name: str
    host: SimHost
    api: SchedulesApi
    service: SchedulerService
    task: asyncio.Task[None]


class _Simulation:
    def __init__(
        self,
        seed: int,
        *,
        schedules: int,
        minutes: int,
        fault_rate: float,
        rates: FaultRates | None,
        operator_actions: bool,
        clock_steps: bool,
    ) -> None:
        self.seed = seed
        self.schedules = schedules
        self.minutes = minutes
        self.workload = plan_workload(
            seed,
            schedules=schedules,
            minutes=minutes,
            start=SIM_START,
            operator_actions=operator_actions,
            clock_steps=clock_steps,
        )
        self.actions: deque[Action] = deque(self.workload.actions)
        self.clock_steps = deque(self.workload.clock_steps)
        self.rng = random.Random(f"wf-sim/driver/{seed}")
        self.disk = SimDisk(deployments=DEPLOYMENTS)
        self.faults = SimFaults(seed, rates or FaultRates.from_rate(fault_rate), self.disk)
        self.capacity = self.workload.capacity
        self.timeline = Timeline(self.workload.start)
        self.checker = InvariantChecker(self.disk, capacity=self.capacity, timeline=self.timeline)
        self.disk.observers.append(self.checker)
        self.behaviour = RunBehaviour(seed)
        self.clock = ManualClock(self.workload.start, tells_steps=True)
        self.process: _Process | None = None
        self.generation = 0
        self.restart_at = self.workload.start
        # Slot -> current schedule id, and whether the create went through.
        self.ids = {slot: f"s{slot:02d}" for slot in range(schedules)}
        self.created: set[int] = set()
        self.steps = 0
        self.api_calls = 0
        self.api_rejections = 0
        self.clean_restarts = 0
        # The last step had no fault and left the service settled.
        self.clean = False
        self.trace: deque[str] = deque(maxlen=_TRACE)
        self.watch = _ErrorWatch()

    # --- bookkeeping ------------------------------------------------------------------

    def note(self, text: str) -> None:
        reading = self.clock.now()
        moment = self.timeline.now
        # After a step back the reading and the moment differ: both are shown.
        when = format_instant(reading) + (
            f" (moment {format_instant(moment)})" if moment != reading else ""
        )
        self.trace.append(f"{when} {text}")

    def fail(self, message: str) -> SimulationFailure:
        recent = "\n  ".join(self.trace)
        return SimulationFailure(
            self.seed,
            f"seed {self.seed}, step {self.steps}, {format_instant(self.clock.now())}:"
            f" {message}\nlast events:\n  {recent}",
        )

    def _monotonic(self) -> float:
        return self.timeline.now.timestamp()

    def reading_at(self, moment: datetime) -> datetime:
        """What the clock will show at `moment` if it is not set again.
        The workload's times are moments: after a step back, what operators
        do next happens while the clock is behind."""
        return moment + (self.clock.now() - self.timeline.now)

    async def move_clock(self, wanted: datetime) -> None:
        """Time passes up to `wanted` (see `Timeline.show`)."""
        await self.clock.set(self.timeline.show(wanted))

    async def step_clock(self) -> None:
        """Set the host's clock, then take a step at the new reading."""
        by = self.clock_steps.popleft().by
        reading = self.timeline.step(self.clock.now() + by)
        self.note(
            f"clock set {'back' if by < _NO_TIME else 'forward'} by {abs(by).total_seconds():g} s"
        )
        await self.clock.step(reading)
        await self.step()

    def verify(self, *, settled: bool) -> None:
        self.disk.report_history(complete=False)
        if self.watch.unexpected:
            raise self.fail(f"the scheduler logged an error: {self.watch.unexpected[0]}")
        if not self.checker.violations and settled and self.process is not None:
            self.checker.check_settled(self.process.service.state)
        if self.checker.violations:
            raise self.fail("; ".join(self.checker.violations[:5]))

    # --- processes ----------------------------------------------------------------------

    async def boot(self) -> None:
        self.generation += 1
        name = f"p{self.generation}"
        self.faults.revive()
        self.note(f"boot {name}")
        host = SimHost(
            self.disk,
            self.clock.now,
            behaviour=self.behaviour,
            faults=self.faults,
            observer=self.checker,
        )
        try:
            host.recover()
            backend = FileBackend(
                SIM_STORE_ROOT,
                disk=self.disk,
                ownership=MemoryLock(self.disk, name, clock=self.clock.now),
                # Checkpoints age on the virtual clock, so a seed replays exactly.
                journal=CommitJournal(SIM_STORE_ROOT, disk=self.disk, monotonic=self._monotonic),
            )
            # Answers at once: a call must not wait on the wall clock (the
            # service decides when the step settles), and the checker reads
            # what was decided from the disk.
            api = SchedulesApi(backend=backend, host=host, clock=self.clock, answer_wait_s=0)
            service = SchedulerService(
                host=host,
                schedules=api,
                config=SchedulerServiceConfig(
                    enabled=True,
                    poll_interval_s=3600,
                    max_concurrent_runs=self.capacity,
                    drain_grace_s=0,
                ),
                clock=self.clock,
            )
            before = {t for t in asyncio.all_tasks() if t.get_name() == _LOOP_TASK}
            await service.start()
            task = next(t for t in asyncio.all_tasks() - before if t.get_name() == _LOOP_TASK)
            self.process = _Process(name, host, api, service, task)
            await self.settle()
        except (SimulatedCrash, _Died):
            await self.died()
        except InjectedWriteError as exc:
            # The start failed (its recovery could not write): the process
            # exits and is started again, as a supervisor would.
            self.note(f"{name} failed to start: {exc}")
            self.disk.release_lock_of(name)
            self.restart_at = self.clock.now() + timedelta(seconds=self.rng.randint(5, 120))

    async def died(self) -> None:
        process, self.process = self.process, None
        name = process.name if process is not None else f"p{self.generation}"
        self.note(f"{name} crashed at {self.faults.crash_point}")
        if process is not None:
            if not process.task.done():
                process.task.cancel()
            try:
                await process.task
            except (asyncio.CancelledError, SimulatedCrash):
                pass
            except Exception as exc:
                raise self.fail(f"the scheduler loop died of {exc!r}") from exc
        self.disk.release_lock_of(name)
        roll = self.rng.random()
        downtime = 0.0 if roll < 0.3 else self.rng.uniform(10, 300 if roll < 0.8 else 1800)
        self.restart_at = self.clock.now() + timedelta(seconds=round(downtime))

    async def restart(self) -> None:
        """A clean stop (what still executes keeps its executing mark and the
        next host start abandons it), then a boot after a short downtime."""
        assert self.process is not None
        process, self.process = self.process, None
        self.clean_restarts += 1
        self.note(f"clean stop of {process.name}")
        await process.service.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await process.task
        self.restart_at = self.clock.now() + timedelta(seconds=self.rng.randint(0, 180))

    async def settle(self) -> None:
        process = self.process
        assert process is not None
        settle = asyncio.ensure_future(process.service.settle(max_rounds=500))
        dead = asyncio.ensure_future(self.faults.dead_event().wait())
        done, _ = await asyncio.wait(
            {settle, dead, process.task}, return_when=asyncio.FIRST_COMPLETED
        )
        for waiter in (settle, dead):
            if waiter not in done:
                waiter.cancel()
        results = await asyncio.gather(settle, dead, return_exceptions=True)
        if self.faults.dead:
            raise _Died
        if process.task.done():
            raise self.fail(f"the scheduler loop ended: {process.task!r}")
        if isinstance(results[0], BaseException):
            raise self.fail(f"the scheduler did not settle: {results[0]!r}")

    # --- operator actions ----------------------------------------------------------------

    async def perform(self, action: Action) -> None:
        process = self.process
        assert process is not None
        if action.kind == "capacity":
            self.capacity = self.checker.capacity = action.args["capacity"]
            process.service.set_capacity(self.capacity)
            self.note(f"capacity -> {self.capacity}")
            return
        if action.kind == "deployment-off":
            self.disk.deployments.discard(action.args["deployment"])
            self.note(f"deployment {action.args['deployment']} removed")
            return
        if action.kind == "deployment-on":
            self.disk.deployments.add(action.args["deployment"])
            self.note(f"deployment {action.args['deployment']} restored")
            return
        if action.kind == "restart":
            await self.restart()
            return
        if action.kind == "create":
            await self.create(process.api, action)
            return
        if action.slot not in self.created:
            return
        if action.kind in ("trigger", "backfill", "cancel-backfill"):
            await self.request(process.api, action)
            return
        await self.change(process.api, action)

    async def create(self, api: SchedulesApi, action: Action) -> None:
        slot = action.slot
        if slot in self.created:
            return
        schedule_id = self.ids[slot]
        try:
            await api.get_schedule(schedule_id=schedule_id)
        except NotFound:
            pass  # a failed or interrupted create left the id free
        else:
            self.created.add(slot)  # an earlier attempt went through after all
            return
        self.api_calls += 1
        try:
            await api.create_schedule(schedule_id=schedule_id, **action.args["definition"])
        except (InvalidDefinition, StoreUnavailable, AlreadyExists) as exc:
            self.api_rejections += 1
            self.note(f"create {schedule_id} failed: {exc}")
            retry = self.timeline.now + timedelta(seconds=self.rng.randint(60, 300))
            self.actions.appendleft(Action(retry, action.order, "create", slot, action.args))
            self.actions = deque(sorted(self.actions))
            return
        self.created.add(slot)
        self.note(f"created {schedule_id}")

    async def change(self, api: SchedulesApi, action: Action) -> None:
        schedule_id = self.ids[action.slot]
        current = await api.get_schedule(schedule_id=schedule_id)
        deleted = bool(current["deleted"])
        self.api_calls += 1
        stale = False
        try:
            if action.kind == "update":
                revision = current["revision"]
                stale = bool(action.args.get("stale")) and revision > 1
                await api.update_schedule(
                    schedule_id=schedule_id,
                    expected_revision=revision - 1 if stale else revision,
                    **random_patch(self.rng, schedule_id),
                )
            elif action.kind == "pause":
                await api.pause_schedule(schedule_id=schedule_id)
            elif action.kind == "resume":
                await api.resume_schedule(schedule_id=schedule_id)
            else:
                await api.delete_schedule(schedule_id=schedule_id)
        except RevisionConflict as exc:
            self.api_rejections += 1
            if not stale:
                raise self.fail(f"{action.kind} {schedule_id}: unexpected {exc!r}") from exc
            self.note(f"{action.kind} {schedule_id}: stale revision refused")
            return
        except InvalidState as exc:
            self.api_rejections += 1
            if not deleted:
                raise self.fail(f"{action.kind} {schedule_id}: unexpected {exc!r}") from exc
            self.note(f"{action.kind} {schedule_id}: refused, deleted")
            return
        except (InvalidDefinition, StoreUnavailable) as exc:
            self.api_rejections += 1
            self.note(f"{action.kind} {schedule_id} failed: {exc}")
            return
        if stale or (deleted and action.kind != "delete"):
            raise self.fail(f"{action.kind} {schedule_id} was accepted (stale {stale})")
        self.note(f"{action.kind} {schedule_id}")

    async def request(self, api: SchedulesApi, action: Action) -> None:
        """An operator's request: run now, backfill a past range, cancel it.
        Refusals the state explains (the overlap policy, a backfill already
        running or none to cancel, a deleted or blocked schedule) are normal;
        what the scheduler then decides is the checker's to judge."""
        schedule_id = self.ids[action.slot]
        overlap = action.args.get("overlap")
        self.api_calls += 1
        try:
            if action.kind == "trigger":
                answer = await api.trigger_schedule(schedule_id=schedule_id, overlap=overlap)
                self.note(f"trigger {schedule_id} ({overlap}): {answer['status']}")
            elif action.kind == "backfill":
                now = self.clock.now()
                end = now - timedelta(minutes=action.args["short"])
                start = end - timedelta(minutes=action.args["reach"])
                if end > _EARLIEST_BACKFILL:
                    start = max(start, _EARLIEST_BACKFILL)
                answer = await api.backfill_schedule(
                    schedule_id=schedule_id, start=start, end=end, overlap=overlap
                )
                plan = answer["backfill"]
                self.note(
                    f"backfill {schedule_id} {format_instant(start)}..{format_instant(end)}"
                    f" ({overlap}): {plan['planned']} planned"
                )
            else:
                await api.cancel_backfill(schedule_id=schedule_id)
                self.note(f"cancel-backfill {schedule_id}")
        except InvalidState as exc:
            self.api_rejections += 1
            self.note(f"{action.kind} {schedule_id} refused: {exc}")
        except StoreUnavailable as exc:
            self.api_rejections += 1
            self.note(f"{action.kind} {schedule_id} failed: {exc}")

    # --- the steps ------------------------------------------------------------------------

    def next_moment(self, now: datetime) -> datetime:
        moments = [self.workload.end]
        if self.process is None:
            moments.append(self.restart_at)
        else:
            if self.actions:
                moments.append(self.reading_at(self.actions[0].at))
            due = self.process.host.next_due()
            if due is not None:
                moments.append(due)
            wake = next_wakeup(self.process.service.state)
            if wake is not None:
                moments.append(wake)
                # The loop's own wake-up before it, to prepare its round
                # (`prepare_ahead_s`): committed at the instant, or dropped
                # by what happens in between.
                early = wake - timedelta(seconds=self.process.service.prepare_ahead_s)
                if early > now:
                    moments.append(early)
        moment = max(min(moments), now + _SECOND)
        roll = self.rng.random()
        if self.process is not None and roll < 0.03:
            moment += timedelta(seconds=self.rng.randint(60, 900))  # a stalled process
        elif roll < 0.25:
            moment += timedelta(seconds=self.rng.randint(0, 45))  # a late wake-up
        return moment

    async def step(self) -> None:
        errors = self.faults.counts.write_errors
        crashes = self.faults.counts.crashes
        if self.process is None:
            if self.clock.now() >= self.restart_at:
                await self.boot()
        else:
            try:
                self.process.host.fire_due(self.clock.now())
                while self.process is not None and self.actions:
                    if self.actions[0].at > self.timeline.now:
                        break
                    await self.perform(self.actions.popleft())
                if self.process is not None:
                    await self.settle()
            except (SimulatedCrash, _Died):
                await self.died()
        self.steps += 1
        settled = self.faults.counts.write_errors == errors
        self.clean = settled and self.faults.counts.crashes == crashes and self.process is not None
        self.verify(settled=settled)

    async def run(self) -> SimulationReport:
        logger = logging.getLogger("shell")
        logger.addHandler(self.watch)
        # The watch must see the scheduler's errors whatever the caller's levels.
        level = logger.level
        if not logger.isEnabledFor(logging.ERROR):
            logger.setLevel(logging.ERROR)
        previous = set_fault_injector(self.faults)
        try:
            await self.boot()
            self.verify(settled=True)
            while self.clock.now() < self.workload.end:
                await self.move_clock(self.next_moment(self.clock.now()))
                await self.step()
                # Only from a settled service: a round that failed before a
                # step back is decided on the clock after it, which the
                # checker's calendar does not model.
                while self.clean and self.clock_steps:
                    if self.clock_steps[0].at > self.timeline.now:
                        break
                    await self.step_clock()
            await self.finish()
            return self.report()
        except SimulationFailure:
            raise
        except Exception as exc:
            raise self.fail(f"unexpected {exc!r}") from exc
        finally:
            set_fault_injector(previous)
            logger.removeHandler(self.watch)
            logger.setLevel(level)
            await self.shutdown()

    async def finish(self) -> None:
        """No more faults; retire every schedule; let every run end; final checks."""
        self.faults.armed = False
        self.note("end of the workload")
        while self.process is None:
            await self.move_clock(max(self.clock.now(), self.restart_at))
            await self.boot()
        process = self.process
        # Every schedule on the disk: a create that failed with an I/O error may
        # have gone through all the same.
        for schedule_id in await process.api.definitions.list_ids():
            current = await process.api.get_schedule(schedule_id=schedule_id)
            if current["deleted"]:
                continue
            if self.rng.random() < 0.5:
                await process.api.delete_schedule(schedule_id=schedule_id)
            elif not current["paused"]:
                await process.api.pause_schedule(schedule_id=schedule_id)
        await self.settle()
        self.verify(settled=True)
        while (due := process.host.next_due()) is not None:
            await self.move_clock(max(due, self.clock.now()))
            process.host.fire_due(self.clock.now())
            await self.settle()
            self.steps += 1
            self.verify(settled=True)
        self.checker.check_final()
        await self.check_pages(process.api)
        self.verify(settled=True)
        await process.service.stop()
        self.process = None

    async def check_pages(self, api: SchedulesApi) -> None:
        """The API pages the history the disk holds."""
        for schedule_id in await api.definitions.list_ids():
            rows: list[dict[str, Any]] = []
            cursor = None
            while True:
                page = await api.list_schedule_occurrences(
                    schedule_id=schedule_id, limit=100, cursor=cursor
                )
                rows.extend(page["occurrences"])
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            pending = [r for r in rows if r["status"] == "pending"]
            if pending:
                self.checker.violations.append(f"{schedule_id}: pending rows at the end: {pending}")
            decisions = sum(
                "update" not in json.loads(line)
                for line in self.disk.schedules[schedule_id].history
            )
            if len(rows) != decisions:
                self.checker.violations.append(
                    f"{schedule_id}: the API pages {len(rows)} occurrences, the disk has"
                    f" {decisions}"
                )

    async def shutdown(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if not process.task.done():
            process.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, SimulatedCrash, Exception):
            await process.task

    def report(self) -> SimulationReport:
        counts = self.faults.counts
        outcomes = Counter(record["status"] for record in self.checker.run_records().values())
        return SimulationReport(
            seed=self.seed,
            schedules=self.schedules,
            virtual_minutes=self.minutes,
            steps=self.steps,
            api_calls=self.api_calls,
            api_rejections=self.api_rejections,
            admissions=self.checker.admissions,
            trigger_rows=self.checker.trigger_rows,
            backfill_admissions=self.checker.backfill_admissions,
            history_rows=self.checker.rows,
            runs=len(self.disk.runs),
            run_outcomes=dict(sorted(outcomes.items())),
            fault_points=counts.points,
            crashes=counts.crashes,
            write_errors=counts.write_errors,
            preflight_failures=counts.preflight_failures,
            admission_refusals=counts.admission_refusals,
            clean_restarts=self.clean_restarts,
            clock_steps_back=self.timeline.steps_back,
            clock_steps_forward=self.timeline.steps_forward,
            crash_points=dict(sorted(counts.crash_points.items())),
            dump=self.disk.dump(),
        )


async def simulate_service(
    seed: int,
    *,
    schedules: int = 8,
    minutes: int = 240,
    fault_rate: float = 0.003,
    rates: FaultRates | None = None,
    operator_actions: bool = True,
    clock_steps: bool = True,
) -> SimulationReport:
    """Run the real scheduler service fully simulated from `seed`.

    `schedules` schedules are created over `minutes` virtual minutes (see
    `shell.sim.workload`); `fault_rate` is the chance that any one durable
    write faults (see `FaultRates.from_rate`; `rates` overrides it). Checks
    every invariant of `shell.sim.invariants` after every step and at the end.
    `operator_actions=False` leaves out triggers, backfills and their cancels
    (the workload of the seeds found before they were simulated);
    `clock_steps=False` never sets the clock (likewise).

    Returns the report (its `dump` is identical for two runs of one seed).
    Raises `SimulationFailure` (an `AssertionError` naming the seed to replay)
    at the first broken invariant or unexpected error.
    """
    simulation = _Simulation(
        seed,
        schedules=schedules,
        minutes=minutes,
        fault_rate=fault_rate,
        rates=rates,
        operator_actions=operator_actions,
        clock_steps=clock_steps,
    )
    return await simulation.run()
