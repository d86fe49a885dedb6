"""Sample plans for the host tests (no pytest import: test_crash.py's child uses them)."""

from __future__ import annotations

from typing import Any

GREETING_PLAN: dict[str, Any] = {
    "name": "hello",
    "input_schema": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "punct": {"type": "string"}},
        "required": ["name"],
    },
    "output_schema": {
        "type": "object",
        "properties": {"result": {"type": "string"}},
        "required": ["result"],
    },
    "start": "greet",
    "nodes": [
        {
            "id": "greet",
            "kind": "call",
            "capability": "wf.std.format",
            "params": {"template": "hello {input.name}"},
            "state_key": "greeting",
        }
    ],
    "edges": {"greet": {"ok": "__end__"}},
    "output": {"result": "state.greeting"},
}

APPROVAL_PLAN: dict[str, Any] = {
    "name": "approval",
    "input_schema": {"type": "object", "properties": {"item": {"type": "string"}}},
    "start": "draft",
    "nodes": [
        {
            "id": "draft",
            "kind": "call",
            "capability": "wf.std.format",
            "params": {"template": "approve {input.item}?"},
        },
        {
            "id": "approve",
            "kind": "interrupt",
            "prompt": "Approve the draft?",
            "resume_schema": {
                "type": "object",
                "properties": {"approved": {"type": "boolean"}},
                "required": ["approved"],
                "additionalProperties": False,
            },
            "state_key": "decision",
        },
        {
            "id": "done",
            "kind": "call",
            "capability": "wf.std.format",
            "params": {"template": "{state.draft} -> {state.decision.approved}"},
        },
    ],
    "edges": {"draft": {"ok": "approve"}, "approve": {"ok": "done"}, "done": {"ok": "__end__"}},
    "output": {"summary": "state.done", "approved": "state.decision.approved"},
}


def sleep_plan(seconds: float, *, then_interrupt: bool = False) -> dict[str, Any]:
    """start -> sleep(seconds) -> end; or start -> interrupt -> sleep -> end."""
    nodes: list[dict[str, Any]] = [
        {"id": "nap", "kind": "call", "capability": "wf.std.sleep", "params": {"seconds": seconds}}
    ]
    edges: dict[str, Any] = {"nap": {"ok": "__end__"}}
    start = "nap"
    if then_interrupt:
        nodes.insert(0, {"id": "gate", "kind": "interrupt", "resume_schema": {"type": "object"}})
        edges["gate"] = {"ok": "nap"}
        start = "gate"
    return {
        "name": "sleeper",
        "input_schema": {"type": "object"},
        "start": start,
        "nodes": nodes,
        "edges": edges,
        "output": {"slept": "state.nap"},
    }


def chain_plan(length: int) -> dict[str, Any]:
    """n0 -> n1 -> ... -> n{length-1} -> end, each a constant."""
    ids = [f"n{i}" for i in range(length)]
    return {
        "name": "chain",
        "input_schema": {"type": "object"},
        "start": ids[0],
        "nodes": [
            {"id": i, "kind": "call", "capability": "wf.std.constant", "params": {"value": n}}
            for n, i in enumerate(ids)
        ],
        "edges": {i: {"ok": nxt} for i, nxt in zip(ids, [*ids[1:], "__end__"], strict=True)},
        "output": {"last": f"state.{ids[-1]}"},
    }
