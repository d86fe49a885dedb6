"""Deterministic simulation of the scheduler service (not the what-if
simulator of `adapters.simulation`, which models schedules without the
service).

The service's real loop and the real file stores and commit journal run over
a simulated disk (`SimDisk`: power cuts, torn writes, I/O errors), with an
in-memory lock, a simulated run API on a virtual clock, and seeded faults
(crashes, write errors, refused preflights) and steps back of the clock,
while invariants are checked after every step. Same seed, same run, byte for byte. See
`docs/reliability-sim.md`.
"""

from shell.sim.disk import SIM_STORE_ROOT, SimDisk, SimScheduleFiles
from shell.sim.driver import SIM_START, SimulationFailure, SimulationReport, simulate_service
from shell.sim.faults import FaultCounts, FaultRates, InjectedWriteError, SimFaults
from shell.sim.host import RunBehaviour, RunPlan, SimHost
from shell.sim.invariants import InvariantChecker
from shell.sim.lock import MemoryLock
from shell.sim.timeline import Timeline

__all__ = [
    "SIM_START",
    "SIM_STORE_ROOT",
    "FaultCounts",
    "FaultRates",
    "InjectedWriteError",
    "InvariantChecker",
    "MemoryLock",
    "RunBehaviour",
    "RunPlan",
    "SimDisk",
    "SimFaults",
    "SimHost",
    "SimScheduleFiles",
    "SimulationFailure",
    "SimulationReport",
    "Timeline",
    "simulate_service",
]
