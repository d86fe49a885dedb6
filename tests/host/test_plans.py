"""The plan language: every validation problem, and what a valid plan compiles to."""

from __future__ import annotations

import copy
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import pytest

from adapters.host.plans import END, compile_plan
from adapters.host.templates import (
    PathNotSet,
    ValuePath,
    parse_path,
    parse_template,
    render,
    resolve,
)
from core.errors import InvalidInput

from .conftest import APPROVAL_PLAN, GREETING_PLAN

Edit = Callable[[dict[str, Any]], Any]


def _set(path: str, value: Any) -> Edit:
    def edit(plan: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        target: Any = plan
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value

    return edit


def _drop(key: str) -> Edit:
    return lambda plan: plan.pop(key)


def _add_node(node: dict[str, Any], edges: dict[str, str] | None = None) -> Edit:
    def edit(plan: dict[str, Any]) -> None:
        plan["nodes"].append(node)
        if edges is not None:
            plan["edges"][node["id"]] = edges

    return edit


# (case, edit of APPROVAL_PLAN, exact problems as (field, fragment of the reason))
INVALID_PLANS: list[tuple[str, Edit, list[tuple[str, str]]]] = [
    ("unknown top-level field", _set("owner", "me"), [("plan.owner", "unknown field")]),
    ("missing name", _drop("name"), [("plan.name", "non-empty string")]),
    ("blank name", _set("name", "  "), [("plan.name", "non-empty string")]),
    ("missing input_schema", _drop("input_schema"), [("plan.input_schema", "is required")]),
    (
        "invalid input_schema",
        _set("input_schema", {"type": "strnig"}),
        [("plan.input_schema.type", "is not valid")],
    ),
    (
        "input_schema not a schema",
        _set("input_schema", 3),
        [("plan.input_schema", "must be a JSON Schema")],
    ),
    (
        "remote reference",
        _set("input_schema", {"$ref": "https://example.com/s.json"}),
        [("plan.input_schema.$ref", "only local references")],
    ),
    (
        "invalid output_schema",
        _set("output_schema", {"required": "summary"}),
        [("plan.output_schema.required", "is not of type 'array'")],
    ),
    ("missing start", _drop("start"), [("plan.start", "is required")]),
    ("start is not a node", _set("start", "nope"), [("plan.start", "'nope' is not a node id")]),
    # Without nodes, faults that would only echo the missing list are not reported.
    ("nodes missing", _drop("nodes"), [("plan.nodes", "is required")]),
    ("nodes empty", _set("nodes", []), [("plan.nodes", "non-empty list")]),
    ("node not an object", _add_node("x"), [("plan.nodes.3", "must be an object")]),  # type: ignore[arg-type]
    (
        "bad node id",
        _add_node({"id": "a b", "kind": "call", "capability": "wf.std.constant"}),
        [("plan.nodes.3.id", "not a valid key")],
    ),
    (
        "node id __end__",
        _add_node({"id": END, "kind": "interrupt", "resume_schema": {}}),
        [("plan.nodes.3.id", "not a valid key")],
    ),
    (
        "duplicate node id",
        _add_node(
            {"id": "done", "kind": "call", "capability": "wf.std.constant", "params": {"value": 1}}
        ),
        [("plan.nodes.done.id", "duplicate node id")],
    ),
    (
        "unknown kind",
        _set("nodes/2/kind", "script"),
        [("plan.nodes.done.kind", "must be one of")],
    ),
    (
        "unknown capability",
        _set("nodes/2/capability", "wf.std.nope"),
        [("plan.nodes.done.capability", "unknown capability 'wf.std.nope'")],
    ),
    (
        "unknown node field",
        _set("nodes/0/retries", 3),
        [("plan.nodes.draft.retries", "unknown field for a call node")],
    ),
    ("params not an object", _set("nodes/0/params", [1]), [("plan.nodes.draft.params", "object")]),
    (
        "bad state_key",
        _set("nodes/0/state_key", "a.b"),
        # The result would land under 'a.b', so `{state.draft}` reads nothing.
        [
            ("plan.nodes.draft.state_key", "not a valid key"),
            ("plan.nodes.done.params", "no node writes state key 'draft'"),
        ],
    ),
    (
        "bad template",
        _set("nodes/0/params", {"template": "hi {input.name"}),
        [("plan.nodes.draft.params.template", "unclosed")],
    ),
    (
        "interrupt without resume_schema",
        lambda plan: plan["nodes"][1].pop("resume_schema"),
        [("plan.nodes.approve.resume_schema", "is required")],
    ),
    (
        "interrupt with invalid resume_schema",
        _set("nodes/1/resume_schema", {"type": 7}),
        [("plan.nodes.approve.resume_schema.type", "is not valid")],
    ),
    (
        "interrupt prompt not a string",
        _set("nodes/1/prompt", ["?"]),
        [("plan.nodes.approve.prompt", "must be a string")],
    ),
    (
        "interrupt with call fields",
        _set("nodes/1/capability", "wf.std.constant"),
        [("plan.nodes.approve.capability", "unknown field for a interrupt node")],
    ),
    ("edges not an object", _set("edges", []), [("plan.edges", "must be an object")]),
    (
        "edges of a node not an object",
        _set("edges/done", "__end__"),
        [("plan.edges.done", "must be an object"), ("plan.edges.done.ok", "is required")],
    ),
    (
        "dangling edge",
        _set("edges/approve", {"ok": "nowhere"}),
        [("plan.edges.approve.ok", "dangling edge: 'nowhere'"), ("plan.nodes.done", "unreachable")],
    ),
    (
        "edge from an unknown node",
        _set("edges/ghost", {"ok": "done"}),
        [("plan.edges.ghost", "'ghost' is not a node id")],
    ),
    (
        "unknown outcome",
        _set("edges/draft", {"ok": "approve", "maybe": "done"}),
        [("plan.edges.draft.maybe", "unknown outcome for a call node")],
    ),
    (
        "error edge on an interrupt",
        _set("edges/approve", {"ok": "done", "error": "done"}),
        [("plan.edges.approve.error", "unknown outcome for a interrupt node")],
    ),
    ("missing ok edge", _set("edges/done", {}), [("plan.edges.done.ok", "is required")]),
    (
        "ok edge on wf.std.fail",
        _add_node(
            {"id": "boom", "kind": "call", "capability": "wf.std.fail", "params": {"message": "x"}},
            {"ok": "__end__"},
        ),
        [("plan.edges.boom.ok", "never succeeds"), ("plan.nodes.boom", "unreachable")],
    ),
    (
        "unreachable node",
        _add_node(
            {
                "id": "island",
                "kind": "call",
                "capability": "wf.std.constant",
                "params": {"value": 1},
            },
            {"ok": "__end__"},
        ),
        [("plan.nodes.island", "unreachable from the start node")],
    ),
    (
        "output not an object",
        _set("output", ["state.done"]),
        [("plan.output", "must be an object")],
    ),
    (
        "output path with a bad root",
        _set("output", {"x": "inputs.item"}),
        [("plan.output.x", "must start with 'input' or 'state'")],
    ),
    (
        "output path to an unwritten state key",
        _set("output", {"x": "state.nothing"}),
        [("plan.output.x", "no node writes state key 'nothing'")],
    ),
    (
        "template reads an unwritten state key",
        _set("nodes/2/params", {"template": "{state.missing}"}),
        [("plan.nodes.done.params", "no node writes state key 'missing'")],
    ),
]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [pytest.param(edit, expected, id=case) for case, edit, expected in INVALID_PLANS],
)
def test_invalid_plan_names_every_problem(edit: Edit, expected: list[tuple[str, str]]) -> None:
    plan = copy.deepcopy(APPROVAL_PLAN)
    edit(plan)
    with pytest.raises(InvalidInput) as caught:
        compile_plan(plan)
    got = [(p.field, p.reason) for p in caught.value.problems]
    assert len(got) == len(expected), got
    for (field, reason), (want_field, fragment) in zip(sorted(got), sorted(expected), strict=True):
        assert field == want_field, got
        assert fragment in reason, got


