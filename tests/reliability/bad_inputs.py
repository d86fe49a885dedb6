"""Hypothesis strategies of bad JSON-RPC params, one per method.

Every strategy draws params that must be refused: it starts from a call that
would succeed against `rig_store` (the store the bad-input test builds) and
breaks it in at least one way that no reading of the contract accepts. A
drawn call that succeeds is therefore a bug (or a strategy that is not bad
enough), never noise.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from hypothesis import strategies as st

from tests.service.conftest import CONSTANT_PLAN

__all__ = [
    "BAD_ENVELOPES",
    "EXISTING_IDS",
    "INTERRUPTED_RUN",
    "METHOD_PARAMS",
    "bad_body",
]

# What the rig's store holds (see test_bad_input.rig): calls naming these
# exist; everything else does not.
EXISTING_IDS: Final = frozenset(
    {"hourly", "report", "gate", "report.default", "gate.default", "run-000001"}
)
INTERRUPTED_RUN: Final = "run-000001"
CRON_HOURLY: Final = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}

_ID_OK: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

# --- values ---------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def deep(depth: int, leaf: Any = 1) -> Any:
    """A value nested `depth` levels deep (lists and objects alternating)."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


HUGE: Final = "x" * 200_000
# 4,001 digits: under Python's int() limit, so it reaches the fields' own checks.
HUGE_INT: Final = int("9" * 4001)
TRAVERSAL_IDS: Final = (
    "../x",
    "..",
    "../../etc/passwd",
    "a/b",
    "a\\b",
    "x\x00y",
    "\x00",
    ".hidden",
    "-lead",
    "",
    " ",
    "a b",
    "abc\n",
    "abc\r\n",
    "tab\t",
    "ß",
    "日本語",
    "😀",
    "e\u0301",
    "CON",  # valid-looking, absent: NotFound
    "x" * 129,
    HUGE,
)

# Ids that break the id rules (or name nothing): any of them must be refused.
bad_ids = (
    st.sampled_from(TRAVERSAL_IDS)
    | st.text(min_size=1, max_size=40).filter(lambda s: s not in EXISTING_IDS)
    | st.from_regex(_ID_OK, fullmatch=True).filter(lambda s: s not in EXISTING_IDS)
)

# Values of the wrong JSON type for a string field (null is bad only where the
# field is required).
not_strings = (
    st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.lists(json_values, max_size=3)
    | st.dictionaries(st.text(max_size=5), json_values, max_size=3)
    | st.just(deep(40))
)

bad_limits = st.sampled_from([0, 101, -1, 10**30, -(10**30), 1.5, "10", True, False, [10], {}])
bad_positive = st.sampled_from([0, -1, -(10**20), 10**20, HUGE_INT, 1.5, "1", True, [1], {"n": 1}])
bad_revisions = st.sampled_from([0, -1, -7, -(10**20), 1.0, "1", True, [1]]) | st.integers(
    min_value=2, max_value=10**9
)  # a stale (never issued) revision: RevisionConflict

bad_instants = st.sampled_from(
    [
        "2030-01-01T10:00:00",  # naive
        "2030-01-01",
        "2030-01-01 10:00",
        "2030-02-30T10:00:00Z",
        "2030-13-01T00:00:00Z",
        "2030-01-01T25:00:00Z",
        "2030-01-01T10:00:00+25:00",
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-14:00",
        "2000-01-01T00:00:00Z",  # past
        "tomorrow",
        "",
        HUGE,
    ]
) | not_strings.filter(lambda v: not isinstance(v, str))

bad_zones = st.sampled_from(
    ["Mars/Olympus", "../../etc/passwd", "", "localtime", "UTC\x00", "Europe/", "/UTC", HUGE]
) | not_strings.filter(lambda v: not isinstance(v, str))

bad_expressions = st.sampled_from(
    [
        "0 * * * * *",  # six fields
        "0 0 * * * * 2030",  # seven
        "* * * *",
        "",
        "61 * * * *",
        "*/0 * * * *",
        "R * * * *",
        "0 0 31 2 *",  # never
        "@hourly",
        "\u0661 * * * *",  # an Arabic-Indic digit
        "a b c d e",
        HUGE,
    ]
) | not_strings.filter(lambda v: not isinstance(v, str))

bad_triggers = st.one_of(
    st.builds(lambda at: {"kind": "oneshot", "at": at}, bad_instants),
    st.builds(lambda e: {"kind": "cron", "expression": e}, bad_expressions),
    st.builds(lambda z: {"kind": "cron", "expression": "0 * * * *", "timezone": z}, bad_zones),
    st.sampled_from(
        [
            {"kind": "rate", "every": 60},
            {"kind": "cron"},
            {"expression": "0 * * * *"},
            {"kind": "oneshot"},
            {"kind": "cron", "expression": "0 * * * *", "colour": "red"},
            {},
        ]
    ),
    not_strings,
)

