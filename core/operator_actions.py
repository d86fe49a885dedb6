"""Operator actions: run a schedule now (trigger), make up a past range (backfill).

Both are requests an operator makes through the API; the API writes them to
the schedule's lifecycle log and `decide` applies them like the other
lifecycle changes (rules P and Q of `docs/decision-tables.md`). This module
holds what the API and `decide` share: the values, the bounds and the pure
questions both must answer the same way.

Rule P, trigger. One occurrence of the current definition at the moment of
the request, with its bindings resolved for that moment and `origin`
"trigger" in the history. Its instant is the request's time, moved on by a
microsecond while it is a calendar instant of the schedule, an instant the
schedule already has in hand (active, held or waiting), or not after the
schedule's previous trigger (`trigger_instant`): so it never takes the place
of a calendar instant, never moves the watermark, and two triggers are two
occurrences. The schedule's overlap policy applies unless the request says
`overlap="allow"`. A trigger does not wait for an execution slot: like a
run started by hand it starts at once, and then holds a slot like any
scheduled run until it first stops, so scheduled instants wait for it.

Rule Q, backfill. The calendar instants of `[start, end)` (both in the past)
that the scheduler decided without running them (skipped, superseded,
coalesced, rejected by preflight, consumed by a pause, or before the
schedule existed) are admitted, oldest first, with `origin` "backfill" and
the calendar instant as their instant. Never admitted: an instant that was
admitted already (by the calendar or an earlier backfill: whatever its run
became), an instant an earlier backfill decided, and an instant the
calendar has not decided yet (after the watermark, held or waiting), which
the calendar decides as usual. A backfill admits at most one instant per
`decide` call, only into a free execution slot that no scheduled instant is
waiting for, and only while the schedule's overlap places allow (with
`overlap="allow"`, while the backfill's own runs are fewer than
`max_active_runs`): by default one run at a time. A paused schedule's
backfill waits; a deleted schedule's is cancelled. A request made while the
schedule is paused moves its watermark to the request (`decide`): the paused
span up to it is the backfill's, even when the schedule is resumed on a
clock set back behind the request. One backfill per
schedule at a time, at most `BACKFILL_LIMIT` calendar instants per request.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, get_args

from core.calendar import CompiledTrigger
from core.errors import InvalidInput, Problem

__all__ = [
    "BACKFILL_LIMIT",
    "BACKFILL_STATES",
    "EARLIEST_START",
    "OVERLAP_OVERRIDES",
    "Backfill",
    "BackfillInForce",
    "BackfillPlan",
    "BackfillState",
    "backfill_from_payload",
    "backfill_in_force",
    "backfill_to_payload",
    "calendar_instants",
    "check_overlap_override",
    "overlap_refusal",
    "plan_backfill",
    "range_problems",
    "trigger_instant",
]

# Calendar instants one backfill request may cover: a request beyond it is
# refused with its count (split the range). A thousand runs is more than an
# operator reviews before starting them; the simulator plays one at once.
BACKFILL_LIMIT: Final = 1000
# Counting a refused range stops here: the message then says "more than".
_COUNT_CAP: Final = 100 * BACKFILL_LIMIT

# `overlap` of a request: None follows the schedule's policy.
OVERLAP_OVERRIDES: Final[frozenset[str]] = frozenset({"allow"})

BackfillState = Literal["running", "done", "cancelled"]
BACKFILL_STATES: Final[frozenset[str]] = frozenset(get_args(BackfillState))

_TICK: Final = timedelta(microseconds=1)
# A backfill reaches back no further than the Unix epoch: far enough for any
# schedule, and clear of the calendar arithmetic's limits at year 1.
EARLIEST_START: Final = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class Backfill:
    """A schedule's backfill: the request, its plan and its progress.

    `remaining` lists the instants still to admit, oldest first; `planned`
    how many the plan held, `admitted` how many of them were admitted.
    `already_admitted` and `left_to_calendar` count the instants of the range
    the plan left out (see the module docstring). `ended_at` is when the last
    planned instant was admitted or the backfill was cancelled, never before
    its request: a clock stepped back since the request may read earlier.
    """

    start: datetime
    end: datetime
    overlap: str | None
    requested_at: datetime
    state: BackfillState
    planned: int
    admitted: int
    remaining: tuple[datetime, ...]
    already_admitted: int = 0
    left_to_calendar: int = 0
    ended_at: datetime | None = None

    def admitting(self, now: datetime) -> Backfill:
        """This backfill after admitting its oldest remaining instant at `now`."""
        remaining = self.remaining[1:]
        return replace(
            self,
            remaining=remaining,
            admitted=self.admitted + 1,
            state="running" if remaining else "done",
            ended_at=None if remaining else self._ended(now),
        )

    def cancelled(self, at: datetime) -> Backfill:
        """This backfill ended by a cancel or a delete made at `at`."""
        return replace(self, state="cancelled", ended_at=self._ended(at))

    def without(self, decided: Collection[datetime], found_at: datetime) -> Backfill:
        """This backfill without the remaining instants `decided` already
        names (a crash repair: their rows are durable, this record was not).
        When that leaves none, it ended at `found_at`, the moment the repair
        found it done: the record of the last admission's moment was lost,
        and the moment of the request, before any admission, would be false."""
        remaining = tuple(instant for instant in self.remaining if instant not in decided)
        if len(remaining) == len(self.remaining):
            return self
        done = len(self.remaining) - len(remaining)
        finished = not remaining and self.state == "running"
        return replace(
            self,
            remaining=remaining,
            admitted=self.admitted + done,
            state="done" if finished else self.state,
            ended_at=self._ended(found_at) if finished else self.ended_at,
        )

    def _ended(self, at: datetime) -> datetime:
        """When a backfill that ends at `at` on the clock ended: never before
        its request (a clock stepped back since may read earlier)."""
        return max(at, self.requested_at)


@dataclass(frozen=True, slots=True)
class BackfillPlan:
    """What a backfill of a range would admit, and what it leaves out."""

    instants: tuple[datetime, ...]
    already_admitted: int
    left_to_calendar: int


BackfillInForce = Literal["running", "requested"]


def backfill_in_force(applied: Backfill | None, unapplied: Sequence[str]) -> BackfillInForce | None:
    """The schedule's backfill as the API must see it before a request or a
    cancel: `applied` is the backfill the scheduler's state holds, and
    `unapplied` the kinds of the lifecycle records written after the last one
    that state applied, oldest first (an operator may write two before the
    scheduler's next round). The newest `backfill` or `backfill-cancelled`
    among them decides: a cancel ends whatever backfill there was; a request
    beside a backfill still running leaves that one ("running": `decide`
    ignores the request), and is "requested" otherwise (its plan is made when
    it is applied). With neither, the applied backfill is in force while it
    runs."""
    operator = [kind for kind in unapplied if kind in ("backfill", "backfill-cancelled")]
    running = applied is not None and applied.state == "running"
    if not operator:
        return "running" if running else None
    if operator[-1] == "backfill-cancelled":
        return None
    return "running" if running and "backfill-cancelled" not in operator else "requested"


def check_overlap_override(value: object, field: str = "overlap") -> str | None:
    """`value` if it is a valid override (None or "allow"); InvalidInput otherwise."""
    if value is None or (isinstance(value, str) and value in OVERLAP_OVERRIDES):
        return value
    raise InvalidInput.from_problems(
        "operator action",
        [
            Problem(
                field=field,
                reason=f'must be "allow" or null (the schedule\'s policy), got {value!r}',
            )
        ],
    )


def overlap_refusal(active: int, limit: int, overlap: str | None) -> str | None:
    """Why the schedule's overlap policy refuses one more run now, or None."""
    if overlap == "allow" or active < limit:
        return None
    if limit == 1:
        return 'overlap "skip": the schedule has an active run'
    return f'overlap "parallel": {active} runs active, max_active_runs is {limit}'


def range_problems(start: object, end: object, now: datetime) -> list[Problem]:
    """What is wrong with a backfill range `[start, end)` as of `now`."""
    problems: list[Problem] = []
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, datetime) or value.utcoffset() is None:
            problems.append(Problem(field=name, reason="must be an instant with a UTC offset"))
    if problems:
        return problems
    assert isinstance(start, datetime) and isinstance(end, datetime)
    if start < EARLIEST_START:
        problems.append(Problem(field="start", reason=f"must not be before {_iso(EARLIEST_START)}"))
    if not start < end:
        problems.append(Problem(field="end", reason="must be after start"))
    if end > now:
        problems.append(
            Problem(field="end", reason=f"must not be in the future (now is {_iso(now)})")
        )
    return problems


