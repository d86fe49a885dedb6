"""The plan language: model and validation (see docs/plans.md).

A plan is JSON. `compile_plan` checks all of it at once (every problem is
collected into one InvalidInput naming each field under `plan.`) and returns
an immutable `Plan` the engine executes. Validation happens when an artifact
is created, so a stored plan is known to be well-formed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from core.errors import InvalidInput, Problem

from .capabilities import CAPABILITIES
from .jsonvalues import NotJson, as_json, json_problem
from .schemas import check_schema
from .templates import ValuePath, parse_path

__all__ = [
    "END",
    "OUTCOMES",
    "Node",
    "Plan",
    "compile_plan",
]

END: Final = "__end__"
# The outcomes each node kind can have; an edge per outcome names the next node.
OUTCOMES: Final[Mapping[str, frozenset[str]]] = {
    "call": frozenset({"ok", "error"}),
    "interrupt": frozenset({"ok"}),
}
_PLAN_KEYS: Final = frozenset(
    {"name", "input_schema", "output_schema", "start", "nodes", "edges", "output"}
)
_NODE_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "call": frozenset({"id", "kind", "capability", "params", "state_key"}),
    "interrupt": frozenset({"id", "kind", "prompt", "resume_schema", "state_key"}),
}
_KEY_MAX_LENGTH: Final = 128


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    id: str
    kind: Literal["call", "interrupt"]
    # The state key the node's result (or resume payload) is written to.
    state_key: str
    capability: str | None
    params: Mapping[str, Any]
    prompt: str | None
    resume_schema: Any
    # outcome -> next node id or END
    edges: Mapping[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    name: str
    input_schema: Any
    output_schema: Any | None
    start: str
    nodes: Mapping[str, Node]
    output: Mapping[str, ValuePath]
    # The normalized JSON the plan was compiled from (what the artifact stores).
    source: Mapping[str, Any]


def _is_key(value: Any) -> bool:
    # Node ids and state keys must be usable as one path segment (`state.<key>`).
    try:
        path = parse_path(f"state.{value}") if isinstance(value, str) else None
    except ValueError:
        return False
    return (
        path is not None
        and len(path.segments) == 1
        and len(value) <= _KEY_MAX_LENGTH
        and value != END
    )


def _key_problem(field: str, value: Any) -> Problem:
    return Problem(
        field=field,
        reason=(
            f"{value!r} is not a valid key: 1-{_KEY_MAX_LENGTH} letters, digits, '_' or '-', "
            f"and not {END!r}"
        ),
    )


class _Compiler:
    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw
        self.problems: list[Problem] = []
        self.nodes: dict[str, dict[str, Any]] = {}

    def problem(self, field: str, reason: str) -> None:
        self.problems.append(Problem(field=field, reason=reason))

    def run(self) -> Plan | None:
        raw = self.raw
        for key in sorted(set(raw) - _PLAN_KEYS):
            self.problem(f"plan.{key}", f"unknown field (allowed: {sorted(_PLAN_KEYS)})")
        name = raw.get("name")
        if not isinstance(name, str) or not name.strip():
            self.problem("plan.name", "must be a non-empty string")
        if "input_schema" not in raw:
            self.problem("plan.input_schema", "is required")
        else:
            self.problems.extend(check_schema("plan.input_schema", raw["input_schema"]))
        if raw.get("output_schema") is not None:
            self.problems.extend(check_schema("plan.output_schema", raw["output_schema"]))
        # Without a node list, every check that names nodes would only echo that one fault.
        nodes_listed = self.check_nodes(raw.get("nodes"))
        start = raw.get("start")
        if start is None:
            self.problem("plan.start", "is required")
        elif nodes_listed and (not isinstance(start, str) or start not in self.nodes):
            self.problem("plan.start", f"{start!r} is not a node id")
        edges: dict[str, dict[str, str]] = {}
        if nodes_listed:
            raw_edges = raw.get("edges", {})
            edges = self.check_edges(raw_edges)
            if isinstance(raw_edges, dict) and isinstance(start, str) and start in self.nodes:
                self.check_reachable(start, edges)
            self.check_reads()
        output = self.check_output(raw.get("output", {}), check_state=nodes_listed)
        if self.problems:
            return None
        assert isinstance(name, str) and isinstance(start, str)
        nodes = {
            node_id: Node(
                id=node_id,
                kind=spec["kind"],
                state_key=spec.get("state_key", node_id),
                capability=spec.get("capability"),
                params=spec.get("params", {}),
                prompt=spec.get("prompt"),
                resume_schema=spec.get("resume_schema"),
                edges=dict(edges.get(node_id, {})),
            )
            for node_id, spec in self.nodes.items()
        }
        return Plan(
            name=name,
            input_schema=raw["input_schema"],
            output_schema=raw.get("output_schema"),
            start=start,
            nodes=nodes,
            output=output,
            source=raw,
        )

    def check_nodes(self, nodes: Any) -> bool:
        """Check each node; False when there is no usable node list at all."""
        if nodes is None:
            self.problem("plan.nodes", "is required")
            return False
        if not isinstance(nodes, list) or not nodes:
            self.problem("plan.nodes", "must be a non-empty list of node objects")
            return False
        for index, spec in enumerate(nodes):
            field = f"plan.nodes.{index}"
            if not isinstance(spec, dict):
                self.problem(field, "must be an object")
                continue
            node_id = spec.get("id")
            if not isinstance(node_id, str) or not _is_key(node_id):
                self.problems.append(_key_problem(f"{field}.id", node_id))
                continue
            field = f"plan.nodes.{node_id}"
            if node_id in self.nodes:
                self.problem(f"{field}.id", f"duplicate node id {node_id!r}")
                continue
            # Known even with a bad kind, so edges to it are not reported as dangling.
            self.nodes[node_id] = spec
            kind = spec.get("kind")
            if not isinstance(kind, str) or kind not in _NODE_KEYS:
                self.problem(f"{field}.kind", f"must be one of {sorted(_NODE_KEYS)}, got {kind!r}")
                continue
            for key in sorted(set(spec) - _NODE_KEYS[kind]):
                self.problem(
                    f"{field}.{key}",
                    f"unknown field for a {kind} node (allowed: {sorted(_NODE_KEYS[kind])})",
                )
            if "state_key" in spec and not _is_key(spec["state_key"]):
                self.problems.append(_key_problem(f"{field}.state_key", spec["state_key"]))
            if kind == "call":
                self.check_call(field, spec)
            else:
                self.check_interrupt(field, spec)
        return True

    def check_call(self, field: str, spec: Mapping[str, Any]) -> None:
        name = spec.get("capability")
        params = spec.get("params", {})
        if not isinstance(params, dict):
            self.problem(f"{field}.params", "must be an object")
        capability = CAPABILITIES.get(name) if isinstance(name, str) else None
        if capability is None:
            self.problem(
                f"{field}.capability",
                f"unknown capability {name!r} (known: {sorted(CAPABILITIES)})",
            )
        elif isinstance(params, dict):
            self.problems.extend(capability.check(params, f"{field}.params"))

    def check_interrupt(self, field: str, spec: Mapping[str, Any]) -> None:
        if "prompt" in spec and not isinstance(spec["prompt"], str):
            self.problem(f"{field}.prompt", "must be a string")
        if "resume_schema" not in spec:
            self.problem(f"{field}.resume_schema", "is required")
        else:
            self.problems.extend(check_schema(f"{field}.resume_schema", spec["resume_schema"]))

    def check_edges(self, edges: Any) -> dict[str, dict[str, str]]:
        checked: dict[str, dict[str, str]] = {}
        if not isinstance(edges, dict):
            self.problem("plan.edges", "must be an object: node id -> {outcome: next node id}")
            return checked
        for source, by_outcome in edges.items():
            field = f"plan.edges.{source}"
            if source not in self.nodes:
                self.problem(field, f"{source!r} is not a node id")
                continue
            if not isinstance(by_outcome, dict):
                self.problem(field, "must be an object: outcome -> next node id or __end__")
                continue
            kind = self.nodes[source].get("kind")
            allowed = OUTCOMES.get(kind) if isinstance(kind, str) else None
            for outcome, target in by_outcome.items():
                if allowed is not None and outcome not in allowed:
                    self.problem(
                        f"{field}.{outcome}",
                        f"unknown outcome for a {kind} node (allowed: {sorted(allowed)})",
                    )
                elif target != END and (not isinstance(target, str) or target not in self.nodes):
                    self.problem(
                        f"{field}.{outcome}", f"dangling edge: {target!r} is not a node id or {END}"
                    )
                else:
                    checked.setdefault(source, {})[outcome] = target
        for node_id, spec in self.nodes.items():
            if spec.get("kind") not in OUTCOMES:
                continue  # its kind is already reported; its outcomes are unknown
            capability = CAPABILITIES.get(spec.get("capability", ""))
            can_succeed = capability is None or capability.can_succeed
            outgoing = edges.get(node_id)
            has_ok = isinstance(outgoing, dict) and "ok" in outgoing
            if can_succeed and not has_ok:
                self.problem(f"plan.edges.{node_id}.ok", f"is required (use {END!r} to finish)")
            elif not can_succeed and has_ok:
                self.problem(
                    f"plan.edges.{node_id}.ok",
                    f"{spec.get('capability')} never succeeds, so an ok edge cannot be taken",
                )
        return checked

    def check_reachable(self, start: str, edges: Mapping[str, Mapping[str, str]]) -> None:
        seen = {start}
        frontier = [start]
        while frontier:
            for target in edges.get(frontier.pop(), {}).values():
                if target != END and target not in seen:
                    seen.add(target)
                    frontier.append(target)
        for node_id in self.nodes:
            if node_id not in seen:
                self.problem(f"plan.nodes.{node_id}", "unreachable from the start node")

    def written_keys(self) -> set[str]:
        return {spec.get("state_key", node_id) for node_id, spec in self.nodes.items()}

    def check_state_path(self, field: str, path: ValuePath) -> None:
        if path.root == "state" and path.segments and path.segments[0] not in self.written_keys():
            self.problem(field, f"{path.text}: no node writes state key {path.segments[0]!r}")

    def check_output(self, output: Any, *, check_state: bool) -> dict[str, ValuePath]:
        compiled: dict[str, ValuePath] = {}
        if not isinstance(output, dict):
            self.problem("plan.output", "must be an object: output key -> value path")
            return compiled
        for key, text in output.items():
            field = f"plan.output.{key}"
            try:
                path = parse_path(text)
            except ValueError as exc:
                self.problem(field, str(exc))
                continue
            if check_state:
                self.check_state_path(field, path)
            compiled[key] = path
        return compiled

    def check_reads(self) -> None:
        for node_id, spec in self.nodes.items():
            capability = CAPABILITIES.get(spec.get("capability", ""))
            params = spec.get("params", {})
            if spec.get("kind") != "call" or capability is None or not isinstance(params, dict):
                continue
            if capability.check(params, ""):
                continue  # already reported; its paths cannot be read
            for path in capability.reads(params):
                self.check_state_path(f"plan.nodes.{node_id}.params", path)


def compile_plan(raw: Any) -> Plan:
    """Validate a plan and compile it. Raises InvalidInput listing every problem."""
    try:
        # A plain copy, so the stored plan is exactly the JSON that was checked.
        normalized = as_json(raw, "plan")
    except NotJson as exc:
        raise InvalidInput.from_problems("plan", [json_problem(exc)]) from None
    if not isinstance(normalized, dict):
        raise InvalidInput.from_problems(
            "plan", [Problem(field="plan", reason="must be a JSON object")]
        )
    compiler = _Compiler(normalized)
    plan = compiler.run()
    if plan is None:
        raise InvalidInput.from_problems("plan", compiler.problems)
    return plan
