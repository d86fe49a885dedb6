"""Small builders shared by the decide unit tests and the property tests."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from core.commands import Command, PersistRuntime, RecordOccurrence
from core.decide import decide
from core.definitions import ScheduleDefinition, parse_definition
from core.events import Event, ScheduleCreated
from core.state import SchedulerState, initial_state

__all__ = ["DAY", "at", "cron", "kinds", "oneshot", "persisted", "rows", "run", "started_state"]

DAY = datetime(2024, 1, 15, tzinfo=UTC)


def at(hour: int, minute: int = 0, second: int = 0, *, day: int = 0) -> datetime:
    """An instant on the test day (2024-01-15, UTC), `day` days later."""
    return DAY + timedelta(days=day, hours=hour, minutes=minute, seconds=second)


def cron(
    schedule_id: str = "r", expression: str = "0 * * * *", timezone: str = "UTC", **fields: Any
) -> ScheduleDefinition:
    payload: dict[str, Any] = {
        "schedule_id": schedule_id,
        "deployment_id": "report.default",
        "trigger": {"kind": "cron", "expression": expression, "timezone": timezone},
    }
    payload.update(fields)
    return parse_definition(payload)


def oneshot(schedule_id: str, when: datetime, **fields: Any) -> ScheduleDefinition:
    payload: dict[str, Any] = {
        "schedule_id": schedule_id,
        "deployment_id": "report.default",
        "trigger": {"kind": "oneshot", "at": when.isoformat()},
    }
    payload.update(fields)
    return parse_definition(payload)


def run(
    state: SchedulerState, now: datetime, *events: Event
) -> tuple[SchedulerState, tuple[Command, ...]]:
    return decide(state, now, events)


def started_state(
    *definitions: ScheduleDefinition, capacity: int = 4, created: datetime | None = None
) -> SchedulerState:
    """A state where `definitions` were created at `created` (09:30 by default)."""
    when = created or at(9, 30)
    state, _ = decide(
        initial_state(max_concurrent_runs=capacity),
        when,
        [ScheduleCreated(definition=d, at=when) for d in definitions],
    )
    return state


def kinds(commands: Sequence[Command]) -> list[str]:
    """Command class names, for assertions on order."""
    return [type(c).__name__ for c in commands]


def rows(commands: Sequence[Command]) -> list[tuple[str, datetime, str]]:
    return [
        (c.schedule_id, c.instant, c.status) for c in commands if isinstance(c, RecordOccurrence)
    ]


def persisted(commands: Sequence[Command]) -> list[PersistRuntime]:
    return [c for c in commands if isinstance(c, PersistRuntime)]
