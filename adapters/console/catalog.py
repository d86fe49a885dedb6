"""The console's catalog of schedules: what the schedules page, the overview
and the `wf_schedules` gauge list, kept so that a page need not read every
schedule of the store.

`get_schedule` on every one of 10,000 schedules takes about 2 s on files, and
the last occurrence of each as much again: far beyond a page's 100 ms. So the
catalog keeps each schedule's presented form (`get_schedule`'s answer) and
its newest decided occurrence, read through the schedules API only (so it
works on every store backend), and renews them:

- **on demand**: a page (or a scrape) asks for a snapshot; one older than
  `max_age` starts a renewal;
- **small stores at once**: when the last full renewal took less than
  `inline_budget_s`, the page waits for the renewal, so a store of a few
  hundred schedules is always shown as it is now;
- **large stores in the background**, in slices of `slice_size` schedules
  with a yield to the event loop between slices, so that no request waits
  behind more than one slice; the page shows the snapshot it has and says
  when it was taken;
- **touched schedules first**: the console's own actions (pause, resume) and
  the scheduler's decisions mark a schedule as touched; the next snapshot
  reads the touched ones again before answering (up to `slice_size` of them).

`max_age` grows with the cost of a renewal (ten times its duration, at least
`min_age_s`), so a large store is not read over and over while someone
watches: at 10,000 schedules a snapshot may be tens of seconds old, and the
page says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from core.errors import SchedulingError

__all__ = ["CatalogEntry", "CatalogSnapshot", "ScheduleCatalog"]

_log = logging.getLogger("adapters.console")

_MIN_AGE_S: Final = 1.0
_INLINE_BUDGET_S: Final = 0.05
# A slice of 25 schedules is about 12 ms of reads on files (bench/console.py).
_SLICE: Final = 25


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One schedule as the catalog last read it: `schedule` is `get_schedule`'s
    answer (or the blocked stub `list_schedules` gives for damaged records),
    `last` its newest decided occurrence row (None: none yet), `error` what
    reading it raised instead (a damaged history), `read_at` when."""

    schedule_id: str
    schedule: Mapping[str, Any]
    last: Mapping[str, Any] | None
    read_at: datetime
    error: str | None = None

    @property
    def state(self) -> str:
        return str(self.schedule.get("state", "blocked"))


@dataclass(frozen=True, slots=True)
class CatalogSnapshot:
    """The entries by id, when the oldest of them was read, and whether a
    renewal is under way."""

    entries: Mapping[str, CatalogEntry]
    as_of: datetime | None
    renewing: bool
    last_renewal_s: float | None

    def counts(self) -> dict[str, int]:
        """Schedules by state."""
        counts: dict[str, int] = {}
        for entry in self.entries.values():
            counts[entry.state] = counts.get(entry.state, 0) + 1
        return counts


@dataclass(slots=True)
class _Renewal:
    started: float
    task: asyncio.Task[None] | None = None
    ids: list[str] = field(default_factory=list)


