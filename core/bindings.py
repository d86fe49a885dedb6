"""Input bindings: values in a schedule's `inputs` filled in per occurrence.

A binding is a JSON object with exactly one key, `"$bind"`, whose value names
what to fill in (see `BINDING_NAMES`). Bindings may appear at any depth inside
lists and objects; each is replaced by its value and everything else is copied
literally. Any object that has a `"$bind"` key must be a well-formed binding,
so a typo never passes through to a run as a literal.

Names are checked when a definition is parsed (`binding_problems`), so
resolution (`resolve_inputs`) cannot fail on a parsed definition.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final
from zoneinfo import ZoneInfo

if TYPE_CHECKING:
    from core.definitions import ScheduleDefinition

__all__ = [
    "BINDING_KEY",
    "BINDING_NAMES",
    "binding_problems",
    "is_binding",
    "resolve_inputs",
    "resolve_value",
]

BINDING_KEY: Final = "$bind"

BINDING_NAMES: Final[tuple[str, ...]] = (
    "occurrence.instant",
    "occurrence.local_instant",
    "occurrence.timezone",
    "schedule.id",
    "schedule.revision",
)


def is_binding(value: object) -> bool:
    """True when `value` is an object carrying the `"$bind"` key (well-formed or not)."""
    return isinstance(value, Mapping) and BINDING_KEY in value


def binding_problems(value: object) -> list[str]:
    """Every malformed or unknown binding inside `value`, as reasons.

    Each reason names the position inside `value` (`[0].name` style) when the
    binding is nested, so one input key can report several bad bindings.
    """
    found: list[str] = []
    _collect(value, "", found)
    return found


def _collect(value: object, where: str, found: list[str]) -> None:
    at = f" at {where}" if where else ""
    if isinstance(value, Mapping):
        if BINDING_KEY in value:
            name = value[BINDING_KEY]
            if len(value) != 1:
                found.append(f"a binding object must have exactly one key '{BINDING_KEY}'{at}")
            elif not isinstance(name, str):
                found.append(f"binding name must be a string{at}")
            elif name not in BINDING_NAMES:
                known = ", ".join(BINDING_NAMES)
                found.append(f"unknown binding {name!r}{at}; known bindings: {known}")
            return
        for key, item in value.items():
            _collect(item, f"{where}.{key}" if where else str(key), found)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _collect(item, f"{where}[{index}]", found)


def _iso_utc(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def resolve_value(value: Any, bound: Mapping[str, Any]) -> Any:
    """`value` with every binding replaced by `bound[name]`; literals are copied."""
    if isinstance(value, Mapping):
        if BINDING_KEY in value:
            return bound[value[BINDING_KEY]]
        return {key: resolve_value(item, bound) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [resolve_value(item, bound) for item in value]
    return value


def resolve_inputs(
    definition: ScheduleDefinition, revision: int, instant: datetime
) -> dict[str, Any]:
    """The run inputs for the occurrence of `definition` at `instant`.

    `instant` must be aware; it is rendered in UTC (`occurrence.instant`, with
    `Z`) and in the trigger's zone (`occurrence.local_instant`, with that
    zone's offset). One-shot triggers have no zone of their own: their local
    instant is the UTC instant and their timezone is "UTC".
    Raises ValueError for a naive `instant`.
    """
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError("instant must be timezone-aware")
    zone_name = getattr(definition.trigger, "timezone", "UTC")
    local = instant.astimezone(ZoneInfo(zone_name))
    bound: dict[str, Any] = {
        "occurrence.instant": _iso_utc(instant),
        "occurrence.local_instant": local.isoformat(),
        "occurrence.timezone": zone_name,
        "schedule.id": definition.schedule_id,
        "schedule.revision": revision,
    }
    return {key: resolve_value(value, bound) for key, value in definition.inputs.items()}