# Inputs the report plan's schema refuses, or that are not inputs at all.
bad_inputs = st.one_of(
    st.builds(lambda v: {"when": v}, not_strings),
    st.just({"when": {"$bind": "no.such.binding"}}),
    st.just({"when": {"$bind": 5}}),
    st.just({"when": "x", "n": deep(70)}),
    st.sampled_from([2**53, -(2**53), HUGE_INT]).map(lambda n: {"when": "x", "n": [n]}),
    st.lists(json_values, max_size=3),
    st.integers(),
    st.text(max_size=5),
)

bad_plans = st.one_of(
    not_strings.filter(lambda v: not isinstance(v, dict)),
    st.just({}),
    st.just({**CONSTANT_PLAN, "start": "nowhere"}),
    st.just({**CONSTANT_PLAN, "nodes": []}),
    st.just({**CONSTANT_PLAN, "nodes": [{"id": "emit", "kind": "teleport"}]}),
    st.just(
        {
            **CONSTANT_PLAN,
            "nodes": [{"id": "emit", "kind": "call", "capability": "no.such", "params": {}}],
        }
    ),
    st.just({**CONSTANT_PLAN, "edges": {"emit": {"ok": "ghost"}}}),
    st.just({**CONSTANT_PLAN, "input_schema": {"type": "no-such-type"}}),
    st.builds(lambda key: {**CONSTANT_PLAN, key: 1}, st.sampled_from(["colour", "\x00", "ß"])),
)

# --- breaking a good call -------------------------------------------------------------

Params = dict[str, Any]
Breaker = st.SearchStrategy[Callable[[Params], Params]]


def _set(field: str, values: st.SearchStrategy[Any]) -> Breaker:
    def apply(value: Any) -> Callable[[Params], Params]:
        def change(params: Params) -> Params:
            changed = copy.deepcopy(params)
            changed[field] = value
            return changed

        return change

    return values.map(apply)


def _drop(field: str) -> Breaker:
    def change(params: Params) -> Params:
        return {k: v for k, v in params.items() if k != field}

    return st.just(change)


_unknown_param: Breaker = _set("no_such_param", json_values)


def broken(good: st.SearchStrategy[Params], *breakers: Breaker) -> st.SearchStrategy[Params]:
    """`good` params broken by one to three of `breakers` (each alone is bad)."""
    choices = st.one_of(*breakers, _unknown_param)

    @st.composite
    def draw(data: st.DrawFn) -> Params:
        params = data(good)
        for change in data(st.lists(choices, min_size=1, max_size=3)):
            params = change(params)
        return params

    return draw()


new_ids = st.from_regex(_ID_OK, fullmatch=True).filter(lambda s: s not in EXISTING_IDS)

_create_schedule = broken(
    st.builds(
        lambda sid: {
            "schedule_id": sid,
            "deployment_id": "report.default",
            "trigger": dict(CRON_HOURLY),
            "inputs": {"when": "x"},
        },
        new_ids,
    ),
    _set("schedule_id", bad_ids.filter(lambda s: not _ID_OK.fullmatch(s)) | not_strings),
    _set("deployment_id", bad_ids | not_strings | st.none()),
    _set("trigger", bad_triggers | st.none()),
    _set("inputs", bad_inputs),
    _set("overlap", st.sampled_from(["queue", "", "SKIP", 1, True])),
    _set("max_active_runs", st.sampled_from([0, -1, 2, 5, 100_001, HUGE_INT, "1", 1.5, True])),
    _set("misfire", st.sampled_from(["all", "", "Latest", 0])),
    _set("lateness_allowance_s", st.sampled_from([-1, -0.5, -0.0, 1e18, 3.2e8, "60", True, [60]])),
    _set("max_steps", bad_positive | st.just(10**9 + 1)),
    _drop("trigger"),
    _drop("schedule_id"),
)

_schedule_id_only = broken(
    st.just({"schedule_id": "CON"}),  # absent: NotFound on its own
    _set("schedule_id", bad_ids | not_strings | st.none()),
)

_update_schedule = broken(
    st.just({"schedule_id": "hourly", "expected_revision": 2, "lateness_allowance_s": 30}),
    _set("expected_revision", bad_revisions),
    _set("schedule_id", bad_ids | not_strings),
    _set("trigger", bad_triggers),
    _set("inputs", bad_inputs),
    _set("lateness_allowance_s", st.sampled_from([-1, -0.0, 1e18, "30", False])),
    _set("expected_revision", st.just(HUGE_INT)),
    _set("max_steps", bad_positive),
    _set("overlap", st.sampled_from(["queue", 3])),
    _set("misfire", st.sampled_from(["all", 3])),
    _set("deployment_id", bad_ids | not_strings),
    _set("schedule_id", st.just("CON")),
    _drop("expected_revision"),
)

