"""The soak: hundreds of every-minute schedules, a manual clock, random churn.

`Soak` owns one store root and drives the real server, schedules API and
scheduler service (tests.service.conftest.Harness) minute by minute. Each
simulated minute it settles the minute's instants, then, twenty seconds in,
pauses, resumes, edits and deletes a few schedules and resumes some
interrupted runs through the API. Four deployments give every run outcome:
`ok` completes, `boom` fails, `gate` interrupts (until resumed), `loop`
exhausts its step budget.

Invariants are checked as the runs report (the run listener) and after
every minute, and `final_check` audits everything at the end:

- a run is admitted only for an instant after its schedule's creation, not
  in a paused span, not after its deletion, and not while paused or deleted;
- a schedule never has more active runs than its limit when one is admitted;
- scheduled runs holding an execution slot never exceed `max_concurrent_runs`;
- each schedule's history is ordered, one row per instant, every row ends
  terminal once the runs are finished, and agrees with the run store; every
  instant of a schedule that was never paused or deleted is decided (or is
  the pending candidate).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from shell import ManualClock, SchedulerServiceConfig
from shell.sim.disk import SimFileSystem
from tests.service.conftest import CONSTANT_PLAN, GATE_PLAN, Harness

__all__ = ["Soak", "SoakFigures"]

START: Final = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
MINUTE: Final = timedelta(minutes=1)
EVERY_MINUTE: Final = {"kind": "cron", "expression": "* * * * *", "timezone": "UTC"}
ACTIVE: Final = frozenset({"admitted", "running", "interrupted"})
TERMINAL_ROWS: Final = frozenset(
    {
        "completed",
        "failed",
        "exhausted",
        "skipped-overlap",
        "skipped-misfire",
        "superseded",
        "coalesced",
        "preflight-rejected",
    }
)

FAIL_PLAN: Final = {
    "name": "boom",
    "input_schema": {"type": "object"},
    "start": "boom",
    "nodes": [
        {"id": "boom", "kind": "call", "capability": "wf.std.fail", "params": {"message": "boom"}}
    ],
    "edges": {},
    "output": {},
}
LOOP_PLAN: Final = {
    "name": "loop",
    "input_schema": {"type": "object"},
    "start": "one",
    "nodes": [
        {"id": "one", "kind": "call", "capability": "wf.std.constant", "params": {"value": 1}},
        {"id": "two", "kind": "call", "capability": "wf.std.constant", "params": {"value": 2}},
    ],
    "edges": {"one": {"ok": "two"}, "two": {"ok": "__end__"}},
    "output": {},
}
PLANS: Final[Mapping[str, dict[str, Any]]] = {
    "ok": CONSTANT_PLAN,
    "boom": FAIL_PLAN,
    "gate": GATE_PLAN,
    "loop": LOOP_PLAN,
}
INPUTS: Final = {"when": {"$bind": "occurrence.instant"}}


@dataclass
class Track:
    """What the driver knows about one schedule."""

    schedule_id: str
    created: datetime
    limit: int
    parallel: bool
    paused_at: datetime | None = None
    deleted_at: datetime | None = None
    # (paused at, resumed at or None): instants in that span are consumed.
    pauses: list[tuple[datetime, datetime | None]] = field(default_factory=list)
    churned: bool = False


@dataclass
class SoakFigures:
    schedules: int = 0
    minutes: int = 0
    runs: int = 0
    resumes: int = 0
    pauses: int = 0
    edits: int = 0
    deletes: int = 0
    restarts: int = 0
    rows: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    max_slots: int = 0
    # Unflushed writes a power cut at the restart could have lost.
    unsynced_at_cut: int = 0


class Soak:
    """`root` holds the run store (files); the schedule stores and the commit
    journal live under the same path on a simulated disk, which loses some
    of its unflushed writes in a power cut at the restart."""

    def __init__(self, root: Path, *, seed: int, schedules: int, capacity: int) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.count = schedules
        self.capacity = capacity
        self.clock = ManualClock(START)
        self.disk = SimFileSystem()
        self.harness = Harness(root, self.clock, disk=self.disk)
        self.tracks: dict[str, Track] = {}
        self.figures = SoakFigures(schedules=schedules)
        # Run id -> (schedule id, status), as the runs reported it.
        self.runs: dict[str, tuple[str, str]] = {}
        self.active: dict[str, int] = {}
        # Scheduled runs executing now; a resumed run never holds a slot.
        self.holding: set[str] = set()
        self.resumed: set[str] = set()
        self.violations: list[str] = []

    # --- the run listener ----------------------------------------------------------------

    def on_run(
        self, run_id: str, status: str, origin: Mapping[str, Any] | None, message: object
    ) -> None:
        if origin is None or origin.get("kind") != "schedule":
            return
        schedule_id = origin["schedule_id"]
        now = self.clock.now()
        previous = self.runs.get(run_id)
        if previous is None:
            self._admitted(run_id, schedule_id, datetime.fromisoformat(origin["instant"]), now)
        was_active = previous is None or previous[1] in ACTIVE
        if status in ACTIVE and previous is None:
            self.active[schedule_id] = self.active.get(schedule_id, 0) + 1
        elif status not in ACTIVE and was_active and previous is not None:
            self.active[schedule_id] -= 1
        self.runs[run_id] = (schedule_id, status)
        if status == "interrupted":
            self.resumed.add(run_id)
        if status == "running" and run_id not in self.resumed:
            self.holding.add(run_id)
        else:
            self.holding.discard(run_id)
        self.figures.max_slots = max(self.figures.max_slots, len(self.holding))
        if len(self.holding) > self.capacity:
            self.violations.append(f"{len(self.holding)} scheduled runs hold slots at {now}")

    def _admitted(self, run_id: str, schedule_id: str, instant: datetime, now: datetime) -> None:
        self.figures.runs += 1
        track = self.tracks[schedule_id]
        where = f"run {run_id} of {schedule_id}@{instant:%H:%M} at {now:%H:%M:%S}"
        if instant <= track.created:
            self.violations.append(f"{where}: not after the creation at {track.created}")
        if track.paused_at is not None or track.deleted_at is not None:
            self.violations.append(f"{where}: admitted while paused or deleted")
        for paused, resumed in track.pauses:
            if paused < instant and (resumed is None or instant <= resumed):
                self.violations.append(f"{where}: an instant of the span paused at {paused}")
        active = self.active.get(schedule_id, 0)
        if active >= track.limit:
            self.violations.append(f"{where}: {active} runs already active, limit {track.limit}")

    # --- driving -------------------------------------------------------------------------

    async def boot(self) -> None:
        """A process start: the listener sees every run, including those the
        service's recovery starts before `start()` returns."""
        server = await self.harness.build_server()
        server.api.add_run_listener(self.on_run)
        config = SchedulerServiceConfig(
            enabled=True, max_concurrent_runs=self.capacity, poll_interval_s=3600
        )
        service = self.harness.build_service(config)
        await service.start()
        await service.settle()

    async def start(self) -> None:
        await self.boot()
        for name, plan in PLANS.items():
            await self.harness.deploy(f"{name}.default", plan)
        kinds = ["ok"] * 3 + ["boom", "gate", "gate", "loop"]
        for index in range(self.count):
            schedule_id = f"s{index:03d}"
            kind = self.rng.choice(kinds)
            parallel = kind == "gate" and self.rng.random() < 0.4
            limit = self.rng.randint(2, 3) if parallel else 1
            await self.harness.schedules.create_schedule(
                schedule_id=schedule_id,
                deployment_id=f"{kind}.default",
                trigger=EVERY_MINUTE,
                inputs=INPUTS,
                overlap="parallel" if parallel else "skip",
                max_active_runs=limit if parallel else None,
                misfire=self.rng.choice(["skip", "latest"]),
                max_steps=1 if kind == "loop" else None,
            )
            self.tracks[schedule_id] = Track(schedule_id, self.clock.now(), limit, parallel)
        await self.harness.service.settle()  # type: ignore[union-attr]

    async def minute(self, m: int) -> None:
        """Decide minute `m`, then churn twenty seconds into it."""
        await self.harness.at(START + m * MINUTE)
        self.figures.minutes = m
        await self.clock.set(START + m * MINUTE + timedelta(seconds=20))
        await self.churn()
        await self.harness.service.settle()  # type: ignore[union-attr]

    async def restart(self) -> None:
        await self.harness.shutdown()
        # A clean stop leaves nothing unflushed that matters: the power cut
        # may take what is left (a cache's write, say) and nothing is lost.
        self.figures.unsynced_at_cut = self.disk.unsynced()
        self.disk.power_cut(self.rng, "some")
        # Runs of the old process report nothing more; the new one recovers them.
        await self.boot()
        self.figures.restarts += 1

    async def churn(self) -> None:
        api = self.harness.schedules
        now = self.clock.now()
        live = [t for t in self.tracks.values() if t.deleted_at is None]
        for track in live:
            roll = self.rng.random()
            sid = track.schedule_id
            if track.paused_at is None and roll < 0.01:
                await api.pause_schedule(schedule_id=sid)
                track.paused_at = now
                track.pauses.append((now, None))
                track.churned = True
                self.figures.pauses += 1
            elif track.paused_at is not None and roll < 0.3:
                await api.resume_schedule(schedule_id=sid)
                track.pauses[-1] = (track.pauses[-1][0], now)
                track.paused_at = None
            elif roll > 0.997:
                await api.delete_schedule(schedule_id=sid)
                track.deleted_at = now
                track.churned = True
                self.figures.deletes += 1
            elif 0.5 < roll < 0.51:
                await self.edit(track)
        interrupted = sorted(rid for rid, (_, st) in self.runs.items() if st == "interrupted")
        for run_id in interrupted:
            if self.rng.random() < 0.25:
                await self.harness.api.resume_run(run_id, {"go": True})
                self.figures.resumes += 1

    async def edit(self, track: Track) -> None:
        current = await self.harness.schedules.get_schedule(schedule_id=track.schedule_id)
        patch: dict[str, Any] = self.rng.choice(
            [
                {"lateness_allowance_s": float(self.rng.choice([30, 60, 120]))},
                {"misfire": "latest" if current["misfire"] == "skip" else "skip"},
                {"inputs": {**INPUTS, "edited": True}},
            ]
        )
        if track.parallel and self.rng.random() < 0.5:
            patch = {"max_active_runs": self.rng.randint(1, 4)}
        await self.harness.schedules.update_schedule(
            schedule_id=track.schedule_id, expected_revision=current["revision"], **patch
        )
        if "max_active_runs" in patch:
            track.limit = patch["max_active_runs"]
        self.figures.edits += 1

    async def finish_runs(self) -> None:
        """Resume every interrupted run until none is left (a freed overlap
        place may admit a held candidate, which interrupts again)."""
        for _ in range(10):
            interrupted = sorted(rid for rid, (_, st) in self.runs.items() if st == "interrupted")
            if not interrupted:
                return
            for run_id in interrupted:
                await self.harness.api.resume_run(run_id, {"go": True})
                self.figures.resumes += 1
            await self.harness.service.settle()  # type: ignore[union-attr]
        raise AssertionError("interrupted runs kept coming back")

    # --- checking ------------------------------------------------------------------------

    async def history(self, schedule_id: str) -> list[dict[str, Any]]:
        return await self.harness.occurrences(schedule_id)

    def check_rows(self, schedule_id: str, rows: list[dict[str, Any]]) -> None:
        stored = [r for r in rows if r["status"] != "pending"]
        instants = [r["instant"] for r in stored]
        if instants != sorted(set(instants), key=datetime.fromisoformat):
            self.violations.append(f"{schedule_id}: history not ordered or repeats an instant")
        pending = [r for r in rows if r["status"] == "pending"]
        if any(p["instant"] in instants for p in pending):
            self.violations.append(f"{schedule_id}: a pending instant was already decided")

    async def sample_check(self, size: int) -> None:
        for schedule_id in self.rng.sample(sorted(self.tracks), size):
            self.check_rows(schedule_id, await self.history(schedule_id))

    async def final_check(self, end: datetime) -> None:
        runs = await self._all_runs()
        by_origin: dict[tuple[str, str], str] = {}
        for run in runs:
            origin = run["origin"] or {}
            if origin.get("kind") != "schedule":
                continue
            key = (origin["schedule_id"], origin["instant"])
            if key in by_origin:
                self.violations.append(f"runs {by_origin[key]} and {run['run_id']} claim {key}")
            by_origin[key] = run["run_id"]
            self.figures.outcomes[run["status"]] = self.figures.outcomes.get(run["status"], 0) + 1
        status_of = {run["run_id"]: run["status"] for run in runs}
        seen_runs: set[str] = set()
        for schedule_id, track in sorted(self.tracks.items()):
            rows = await self.history(schedule_id)
            self.check_rows(schedule_id, rows)
            stored = [r for r in rows if r["status"] != "pending"]
            self.figures.rows += len(stored)
            decided: set[datetime] = set()
            for row in stored:
                if row["status"] not in TERMINAL_ROWS:
                    self.violations.append(
                        f"{schedule_id}@{row['instant']}: ends {row['status']}"
                        f" (run {row['run_id']}: {status_of.get(row['run_id'])},"
                        f" tracked {self.runs.get(row['run_id'])})"
                    )
                run_id = row["run_id"]
                if run_id is not None and row["status"] not in ("superseded", "skipped-overlap"):
                    if run_id in seen_runs:
                        self.violations.append(f"{run_id} is the run of two occurrences")
                    seen_runs.add(run_id)
                    if by_origin.get((schedule_id, row["instant"])) != run_id:
                        self.violations.append(f"{schedule_id}@{row['instant']}: not {run_id}'s")
                    if status_of.get(run_id) != row["status"]:
                        self.violations.append(
                            f"{schedule_id}@{row['instant']}: history says {row['status']},"
                            f" run {run_id} says {status_of.get(run_id)}"
                        )
                decided.update(_instants(row))
            if not track.churned:
                expected = _minutes(track.created, end)
                pending = {
                    datetime.fromisoformat(r["instant"]) for r in rows if r["status"] == "pending"
                }
                missing = sorted(expected - decided - pending)
                if missing:
                    self.violations.append(f"{schedule_id}: never decided {missing[:3]}")
                extra = sorted(decided - expected)
                if extra:
                    self.violations.append(f"{schedule_id}: decided {extra[:3]} out of range")
        for (schedule_id, instant), run_id in by_origin.items():
            if run_id not in seen_runs:
                self.violations.append(f"{run_id} claims {schedule_id}@{instant}, no row has it")

    async def _all_runs(self) -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = await self.harness.api.list_runs(cursor=cursor, limit=100)
            runs.extend(page["runs"])
            cursor = page["next_cursor"]
            if cursor is None:
                return runs


def _instants(row: Mapping[str, Any]) -> set[datetime]:
    """The instants a history row decides (a coalesced row stands for a range)."""
    last = datetime.fromisoformat(row["instant"])
    if row.get("count", 1) > 1 and row.get("first_instant"):
        first = datetime.fromisoformat(row["first_instant"])
        return {first + i * MINUTE for i in range(int((last - first) / MINUTE) + 1)}
    return {last}


def _minutes(created: datetime, end: datetime) -> set[datetime]:
    """Every-minute instants in (created, end]."""
    first = created.replace(second=0, microsecond=0) + MINUTE
    return {first + i * MINUTE for i in range(int((end - first) / MINUTE) + 1)}
