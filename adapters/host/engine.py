"""Executes a compiled plan from a position until it stops.

Theory of operation. A position is (next node, state, steps used). Visiting a
node costs one step; before each visit the budget is checked, so a run whose
next visit would exceed `max_steps` stops `exhausted` at that node. A call
node runs its capability: success writes the result to `state[state_key]`
and follows the `ok` edge; a `CapabilityError` writes `{"error": message}`
and follows the `error` edge, or stops the run `failed` when there is none.
Visiting an interrupt node stops the run `interrupted` at that node (the
resume payload is delivered by the host, which then continues from the
interrupt's `ok` edge without another step). Reaching `__end__` evaluates the
output mapping and the optional output schema: the run `completed`, or
`failed` if the output cannot be produced.

The engine owns no storage: after every step that does not stop the run it
awaits `record_step(entry, position)`, which the host makes durable, and it
returns the `Stop` for the host to checkpoint. A step that reaches `__end__`
is not recorded on its own: its trace entry goes with the stop (`Stop.entry`),
one write instead of two. Cancellation propagates
untouched (nothing is recorded for the interrupted step).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from core.fast_init import fast_init

from .capabilities import CAPABILITIES, CapabilityError, Scope
from .jsonvalues import copy_json
from .plans import END, Plan
from .schemas import validate_instance
from .templates import PathNotSet, resolve

__all__ = ["Position", "Stop", "StopStatus", "execute", "trace_entry"]

StopStatus = Literal["interrupted", "completed", "failed", "exhausted"]


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Position:
    """Where execution continues: the next node (or END), the state, steps used."""

    node: str
    state: dict[str, Any]
    steps: int


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Stop:
    status: StopStatus
    # For interrupted/exhausted: the node to continue at; failed: the failing
    # node (or END when the output failed); completed: END.
    position: Position
    # The trace entry of the step that stopped the run, or that reached END,
    # when a step did.
    entry: dict[str, Any] | None = None
    output: Any = None
    # {"kind", "message", "node"} for failed and exhausted runs.
    error: dict[str, Any] | None = field(default=None)


def trace_entry(
    *,
    step: int,
    attempt: int,
    node: str,
    kind: str,
    outcome: str,
    at: str,
    capability: str | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    """One trace record; `outcome` is ok, error, interrupted or resumed."""
    entry: dict[str, Any] = {
        "step": step,
        "attempt": attempt,
        "node": node,
        "kind": kind,
        "outcome": outcome,
        "at": at,
    }
    if capability is not None:
        entry["capability"] = capability
    if message is not None:
        entry["message"] = message
    return entry


def _finish(
    plan: Plan, inputs: Mapping[str, Any], position: Position, entry: dict[str, Any] | None = None
) -> Stop:
    """The stop at END; `entry` is the trace entry of the step that reached it
    (None when the run resumed at END)."""
    output: dict[str, Any] = {}
    for key, path in plan.output.items():
        try:
            output[key] = copy_json(resolve(path, inputs, position.state))
        except PathNotSet as exc:
            return Stop(
                status="failed",
                position=position,
                entry=entry,
                error={"kind": "output", "message": f"output.{key}: {exc}", "node": None},
            )
    if plan.output_schema is not None:
        problems = validate_instance("output", plan.output_schema, output)
        if problems:
            summary = "; ".join(f"{p.field}: {p.reason}" for p in problems)
            return Stop(
                status="failed",
                position=position,
                entry=entry,
                error={
                    "kind": "output",
                    "message": f"output does not match output_schema: {summary}",
                    "node": None,
                },
            )
    return Stop(status="completed", position=position, entry=entry, output=output)


async def execute(
    plan: Plan,
    inputs: Mapping[str, Any],
    position: Position,
    *,
    max_steps: int | None,
    attempt: int,
    now: Callable[[], str],
    record_step: Callable[[dict[str, Any], Position], Awaitable[None]],
) -> Stop:
    """Run from `position` until the run stops; see the module docstring."""
    node_id = position.node
    # Plain JSON (plans, inputs and checkpoints are): copied without
    # `copy.deepcopy`'s memo and dispatch, once per run.
    state = copy_json(position.state)
    steps = position.steps
    while True:
        here = Position(node=node_id, state=state, steps=steps)
        if node_id == END:
            return _finish(plan, inputs, here)
        if max_steps is not None and steps >= max_steps:
            return Stop(
                status="exhausted",
                position=here,
                error={
                    "kind": "budget",
                    "message": (
                        f"step budget exhausted: max_steps={max_steps} used up "
                        f"before node {node_id!r}"
                    ),
                    "node": node_id,
                },
            )
        node = plan.nodes[node_id]
        steps += 1
        if node.kind == "interrupt":
            entry = trace_entry(
                step=steps,
                attempt=attempt,
                node=node_id,
                kind="interrupt",
                outcome="interrupted",
                at=now(),
            )
            return Stop(
                status="interrupted",
                position=Position(node=node_id, state=state, steps=steps),
                entry=entry,
            )
        assert node.capability is not None
        capability = CAPABILITIES[node.capability]
        try:
            result = await capability.run(node.params, Scope(inputs=inputs, state=state))
        except CapabilityError as exc:
            entry = trace_entry(
                step=steps,
                attempt=attempt,
                node=node_id,
                kind="call",
                capability=node.capability,
                outcome="error",
                message=exc.message,
                at=now(),
            )
            if "error" not in node.edges:
                return Stop(
                    status="failed",
                    position=Position(node=node_id, state=state, steps=steps),
                    entry=entry,
                    error={"kind": "node", "message": exc.message, "node": node_id},
                )
            state = {**state, node.state_key: {"error": exc.message}}
            node_id = node.edges["error"]
        else:
            entry = trace_entry(
                step=steps,
                attempt=attempt,
                node=node_id,
                kind="call",
                capability=node.capability,
                outcome="ok",
                at=now(),
            )
            state = {**state, node.state_key: result}
            node_id = node.edges["ok"]
        if node_id == END:
            # The step that reaches the end is recorded with the run's stop,
            # in one write: nothing happens between the two but evaluating
            # the output, so a crash there leaves the same truth (an
            # executing run whose last step is not recorded) as a crash
            # during the step.
            return _finish(plan, inputs, Position(node=END, state=state, steps=steps), entry)
        await record_step(entry, Position(node=node_id, state=state, steps=steps))
        # Yield once per step so a tight loop of instant nodes cannot starve the loop.
        await asyncio.sleep(0)
