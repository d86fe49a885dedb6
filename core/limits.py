"""Documented ranges of the integers the API accepts (docs/operations.md, docs/host.md).

Each bound is far beyond any real use and small enough that every layer (file
names, JSON peers that hold numbers as IEEE doubles, datetime arithmetic) can
represent the value exactly.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "MAX_ACTIVE_RUNS",
    "MAX_SAFE_INTEGER",
    "MAX_STEPS",
    "MAX_VERSION",
    "unsafe_integer_paths",
]

# Artifact versions name files: a signed 32-bit range keeps names short.
MAX_VERSION: Final = 2**31 - 1
MAX_STEPS: Final = 1_000_000_000
# As many as the scheduler's max_concurrent_runs may ever allow.
MAX_ACTIVE_RUNS: Final = 100_000
# Integers beyond ±(2^53 - 1) lose precision in JavaScript and many other
# JSON peers (RFC 7493, I-JSON): a value a client could not read back exactly
# is refused rather than stored.
MAX_SAFE_INTEGER: Final = 2**53 - 1


def unsafe_integer_paths(value: object, where: str = "") -> list[str]:
    """Where inside a JSON value an integer lies outside ±MAX_SAFE_INTEGER.

    Paths are `[0].name` style relative to `value` ("" for `value` itself)."""
    found: list[str] = []
    stack: list[tuple[object, str]] = [(value, where)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int):
            if not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                found.append(at)
        elif isinstance(item, dict):
            stack.extend((child, f"{at}.{key}") for key, child in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{at}[{index}]") for index, child in enumerate(item))
    return sorted(found)
