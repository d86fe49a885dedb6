"""Each wf.std capability: parameter checks and behaviour."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters.host.capabilities import CAPABILITIES, MAX_SLEEP_S, CapabilityError, Scope

SCOPE = Scope(inputs={"name": "Ada", "n": 2}, state={"greeting": "hi", "list": [1, 2]})


def test_the_standard_capabilities_are_registered() -> None:
    assert sorted(CAPABILITIES) == [
        "wf.std.constant",
        "wf.std.fail",
        "wf.std.format",
        "wf.std.sleep",
    ]
    assert {name: c.can_succeed for name, c in CAPABILITIES.items()} == {
        "wf.std.constant": True,
        "wf.std.fail": False,
        "wf.std.format": True,
        "wf.std.sleep": True,
    }


# (capability, params, exact problems as (field, fragment))
PARAM_CASES: list[tuple[str, dict[str, Any], list[tuple[str, str]]]] = [
    ("wf.std.constant", {"value": None}, []),
    ("wf.std.constant", {"value": {"a": [1]}}, []),
    ("wf.std.constant", {}, [("p.value", "is required")]),
    ("wf.std.constant", {"value": 1, "extra": 2}, [("p.extra", "unknown parameter")]),
    ("wf.std.format", {"template": "hi {input.name}"}, []),
    ("wf.std.format", {}, [("p.template", "is required")]),
    ("wf.std.format", {"template": 3}, [("p.template", "must be a string")]),
    ("wf.std.format", {"template": "{oops}"}, [("p.template", "must start with 'input'")]),
    ("wf.std.sleep", {"seconds": 0}, []),
    ("wf.std.sleep", {"seconds": 0.25}, []),
    ("wf.std.sleep", {"seconds": MAX_SLEEP_S}, []),
    ("wf.std.sleep", {}, [("p.seconds", "is required")]),
    ("wf.std.sleep", {"seconds": -1}, [("p.seconds", "from 0 to 86400")]),
    ("wf.std.sleep", {"seconds": MAX_SLEEP_S + 1}, [("p.seconds", "from 0 to 86400")]),
    ("wf.std.sleep", {"seconds": True}, [("p.seconds", "must be a number")]),
    ("wf.std.sleep", {"seconds": "1"}, [("p.seconds", "must be a number")]),
    ("wf.std.fail", {"message": "boom"}, []),
    ("wf.std.fail", {}, [("p.message", "non-empty string")]),
    ("wf.std.fail", {"message": ""}, [("p.message", "non-empty string")]),
    (
        "wf.std.fail",
        {"message": 1, "code": 2},
        [("p.code", "unknown parameter"), ("p.message", "non-empty string")],
    ),
]


@pytest.mark.parametrize(("name", "params", "expected"), PARAM_CASES)
def test_param_checks(name: str, params: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    got = [(p.field, p.reason) for p in CAPABILITIES[name].check(params, "p")]
    assert [field for field, _ in got] == [field for field, _ in expected]
    for (_, reason), (_, fragment) in zip(got, expected, strict=True):
        assert fragment in reason


async def test_constant_returns_a_copy_of_its_value() -> None:
    params = {"value": {"nested": [1, 2]}}
    result = await CAPABILITIES["wf.std.constant"].run(params, SCOPE)
    assert result == {"nested": [1, 2]}
    result["nested"].append(3)
    assert params == {"value": {"nested": [1, 2]}}


async def test_format_renders_inputs_and_state() -> None:
    params = {"template": "{state.greeting} {input.name} x{input.n} {state.list}"}
    assert await CAPABILITIES["wf.std.format"].run(params, SCOPE) == "hi Ada x2 [1,2]"


async def test_format_missing_value_is_an_error_outcome() -> None:
    with pytest.raises(CapabilityError) as caught:
        await CAPABILITIES["wf.std.format"].run({"template": "{input.nope}"}, SCOPE)
    assert caught.value.message == "template: input.nope is not set"


def test_format_reads_its_template_paths() -> None:
    paths = CAPABILITIES["wf.std.format"].reads({"template": "{input.a} {state.b.c}"})
    assert [p.text for p in paths] == ["input.a", "state.b.c"]


async def test_sleep_awaits_and_returns_the_seconds() -> None:
    task = asyncio.create_task(CAPABILITIES["wf.std.sleep"].run({"seconds": 0.02}, SCOPE))
    await asyncio.sleep(0)
    assert not task.done()  # it really waits (asynchronously)
    assert await task == 0.02


async def test_sleep_is_cancellable() -> None:
    task = asyncio.create_task(CAPABILITIES["wf.std.sleep"].run({"seconds": 60}, SCOPE))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_fail_raises_its_message() -> None:
    with pytest.raises(CapabilityError) as caught:
        await CAPABILITIES["wf.std.fail"].run({"message": "disk on fire"}, SCOPE)
    assert caught.value.message == "disk on fire"
