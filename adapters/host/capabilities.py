"""The capabilities a `call` node can invoke: `wf.std.*`.

Each capability checks its params once, when the artifact is created (all
problems reported together with the rest of the plan), and runs many times.
A capability that fails raises `CapabilityError`: the node's outcome is then
`error` (see docs/plans.md). Anything else it raises is a host bug.

| name            | params                         | result                      |
| --------------- | ------------------------------ | --------------------------- |
| wf.std.constant | value: any JSON                | the value                   |
| wf.std.format   | template: string (templates.py)| the rendered string         |
| wf.std.sleep    | seconds: number, 0..86400      | the seconds slept           |
| wf.std.fail     | message: non-empty string      | never: fails with message   |
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from core.errors import Problem

from .jsonvalues import copy_json
from .templates import PathNotSet, ValuePath, parse_template, render

__all__ = [
    "CAPABILITIES",
    "MAX_SLEEP_S",
    "Capability",
    "CapabilityError",
    "Scope",
]

MAX_SLEEP_S: Final = 86_400.0


class CapabilityError(Exception):
    """The capability failed in a way the plan may handle (an `error` outcome)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class Scope:
    """What a running node can see: the run's inputs and the state so far."""

    inputs: Mapping[str, Any]
    state: Mapping[str, Any]


class Capability(Protocol):
    name: str
    # False when the capability can never succeed, so an `ok` edge is a mistake.
    can_succeed: bool

    def check(self, params: Mapping[str, Any], field: str) -> list[Problem]:
        """Problems with `params` (already known to be an object)."""
        ...

    def reads(self, params: Mapping[str, Any]) -> tuple[ValuePath, ...]:
        """The value paths the node reads (for the plan's dangling-state check)."""
        ...

    async def run(self, params: Mapping[str, Any], scope: Scope) -> Any:
        """Execute once. Raises CapabilityError for an `error` outcome."""
        ...


def _unknown_keys(params: Mapping[str, Any], allowed: set[str], field: str) -> list[Problem]:
    return [
        Problem(field=f"{field}.{key}", reason=f"unknown parameter (allowed: {sorted(allowed)})")
        for key in sorted(set(params) - allowed)
    ]


class _Constant:
    name = "wf.std.constant"
    can_succeed = True

    def check(self, params: Mapping[str, Any], field: str) -> list[Problem]:
        problems = _unknown_keys(params, {"value"}, field)
        if "value" not in params:
            problems.append(Problem(field=f"{field}.value", reason="is required"))
        return problems

    def reads(self, params: Mapping[str, Any]) -> tuple[ValuePath, ...]:
        return ()

    async def run(self, params: Mapping[str, Any], scope: Scope) -> Any:
        # A compiled plan is plain JSON (`compile_plan`).
        return copy_json(params["value"])


class _Format:
    name = "wf.std.format"
    can_succeed = True

    def check(self, params: Mapping[str, Any], field: str) -> list[Problem]:
        problems = _unknown_keys(params, {"template"}, field)
        if "template" not in params:
            problems.append(Problem(field=f"{field}.template", reason="is required"))
            return problems
        try:
            parse_template(params["template"])
        except ValueError as exc:
            problems.append(Problem(field=f"{field}.template", reason=str(exc)))
        return problems

    def reads(self, params: Mapping[str, Any]) -> tuple[ValuePath, ...]:
        return parse_template(params["template"]).paths

    async def run(self, params: Mapping[str, Any], scope: Scope) -> Any:
        try:
            return render(parse_template(params["template"]), scope.inputs, scope.state)
        except PathNotSet as exc:
            raise CapabilityError(f"template: {exc}") from None


class _Sleep:
    name = "wf.std.sleep"
    can_succeed = True

    def check(self, params: Mapping[str, Any], field: str) -> list[Problem]:
        problems = _unknown_keys(params, {"seconds"}, field)
        seconds = params.get("seconds")
        if "seconds" not in params:
            problems.append(Problem(field=f"{field}.seconds", reason="is required"))
        elif (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not 0 <= seconds <= MAX_SLEEP_S
        ):
            problems.append(
                Problem(
                    field=f"{field}.seconds",
                    reason=f"must be a number from 0 to {MAX_SLEEP_S:g}, got {seconds!r}",
                )
            )
        return problems

    def reads(self, params: Mapping[str, Any]) -> tuple[ValuePath, ...]:
        return ()

    async def run(self, params: Mapping[str, Any], scope: Scope) -> Any:
        seconds = params["seconds"]
        await asyncio.sleep(seconds)
        return seconds


class _Fail:
    name = "wf.std.fail"
    can_succeed = False

    def check(self, params: Mapping[str, Any], field: str) -> list[Problem]:
        problems = _unknown_keys(params, {"message"}, field)
        message = params.get("message")
        if not isinstance(message, str) or not message:
            problems.append(Problem(field=f"{field}.message", reason="must be a non-empty string"))
        return problems

    def reads(self, params: Mapping[str, Any]) -> tuple[ValuePath, ...]:
        return ()

    async def run(self, params: Mapping[str, Any], scope: Scope) -> Any:
        raise CapabilityError(params["message"])


CAPABILITIES: Final[Mapping[str, Capability]] = {
    capability.name: capability for capability in (_Constant(), _Format(), _Sleep(), _Fail())
}