_list_occurrences = broken(
    st.just({"schedule_id": "hourly", "limit": 0}),
    _set("limit", bad_limits),
    _set("cursor", st.text(min_size=1, max_size=60) | not_strings | st.just(HUGE)),
    _set("schedule_id", bad_ids | not_strings | st.none()),
)

_create_artifact = broken(
    st.builds(
        lambda aid: {"artifact_id": aid, "version": 1, "plan": copy.deepcopy(CONSTANT_PLAN)},
        new_ids,
    ),
    _set("artifact_id", st.sampled_from(TRAVERSAL_IDS).filter(lambda s: s != "CON") | not_strings),
    _set("version", bad_positive | st.none() | st.just(2**31) | st.just(int("9" * 240))),
    _set("plan", bad_plans | st.none()),
    _set("title", not_strings),
    _set("description", not_strings),
    # An existing version with other content.
    st.just(lambda p: {**p, "artifact_id": "report", "version": 1, "title": "other"}),
)

_get_artifact = broken(
    st.just({"artifact_id": "CON"}),
    _set("artifact_id", bad_ids | not_strings | st.none()),
    _set("version", bad_positive),
)


def _payload(**fields: Any) -> Params:
    return {
        "payload": {
            "deployment_id": "new.default",
            "artifact_id": "report",
            "artifact_version": 1,
            **fields,
        }
    }


def _set_payload(field: str, values: st.SearchStrategy[Any]) -> Breaker:
    def apply(value: Any) -> Callable[[Params], Params]:
        def change(params: Params) -> Params:
            changed = copy.deepcopy(params)
            if isinstance(changed.get("payload"), dict):
                changed["payload"][field] = value
            return changed

        return change

    return values.map(apply)


_save_deployment = broken(
    st.builds(lambda did: _payload(deployment_id=did), new_ids),
    _set_payload(
        "deployment_id",
        st.sampled_from(TRAVERSAL_IDS).filter(lambda s: s != "CON") | not_strings | st.none(),
    ),
    _set_payload("artifact_id", bad_ids | not_strings | st.none()),
    _set_payload(
        "artifact_version",
        bad_positive | st.integers(min_value=2, max_value=10**6) | st.just(2**31),
    ),
    # Default inputs alone are not checked against the schema (they may be
    # partial, docs/host.md), but they must be an object.
    _set_payload("inputs", bad_inputs.filter(lambda v: not isinstance(v, dict))),
    _set_payload("title", not_strings),
    _set_payload("colour", json_values),
    _set("payload", not_strings.filter(lambda v: not isinstance(v, dict)) | st.none()),
)

_deployment_id_only = broken(
    st.just({"deployment_id": "CON"}),
    _set("deployment_id", bad_ids | not_strings | st.none()),
)

_start_run = broken(
    st.just({"deployment_id": "report.default", "inputs": {"when": "x"}}),
    _set("deployment_id", bad_ids | not_strings | st.none()),
    _set("inputs", bad_inputs),
    _set("max_steps", bad_positive | st.just(10**9 + 1)),
)

_resume_run = broken(
    st.just({"run_id": INTERRUPTED_RUN, "payload": {"go": True}}),
    _set("run_id", bad_ids | not_strings | st.none() | st.just("run-" + "9" * 5000)),
    _set("payload", st.sampled_from([{}, {"go": "yes"}, {"go": 1}, {"stop": True}, [], "go", 1])),
    _drop("payload"),
    _drop("run_id"),
)

_inspect_run = broken(
    st.just({"run_id": "run-999999"}),
    _set(
        "run_id",
        bad_ids
        | not_strings
        | st.none()
        | st.sampled_from(["run-1", "run-0000001", "run-٠٠٠٠٠١", "run-" + "9" * 5000]),
    ),
)

_list_runs = broken(
    st.just({"limit": 0}),
    _set("status", st.sampled_from(["done", "", "RUNNING", "pending", 5, True])),
    _set("limit", bad_limits),
    _set("cursor", st.text(min_size=1, max_size=40) | not_strings | st.just(HUGE)),
)

_no_params = broken(st.just({"no_such_param": 1}))

_bad_overlaps = st.sampled_from(["skip", "parallel", "", "ALLOW", " allow", 1, True, [], {}])

_trigger = broken(
    st.just({"schedule_id": "hourly"}),
    _set("schedule_id", bad_ids | not_strings | st.none()),
    _set("overlap", _bad_overlaps),
)

