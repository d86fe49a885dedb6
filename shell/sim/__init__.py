"""Deterministic simulation of the scheduler service (not the what-if
simulator of `adapters.simulation`, which models schedules without the
service).

The service's real loop runs against in-memory stores and lock with the
file stores' behaviour, a simulated run API on a virtual clock, and seeded
faults (crashes, write errors, refused preflights), while invariants are
checked after every step. Same seed, same run, byte for byte. See
`docs/reliability-sim.md`.
"""

from shell.sim.definitions import SIM_STORE_ROOT, MemoryDefinitionStore
from shell.sim.disk import SimDisk, SimScheduleFiles
from shell.sim.driver import SIM_START, SimulationFailure, SimulationReport, simulate_service
from shell.sim.faults import FaultCounts, FaultRates, InjectedWriteError, SimFaults
from shell.sim.history import MemoryHistoryStore
from shell.sim.host import RunBehaviour, RunPlan, SimHost
from shell.sim.invariants import InvariantChecker
from shell.sim.lock import MemoryLock
from shell.sim.runtime import MemoryRuntimeStore

__all__ = [
    "SIM_START",
    "SIM_STORE_ROOT",
    "FaultCounts",
    "FaultRates",
    "InjectedWriteError",
    "InvariantChecker",
    "MemoryDefinitionStore",
    "MemoryHistoryStore",
    "MemoryLock",
    "MemoryRuntimeStore",
    "RunBehaviour",
    "RunPlan",
    "SimDisk",
    "SimFaults",
    "SimHost",
    "SimScheduleFiles",
    "SimulationFailure",
    "SimulationReport",
    "simulate_service",
]