def calendar_instants(
    trigger: CompiledTrigger, start: datetime, end: datetime, *, limit: int = BACKFILL_LIMIT
) -> tuple[datetime, ...]:
    """The trigger's instants in `[start, end)`, oldest first. Raises
    InvalidInput naming `end` with the count when there are more than `limit`."""
    found: list[datetime] = []
    for instant in trigger.iter_after(start - _TICK):
        if instant >= end:
            return tuple(found)
        if len(found) == limit:
            count = limit + 1 + _count_upto(trigger, instant, end)
            shown = f"more than {_COUNT_CAP}" if count > _COUNT_CAP else str(count)
            raise InvalidInput.from_problems(
                "backfill",
                [
                    Problem(
                        field="end",
                        reason=f"the range holds {shown} calendar instants; a backfill takes at"
                        f" most {limit}: split it into smaller ranges",
                    )
                ],
            )
        found.append(instant)
    return tuple(found)


def _count_upto(trigger: CompiledTrigger, after: datetime, end: datetime) -> int:
    count = 0
    for instant in trigger.iter_after(after):
        if instant >= end or count > _COUNT_CAP:
            break
        count += 1
    return count


def plan_backfill(
    instants: tuple[datetime, ...],
    *,
    watermark: datetime,
    pending: Collection[datetime],
    admitted: Collection[datetime],
    paused_until: datetime | None = None,
) -> BackfillPlan:
    """Which of the range's calendar `instants` a backfill admits (rule Q):
    not one the calendar has not decided yet (after `watermark`, or in
    `pending`: held, waiting or active), nor one in `admitted` (admitted
    before, or decided by an earlier backfill). `paused_until`: the schedule
    is paused and the request made then; the paused span up to it is
    consumed (rule A: the resume moves the watermark past it, so the
    calendar never decides those instants) and is the backfill's to take."""
    decided_upto = watermark if paused_until is None else max(watermark, paused_until)
    plan: list[datetime] = []
    already = left = 0
    for instant in instants:
        if instant > decided_upto or instant in pending:
            left += 1
        elif instant in admitted:
            already += 1
        else:
            plan.append(instant)
    return BackfillPlan(tuple(plan), already, left)


