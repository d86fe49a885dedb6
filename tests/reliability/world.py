"""A store root that can crash: the service harness, a phase-aware fault
injector, the death of a process simulated in-process, and the checks every
recovery must pass.

A simulated crash must look like a dead process to everything after it, so
`PhasedCrash` refuses every durable write once it has crashed (a zombie task
of the dead "process" cannot write behind the test's back), and `abandon()`
stops the dead process's tasks and drops its lock without writing anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import posixpath
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from core.calendar import compile_trigger
from core.definitions import parse_definition
from core.occurrences import RUN_STATUSES, TERMINAL_RUN_STATUSES, TERMINAL_STATUSES
from shell import ManualClock, SchedulerService, SchedulerServiceConfig
from shell.disk import OS_DISK, Disk, exists, is_directory
from shell.durable import SimulatedCrash
from shell.pg.ownership import PgOwnership
from shell.store_format import format_instant, parse_instant
from tests import run_log_files
from tests.pgdeath import die_on_the_database
from tests.service.conftest import Harness

__all__ = [
    "ABANDONED_TEXT",
    "AMBIGUOUS_TEXT",
    "CrashPoint",
    "DiskRun",
    "PhasedCrash",
    "World",
    "check_every_instant_decided",
    "check_recovered",
    "copy_tree",
    "die_on_the_database",
    "disk_admissions",
    "disk_runs",
    "finish_and_check",
    "read_all",
]

T = TypeVar("T")

ABANDONED_TEXT = "external effects may already have occurred"
AMBIGUOUS_TEXT = "ambiguous resume"


@dataclass(frozen=True, slots=True, order=True)
class CrashPoint:
    """The `occurrence`-th time `point` is reached during scenario phase `phase`."""

    phase: str
    point: str
    occurrence: int

    @property
    def label(self) -> str:
        return f"{self.phase}/{self.point}#{self.occurrence}"


class PhasedCrash:
    """A fault injector that counts points per scenario phase, records them, and
    crashes at `target` (None: only record). `on_crash` runs first (a child
    process uses it to SIGKILL itself). After the crash every later durable
    write raises too: the process is dead."""

    def __init__(
        self, target: CrashPoint | None = None, on_crash: Callable[[], None] | None = None
    ) -> None:
        self.target = target
        self.on_crash = on_crash
        self.phase = ""
        self.seen: list[CrashPoint] = []
        self.crashed = False
        self.dead = asyncio.Event()
        self._counts: Counter[tuple[str, str]] = Counter()

    def __call__(self, point: str) -> None:
        if self.crashed:
            raise SimulatedCrash(f"write after the crash: {point}")
        key = (self.phase, point)
        self._counts[key] += 1
        reached = CrashPoint(self.phase, point, self._counts[key])
        self.seen.append(reached)
        if reached == self.target:
            self.crashed = True
            self.dead.set()
            if self.on_crash is not None:
                self.on_crash()
            raise SimulatedCrash(reached.label)


class World(Harness):
    """The service harness with crash-aware driving: every await the scenario
    makes returns or raises `SimulatedCrash` as soon as the injector crashed,
    wherever the crash happened (the service loop, a run task, an API call)."""

    def __init__(
        self,
        root: Path,
        clock: ManualClock,
        injector: PhasedCrash | None,
        *,
        disk: Disk = OS_DISK,
    ) -> None:
        super().__init__(root, clock, disk=disk)
        self.injector = injector
        self._schedule_ids: list[str] | None = None

    async def guard(self, awaitable: Awaitable[T]) -> T:
        task = asyncio.ensure_future(awaitable)
        if self.injector is None:
            return await task
        dead = asyncio.ensure_future(self.injector.dead.wait())
        try:
            done, _ = await asyncio.wait({task, dead}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()  # an outer guard gave up on us: leave nothing pending
            raise
        finally:
            dead.cancel()
        if task in done:
            return task.result()
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise SimulatedCrash("crashed elsewhere in the process")

    async def boot(self, **config: Any) -> SchedulerService:
        config.setdefault("enabled", True)
        config.setdefault("drain_grace_s", 0.0)
        await self.build_server()
        service = self.build_service(SchedulerServiceConfig(**config))
        await self.guard(service.start())
        await self.settle()
        return service

    async def settle(self) -> None:
        assert self.service is not None
        await self.guard(self.service.settle())

    async def at(self, instant: datetime) -> None:
        await self.clock.set(instant)
        await self.settle()

    async def abandon(self) -> None:
        """The process dies here: its tasks stop without writing anything, and
        the kernel drops its flock when its descriptors close. Nothing it held
        in memory survives."""
        service = self.service
        if service is not None:
            task = service._task  # a dead process has no clean stop: reach in
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            ownership = service._backend.ownership
            if isinstance(ownership, PgOwnership):
                await ownership.step_down()  # no renewal: the lease runs out
            service._running = False
        if self.server is not None:
            if self.server.store_lock is not None:
                # On files the service runs under its server's lock: closing
                # its descriptors releases the flocks.
                self.server.store_lock.abandon()
            await self.server.api.cancel_executing()
        if self.database is not None:
            await die_on_the_database(self.database)
        # Its connections end with it.
        await self._close_database()
        self.service = None
        self.server = None

    # --- reading everything back -------------------------------------------------------

    async def schedule_ids(self) -> list[str]:
        """Every schedule, deleted ones too. Read once: the checks that use it
        create no schedules."""
        if self._schedule_ids is None:
            listed = await self.schedules.list_schedules(include_deleted=True)
            self._schedule_ids = [s["schedule_id"] for s in listed]
        return list(self._schedule_ids)

    async def decided(self, schedule_id: str) -> list[dict[str, Any]]:
        """Stored history rows (the synthesized pending rows left out)."""
        return [r for r in await self.occurrences(schedule_id) if r["status"] != "pending"]

    async def runs(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = await self.api.list_runs(cursor=cursor, limit=100)
            rows.extend(page["runs"])
            cursor = page["next_cursor"]
            if cursor is None:
                return rows


@dataclass(frozen=True, slots=True)
class DiskRun:
    """A run record as the dead process left it on disk."""

    run_id: str
    status: str
    executing_kind: str | None
    schedule_id: str | None
    instant: str | None


def disk_runs(root: Path, disk: Disk = OS_DISK) -> dict[str, DiskRun]:
    """Every run record in the run log under `root` on `disk`, read raw (no
    recovery)."""
    found: dict[str, DiskRun] = {}
    for run_id, data in sorted(run_log_files.records(root, disk).items()):
        origin = data.get("origin") or {}
        executing = data.get("executing") or {}
        found[run_id] = DiskRun(
            run_id=data["run_id"],
            status=data["status"],
            executing_kind=executing.get("kind"),
            schedule_id=origin.get("schedule_id"),
            instant=origin.get("instant"),
        )
    return found


def disk_admissions(root: Path, disk: Disk = OS_DISK) -> dict[tuple[str, str], str]:
    """(schedule, instant) -> run id of every complete `admitted` decision row
    on `disk` (where the schedule stores are)."""
    found: dict[tuple[str, str], str] = {}
    schedules = f"{root}/schedules"
    for name in sorted(disk.list(schedules)) if is_directory(disk, schedules) else []:
        log = f"{schedules}/{name}/history.jsonl"
        if not exists(disk, log):
            continue
        for line in read_all(disk, log).split(b"\n")[:-1]:  # a torn last piece is no row
            row = json.loads(line)
            if row.get("status") == "admitted" and not row.get("update"):
                found[(name, row["instant"])] = row["run_id"]
    return found


def read_all(disk: Disk, path: str) -> bytes:
    handle = disk.open(path)
    try:
        return handle.read_at(handle.size(), 0)
    finally:
        handle.close()


def copy_tree(source: Disk, source_root: str, target: Disk, target_root: str) -> None:
    """Copy the directory tree at `source_root` to `target_root` and flush it
    (the crash tests' template store, from one disk to another)."""
    target.make_directory(target_root, parents=True)
    for name in sorted(source.list(source_root)):
        here, there = f"{source_root}/{name}", f"{target_root}/{name}"
        if is_directory(source, here):
            copy_tree(source, here, target, there)
            continue
        handle = target.open(there, write=True, create=True, exclusive=True)
        try:
            handle.write_at(read_all(source, here), 0)
            handle.fsync()
        finally:
            handle.close()
    target.fsync_directory(target_root)
    target.fsync_directory(posixpath.dirname(target_root))


async def check_recovered(
    world: World, before: dict[str, DiskRun], admitted_before: dict[tuple[str, str], str]
) -> dict[str, Any]:
    """The guarantees after a restart on what a crash left (`before`: the run
    records and admitted rows on disk at the moment of death). Returns the
    runs by id."""
    runs = {run["run_id"]: run for run in await world.runs()}
    # Every schedule-origin run belongs to exactly one occurrence, and no
    # occurrence has two runs (nothing admitted twice, nothing replayed).
    origins: Counter[tuple[str, str]] = Counter()
    for run in runs.values():
        origin = run["origin"]
        if origin.get("kind") == "schedule":
            origins[(origin["schedule_id"], origin["instant"])] += 1
    twice = {key: n for key, n in origins.items() if n > 1}
    assert not twice, f"occurrences with more than one run: {twice}"

    in_history: set[tuple[str, str]] = set()
    for schedule_id in await world.schedule_ids():
        schedule = await world.schedules.get_schedule(schedule_id=schedule_id)
        assert schedule["blocked"] is None, f"{schedule_id} blocked after a crash: {schedule}"
        rows = await world.decided(schedule_id)
        instants = [row["instant"] for row in rows]
        assert len(instants) == len(set(instants)), f"{schedule_id}: an instant decided twice"
        for row in rows:
            if row["status"] not in RUN_STATUSES:
                continue
            key = (schedule_id, row["instant"])
            in_history.add(key)
            # Every admitted occurrence has its run, and they agree.
            assert row["run_id"] in runs, f"{key} admitted without its run: {row}"
            run = runs[row["run_id"]]
            assert (run["origin"]["schedule_id"], run["origin"]["instant"]) == key
            assert row["status"] == run["status"], (key, row, run["status"])
            assert run["status"] != "admitted", f"{key}: admitted run never started"
    orphans = set(origins) - in_history
    assert not orphans, f"runs claiming occurrences the history does not hold: {orphans}"
    # An admission that was durable at the crash keeps its run id.
    for key, run_id in admitted_before.items():
        assert key in in_history and runs[run_id]["origin"]["instant"] == key[1], key

    for run_id, dead in before.items():
        run = runs[run_id]
        if dead.status == "running" and dead.executing_kind == "start":
            # Abandoned mid-run: failed, disclosed, never retried.
            assert run["status"] == "failed", run
            assert run["error"]["kind"] == "abandoned"
            assert ABANDONED_TEXT in run["error"]["message"]
            assert run["attempt"] == 1
        elif dead.status == "running" and dead.executing_kind == "resume":
            # An attempt mark without a result: failed closed, not retried.
            assert run["status"] == "failed", run
            assert run["error"]["kind"] == "ambiguous-resume"
            assert AMBIGUOUS_TEXT in run["error"]["message"]
        elif dead.status == "interrupted":
            assert run["status"] == "interrupted", run
            assert run["interrupt"] is not None
        elif dead.status in TERMINAL_RUN_STATUSES:
            assert run["status"] == dead.status, run
    for schedule_id in await world.schedule_ids():
        for row in await world.decided(schedule_id):
            if row["status"] == "failed" and row["run_id"] is not None:
                error = runs[row["run_id"]]["error"]
                if error["kind"] == "abandoned":
                    assert ABANDONED_TEXT in row["reason"], row
                if error["kind"] == "ambiguous-resume":
                    assert AMBIGUOUS_TEXT in row["reason"], row
    return runs


async def finish_and_check(world: World, resume_payload: dict[str, Any]) -> None:
    """End every run (interrupted runs must still be resumable) and check that
    every decided instant has exactly one terminal history row. A run that
    is still executing (a long sleep) ends the only way it can without
    waiting: the process dies again and recovery abandons it."""
    if any(run["status"] == "running" for run in await world.runs()):
        await world.abandon()
        await world.boot()
    for run in await world.runs():
        if run["status"] == "interrupted":
            resumed = await world.api.resume_run(run["run_id"], resume_payload)
            assert resumed["status"] == "completed", resumed
    await world.settle()
    for schedule_id in await world.schedule_ids():
        rows = await world.decided(schedule_id)
        instants = [row["instant"] for row in rows]
        assert len(instants) == len(set(instants)), f"{schedule_id}: an instant decided twice"
        open_rows = [row for row in rows if row["status"] not in TERMINAL_STATUSES]
        assert not open_rows, f"{schedule_id}: rows without a terminal status: {open_rows}"


async def check_every_instant_decided(world: World, until: datetime) -> None:
    """No instant was lost: every trigger instant up to `until` at which a
    schedule existed and was neither paused nor deleted (by its durable
    lifecycle log) is covered by a history row, directly or inside a row that
    stands for a run of missed instants."""
    for schedule_id in await world.schedule_ids():
        records = await world.schedules.definitions.records_after(schedule_id, 0)
        covered: set[str] = set()
        for row in await world.decided(schedule_id):
            covered.add(row["instant"])
            if row["count"] > 1:
                first, last = (
                    parse_instant(row["first_instant"]),
                    parse_instant(row["last_instant"]),
                )
                covered.update(_instants(records, first - timedelta(microseconds=1), last))
        expected = _instants(records, parse_instant(records[0]["at"]), until, live_only=True)
        missing = sorted(set(expected) - covered)
        assert not missing, f"{schedule_id}: instants never decided: {missing}"


def _instants(
    records: tuple[dict[str, Any], ...],
    after: datetime,
    until: datetime,
    *,
    live_only: bool = False,
) -> list[str]:
    """Trigger instants in (after, until] by the trigger in force at each one;
    with `live_only`, only those at which the schedule was neither paused nor
    deleted (a change at `t` applies after `t` is decided)."""
    changes = [(parse_instant(r["at"]), r) for r in records]
    triggers = [
        (at, compile_trigger(parse_definition(r["definition"]).trigger))
        for at, r in changes
        if "definition" in r
    ]
    found: list[str] = []
    cursor = after
    while True:
        trigger = next(t for at, t in reversed(triggers) if at <= cursor or at == triggers[0][0])
        instant = trigger.next_after(cursor)
        if instant is None or instant > until:
            return found
        live = True
        for at, record in changes:
            if at < instant and record["kind"] in ("paused", "deleted", "resumed"):
                live = record["kind"] == "resumed"
        if live or not live_only:
            found.append(format_instant(instant))
        cursor = instant
