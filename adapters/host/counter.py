"""The store-backed run id counter: `run-000001`, `run-000002`, ...

The file `<root>/counters/run_id` holds `{"last_issued": N}`. Reserving ids
advances it durably *before* any id is handed out, so a crash can only skip
ids, never issue one twice. Reserving a batch costs one write (group commit).

If the file is damaged or behind the run files on disk, the counter resumes
from the larger of what it can still read and the highest run id on disk, and
the repair is reported. (Ids that were reserved but never used before such
damage cannot be seen anywhere on disk; see docs/host.md.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shell.durable import fault_point

from .storage import atomic_write_json, read_json

__all__ = ["RunIdCounter"]


class RunIdCounter:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._last = 0

    @property
    def last_issued(self) -> int:
        return self._last

    def load(self, highest_on_disk: int) -> dict[str, Any] | None:
        """Read the counter; repair it if needed. Returns a finding on repair."""
        if not self.path.exists():
            self._last = highest_on_disk
            if highest_on_disk == 0:
                return None
            self._write(highest_on_disk)
            return self._finding(f"counter file missing; resumed after run id {highest_on_disk}")
        stored: int | None = None
        reason: str | None = None
        try:
            data = read_json(self.path)
        except (OSError, ValueError) as exc:
            reason = f"counter file unreadable ({exc})"
        else:
            value = data.get("last_issued") if isinstance(data, dict) else None
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                stored = value
            else:
                reason = f"counter file holds no valid last_issued: {data!r}"
        if stored is not None and stored >= highest_on_disk:
            self._last = stored
            return None
        if stored is not None:
            reason = f"counter ({stored}) is behind the highest run id on disk ({highest_on_disk})"
        self._last = max(stored or 0, highest_on_disk)
        self._write(self._last)
        return self._finding(f"{reason}; resumed after run id {self._last}")

    def reserve(self, count: int) -> list[int]:
        """Durably advance by `count` and return the reserved numbers."""
        first = self._last + 1
        self._write(self._last + count)
        self._last += count
        return list(range(first, self._last + 1))

    def _write(self, last: int) -> None:
        fault_point("before:counter:run_id")
        atomic_write_json(self.path, {"last_issued": last})
        fault_point("after:counter:run_id")

    def _finding(self, reason: str) -> dict[str, Any]:
        return {
            "run_id": None,
            "file": str(self.path),
            "finding": "counter-repaired",
            "reason": reason,
        }
