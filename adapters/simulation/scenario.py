"""Scenarios: what `wf-schedule simulate` dry-runs, validated in one pass.

A scenario is a JSON object:

    {"start": ISO, "end": ISO, "max_concurrent_runs": 4,
     "schedules": [{<create_schedule payload>, "created_at": ISO, "run": <run model>}],
     "events": [{"at": ISO, "action": "pause|resume|update|delete",
                 "schedule_id": ..., "changes": {<update_schedule fields>}},
                {"at": ISO, "action": "trigger", "schedule_id": ..., "overlap": "allow"?},
                {"at": ISO, "action": "backfill", "schedule_id": ...,
                 "start": ISO, "end": ISO, "overlap": "allow"?},
                {"at": ISO, "action": "cancel-backfill", "schedule_id": ...}],
     "downtime": [{"from": ISO, "to": ISO}],
     "missing_deployments": [{"deployment_id": ..., "from": ISO?, "to": ISO?}]}

`parse_scenario` checks everything (the schedule payloads with the same
parser as `create_schedule`, updates with the same patch rules as
`update_schedule`, backfill ranges with the same bounds as `backfill_schedule`)
and raises one `InvalidInput` whose problems name each bad field as a path
into the scenario (`schedules[0].trigger.expression`, `events[2].at`).
Nothing here reads a file or a clock.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
)
from pydantic_core import PydanticCustomError

from adapters.simulation.runmodel import RunModelSpec
from core.calendar import compile_trigger
from core.definitions import (
    ScheduleDefinition,
    apply_update,
    check_oneshot_in_future,
    parse_definition,
    parse_update,
)
from core.errors import InvalidDefinition, InvalidInput, Problem
from core.operator_actions import calendar_instants, range_problems

__all__ = [
    "Action",
    "DeploymentOutage",
    "DowntimeWindow",
    "OperatorEvent",
    "Scenario",
    "ScenarioSchedule",
    "parse_scenario",
]

Action = Literal["pause", "resume", "update", "delete", "trigger", "backfill", "cancel-backfill"]
# The operator's requests of rules P and Q (`core/operator_actions.py`).
OPERATOR_REQUESTS: Final[frozenset[str]] = frozenset({"trigger", "backfill", "cancel-backfill"})
_SIMULATION_KEYS: Final = ("created_at", "run")


def _instant_text(value: object) -> object:
    if isinstance(value, str | datetime):
        return value
    raise PydanticCustomError("instant_type", "must be an ISO-8601 date-time string with an offset")


def _aware_utc(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise PydanticCustomError(
            "naive_datetime", "must include a UTC offset (for example 2026-03-02T00:00:00Z)"
        )
    return value.astimezone(UTC)


Instant = Annotated[datetime, BeforeValidator(_instant_text), AfterValidator(_aware_utc)]


class _Raw(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=False)


class _RawEvent(_Raw):
    at: Instant
    action: Action
    schedule_id: Annotated[str, Field(strict=True)]
    changes: dict[str, Any] | None = None
    start: Instant | None = None
    end: Instant | None = None
    overlap: Literal["allow"] | None = None


class _RawWindow(_Raw):
    from_: Instant = Field(alias="from")
    to: Instant


class _RawOutage(_Raw):
    deployment_id: Annotated[str, Field(strict=True)]
    from_: Instant | None = Field(default=None, alias="from")
    to: Instant | None = None


class _RawScheduleExtras(_Raw):
    created_at: Instant | None = None
    run: RunModelSpec = RunModelSpec()


class _RawScenario(_Raw):
    title: str | None = None
    description: str | None = None
    start: Instant
    end: Instant
    max_concurrent_runs: Annotated[int, Field(strict=True, ge=1)] = 4
    schedules: Annotated[list[dict[str, Any]], Field(min_length=1)]
    events: list[_RawEvent] = Field(default_factory=list)
    downtime: list[_RawWindow] = Field(default_factory=list)
    missing_deployments: list[_RawOutage] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ScenarioSchedule:
    """One schedule: its parsed definition, when it was created, how its runs go."""

    definition: ScheduleDefinition
    created_at: datetime
    run: RunModelSpec

    @property
    def schedule_id(self) -> str:
        return self.definition.schedule_id


@dataclass(frozen=True, slots=True)
class OperatorEvent:
    """An operator action at `at`. For `update`, `definition` is the whole new
    definition and `revision` its revision; both are None otherwise. For
    `backfill`, `start` and `end` are the range `[start, end)`; `overlap` is
    a trigger's or backfill's override ("allow", or None: the schedule's
    policy)."""

    at: datetime
    action: Action
    schedule_id: str
    definition: ScheduleDefinition | None = None
    revision: int | None = None
    start: datetime | None = None
    end: datetime | None = None
    overlap: str | None = None


@dataclass(frozen=True, slots=True)
class DowntimeWindow:
    """The scheduler decides nothing in `[start, end)`."""

    start: datetime
    end: datetime


@dataclass(frozen=True, slots=True)
class DeploymentOutage:
    """`deployment_id` is missing (preflight fails) in `[start, end)`; None is open."""

    deployment_id: str
    start: datetime | None
    end: datetime | None

    def covers(self, instant: datetime) -> bool:
        return (self.start is None or self.start <= instant) and (
            self.end is None or instant < self.end
        )


@dataclass(frozen=True, slots=True)
class Scenario:
    """A validated scenario. `events` and `downtime` are sorted by time (events
    at the same instant keep the order they were given in)."""

    start: datetime
    end: datetime
    max_concurrent_runs: int
    schedules: tuple[ScenarioSchedule, ...]
    events: tuple[OperatorEvent, ...] = ()
    downtime: tuple[DowntimeWindow, ...] = ()
    missing_deployments: tuple[DeploymentOutage, ...] = ()
    title: str | None = None
    description: str | None = None

    def deployment_missing(self, deployment_id: str, instant: datetime) -> bool:
        return any(
            o.deployment_id == deployment_id and o.covers(instant) for o in self.missing_deployments
        )


# --- problems -----------------------------------------------------------------


def _path(loc: tuple[int | str, ...], data: object, *, missing: bool) -> str:
    # Walk the input alongside the error location: a segment that is not in
    # the input (a union's tag, such as the duration `kind`) is not a field and
    # is dropped, except the last segment of a missing field.
    parts: list[int | str] = []
    node: object = data
    for position, part in enumerate(loc):
        last = position == len(loc) - 1
        present = (isinstance(node, Mapping) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        )
        if present:
            parts.append(part)
            node = node[part]  # type: ignore[index]
        elif last and missing and isinstance(node, Mapping):
            parts.append(part)
    return _join(parts)


def _join(parts: list[int | str]) -> str:
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _reason(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    message = str(error["msg"])
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "too_short":
        return "must not be empty"
    if kind in ("model_attributes_type", "dict_type", "model_type"):
        return "must be an object"
    if kind == "union_tag_invalid":
        return f"unknown kind {error['input'].get('kind')!r}; " + message.split("expected tags: ")[
            -1
        ].join(("expected one of ", ""))
    if kind == "union_tag_not_found":
        return "needs a 'kind'"
    if message.startswith("Input should be "):
        return "must be " + message.removeprefix("Input should be ")
    return message.removeprefix("Value error, ")


def _validation_problems(exc: ValidationError, data: object, prefix: str = "") -> list[Problem]:
    problems: list[Problem] = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        field = _path(loc, data, missing=error["type"] == "missing")
        if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
            field = f"{field}.kind"
        problem = Problem(field=_join_prefix(prefix, field) or "(scenario)", reason=_reason(error))
        if problem not in problems:
            problems.append(problem)
    return problems


def _join_prefix(prefix: str, field: str) -> str:
    if not prefix:
        return field
    if not field or field in ("(definition)", "(fields)"):
        return prefix
    return f"{prefix}{field}" if field.startswith("[") else f"{prefix}.{field}"


def _prefixed(prefix: str, error: InvalidInput) -> list[Problem]:
    return [Problem(field=_join_prefix(prefix, p.field), reason=p.reason) for p in error.problems]


def _iso(instant: datetime) -> str:
    return instant.isoformat().replace("+00:00", "Z")


# --- parsing ------------------------------------------------------------------


def parse_scenario(data: object) -> Scenario:
    """Validate a JSON-like scenario into a `Scenario`.

    Raises InvalidInput listing every problem, each with the path of the
    offending field (`schedules[1].misfire`, `events[0].changes.trigger.at`,
    `downtime[0].to`) and why.
    """
    if not isinstance(data, Mapping):
        raise InvalidInput.from_problems(
            "scenario",
            [Problem(field="(scenario)", reason=f"must be an object, got {type(data).__name__}")],
        )
    problems: list[Problem] = []
    try:
        raw = _RawScenario.model_validate(dict(data))
    except ValidationError as exc:
        problems += _validation_problems(exc, data)
        # Schedules are checked even when the top level is broken, so one
        # run reports everything that is wrong.
        schedules = data.get("schedules")
        if isinstance(schedules, list):
            start = _maybe_instant(data.get("start"))
            end = _maybe_instant(data.get("end"))
            _, more = _parse_schedules(schedules, start, end)
            problems += [p for p in more if p not in problems]
        raise InvalidInput.from_problems("scenario", problems) from None

    if raw.end <= raw.start:
        problems.append(Problem(field="end", reason=f"must be after start ({_iso(raw.start)})"))
    # With an empty horizon, creation times cannot be judged against it.
    horizon_end = raw.end if raw.end > raw.start else None
    schedules, more = _parse_schedules(raw.schedules, raw.start, horizon_end)
    problems += more
    events, more = _parse_events(raw.events, schedules, raw.start, raw.end)
    problems += more
    downtime, more = _parse_downtime(raw.downtime)
    problems += more
    outages: list[DeploymentOutage] = []
    for index, outage in enumerate(raw.missing_deployments):
        if outage.from_ is not None and outage.to is not None and outage.to <= outage.from_:
            problems.append(
                Problem(field=f"missing_deployments[{index}].to", reason="must be after from")
            )
        outages.append(DeploymentOutage(outage.deployment_id, outage.from_, outage.to))
    if problems:
        raise InvalidInput.from_problems("scenario", problems)
    return Scenario(
        start=raw.start,
        end=raw.end,
        max_concurrent_runs=raw.max_concurrent_runs,
        schedules=tuple(schedules.values()),
        events=tuple(events),
        downtime=tuple(downtime),
        missing_deployments=tuple(outages),
        title=raw.title,
        description=raw.description,
    )


def _maybe_instant(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo is not None else None


def _parse_schedules(
    items: list[Any], start: datetime | None, end: datetime | None
) -> tuple[dict[str, ScenarioSchedule], list[Problem]]:
    problems: list[Problem] = []
    found: dict[str, ScenarioSchedule] = {}
    first_index: dict[str, int] = {}
    for index, item in enumerate(items):
        where = f"schedules[{index}]"
        if not isinstance(item, Mapping):
            problems.append(Problem(field=where, reason="must be an object"))
            continue
        payload = {k: v for k, v in item.items() if k not in _SIMULATION_KEYS}
        extras_data = {k: v for k, v in item.items() if k in _SIMULATION_KEYS}
        extras: _RawScheduleExtras | None = None
        definition: ScheduleDefinition | None = None
        try:
            extras = _RawScheduleExtras.model_validate(extras_data)
        except ValidationError as exc:
            problems += _validation_problems(exc, extras_data, where)
        try:
            definition = parse_definition(payload)
        except InvalidDefinition as exc:
            problems += _prefixed(where, exc)
        if extras is None or definition is None or start is None:
            continue
        created_at = extras.created_at or start
        if created_at < start or (end is not None and created_at >= end):
            problems.append(
                Problem(
                    field=f"{where}.created_at",
                    reason="must be inside the horizon (start <= created_at < end)",
                )
            )
            continue
        try:
            check_oneshot_in_future(definition, created_at)
        except InvalidDefinition as exc:
            problems += _prefixed(where, exc)
            continue
        schedule_id = definition.schedule_id
        if schedule_id in first_index:
            problems.append(
                Problem(
                    field=f"{where}.schedule_id",
                    reason=f"{schedule_id!r} is already used by "
                    f"schedules[{first_index[schedule_id]}]",
                )
            )
            continue
        first_index[schedule_id] = index
        found[schedule_id] = ScenarioSchedule(definition, created_at, extras.run)
    return found, problems


def _parse_events(
    items: list[_RawEvent],
    schedules: Mapping[str, ScenarioSchedule],
    start: datetime,
    end: datetime,
) -> tuple[list[OperatorEvent], list[Problem]]:
    problems: list[Problem] = []
    events: list[OperatorEvent] = []
    current = {sid: (s.definition, 1) for sid, s in schedules.items()}
    deleted: dict[str, int] = {}
    # Stable: events at the same instant apply in the order they were given.
    order = sorted(range(len(items)), key=lambda i: items[i].at)
    for index in order:
        item = items[index]
        where = f"events[{index}]"
        if not start <= item.at <= end:
            problems.append(Problem(field=f"{where}.at", reason="must be inside the horizon"))
            continue
        schedule = schedules.get(item.schedule_id)
        if schedule is None:
            problems.append(
                Problem(
                    field=f"{where}.schedule_id",
                    reason=f"no schedule {item.schedule_id!r} in this scenario",
                )
            )
            continue
        if item.at < schedule.created_at:
            problems.append(
                Problem(
                    field=f"{where}.at",
                    reason=f"is before the schedule was created ({_iso(schedule.created_at)})",
                )
            )
            continue
        if item.schedule_id in deleted:
            problems.append(
                Problem(
                    field=f"{where}.schedule_id",
                    reason=f"schedule was deleted by events[{deleted[item.schedule_id]}]",
                )
            )
            continue
        misplaced = _misplaced_fields(item, where)
        if misplaced:
            problems += misplaced
            continue
        if item.action == "backfill":
            definition, _ = current[item.schedule_id]
            more = _range_problems(item, definition, where)
            if more:
                problems += more
                continue
        if item.action != "update":
            if item.action == "delete":
                deleted[item.schedule_id] = index
            events.append(
                OperatorEvent(
                    item.at,
                    item.action,
                    item.schedule_id,
                    start=item.start,
                    end=item.end,
                    overlap=item.overlap,
                )
            )
            continue
        if item.changes is None:
            problems.append(
                Problem(field=f"{where}.changes", reason="is required with action 'update'")
            )
            continue
        definition, revision = current[item.schedule_id]
        try:
            # Exactly update_schedule's rules, at the event's time.
            updated = apply_update(definition, parse_update(item.changes), item.at)
        except InvalidDefinition as exc:
            problems += _prefixed(f"{where}.changes", exc)
            continue
        current[item.schedule_id] = (updated, revision + 1)
        events.append(OperatorEvent(item.at, "update", item.schedule_id, updated, revision + 1))
    return events, problems


# Which action each optional field of an event belongs to.
_FIELD_ACTIONS: Final[dict[str, tuple[str, ...]]] = {
    "changes": ("update",),
    "start": ("backfill",),
    "end": ("backfill",),
    "overlap": ("trigger", "backfill"),
}


def _misplaced_fields(item: _RawEvent, where: str) -> list[Problem]:
    """A field the event's action does not take, or one it needs and lacks."""
    problems: list[Problem] = []
    for name, actions in _FIELD_ACTIONS.items():
        present = getattr(item, name) is not None
        if present and item.action not in actions:
            allowed = " or ".join(repr(action) for action in actions)
            reason = f"is only allowed with action {allowed}"
            problems.append(Problem(field=f"{where}.{name}", reason=reason))
        elif not present and name != "overlap" and item.action in actions:
            reason = f"is required with action {item.action!r}"
            problems.append(Problem(field=f"{where}.{name}", reason=reason))
    return problems


