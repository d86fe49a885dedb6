"""Figures the reliability tests measure, shown in pytest's terminal summary
(also with -q) by this package's conftest."""

from __future__ import annotations

__all__ = ["FIGURES", "record"]

FIGURES: dict[str, str] = {}


def record(name: str, value: object) -> None:
    FIGURES[name] = str(value)
