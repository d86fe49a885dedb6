"""Seeded faults: crashes and write errors at durable writes, refused preflights.

`SimFaults` is installed as the process-wide fault injector
(`shell.durable.set_fault_injector`), so it sees every fault point the
in-memory stores, the simulated run API and `GroupCommit` pass. At each one
it draws from its own seeded stream:

- a *crash* (`SimulatedCrash`) at any point: the simulated process dies there.
  From then on every durable write raises too (a task of the dead process
  must not write behind the simulation's back) until `revive()`;
- a *write error* (`InjectedWriteError`, an `OSError`) at the points where a
  real write can fail and its caller sees the error (`WRITE_ERROR_POINTS`).

A crash is, one time in two, also a power cut: the disk then loses none, all
or some of the writes not flushed yet (`SimDisk.power_cut`), and the real
stores and commit journal must recover from what is left. The history rows
a group commit wrote are reported to the invariant checker at its
`after:commit` (a whole batch), and at a fault or a check (what there is).
Preflight failures and run admissions
refused by the host are drawn by the run API through `preflight_fails()` and
`admission_refused()`. Every injected error says `[simulated]`, which is how
the simulation tells its own faults from real errors in the service's log.
"""

from __future__ import annotations

import asyncio
import errno
import random
from collections import Counter
from dataclasses import dataclass, field

from shell.durable import SimulatedCrash
from shell.sim.disk import SIMULATED, DiskFault, InjectedWriteError, PowerCut, SimDisk

__all__ = [
    "SIMULATED",
    "WRITE_ERROR_POINTS",
    "FaultCounts",
    "FaultRates",
    "InjectedWriteError",
    "SimFaults",
]

WRITE_ERROR_POINTS = frozenset(
    {
        # A wake-up's group commit (the round fails): its journal record, and
        # the files written after it is durable.
        "before:commit",
        "before:append:commit.journal",
        "before:apply:history.jsonl",
        "before:apply:runtime.jsonl",
        # The schedules API's writes (the call fails).
        "before:mkdir:schedule",
        "before:append:lifecycle.jsonl",
        "before:replace:definition.json",
        # The run API's writes the service waits for.
        "before:counter:run_id",
        "before:run:admitted",
        "before:run:executing-mark",
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultRates:
    """Probabilities: `crash` and `write_error` per fault point reached,
    `preflight` per preflight call, `admission` per run admission."""

    crash: float = 0.0
    write_error: float = 0.0
    preflight: float = 0.0
    admission: float = 0.0

    def __post_init__(self) -> None:
        bad = [
            name
            for name in ("crash", "write_error", "preflight", "admission")
            if not 0.0 <= getattr(self, name) <= 1.0
        ]
        if bad or self.crash + self.write_error > 1.0:
            raise ValueError(f"fault rates must be probabilities: {', '.join(bad) or 'sum'}")

    @classmethod
    def from_rate(cls, rate: float) -> FaultRates:
        """One knob: `rate` is the chance that a durable write faults (a crash
        in 2 cases out of 5, an I/O error otherwise); preflights fail five
        times as often and admissions are refused as often as writes fault."""
        if not 0.0 <= rate <= 0.2:
            raise ValueError(f"fault_rate must be between 0 and 0.2, got {rate}")
        return cls(crash=rate * 0.4, write_error=rate * 0.6, preflight=rate * 5, admission=rate)


@dataclass(slots=True)
class FaultCounts:
    """What was injected so far."""

    points: int = 0
    crashes: int = 0
    write_errors: int = 0
    preflight_failures: int = 0
    admission_refusals: int = 0
    disk_errors: int = 0
    crash_points: Counter[str] = field(default_factory=Counter)
    error_points: Counter[str] = field(default_factory=Counter)

    @property
    def errors(self) -> int:
        """Faults the live process saw (everything but crashes)."""
        return (
            self.write_errors + self.preflight_failures + self.admission_refusals + self.disk_errors
        )


class SimFaults:
    """The seeded fault injector of one simulation (see the module docstring)."""

    def __init__(self, seed: int, rates: FaultRates, disk: SimDisk) -> None:
        self._rng = random.Random(f"wf-sim/faults/{seed}")
        self.rates = rates
        self._disk = disk
        self.counts = FaultCounts()
        # Disarmed, nothing is injected (the end of a simulation lets runs finish).
        self.armed = True
        self.dead = False
        self.crash_point: str | None = None
        self.power_cuts = 0
        # Disk writes seen at the last `before:commit`: an `after:commit`
        # with none since ends an empty commit, which wrote nothing.
        self._writes_at_commit = -1
        self._dead_event: asyncio.Event | None = None
        # Its own stream, so drawing disk faults leaves the other draws as they were.
        self._disk_rng = random.Random(f"wf-sim/disk-faults/{seed}")
        disk.faults = self.disk_fault

    def disk_fault(self, op: str, path: str, size: int) -> DiskFault | None:
        """The disk's own faults (`SimDisk.faults`): a write refused with
        `ENOSPC` after writing part of its bytes, or an `fsync` with `EIO`."""
        if self.dead or not self.armed or op not in ("write", "fsync"):
            return None
        if self._disk_rng.random() >= self.rates.write_error * 0.1:
            return None
        # Also a write error: one of those the live process saw.
        self.counts.write_errors += 1
        self.counts.disk_errors += 1
        self.counts.error_points[f"disk:{op}"] += 1
        if op == "fsync":
            return DiskFault(errno.EIO)
        return DiskFault(errno.ENOSPC, self._disk_rng.randint(0, max(0, size - 1)))

    def dead_event(self) -> asyncio.Event:
        """Set when the simulated process crashes."""
        if self._dead_event is None:
            self._dead_event = asyncio.Event()
            if self.dead:
                self._dead_event.set()
        return self._dead_event

    def revive(self) -> None:
        """A new process starts: durable writes are allowed again."""
        self.dead = False
        self.crash_point = None
        self._dead_event = None

    def __call__(self, point: str) -> None:
        if self.dead:
            raise SimulatedCrash(f"write after the crash at {self.crash_point}: {point}")
        if point == "before:commit":
            self._disk.report_history(complete=False)
            self._writes_at_commit = self._disk.writes
        if point == "after:commit":
            self._disk.report_history(complete=True)
            if self._disk.writes == self._writes_at_commit:
                return  # an empty commit writes nothing that could fail
        if not self.armed:
            return
        self.counts.points += 1
        roll = self._rng.random()
        if roll < self.rates.crash:
            self._disk.report_history(complete=False)
            if self._rng.random() < 0.5:
                mode: PowerCut = self._rng.choice(("none", "all", "some"))
                self._disk.power_cut(self._rng, mode)
                self.power_cuts += 1
            self.dead = True
            self.crash_point = point
            self.counts.crashes += 1
            self.counts.crash_points[point] += 1
            if self._dead_event is not None:
                self._dead_event.set()
            raise SimulatedCrash(point)
        if roll < self.rates.crash + self.rates.write_error and point in WRITE_ERROR_POINTS:
            self._disk.report_history(complete=False)
            self.counts.write_errors += 1
            self.counts.error_points[point] += 1
            raise InjectedWriteError(errno.EIO, f"{SIMULATED} I/O error at {point}")

    def preflight_fails(self) -> bool:
        if not self.armed or self._rng.random() >= self.rates.preflight:
            return False
        self.counts.preflight_failures += 1
        return True

    def admission_refused(self) -> bool:
        if not self.armed or self._rng.random() >= self.rates.admission:
            return False
        self.counts.admission_refusals += 1
        return True