def _range_problems(item: _RawEvent, definition: ScheduleDefinition, where: str) -> list[Problem]:
    """A backfill's range checked as `backfill_schedule` checks it, as of the
    event's `at`: `start < end <= at`, and at most `BACKFILL_LIMIT` calendar
    instants of the schedule's definition at that time (the count named)."""
    problems = [
        Problem(field=f"{where}.{p.field}", reason=p.reason)
        for p in range_problems(item.start, item.end, item.at)
    ]
    if problems:
        return problems
    assert item.start is not None and item.end is not None
    try:
        calendar_instants(compile_trigger(definition.trigger), item.start, item.end)
    except InvalidInput as exc:
        return _prefixed(where, exc)
    return []


def _parse_downtime(
    items: list[_RawWindow],
) -> tuple[list[DowntimeWindow], list[Problem]]:
    problems: list[Problem] = []
    windows: list[tuple[DowntimeWindow, int]] = []
    for index, item in enumerate(items):
        if item.to <= item.from_:
            problems.append(Problem(field=f"downtime[{index}].to", reason="must be after from"))
            continue
        windows.append((DowntimeWindow(item.from_, item.to), index))
    windows.sort(key=lambda pair: pair[0].start)
    for (before, before_index), (after, index) in itertools.pairwise(windows):
        if after.start < before.end:
            problems.append(
                Problem(
                    field=f"downtime[{index}].from",
                    reason=f"overlaps downtime[{before_index}]; merge the windows",
                )
            )
    return [window for window, _ in windows], problems
