"""Turning caller values into plain JSON values before they are checked or stored.

Callers (the scheduler in particular) may hand over immutable mappings and
sequences (`Mapping`, tuples, pyrsistent maps/vectors). The host stores plain
JSON, so those are thawed into dicts and lists; anything that is not JSON
(NaN, infinities, non-string keys, lone surrogates, other objects) is a
problem at `field`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from core.errors import Problem
from core.limits import MAX_SAFE_INTEGER

__all__ = ["NotJson", "as_json", "copy_json", "json_problem"]


class NotJson(ValueError):
    """The value at `path` is not JSON, for `reason`."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def _text(value: str, where: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate ("\\ud800" in JSON) is no Unicode text: no record
        # holding it could be written.
        raise NotJson(where, "a string holds a lone surrogate") from None
    return value


def _thaw(value: Any, where: str) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _text(value, where)
    if isinstance(value, int):
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            # JSON peers that read numbers as doubles could not hold it exactly.
            raise NotJson(where, f"an integer outside ±{MAX_SAFE_INTEGER} (2^53 - 1)")
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJson(where, f"{value!r} is not a JSON number")
        return value
    if isinstance(value, Mapping):
        thawed: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotJson(where, f"key {key!r} is not a string")
            _text(key, where)
            thawed[key] = _thaw(item, f"{where}.{key}")
        return thawed
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return [_thaw(item, f"{where}.{index}") for index, item in enumerate(value)]
    raise NotJson(where, f"{type(value).__name__} is not a JSON value")


def as_json(value: Any, field: str) -> Any:
    """A plain-JSON deep copy of `value`. Raises NotJson naming the offending path."""
    return _thaw(value, field)


_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def copy_json(value: Any) -> Any:
    """A deep copy of a plain JSON value the host already holds (dicts, lists
    and scalars only): `as_json` without its checks, and several times
    cheaper than `copy.deepcopy`, which every run listener's call paid."""
    if isinstance(value, dict):
        # A scalar item is its own copy: no call for it (origins are flat).
        return {
            key: item if type(item) in _SCALARS else copy_json(item) for key, item in value.items()
        }
    if isinstance(value, list):
        return [item if type(item) in _SCALARS else copy_json(item) for item in value]
    return value


def json_problem(exc: NotJson) -> Problem:
    """The Problem naming where a value is not JSON."""
    return Problem(field=exc.path, reason=f"is not JSON: {exc.reason}")
