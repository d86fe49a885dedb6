"""The API side of the operator's requests: trigger a schedule now, backfill
a past range, cancel a backfill (rules P and Q, `core/operator_actions.py`).

Each call validates everything before its first write (the field and the
reason named, nothing written), then appends the request to the schedule's
lifecycle log, as a pause is, and tells the scheduler service. The service
delivers it to `decide` once, in log order; a request the process dies
before deciding is delivered again at the next start, and one it decided is
not (`shell/recovery.py`).

A trigger's answer is its occurrence: the call waits (up to `TRIGGER_WAIT_S`)
for the row the scheduler writes. A backfill's answer is its plan as the
stores show it when the request is made; its progress is in `get_schedule`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from core.calendar import compile_trigger
from core.definitions import ScheduleDefinition, parse_definition
from core.errors import InvalidDefinition, InvalidInput, InvalidState, Problem
from core.operator_actions import (
    Backfill,
    backfill_from_payload,
    backfill_to_payload,
    calendar_instants,
    overlap_refusal,
    plan_backfill,
    range_problems,
    trigger_instant,
)
from shell.store_format import format_instant, parse_instant

__all__ = [
    "TRIGGER_WAIT_S",
    "backfill_plan_view",
    "backfill_view",
    "checked_range",
    "predicted_trigger_instant",
    "refuse_unless_live",
    "stored_backfill",
    "trigger_refusal",
    "wait_for_trigger",
]

# How long a trigger call waits for the scheduler to decide its request.
TRIGGER_WAIT_S: Final = 10.0
_POLL_S: Final = 0.02


def refuse_unless_live(snapshot: Mapping[str, Any], action: str) -> ScheduleDefinition:
    """The schedule's definition, or InvalidState when `action` cannot apply
    to it (deleted, blocked, or a definition that no longer parses)."""
    schedule_id = snapshot["schedule_id"]
    data = {"schedule_id": schedule_id}
    if snapshot["deleted"]:
        raise InvalidState(f"schedule {schedule_id!r} is deleted: it cannot be {action}", data=data)
    blocked = snapshot.get("blocked")
    if blocked is not None:
        raise InvalidState(
            f"schedule {schedule_id!r} is blocked ({blocked.get('reason')}): it cannot be"
            f" {action} until its records are repaired",
            data=data,
        )
    try:
        return parse_definition(dict(snapshot["definition"]))
    except InvalidDefinition as exc:
        raise InvalidState(
            f"schedule {schedule_id!r} has a definition that does not parse: {exc.message}",
            data=data,
        ) from None


def trigger_refusal(active: int, definition: ScheduleDefinition, overlap: str | None) -> str | None:
    """Why a trigger is refused now by the schedule's overlap policy, or None."""
    return overlap_refusal(active, definition.active_run_limit, overlap)


def predicted_trigger_instant(
    definition: ScheduleDefinition,
    at: datetime,
    taken: tuple[datetime, ...],
    after: datetime | None,
) -> datetime:
    """The instant `decide` gives a trigger requested at `at` (rule P), as far
    as this process knows the schedule (`after`: its newest trigger)."""
    return trigger_instant(compile_trigger(definition.trigger), at, after=after, taken=taken)


def checked_range(
    definition: ScheduleDefinition, start: object, end: object, now: datetime
) -> tuple[datetime, datetime, tuple[datetime, ...]]:
    """`start`, `end` as instants and the calendar instants of `[start, end)`;
    InvalidInput naming the field for a bad range or one beyond the bound."""
    parsed: dict[str, object] = {}
    problems: list[Problem] = []
    for name, value in (("start", start), ("end", end)):
        if isinstance(value, str):
            try:
                parsed[name] = parse_instant(value)
            except (ValueError, OverflowError) as exc:
                problems.append(Problem(field=name, reason=f"must be an instant: {exc}"))
        else:
            parsed[name] = value
    if problems:
        raise InvalidInput.from_problems("backfill", problems)
    problems = range_problems(parsed["start"], parsed["end"], now)
    if problems:
        raise InvalidInput.from_problems("backfill", problems)
    first, last = parsed["start"], parsed["end"]
    assert isinstance(first, datetime) and isinstance(last, datetime)
    instants = calendar_instants(compile_trigger(definition.trigger), first, last)
    return first, last, instants


def stored_backfill(record: Mapping[str, Any] | None) -> Backfill | None:
    """The backfill a runtime record holds (running or ended), if any."""
    if record is None or record.get("backfill") is None:
        return None
    return backfill_from_payload(record["backfill"])


def backfill_plan_view(
    *,
    start: datetime,
    end: datetime,
    overlap: str | None,
    requested_at: datetime,
    instants: tuple[datetime, ...],
    watermark: datetime,
    pending: tuple[datetime, ...],
    decided: frozenset[datetime],
    paused_until: datetime | None,
) -> dict[str, Any]:
    """What a backfill request answers: its plan as the stores show it now
    (the scheduler plans again when it applies the request, from the same
    rule, and that plan is the one `get_schedule` then shows)."""
    plan = plan_backfill(
        instants,
        watermark=watermark,
        pending=pending,
        admitted=decided,
        paused_until=paused_until,
    )
    return {
        "start": format_instant(start),
        "end": format_instant(end),
        "overlap": overlap,
        "requested_at": format_instant(requested_at),
        "state": "requested",
        "instants": len(instants),
        "planned": len(plan.instants),
        "already_admitted": plan.already_admitted,
        "left_to_calendar": plan.left_to_calendar,
        "first": format_instant(plan.instants[0]) if plan.instants else None,
        "last": format_instant(plan.instants[-1]) if plan.instants else None,
    }


def backfill_view(backfill: Backfill | None) -> dict[str, Any] | None:
    """The schedule's backfill as `get_schedule` shows it: the request, the
    counts, and the next instant instead of the whole remaining list."""
    if backfill is None:
        return None
    payload = backfill_to_payload(backfill)
    remaining = payload.pop("remaining")
    payload["remaining"] = len(remaining)
    # A cancelled backfill keeps the instants it never admitted, and admits
    # none of them.
    payload["next"] = remaining[0] if remaining and backfill.state == "running" else None
    return payload


async def wait_for_trigger(
    read: Any, schedule_id: str, instant: datetime, *, budget_s: float = TRIGGER_WAIT_S
) -> dict[str, Any] | None:
    """The trigger occurrence at `instant` once the scheduler wrote it
    (`read`: the history's `occurrence_at`), or None when it did not within
    `budget_s` (no scheduler is running, or it is busy)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget_s
    while True:
        row: dict[str, Any] | None = await read(schedule_id, instant, "trigger")
        if row is not None or loop.time() >= deadline:
            return row
        await asyncio.sleep(_POLL_S)
