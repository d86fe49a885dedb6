"""Housekeeping: the service's work kept off a start's path and off a herd's.

Three jobs, all done through the upkeep port (`shell.store_ports`) and only
at a quiet moment, when nothing is due for a while:

- the first quiet moment after a start sweeps the temp files of interrupted
  writes (a start does not look for them);
- every quiet moment flushes what was written long enough ago to cost little
  (on files: the commit journal checkpointed once its oldest record has aged,
  so that the history indexes' headers, which wait for such a flush, follow
  the rows by about a minute);
- the startup checkpoint (`shell/startup_checkpoint.py`: what a start after a
  crash need not read) is rewritten at the first quiet moment and every
  `checkpoint_interval_s` after, if a round had anything to do since; the
  history indexes are published and the journal checkpointed (emptied)
  before it. A clean stop writes one too.

`Housekeeping` keeps what that needs between rounds: which schedules rounds
touched since the last checkpoint, when it was written, and whether the
sweep is still owed (the checkpoint's own ledger is the backend's upkeep's). The service
(`shell/service.py`) owns it and decides when the state is fit to checkpoint:
only a scheduler whose state matches the stores (not fenced, not waiting to
rebuild after a failed round) calls it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from core.commands import Command
from core.decide import next_due, next_wakeup
from core.events import Event
from core.state import SchedulerState
from shell.clock import Clock
from shell.config import SchedulerServiceConfig
from shell.durable import TEMP_IN_FLIGHT_NS
from shell.store_ports import StoreUpkeepPort

__all__ = ["Housekeeping"]

# The service's own messages: operators and tests filter on its logger name.
_log = logging.getLogger("shell.service")

# Housekeeping (the startup checkpoint, the sweep of temp files) runs only
# when nothing is due for this long, comfortably more than it takes at
# 10,000 schedules.
_QUIET = timedelta(seconds=10)


def _touch(touched: set[str], items: Iterable[Event | Command]) -> None:
    """Add the schedules `items` (a round's events and commands) concern: a
    loop rather than a generator: about six items per occurrence."""
    for item in items:
        schedule_id = getattr(item, "schedule_id", None)
        if schedule_id is None:
            definition = getattr(item, "definition", None)
            schedule_id = getattr(definition, "schedule_id", None)
        if isinstance(schedule_id, str):
            touched.add(schedule_id)


def _by_next_due(
    touched: set[str], state: SchedulerState, horizon: datetime
) -> tuple[set[str], set[str]]:
    """The touched schedules a running checkpoint examines, and those it
    leaves touched for a later one: a schedule `decide` acts on again before
    `horizon` (the next checkpoint's earliest time) will change its history
    before then, so its entry refreshed now would serve only a crash within
    the next few moments, and a start after any later crash reads its history
    and runtime record anyway. Its entry stays as captured (still true for its
    lifecycle records; a start compares each part's files before taking it).
    At 1,000 every-minute schedules the examination was about 70 us per
    schedule, every `checkpoint_interval_s`: 7% of the CPU a minute
    (docs/performance.md, section 11, sixteenth pass)."""
    examine: set[str] = set()
    later: set[str] = set()
    for schedule_id in touched:
        due = next_due(state, schedule_id)
        (later if due is not None and due < horizon else examine).add(schedule_id)
    return examine, later


class Housekeeping:
    """The service's quiet-moment work and the startup checkpoint's ledger."""

    def __init__(self, *, clock: Clock, config: SchedulerServiceConfig) -> None:
        self._clock = clock
        self._config = config
        # When this process last wrote the startup checkpoint (None: not since
        # its start), on the service's clock, and the schedules whose events
        # or commands rounds have had since it examined them: the next running
        # checkpoint examines only those not due again before the one after
        # (an idle scheduler rewrites nothing).
        self._checkpointed_at: datetime | None = None
        self._touched: set[str] = set()
        # Wall-clock time the last start began (`time.time_ns()`), and
        # whether the temp files older than it have been swept since.
        self._started_ns = 0
        self._swept = True

    @property
    def checkpointed_at(self) -> datetime | None:
        """When this process last wrote the startup checkpoint (for benchmarks)."""
        return self._checkpointed_at

    def started(self) -> None:
        """A start: nothing checkpointed since, the sweep owed."""
        self._checkpointed_at, self._touched = None, set()
        self._started_ns, self._swept = time.time_ns(), False

    def touch(self, events: Sequence[Event], commands: Sequence[Command]) -> None:
        """Note the schedules a round concerned: the next checkpoint examines them."""
        _touch(self._touched, events)
        _touch(self._touched, commands)

    def if_quiet(self, upkeep: StoreUpkeepPort, state: SchedulerState) -> None:
        """At a quiet moment (nothing due for `_QUIET`), the work kept off a
        start's path and off a herd's: the first one after a start sweeps the
        temp files of interrupted writes, and the startup checkpoint is
        written then and every `checkpoint_interval_s` after, if a round had
        anything to do since, so that a start after a crash reads only what
        changed. At 10,000 schedules the first after a start holds the loop
        for about a second, a later checkpoint 0.15-0.6 s (it examines only
        the schedules rounds touched since the last and not due again before
        the next, `_by_next_due`)."""
        now = self._clock.now()
        due = next_wakeup(state)
        if due is not None and due - now < _QUIET:
            return
        if not self._swept:
            self._swept = True
            # Temp files a start does not look for (`StoreUpkeepPort`).
            upkeep.sweep_temp_files(older_than_ns=self._started_ns - TEMP_IN_FLIGHT_NS)
        upkeep.flush_if_aged()
        interval = self._config.checkpoint_interval_s
        last = self._checkpointed_at
        if (
            interval == 0
            or not self._touched
            or (last is not None and last <= now < last + timedelta(seconds=interval))
        ):
            return
        self._checkpointed_at = now
        # A failure to publish (the indexes, the journal emptied) is a failed
        # round (the loop rebuilds from the stores); one to write the
        # checkpoint only costs the next start time.
        upkeep.publish()
        examine, later = _by_next_due(self._touched, state, now + timedelta(seconds=interval))
        if upkeep.write_startup_checkpoint(examine=examine):
            self._touched = later