_backfill = broken(
    st.just(
        {"schedule_id": "hourly", "start": "2026-03-01T00:00:00Z", "end": "2026-03-01T05:00:00Z"}
    ),
    _set("schedule_id", bad_ids | not_strings | st.none()),
    _set("start", bad_instants | not_strings | st.none()),
    _set("end", bad_instants | not_strings | st.none()),
    # Before any start, or in the future: whatever the other fields say.
    _set("end", st.sampled_from(["1999-01-01T00:00:00Z", "2999-01-01T00:00:00Z"])),
    # More than 1,000 hourly instants before the good end.
    _set("start", st.just("2000-01-01T00:00:00Z")),
    _set("overlap", _bad_overlaps),
    _drop("start"),
    _drop("end"),
)

METHOD_PARAMS: Final[Mapping[str, st.SearchStrategy[Params]]] = {
    "workflow.schedules.create": _create_schedule,
    "workflow.schedules.get": _schedule_id_only,
    "workflow.schedules.list": broken(
        st.just({"include_deleted": "yes"}),
        _set("include_deleted", st.sampled_from(["yes", 1, 0, [], {}])),
    ),
    "workflow.schedules.update": _update_schedule,
    "workflow.schedules.pause": _schedule_id_only,
    "workflow.schedules.resume": _schedule_id_only,
    "workflow.schedules.delete": _schedule_id_only,
    "workflow.schedules.occurrences.list": _list_occurrences,
    "workflow.schedules.trigger": _trigger,
    "workflow.schedules.backfill": _backfill,
    # No backfill runs in the rig's store: even a well-formed cancel is refused.
    "workflow.schedules.backfill.cancel": broken(
        st.just({"schedule_id": "hourly"}),
        _set("schedule_id", bad_ids | not_strings | st.none()),
    ),
    "workflow.artifacts.create_from_plan": _create_artifact,
    "workflow.artifacts.get": _get_artifact,
    "workflow.artifacts.list": _no_params,
    "workflow.deployments.save": _save_deployment,
    "workflow.deployments.get": _deployment_id_only,
    "workflow.deployments.list": _no_params,
    "workflow.deployments.delete": _deployment_id_only,
    "workflow.runs.start": _start_run,
    "workflow.runs.resume": _resume_run,
    "workflow.runs.inspect": _inspect_run,
    "workflow.runs.list": _list_runs,
    "workflow.health": _no_params,
}

# --- envelopes --------------------------------------------------------------------------


def _call(**fields: Any) -> Params:
    return {"jsonrpc": "2.0", "id": 1, "method": "workflow.health", **fields}


BAD_ENVELOPES: Final = st.one_of(
    st.builds(lambda v: _call(jsonrpc=v), json_values.filter(lambda v: v != "2.0")),
    st.builds(lambda v: _call(method=v), not_strings | st.none() | st.just("")),
    st.builds(
        lambda v: _call(method=v), st.text(max_size=30).filter(lambda m: m not in METHOD_PARAMS)
    ),
    st.builds(lambda v: _call(params=v), not_strings.filter(lambda v: not isinstance(v, dict))),
    st.builds(lambda v: _call(id=v), st.sampled_from([True, [1], {"a": 1}])),
    st.builds(
        lambda k: {**_call(), k: 1},
        st.text(min_size=1, max_size=8).filter(
            lambda k: k not in ("jsonrpc", "id", "method", "params")
        ),
    ),
    st.lists(json_values.filter(lambda v: not isinstance(v, dict)), min_size=1, max_size=3),
    json_values.filter(lambda v: not isinstance(v, dict | list)),
)


def bad_body() -> st.SearchStrategy[bytes]:
    """Raw bodies that are not one good call: broken JSON, lone surrogates,
    nesting past the bound, an empty batch."""
    return st.one_of(
        st.binary(max_size=64).filter(lambda b: not b.strip().startswith((b"{", b"["))),
        st.sampled_from(
            [
                b"",
                b"{",
                b"[]",
                b"\xff\xfe",
                b'{"jsonrpc": "2.0", "id": 1, "method": "workflow.health", "params": {}, }',
                b'{"jsonrpc": "2.0", "id": NaN, "method": "workflow.health"}',
                b'{"jsonrpc": "2.0", "id": 1, "method": "workflow.health",'
                b' "params": {"a": "\\ud800"}}',
                b'{"jsonrpc": "2.0", "id": 1, "method": "workflow.runs.start", "params": '
                b'{"deployment_id": "report.default", "inputs": {"when": "\\udc00"}}}',
                b'{"jsonrpc": "2.0", "id": 1, "method": "workflow.health", "params": {"a": '
                + b"[" * 100_000
                + b"]" * 100_000
                + b"}}",
                b'{"jsonrpc": "2.0", "id": 1, "method": "workflow.health", "params": {"a": '
                + b"[" * 900
                + b"]" * 900
                + b"}}",
            ]
        ),
    )
