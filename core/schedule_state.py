"""A schedule's lifecycle state: the one word `get`/`list` show for it.

The stores keep flags (`paused`, `deleted`, `blocked`), and a one-shot whose
single instant already fired keeps all of them false: shown by flags alone it
looks `active` forever. `lifecycle_state` derives the one state a reader
wants from those flags and a few facts the shell gathers about the one-shot's
instant; the shell decides nothing itself.

First rule that applies (a decision table, `tests/unit/test_schedule_state.py`):

1. `deleted`: nothing is admitted after a delete, whatever else holds.
2. `blocked`: its records failed closed; an operator must repair them (a
   blocked schedule neither advances nor admits, so it is not `finished`).
3. `finished`: a one-shot whose single instant is decided and closed. Decided:
   recorded in its history, or behind its watermark, or inside its latest
   paused span (after the pause, up to the resume or now): a resume starts
   after the resume time, so the paused span is consumed and never replayed.
   Closed: no run of it is still active (admitted, running or interrupted,
   which a resume payload may still continue), it is not held or waiting
   for a slot, and no occurrence an operator asked for (a trigger, rule P)
   is still open. A paused fired one-shot is `finished` too:
   nothing more can ever happen to it, and resuming it changes nothing.
4. `paused`.
5. `active`: everything else, including a one-shot whose run is still going
   (its occurrence is still open) and one whose instant is still ahead.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Final, Literal, get_args

from core.occurrences import TERMINAL_STATUSES

__all__ = ["LIFECYCLE_STATES", "LifecycleState", "lifecycle_state", "oneshot_finished"]

LifecycleState = Literal["deleted", "blocked", "finished", "paused", "active"]

# In precedence order: the first that applies is the state.
LIFECYCLE_STATES: Final[tuple[str, ...]] = get_args(LifecycleState)


def oneshot_finished(
    *,
    at: datetime,
    now: datetime,
    paused: bool,
    paused_at: datetime | None,
    resumed_at: datetime | None,
    watermark: datetime | None,
    recorded_status: str | None,
    open_instants: Collection[datetime],
) -> bool:
    """True when a one-shot's only instant `at` is decided and nothing of it is open.

    `paused_at` / `resumed_at`: the latest pause and resume (None: none yet).
    `watermark`: the schedule's watermark (None: not known). `recorded_status`:
    the latest status of the history row decided at `at` (None: no row, or
    not read). `open_instants`: the instants held, waiting for a slot, or with
    a run still active, as far as the caller knows them: `at`'s, or a
    trigger's, which keeps a fired one-shot open while it runs.
    """
    if open_instants:
        return False
    if recorded_status is not None:
        # A row that is not terminal is a run still going (the history may
        # lag the run, never run ahead of it): the occurrence is open.
        return recorded_status in TERMINAL_STATUSES
    if watermark is not None and at <= watermark:
        return True
    return _in_latest_paused_span(at, now, paused, paused_at, resumed_at)


def _in_latest_paused_span(
    at: datetime,
    now: datetime,
    paused: bool,
    paused_at: datetime | None,
    resumed_at: datetime | None,
) -> bool:
    """`at` lies in `(paused_at, end]`, the latest paused span (it ends now
    while still paused): `decide` consumes it with no row, even before the
    scheduler has caught up with the watermark. An instant equal to the pause
    time is decided before the pause applies, so the span is open at its
    start. Older spans are behind the watermark once the resume is read."""
    if paused_at is None or at <= paused_at:
        return False
    end = now if paused else resumed_at
    return end is not None and at <= end


def lifecycle_state(
    *, deleted: bool, blocked: bool, paused: bool, finished: bool
) -> LifecycleState:
    """The schedule's state by the precedence in this module's docstring.

    `finished` is `oneshot_finished(...)` for a one-shot and False otherwise
    (a cron schedule always has another instant ahead or can be resumed to one).
    """
    if deleted:
        return "deleted"
    if blocked:
        return "blocked"
    if finished:
        return "finished"
    if paused:
        return "paused"
    return "active"
