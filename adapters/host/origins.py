"""Run origins: who asked for a run.

`{"kind": "manual"}` (the default), or
`{"kind": "schedule", "schedule_id": str, "instant": ISO-8601 UTC, "revision": int >= 1}`
for a run the scheduler admitted for one occurrence of a schedule revision,
with `"action": "trigger"` or `"backfill"` when an operator's request opened
the occurrence (absent for a calendar instant).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from core.errors import Problem
from core.limits import MAX_SAFE_INTEGER

from .identifiers import check_positive_int
from .jsonvalues import NotJson, as_json, json_problem

__all__ = ["MANUAL", "check_origin"]

MANUAL: Final = {"kind": "manual"}
_SCHEDULE_KEYS: Final = frozenset({"kind", "schedule_id", "instant", "revision"})
# The order a stored schedule origin keeps its keys in (a herd stores thousands).
_STORED_ORDER: Final = tuple(sorted(_SCHEDULE_KEYS))
_KNOWN_SCHEDULE_KEYS: Final = _SCHEDULE_KEYS | {"action"}
_UTC_OFFSET: Final = timedelta(0)
_ACTIONS: Final = frozenset({"trigger", "backfill"})


# Cached by text: a herd's origins all carry the same instant, and a spread
# minute's share a few dozen.
@functools.lru_cache(maxsize=1 << 10)
def _is_utc_instant(text: str) -> bool:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return False
    return parsed.utcoffset() == _UTC_OFFSET


def _flat_copy(origin: Mapping[Any, Any]) -> dict[str, Any] | None:
    """A copy of an origin that is a plain dict of text and small integers
    (every origin the scheduler makes), or None for anything else, which
    `as_json` then checks in full: a herd admits thousands at once."""
    if type(origin) is not dict:
        return None
    for key, value in origin.items():
        if type(key) is not str or not key.isascii():
            return None
        kind = type(value)
        if kind is str:
            if not value.isascii():
                return None  # checked in full: a lone surrogate is no text
        elif kind is not int or not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return None
    return dict(origin)


def _scheduled(origin: Any) -> dict[str, Any] | None:
    """The origin to store for a valid calendar origin of exactly the four
    keys in plain text and integers (the origin the scheduler gives every
    run it admits), or None for any other value, which `check_origin`
    checks in full: the same answer in a third of the time."""
    if type(origin) is not dict or origin.keys() != _SCHEDULE_KEYS:
        return None
    kind = origin["kind"]
    schedule_id = origin["schedule_id"]
    instant = origin["instant"]
    revision = origin["revision"]
    if (
        type(kind) is str
        and kind == "schedule"
        and type(schedule_id) is str
        and 1 <= len(schedule_id) <= 128
        and schedule_id.isascii()
        and type(instant) is str
        and instant.isascii()
        and _is_utc_instant(instant)
        and type(revision) is int
        and 1 <= revision <= MAX_SAFE_INTEGER
    ):
        return {
            "instant": instant,
            "kind": "schedule",
            "revision": revision,
            "schedule_id": schedule_id,
        }
    return None


def check_origin(origin: Any) -> tuple[dict[str, Any], list[Problem]]:
    """The origin to store (manual for None) and its problems."""
    if origin is None:
        return dict(MANUAL), []
    scheduled = _scheduled(origin)
    if scheduled is not None:
        return scheduled, []
    return _checked_in_full(origin)


def _checked_in_full(origin: Any) -> tuple[dict[str, Any], list[Problem]]:
    """`check_origin` of any value but None."""
    if not isinstance(origin, Mapping):
        return {}, [Problem(field="origin", reason="must be an object or null")]
    flat = _flat_copy(origin)
    if flat is not None:
        origin = flat
    else:
        try:
            origin = as_json(origin, "origin")
        except NotJson as exc:
            return {}, [json_problem(exc)]
    kind = origin.get("kind")
    if kind == "manual":
        extra = sorted(set(origin) - {"kind"}, key=str)
        return dict(MANUAL), [
            Problem(field=f"origin.{key}", reason="unknown field for a manual origin")
            for key in extra
        ]
    if kind != "schedule":
        reason = f"must be 'manual' or 'schedule', got {kind!r}"
        return {}, [Problem(field="origin.kind", reason=reason)]
    problems = [
        Problem(field=f"origin.{key}", reason="unknown field for a schedule origin")
        for key in sorted(origin.keys() - _KNOWN_SCHEDULE_KEYS, key=str)
    ]
    action = origin.get("action")
    if "action" in origin and not (type(action) is str and action in _ACTIONS):
        problems.append(
            Problem(
                field="origin.action",
                reason=f"must be 'trigger' or 'backfill' when given, got {action!r}",
            )
        )
    schedule_id = origin.get("schedule_id")
    if not isinstance(schedule_id, str) or not 1 <= len(schedule_id) <= 128:
        problems.append(
            Problem(field="origin.schedule_id", reason="must be a string of 1-128 characters")
        )
    instant = origin.get("instant")
    if not isinstance(instant, str) or not _is_utc_instant(instant):
        problems.append(
            Problem(
                field="origin.instant",
                reason=f"must be an ISO-8601 UTC instant, got {instant!r}",
            )
        )
    problems += check_positive_int("origin.revision", origin.get("revision"))
    kept = {key: origin.get(key) for key in _STORED_ORDER}
    if "action" in origin:
        kept["action"] = action
    return kept, problems
