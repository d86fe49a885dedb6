"""Schedule definitions: the validated, immutable description of a schedule.

Definitions arrive as JSON-like mappings from the API. `parse_definition` and
`parse_patch` turn them into frozen pydantic models or raise one
`InvalidDefinition` that lists every problem at once, each as a dotted field
path (`trigger.expression`, `inputs.report_date`) and an operator-readable
reason. Cross-field rules (overlap vs `max_active_runs`) are reported together
with the field problems whenever the fields they read are themselves valid.

Models are frozen and hashable so they can be shared by value between the
core's immutable states and used as cache keys.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from functools import lru_cache
from typing import Annotated, Any, Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from core.bindings import binding_problems
from core.errors import InvalidDefinition, Problem
from core.limits import MAX_ACTIVE_RUNS, MAX_SAFE_INTEGER, MAX_STEPS, unsafe_integer_paths

__all__ = [
    "DEFINITION_FIELDS",
    "PATCHABLE_FIELDS",
    "CronTrigger",
    "OneShotTrigger",
    "ScheduleDefinition",
    "SchedulePatch",
    "Trigger",
    "apply_patch",
    "apply_update",
    "check_oneshot_in_future",
    "definition_to_payload",
    "parse_definition",
    "parse_patch",
    "parse_update",
]

_TRIGGER_KINDS: Final = ("oneshot", "cron")
_CRON_FIELDS: Final = ("minute", "hour", "day-of-month", "month", "day-of-week")
# croniter's `R` asks for random values: a calendar must be deterministic.
_RANDOM_TOKEN: Final = re.compile(r"(?<![a-z])r(?![a-z])", re.IGNORECASE)
_SCHEDULE_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_DEPLOYMENT_ID: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")
# Valid zoneinfo keys that name the host's configuration, not a place.
_HOST_ZONES: Final = frozenset({"localtime", "posixrules"})
# Where cron validation starts looking for a first match; any fixed instant works.
_PROBE_START: Final = datetime(2000, 1, 1, tzinfo=UTC)
# More than any calendar needs, and far from the ends of datetime arithmetic:
# decide computes `now - allowance`, which must stay an instant.
_MAX_ALLOWANCE_S: Final = 10 * 366 * 86_400


def _fail(kind: str, reason: str) -> PydanticCustomError:
    return PydanticCustomError(kind, reason)


# --- field validators ---------------------------------------------------------


def _check_instant_input(value: object) -> object:
    # Reject numbers and other lax pydantic datetime inputs: an instant is
    # always written as ISO-8601 text (or given as a datetime from Python).
    if isinstance(value, str | datetime):
        return value
    raise _fail("instant_type", "must be an ISO-8601 date-time string with a UTC offset")


def _aware_utc(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise _fail(
            "naive_datetime",
            "must include a UTC offset (for example 2026-03-29T02:30:00+01:00 or ...Z)",
        )
    try:
        return value.astimezone(UTC)
    except OverflowError:
        # 0001-01-01T00:00:00+01:00 is a valid text but no UTC instant.
        raise _fail("instant_range", "is outside the range of instants") from None


# Every start validates every schedule's definition again, and schedules share
# a handful of expressions: each is checked once (a bad one raises, which
# lru_cache does not remember).
@lru_cache(maxsize=4096)
def _check_cron_expression(value: str) -> str:
    fields = value.split()
    if len(fields) != len(_CRON_FIELDS):
        raise PydanticCustomError(
            "cron_fields",
            "must have exactly five fields (minute hour day-of-month month day-of-week), "
            "got {count}",
            {"count": len(fields)},
        )
    for name, field_text in zip(_CRON_FIELDS, fields, strict=True):
        if _RANDOM_TOKEN.search(field_text):
            raise _fail(
                "cron_random",
                f"{name} field {field_text!r}: random values ('R') are not allowed",
            )
    normalized = " ".join(fields)
    _probe_cron(normalized)
    return normalized


@lru_cache(maxsize=1024)
def _probe_cron(expression: str) -> None:
    try:
        croniter(expression, _PROBE_START, day_or=True).get_next(datetime)
    except (ValueError, KeyError, TypeError) as exc:
        # croniter's errors are ValueError subclasses; the "bad date" one
        # means the fields are well-formed but never match (31 April).
        if type(exc).__name__ == "CroniterBadDateError":
            raise _fail("cron_never", "never matches any date") from None
        raise _fail("cron_invalid", f"is not a valid cron expression: {exc}") from None


def _check_timezone(value: str) -> str:
    if value in _HOST_ZONES:
        raise _fail(
            "timezone_host",
            f"{value!r} names the host's configuration; give an IANA zone such as Europe/Berlin",
        )
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # OSError: the lookup is a file path (a name too long for the
        # filesystem, a directory such as "America").
        raise _fail(
            "timezone_unknown",
            f"unknown time zone {value!r}; give an IANA name such as UTC or Europe/Berlin",
        ) from None
    return value


def _check_schedule_id(value: str) -> str:
    if not _SCHEDULE_ID.fullmatch(value):
        raise _fail(
            "schedule_id",
            "must be 1-128 characters of letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
        )
    return value


def _check_deployment_id(value: str) -> str:
    if not _DEPLOYMENT_ID.fullmatch(value):
        raise _fail(
            "deployment_id",
            "must be 1-200 characters of letters, digits, '.', '_' or '-', "
            "starting with a letter, digit or '_'",
        )
    return value


def _check_input_value(value: JsonValue) -> JsonValue:
    found = binding_problems(value)
    found += [
        f"integer{' at ' + path if path else ''} is outside ±{MAX_SAFE_INTEGER} (2^53 - 1)"
        for path in unsafe_integer_paths(value)
    ]
    if found:
        raise _fail("binding", "; ".join(found))
    return value


def _at_most(maximum: int) -> Any:
    def check(value: int) -> int:
        if not 1 <= value <= maximum:
            raise _fail("range", f"must be at least 1 and at most {maximum}")
        return value

    return AfterValidator(check)


def _check_allowance(value: float) -> float:
    # -0.0 compares equal to 0 but would be stored and shown as a negative.
    negative = math.copysign(1.0, value) < 0
    if not math.isfinite(value) or negative or not 0 <= value <= _MAX_ALLOWANCE_S:
        raise _fail(
            "allowance",
            f"must be a finite number of seconds >= 0 and at most {_MAX_ALLOWANCE_S} (ten years)"
            + (", not -0.0" if negative and value == 0 else ""),
        )
    return float(value)


Instant = Annotated[datetime, BeforeValidator(_check_instant_input), AfterValidator(_aware_utc)]
CronExpression = Annotated[str, Field(strict=True), AfterValidator(_check_cron_expression)]
TimezoneName = Annotated[str, Field(strict=True), AfterValidator(_check_timezone)]
ScheduleId = Annotated[str, Field(strict=True), AfterValidator(_check_schedule_id)]
DeploymentId = Annotated[str, Field(strict=True), AfterValidator(_check_deployment_id)]
InputValue = Annotated[JsonValue, AfterValidator(_check_input_value)]
Inputs = dict[str, InputValue]
ActiveRunLimit = Annotated[int, Field(strict=True), _at_most(MAX_ACTIVE_RUNS)]
StepBudget = Annotated[int, Field(strict=True), _at_most(MAX_STEPS)]
Allowance = Annotated[float, Field(strict=True), AfterValidator(_check_allowance)]
Overlap = Literal["skip", "parallel"]
Misfire = Literal["skip", "latest"]


# --- models -------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OneShotTrigger(_Model):
    """Fires once, at `at` (normalized to UTC; the input must carry an offset)."""

    kind: Literal["oneshot"] = "oneshot"
    at: Instant


class CronTrigger(_Model):
    """Five-field Unix cron `expression` evaluated in the IANA zone `timezone`.

    Day-of-month and day-of-week match with OR when both are restricted; `0`
    and `7` both mean Sunday. croniter resolves DST gaps and folds.
    """

    kind: Literal["cron"] = "cron"
    expression: CronExpression
    timezone: TimezoneName = "UTC"


Trigger = Annotated[OneShotTrigger | CronTrigger, Field(discriminator="kind")]


def _overlap_problems(overlap: str, max_active_runs: int | None) -> list[Problem]:
    if overlap == "parallel" and max_active_runs is None:
        return [
            Problem(
                field="max_active_runs",
                reason="is required with overlap 'parallel' (a positive limit)",
            )
        ]
    if overlap == "skip" and max_active_runs not in (None, 1):
        return [
            Problem(
                field="max_active_runs",
                reason=f"must be absent or 1 with overlap 'skip', got {max_active_runs}",
            )
        ]
    return []


class ScheduleDefinition(_Model):
    """A complete schedule definition (without its revision, which the store keeps)."""

    schedule_id: ScheduleId
    deployment_id: DeploymentId
    trigger: Trigger
    inputs: Inputs = Field(default_factory=dict)
    overlap: Overlap = "skip"
    max_active_runs: ActiveRunLimit | None = None
    misfire: Misfire = "skip"
    lateness_allowance_s: Allowance = 60.0
    max_steps: StepBudget | None = None

    @model_validator(mode="after")
    def _cross_field(self) -> ScheduleDefinition:
        problems = _overlap_problems(self.overlap, self.max_active_runs)
        if problems:
            raise _fail(_CROSS_FIELD, "; ".join(f"{p.field}: {p.reason}" for p in problems))
        return self

    @property
    def active_run_limit(self) -> int:
        """How many active runs this schedule may have at once."""
        if self.overlap == "parallel" and self.max_active_runs is not None:
            return self.max_active_runs
        return 1

    def __hash__(self) -> int:
        # `inputs` is a dict, so hash its canonical JSON text instead.
        inputs = json.dumps(self.inputs, sort_keys=True, separators=(",", ":"))
        return hash(
            tuple(inputs if name == "inputs" else getattr(self, name) for name in DEFINITION_FIELDS)
        )


class SchedulePatch(_Model):
    """An update: every field that is not None replaces the definition's value.

    `schedule_id` cannot be changed. None means "unpatched", so an optional
    field cannot be cleared by a patch; see `apply_patch` for how switching
    overlap to "skip" treats `max_active_runs`.
    """

    deployment_id: DeploymentId | None = None
    trigger: Trigger | None = None
    inputs: Inputs | None = None
    overlap: Overlap | None = None
    max_active_runs: ActiveRunLimit | None = None
    misfire: Misfire | None = None
    lateness_allowance_s: Allowance | None = None
    max_steps: StepBudget | None = None

    def __hash__(self) -> int:
        return hash(json.dumps(self.model_dump(mode="json"), sort_keys=True))


_CROSS_FIELD: Final = "cross_field"

# The models are where the fields are listed; everything that names them
# (the API's and the client's keyword arguments, the RPC params, the CLI's
# options) follows these, and tests hold the explicit signatures to them.
DEFINITION_FIELDS: Final[tuple[str, ...]] = tuple(ScheduleDefinition.model_fields)
# Every field but the id, in the definition's order.
PATCHABLE_FIELDS: Final[tuple[str, ...]] = tuple(SchedulePatch.model_fields)


# --- parsing and errors -------------------------------------------------------


def _field_path(loc: tuple[int | str, ...]) -> str:
    parts = list(loc)
    # A discriminated union adds the tag as a path segment: trigger.cron.expression.
    for index in range(len(parts) - 1):
        if parts[index] == "trigger" and parts[index + 1] in _TRIGGER_KINDS:
            del parts[index + 1]
            break
    # JsonValue's internal union branches (`list[...]`, `str`) are not fields.
    if parts and parts[0] == "inputs" and len(parts) > 2:
        parts = parts[:2]
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def _reason(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    message = str(error["msg"])
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "union_tag_not_found":
        return "is required: one of 'oneshot', 'cron'"
    if kind == "union_tag_invalid":
        return f"must be 'oneshot' or 'cron', got {error['input'].get('kind')!r}"
    if kind in ("model_attributes_type", "dict_type", "model_type"):
        return "must be an object"
    if message.startswith("Input should be "):
        return "must be " + message.removeprefix("Input should be ")
    return message.removeprefix("Value error, ")


def _problems(exc: ValidationError) -> list[Problem]:
    problems: list[Problem] = []
    for error in exc.errors(include_url=False):
        if error["type"] == _CROSS_FIELD:
            continue  # recomputed with proper field paths by the caller
        field = _field_path(tuple(error["loc"]))
        if error["type"] in ("union_tag_not_found", "union_tag_invalid"):
            field = f"{field}.kind"
        problem = Problem(field=field or "(definition)", reason=_reason(error))
        if problem not in problems:
            problems.append(problem)
    return problems


def _cross_field_from_payload(
    payload: Mapping[str, Any], problems: Iterable[Problem]
) -> list[Problem]:
    # Only judge the combination when both fields it reads are themselves valid.
    bad = {p.field for p in problems}
    if "overlap" in bad or "max_active_runs" in bad:
        return []
    overlap = payload.get("overlap")
    return _overlap_problems("skip" if overlap is None else overlap, payload.get("max_active_runs"))


def _invalid(what: str, problems: Iterable[Problem]) -> InvalidDefinition:
    listed = tuple(problems)
    summary = "; ".join(f"{p.field}: {p.reason}" for p in listed)
    return InvalidDefinition(f"invalid {what}: {summary}", problems=listed)


def _not_a_mapping(what: str, payload: object) -> InvalidDefinition:
    return _invalid(
        what,
        [Problem(field="(definition)", reason=f"must be an object, got {type(payload).__name__}")],
    )


def parse_definition(payload: Mapping[str, Any]) -> ScheduleDefinition:
    """Validate a JSON-like payload into a `ScheduleDefinition`.

    Raises InvalidDefinition listing every problem (field path and reason),
    including unknown fields and the overlap/max_active_runs rules.
    """
    if not isinstance(payload, Mapping):
        raise _not_a_mapping("schedule definition", payload)
    try:
        return ScheduleDefinition.model_validate(dict(payload))
    except ValidationError as exc:
        problems = _problems(exc)
        problems += _cross_field_from_payload(payload, problems)
        raise _invalid("schedule definition", problems) from None


def parse_patch(payload: Mapping[str, Any]) -> SchedulePatch:
    """Validate a JSON-like update payload into a `SchedulePatch`.

    A field that is absent or null is left unpatched. `schedule_id` is not
    patchable and is reported as an unknown field. Cross-field rules are
    checked by `apply_patch`, against the definition being updated.
    """
    if not isinstance(payload, Mapping):
        raise _not_a_mapping("schedule update", payload)
    try:
        return SchedulePatch.model_validate(dict(payload))
    except ValidationError as exc:
        raise _invalid("schedule update", _problems(exc)) from None


def apply_patch(definition: ScheduleDefinition, patch: SchedulePatch) -> ScheduleDefinition:
    """The definition with every non-None field of `patch` applied.

    Switching overlap to "skip" without also patching `max_active_runs` drops
    the old parallel limit (it has no meaning under "skip"). Raises
    InvalidDefinition when the result breaks a cross-field rule (for example
    overlap "parallel" without `max_active_runs`).
    """
    changes = {name: value for name, value in patch if value is not None}
    if changes.get("overlap") == "skip" and "max_active_runs" not in changes:
        changes["max_active_runs"] = None
    merged = {name: getattr(definition, name) for name in ScheduleDefinition.model_fields}
    merged.update(changes)
    problems = _overlap_problems(merged["overlap"], merged["max_active_runs"])
    if problems:
        raise _invalid("schedule update", problems)
    # Every field was validated already; rebuild without re-parsing strings.
    return definition.model_copy(update=changes)


def definition_to_payload(definition: ScheduleDefinition) -> dict[str, Any]:
    """A JSON-safe payload (instants as ISO-8601 with `Z`) that `parse_definition`
    turns back into an equal definition."""
    payload: dict[str, Any] = definition.model_dump(mode="json")
    trigger = payload["trigger"]
    if trigger["kind"] == "oneshot":
        trigger["at"] = _iso_z(definition.trigger.at)  # type: ignore[union-attr]
    return payload


def _iso_z(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def check_oneshot_in_future(definition: ScheduleDefinition, now: datetime) -> None:
    """Reject a one-shot whose instant is not after `now` (aware).

    Creation and update never backfill, so such a schedule could never fire.
    Cron triggers always pass. Raises InvalidDefinition at `trigger.at`.
    """
    trigger = definition.trigger
    if isinstance(trigger, OneShotTrigger) and trigger.at <= now:
        raise _invalid(
            "schedule definition",
            [
                Problem(
                    field="trigger.at",
                    reason=(
                        f"is in the past ({_iso_z(trigger.at)} is not after "
                        f"{_iso_z(now)}); a one-shot must be in the future"
                    ),
                )
            ],
        )


def parse_update(payload: Mapping[str, Any]) -> SchedulePatch:
    """`parse_patch`, and the update must patch at least one field.

    This and `apply_update` are the whole of `update_schedule`'s validation of
    the fields (the deployment and sample inputs aside), shared with anything
    that replays updates, such as the simulator.
    """
    patch = parse_patch(payload)
    if all(value is None for _, value in patch):
        raise _invalid(
            "schedule update",
            [
                Problem(
                    field="(fields)",
                    reason=f"give at least one of {', '.join(PATCHABLE_FIELDS)}",
                )
            ],
        )
    return patch


def apply_update(
    definition: ScheduleDefinition, patch: SchedulePatch, now: datetime
) -> ScheduleDefinition:
    """`apply_patch`, and a patched one-shot trigger must be after `now`.

    Only an update that sets the trigger is held to the future: changing, say,
    `max_steps` of a one-shot that already fired is allowed, as it harms
    nothing (an update never backfills).
    """
    updated = apply_patch(definition, patch)
    if patch.trigger is not None:
        check_oneshot_in_future(updated, now)
    return updated
