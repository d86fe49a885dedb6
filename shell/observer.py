"""What the scheduler service tells an observer: the points a metrics
recorder (`adapters/metrics.py`) or a test watches, without the loop knowing
what is done with them.

The service calls its observer at five well-defined points and nowhere else:

- `recovered(events)`: a start's (or a resynchronization's) recovery events,
  once they are known, before the first round decides them;
- `decided(decisions, now)`: after a round's group commit returned, one
  `Decision` per decision row it made durable (status, instant, how many
  calendar instants the row stands for);
- `committed(seconds)`: how long that group commit took (staging excluded);
- `round_finished(seconds)`: how long a whole wake-up took (events, decide,
  commit, launches), whether it succeeded or failed;
- `prepared(outcome)`: a round prepared ahead of its instant was committed
  at it (`"committed"`) or dropped, nothing of it written (`"dropped"`).

An observer must be quick and must not raise: it runs on the loop, inside a
round. `NullObserver` does nothing and is the default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from core.events import Event
from core.fast_init import fast_init

__all__ = ["Decision", "NullObserver", "SchedulerObserver"]


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """One decision row made durable: `status` (`admitted`, `skipped-misfire`,
    `preflight-rejected`, ...), the occurrence's `instant`, and `count`, the
    calendar instants it stands for (more than one for a coalesced row)."""

    schedule_id: str
    instant: datetime
    status: str
    count: int = 1


class SchedulerObserver(Protocol):
    """See the module docstring."""

    def recovered(self, events: Sequence[Event]) -> None: ...

    def decided(self, decisions: Sequence[Decision], now: datetime) -> None: ...

    def committed(self, seconds: float) -> None: ...

    def round_finished(self, seconds: float) -> None: ...

    def prepared(self, outcome: Literal["committed", "dropped"]) -> None: ...


class NullObserver:
    """An observer that ignores everything."""

    def recovered(self, events: Sequence[Event]) -> None:
        del events

    def decided(self, decisions: Sequence[Decision], now: datetime) -> None:
        del decisions, now

    def committed(self, seconds: float) -> None:
        del seconds

    def round_finished(self, seconds: float) -> None:
        del seconds

    def prepared(self, outcome: Literal["committed", "dropped"]) -> None:
        del outcome