def trigger_instant(
    trigger: CompiledTrigger,
    requested: datetime,
    *,
    after: datetime | None,
    taken: Collection[datetime],
) -> datetime:
    """The instant of a trigger requested at `requested` (rule P): the first
    microsecond from `requested` on that is after `after` (the previous
    trigger), not in `taken`, and not a calendar instant of `trigger`."""
    instant = requested if after is None or requested > after else after + _TICK
    while instant in taken or trigger.next_after(instant - _TICK) == instant:
        instant += _TICK
    return instant


def backfill_to_payload(backfill: Backfill) -> dict[str, Any]:
    """The JSON form of `backfill` (runtime records, the API)."""
    return {
        "start": _iso(backfill.start),
        "end": _iso(backfill.end),
        "overlap": backfill.overlap,
        "requested_at": _iso(backfill.requested_at),
        "state": backfill.state,
        "planned": backfill.planned,
        "admitted": backfill.admitted,
        "remaining": [_iso(instant) for instant in backfill.remaining],
        "already_admitted": backfill.already_admitted,
        "left_to_calendar": backfill.left_to_calendar,
        "ended_at": None if backfill.ended_at is None else _iso(backfill.ended_at),
    }


def backfill_from_payload(payload: object) -> Backfill:
    """The `Backfill` a payload of `backfill_to_payload` describes; raises
    ValueError naming what is wrong."""
    if not isinstance(payload, Mapping):
        raise ValueError(f"backfill must be an object, got {type(payload).__name__}")
    try:
        remaining = payload["remaining"]
        if not isinstance(remaining, list):
            raise ValueError("backfill.remaining must be a list")
        backfill = Backfill(
            start=_instant(payload["start"], "start"),
            end=_instant(payload["end"], "end"),
            overlap=check_overlap_override(payload["overlap"], "backfill.overlap"),
            requested_at=_instant(payload["requested_at"], "requested_at"),
            state=_state(payload["state"]),
            planned=_count(payload["planned"], "planned"),
            admitted=_count(payload["admitted"], "admitted"),
            remaining=tuple(_instant(text, "remaining") for text in remaining),
            already_admitted=_count(payload.get("already_admitted", 0), "already_admitted"),
            left_to_calendar=_count(payload.get("left_to_calendar", 0), "left_to_calendar"),
            ended_at=None
            if payload.get("ended_at") is None
            else _instant(payload["ended_at"], "ended_at"),
        )
    except KeyError as missing:
        raise ValueError(f"backfill.{missing.args[0]} is missing") from None
    except InvalidInput as bad:
        raise ValueError(str(bad)) from None
    if list(backfill.remaining) != sorted(set(backfill.remaining)):
        raise ValueError("backfill.remaining must be distinct instants, oldest first")
    if backfill.admitted + len(backfill.remaining) > backfill.planned:
        raise ValueError("backfill.admitted and remaining exceed planned")
    if (backfill.state == "running") != (backfill.ended_at is None):
        raise ValueError("backfill.ended_at is set exactly when it is not running")
    return backfill


def _instant(text: object, name: str) -> datetime:
    if not isinstance(text, str):
        raise ValueError(f"backfill.{name} must be an instant string")
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"backfill.{name} must be an instant, got {text!r}") from None
    if value.utcoffset() is None:
        raise ValueError(f"backfill.{name} must have a UTC offset")
    return value.astimezone(UTC)


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"backfill.{name} must be a non-negative integer")
    return value


def _state(value: object) -> BackfillState:
    if value not in BACKFILL_STATES:
        raise ValueError(f"backfill.state must be one of {sorted(BACKFILL_STATES)}")
    return value  # type: ignore[return-value]


def _iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")