def test_many_problems_come_in_one_error() -> None:
    plan = copy.deepcopy(APPROVAL_PLAN)
    plan.pop("start")
    plan["nodes"][0]["capability"] = "wf.std.teleport"
    plan["edges"]["approve"] = {"ok": "nowhere"}
    plan["output_schema"] = {"type": "nonsense"}
    with pytest.raises(InvalidInput) as caught:
        compile_plan(plan)
    fields = {p.field for p in caught.value.problems}
    assert fields == {
        "plan.start",
        "plan.nodes.draft.capability",
        "plan.edges.approve.ok",
        "plan.output_schema.type",
    }
    # The unreachable check needs a start node, so the missing start hides it.
    assert str(caught.value).startswith("invalid plan: ")


@pytest.mark.parametrize(
    ("raw", "field", "reason"),
    [
        ([], "plan", "must be a JSON object"),
        ({"name": float("nan")}, "plan.name", "is not JSON: nan is not a JSON number"),
        ({"nodes": [{"id": b"x"}]}, "plan.nodes.0.id", "is not JSON: bytes is not a JSON value"),
        (object(), "plan", "is not JSON: object is not a JSON value"),
    ],
)
def test_plan_that_is_not_a_json_object(raw: Any, field: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        compile_plan(raw)
    assert [(p.field, p.reason) for p in caught.value.problems] == [(field, reason)]


def test_immutable_mappings_and_sequences_are_accepted() -> None:
    frozen = MappingProxyType({**APPROVAL_PLAN, "nodes": tuple(APPROVAL_PLAN["nodes"])})
    assert compile_plan(frozen).source == APPROVAL_PLAN


def test_valid_plan_compiles_with_defaults() -> None:
    plan = compile_plan(APPROVAL_PLAN)
    assert plan.name == "approval"
    assert plan.start == "draft"
    assert list(plan.nodes) == ["draft", "approve", "done"]
    draft = plan.nodes["draft"]
    assert (draft.kind, draft.capability, draft.state_key) == ("call", "wf.std.format", "draft")
    approve = plan.nodes["approve"]
    assert (approve.kind, approve.state_key, approve.prompt) == (
        "interrupt",
        "decision",
        "Approve the draft?",
    )
    assert dict(approve.edges) == {"ok": "done"}
    assert plan.output_schema is None
    assert dict(plan.output) == {
        "summary": ValuePath(root="state", segments=("done",)),
        "approved": ValuePath(root="state", segments=("decision", "approved")),
    }
    assert plan.source == APPROVAL_PLAN


def test_loops_and_error_edges_are_allowed() -> None:
    plan = compile_plan(
        {
            "name": "retry",
            "input_schema": {},
            "start": "try",
            "nodes": [
                {
                    "id": "try",
                    "kind": "call",
                    "capability": "wf.std.fail",
                    "params": {"message": "x"},
                },
            ],
            "edges": {"try": {"error": "try"}},
        }
    )
    assert dict(plan.nodes["try"].edges) == {"error": "try"}
    assert dict(plan.output) == {}


def test_greeting_plan_is_valid() -> None:
    assert compile_plan(GREETING_PLAN).output_schema == GREETING_PLAN["output_schema"]


# --- paths and templates --------------------------------------------------------

INPUTS = {"name": "Ada", "n": 3, "tags": ["x", "y"], "user": {"id": 7}}
STATE = {"greeting": "hi", "flag": True, "nothing": None}

RENDER_CASES = [
    ("hello {input.name}", "hello Ada"),
    ("{input.n} items", "3 items"),
    ("{state.flag}/{state.nothing}", "true/null"),
    ("{input.tags}", '["x","y"]'),
    ("{input.tags.1}", "y"),
    ("{input.user}", '{"id":7}'),
    ("{{literal}} {{{input.name}}}", "{literal} {Ada}"),
    ("{ state.greeting }", "hi"),
    ("no placeholders", "no placeholders"),
    ("", ""),
]


@pytest.mark.parametrize(("template", "expected"), RENDER_CASES)
def test_render(template: str, expected: str) -> None:
    assert render(parse_template(template), INPUTS, STATE) == expected


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("{input.name", "unclosed '{' at offset 0"),
        ("a } b", "single '}' at offset 2"),
        ("{name}", "must start with 'input' or 'state'"),
        ("{input..x}", "empty or invalid segment"),
        ("{input.a b}", "invalid segment 'a b'"),
        ("{}", "must start with"),
    ],
)
def test_template_syntax_errors(template: str, fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_template(template)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("input.missing", "input.missing is not set"),
        ("input.tags.5", "input.tags.5 is not set"),
        ("input.name.first", "input.name.first is not set"),
        ("state.greeting.x", "state.greeting.x is not set"),
    ],
)
def test_resolve_missing(path: str, message: str) -> None:
    with pytest.raises(PathNotSet) as caught:
        resolve(parse_path(path), INPUTS, STATE)
    assert str(caught.value) == message


def test_resolve_roots_and_values() -> None:
    assert resolve(parse_path("input"), INPUTS, STATE) == INPUTS
    assert resolve(parse_path("state.nothing"), INPUTS, STATE) is None
    assert resolve(parse_path("input.user.id"), INPUTS, STATE) == 7
    assert parse_path("state.a.0").text == "state.a.0"
