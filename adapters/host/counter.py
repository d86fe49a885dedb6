"""The store-backed run id counter: `run-000001`, `run-000002`, ...

On files, `<root>/counters/run_id` holds `{"last_issued": N}`; on PostgreSQL
the sequence `wf_run_number` issues the numbers (persistence.py). Reserving
ids advances the counter durably *before* any id is handed out, so a crash
can only skip ids, never issue one twice. Reserving a batch costs one write
(group commit) or one transaction.

If the counter is damaged or behind the runs in the store, the counter
resumes from the larger of what it can still read and the highest run id
stored, and the repair is reported. (On files, ids that were reserved but
never used before such damage cannot be seen anywhere on disk; see
docs/host.md.)
"""

from __future__ import annotations

from typing import Any

from shell.durable import fault_point

from .persistence import CounterPersistence

__all__ = ["RunIdCounter"]


class RunIdCounter:
    def __init__(self, persistence: CounterPersistence) -> None:
        self._persistence = persistence
        self._last = 0

    @property
    def last_issued(self) -> int:
        """The highest number this process issued, or the counter's at load."""
        return self._last

    async def load(self, highest_stored: int) -> dict[str, Any] | None:
        """Read the counter; repair it if needed. Returns a finding on repair.
        `highest_stored`: the highest run number with a record (readable or not)."""
        found = await self._persistence.read()
        if found.missing:
            self._last = highest_stored
            if highest_stored == 0:
                return None
            await self._repair(highest_stored)
            return self._finding(f"{found.problem}; resumed after run id {highest_stored}")
        stored = found.stored
        if stored is not None and stored >= highest_stored:
            self._last = stored
            return None
        reason = found.problem
        if stored is not None:
            reason = (
                f"{self._persistence.name} ({stored}) is behind the highest run id"
                f" {self._persistence.runs_where} ({highest_stored})"
            )
        self._last = max(stored or 0, highest_stored)
        await self._repair(self._last)
        return self._finding(f"{reason}; resumed after run id {self._last}")

    async def reserve(self, count: int) -> list[int]:
        """Durably advance by `count` and return the reserved numbers."""
        fault_point("before:counter:run_id")
        numbers = await self._persistence.advance(self._last, count)
        fault_point("after:counter:run_id")
        self._last = max(self._last, numbers[-1])
        return numbers

    async def _repair(self, last: int) -> None:
        fault_point("before:counter:run_id")
        await self._persistence.repair(last)
        fault_point("after:counter:run_id")

    def _finding(self, reason: str) -> dict[str, Any]:
        return {
            "run_id": None,
            "file": self._persistence.location,
            "finding": "counter-repaired",
            "reason": reason,
        }
