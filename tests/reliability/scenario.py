"""The scripted scenario the crash tests run: every kind of durable write the
scheduler makes, in phases named after what they exercise.

Three schedules share the store: `hourly` (a run that completes at once),
`gated` (a run that stops at an interrupt and is resumed) and `napper` (a
one-shot whose run is still executing when the process dies in `restart`).
`gated` and `napper` are created before any service runs (the first start
consumes them), `hourly` with the service running. The phases cover a first
start, create, admission, run start and stop, a run resume, update, pause,
resume-schedule, delete, recovery after a death with a run in flight, and
a clean stop followed by a start from the startup checkpoint it wrote, and
an operator's trigger and backfill of `hourly` (three instants before it
existed, admitted one at a time; the phase waits for the backfill to end so
that every one of its writes is a crash point of this phase).
The clock is fixed within each phase, so a crash at any point of a phase has
a known `now` (`clock_during`).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from shell import ManualClock
from shell.durable import set_fault_injector
from shell.sim.disk import SimFileSystem
from shell.startup_checkpoint import CHECKPOINT_FILE
from tests.service.conftest import GATE_PLAN, START, TWO_STEP_PLAN, sleep_plan

from .world import PhasedCrash, World, copy_tree, read_all

__all__ = ["GO", "PHASES", "Phase", "clock_during", "hour", "run_scenario", "set_up"]

GO: dict[str, Any] = {"go": True}


def hour(h: int) -> datetime:
    return START.replace(hour=h, minute=0)


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    at: datetime
    body: Callable[[World], Awaitable[None]]


async def _boot(world: World) -> None:
    await world.boot()


async def _create(world: World) -> None:
    await world.schedules.create_schedule(
        schedule_id="hourly",
        deployment_id="report.default",
        trigger={"kind": "cron", "expression": "0 * * * *"},
        inputs={"when": {"$bind": "occurrence.instant"}},
    )
    await world.settle()


async def _create_offline(world: World) -> None:
    """Schedules created through the API while no service runs: the first
    start consumes them (part of `set_up`, so no crash test repeats the same
    create three times)."""
    world.schedules.clock = world.clock  # a service would share its clock
    await world.schedules.create_schedule(
        schedule_id="gated",
        deployment_id="gate.default",
        trigger={"kind": "cron", "expression": "0 * * * *"},
    )
    await world.schedules.create_schedule(
        schedule_id="napper",
        deployment_id="sleeper.default",
        trigger={"kind": "oneshot", "at": hour(10).isoformat()},
    )


async def _settle(world: World) -> None:
    await world.settle()


async def _restart(world: World) -> None:
    # The process dies with napper's run executing; a new one starts.
    await world.abandon()
    await world.boot()


async def _resume_run(world: World) -> None:
    [row] = [r for r in await world.decided("gated") if r["instant"].startswith("2026-03-02T10")]
    await world.guard(world.api.resume_run(row["run_id"], GO))
    await world.settle()


async def _update(world: World) -> None:
    await world.schedules.update_schedule(
        schedule_id="hourly", expected_revision=1, inputs={"when": "edited"}
    )
    await world.settle()


async def _pause(world: World) -> None:
    await world.schedules.pause_schedule(schedule_id="gated")
    await world.settle()


async def _resume_schedule(world: World) -> None:
    await world.schedules.resume_schedule(schedule_id="gated")
    await world.settle()


async def _stop_and_start(world: World) -> None:
    """A clean stop, which writes the startup checkpoint, and a start that
    takes the schedules from it."""
    # The lifecycle logs were written moments ago; the checkpoint trusts the
    # files other servers write only once they are 0.1 s old
    # (`startup_checkpoint._SETTLE_NS`), and this phase is meant to use it.
    await asyncio.sleep(0.15)
    assert world.service is not None and world.server is not None
    await world.guard(world.service.stop())
    await world.guard(world.server.api.cancel_executing())
    header = read_all(world.disk, f"{world.root}/{CHECKPOINT_FILE}").split(b"\n", 1)[0]
    assert json.loads(header)["schedules"] == 3, "every schedule is in the checkpoint"
    await world.boot()


async def _trigger(world: World) -> None:
    await world.schedules.trigger_schedule(schedule_id="hourly")
    await _until_quiet(world, "hourly")


async def _backfill(world: World) -> None:
    await world.schedules.backfill_schedule(
        schedule_id="hourly", start=hour(7).isoformat(), end=START.isoformat()
    )
    for _ in range(200):
        await _until_quiet(world, "hourly")
        backfill = (await world.schedules.get_schedule(schedule_id="hourly"))["backfill"]
        if backfill["state"] != "running":
            break
    await _until_quiet(world, "hourly")


async def _until_quiet(world: World, schedule_id: str) -> None:
    """Settle until no run of the schedule is admitted or running (its runs
    execute on their own tasks; their ends reach the history a round later)."""
    for _ in range(200):
        await world.settle()
        rows = await world.decided(schedule_id)
        if all(row["status"] not in ("admitted", "running") for row in rows):
            return
        await asyncio.sleep(0.01)


async def _delete(world: World) -> None:
    await world.schedules.delete_schedule(schedule_id="hourly")
    await world.settle()


PHASES: tuple[Phase, ...] = (
    Phase("boot", START, _boot),
    Phase("create", START, _create),
    Phase("admission-10", hour(10), _settle),
    Phase("restart", hour(10) + timedelta(minutes=5), _restart),
    Phase("resume-run", hour(10) + timedelta(minutes=10), _resume_run),
    Phase("update", hour(10) + timedelta(minutes=20), _update),
    Phase("pause", hour(10) + timedelta(minutes=30), _pause),
    Phase("trigger", hour(10) + timedelta(minutes=40), _trigger),
    Phase("backfill", hour(10) + timedelta(minutes=50), _backfill),
    Phase("admission-11", hour(11), _settle),
    Phase("resume-schedule", hour(11) + timedelta(minutes=10), _resume_schedule),
    Phase("delete", hour(11) + timedelta(minutes=20), _delete),
    Phase("admission-12", hour(12), _settle),
    Phase("stop-start", hour(12) + timedelta(minutes=10), _stop_and_start),
)


def clock_during(phase: str) -> datetime:
    return next(p.at for p in PHASES if p.name == phase)


_template: tuple[Path, SimFileSystem] | None = None


async def set_up(world: World) -> None:
    """The deployments, and two schedules created while no service runs (not
    crash targets: writes made before any service starts).

    They are made once per process and copied into each store (the run
    store's files, and the schedule stores from the template's simulated
    disk to the world's disk): validating three plans costs more than a
    whole crash test otherwise."""
    global _template
    if _template is None:
        base = Path(tempfile.mkdtemp(prefix="wf-reliability-template-"))
        atexit.register(shutil.rmtree, base, ignore_errors=True)
        maker = World(base / "store", ManualClock(START), None, disk=SimFileSystem())
        injector = set_fault_injector(None)  # made once: its writes are no crash points
        try:
            await maker.build_server()
            await maker.deploy("report.default", TWO_STEP_PLAN)
            await maker.deploy("gate.default", GATE_PLAN)
            await maker.deploy("sleeper.default", sleep_plan(30))
            await _create_offline(maker)
        finally:
            set_fault_injector(injector)
        _template = (maker.root, maker.disk)
    root, disk = _template
    shutil.copytree(root, world.root)
    copy_tree(disk, str(root), world.disk, str(world.root))


async def run_scenario(world: World, injector: PhasedCrash) -> str | None:
    """Run every phase with `injector` counting points per phase. Returns the
    phase in which the process crashed (None if it never did); a crash raises
    nothing out of here."""
    await set_up(world)
    for phase in PHASES:
        injector.phase = phase.name
        await world.clock.set(phase.at)
        try:
            await world.guard(phase.body(world))
        except BaseException:
            # Whatever a crash made the dead process's code raise is moot.
            if not injector.crashed:
                raise
            return phase.name
        if injector.crashed:
            return phase.name
    injector.phase = "end"
    return None