class ScheduleCatalog:
    """See the module docstring. `schedules` is the server's schedules API
    (`server.api.schedules`); `now` reads the server's clock."""

    def __init__(
        self,
        schedules: Any,
        *,
        now: Any,
        min_age_s: float = _MIN_AGE_S,
        inline_budget_s: float = _INLINE_BUDGET_S,
        slice_size: int = _SLICE,
    ) -> None:
        self._api = schedules
        self._now = now
        self._min_age_s = min_age_s
        self._inline_budget_s = inline_budget_s
        self._slice = slice_size
        self._entries: dict[str, CatalogEntry] = {}
        self._as_of: datetime | None = None
        self._renewed_at: float | None = None
        self._cost_s: float | None = None
        self._renewal: _Renewal | None = None
        self._touched: set[str] = set()

    @property
    def max_age_s(self) -> float:
        """How old a snapshot may be before a page starts a renewal."""
        return max(self._min_age_s, 10 * (self._cost_s or 0.0))

    def touch(self, schedule_ids: Iterable[str]) -> None:
        """These schedules changed: read them again before the next snapshot."""
        self._touched.update(schedule_ids)

    def peek(self) -> CatalogSnapshot:
        """The snapshot as it is, without reading anything (for a scrape)."""
        return CatalogSnapshot(
            entries=dict(self._entries),
            as_of=self._as_of,
            renewing=self._renewal is not None,
            last_renewal_s=self._cost_s,
        )

    async def snapshot(self) -> CatalogSnapshot:
        """The catalog, renewed first when it is small and stale, or when it
        was never read; otherwise renewed in the background when stale."""
        fresh_enough = (
            self._renewed_at is not None and time.monotonic() - self._renewed_at < self.max_age_s
        )
        if self._as_of is None or (
            not fresh_enough and (self._cost_s or 0.0) <= self._inline_budget_s
        ):
            await self._renew_now()
        elif not fresh_enough and self._renewal is None:
            self._renewal = _Renewal(started=time.monotonic())
            self._renewal.task = asyncio.create_task(self._renew(), name="wf-console-catalog")
        if self._touched:
            # At most one slice of them per request; the rest at the next one.
            touched = sorted(self._touched)[: self._slice]
            self._touched.difference_update(touched)
            for schedule_id in touched:
                await self._read(schedule_id)
        return self.peek()

    async def close(self) -> None:
        """Stop a background renewal (the server is stopping)."""
        renewal, self._renewal = self._renewal, None
        if renewal is not None and renewal.task is not None:
            renewal.task.cancel()
            # Whatever it ended with, it is over: the server is stopping.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await renewal.task

    async def _renew_now(self) -> None:
        if self._renewal is not None and self._renewal.task is not None:
            # One renewal at a time: wait for the one under way.
            await asyncio.shield(self._renewal.task)
            return
        self._renewal = _Renewal(started=time.monotonic())
        task = asyncio.create_task(self._renew(), name="wf-console-catalog")
        self._renewal.task = task
        await asyncio.shield(task)

    async def _renew(self) -> None:
        began = time.monotonic()
        as_of = self._now()
        try:
            ids = await self._api.definitions.list_ids()
            seen = set(ids)
            for start in range(0, len(ids), self._slice):
                for schedule_id in ids[start : start + self._slice]:
                    await self._read(schedule_id)
                # Let requests in between slices.
                await asyncio.sleep(0)
            for gone in set(self._entries) - seen:
                del self._entries[gone]
            self._as_of = as_of
            self._renewed_at = time.monotonic()
            self._cost_s = self._renewed_at - began
        except SchedulingError as exc:
            _log.warning(
                "console: the schedule catalog could not be renewed: %s",
                exc.message,
                extra={"event": "console.catalog_failed"},
            )
            if self._as_of is None:
                raise
        finally:
            self._renewal = None

    async def _read(self, schedule_id: str) -> None:
        read_at = self._now()
        try:
            schedule = await self._api.get_schedule(schedule_id=schedule_id)
        except SchedulingError as exc:
            if exc.code == "not_found":
                self._entries.pop(schedule_id, None)
                return
            stub = {"schedule_id": schedule_id, "state": "blocked", "blocked": exc.data}
            self._entries[schedule_id] = CatalogEntry(
                schedule_id, stub, None, read_at, error=exc.message
            )
            return
        last: Mapping[str, Any] | None = None
        error: str | None = None
        try:
            page = await self._api.list_schedule_occurrences(
                schedule_id=schedule_id, limit=1, newest_first=True
            )
            decided = [row for row in page["occurrences"] if row.get("status") != "pending"]
            last = decided[0] if decided else None
        except SchedulingError as exc:
            error = exc.message
        self._entries[schedule_id] = CatalogEntry(schedule_id, schedule, last, read_at, error)
