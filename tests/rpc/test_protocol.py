"""The JSON-RPC envelope and the error mapping, without a server."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.rpc.protocol import (
    DOMAIN_ERROR_CODES,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    Call,
    InvalidParams,
    RpcError,
    RpcFailure,
    Unauthorized,
    domain_error_object,
    error_from_wire,
    parse_body,
)
from core.errors import (
    AlreadyExists,
    CoreMisuse,
    InvalidDefinition,
    InvalidInput,
    InvalidState,
    NotFound,
    Problem,
    RevisionConflict,
    SchedulerUnavailable,
    SchedulingError,
    StoreFenced,
)

PARSE_CASES: list[tuple[bytes, int]] = [
    (b"{", PARSE_ERROR),
    (b"", PARSE_ERROR),
    (b"\xff\xfe", PARSE_ERROR),
    (b'{"jsonrpc": "2.0", "method": "x", "id": NaN}', PARSE_ERROR),
    (b"[]", INVALID_REQUEST),
    (b"42", INVALID_REQUEST),
    (b'"workflow.health"', INVALID_REQUEST),
    (b'{"method": "workflow.health", "id": 1}', INVALID_REQUEST),
    (b'{"jsonrpc": "1.0", "method": "workflow.health", "id": 1}', INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "method": 5, "id": 1}', INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "method": "", "id": 1}', INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "method": "m", "id": true}', INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "method": "m", "id": {}}', INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "method": "m", "id": 1, "extra": 1}', INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "method": "m", "id": 1, "params": [1, 2]}', INVALID_PARAMS),
    # Params that are no structured value make the object no Request at all.
    (b'{"jsonrpc": "2.0", "method": "m", "id": 1, "params": "x"}', INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "method": "m", "id": 1, "params": 5}', INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "method": "m", "id": 1, "params": null}', INVALID_REQUEST),
]


@pytest.mark.parametrize(("body", "code"), PARSE_CASES)
def test_malformed_envelopes_fail_with_their_code(body: bytes, code: int) -> None:
    parsed = parse_body(body)
    assert isinstance(parsed, RpcFailure)
    assert parsed.code == code


@pytest.mark.parametrize(
    "body",
    [b"[]", b"42", b"[5]", b'{"jsonrpc": "2.0", "method": "m", "id": 1, "params": "x"}'],
)
def test_every_envelope_failure_carries_a_data_code(body: bytes) -> None:
    parsed = parse_body(body)
    failure = parsed[0] if isinstance(parsed, list) else parsed
    assert isinstance(failure, RpcFailure)
    assert failure.data["code"] == "invalid_request"
    assert failure.data["problems"], failure.data


def test_by_position_params_of_a_notification_fail_silently() -> None:
    note = parse_body(b'{"jsonrpc": "2.0", "method": "m", "params": [1]}')
    assert isinstance(note, RpcFailure)
    assert (note.code, note.is_notification) == (INVALID_PARAMS, True)
    call = parse_body(b'{"jsonrpc": "2.0", "method": "m", "params": [1], "id": 2}')
    assert isinstance(call, RpcFailure)
    assert (call.code, call.is_notification, call.request_id) == (INVALID_PARAMS, False, 2)


def test_invalid_request_keeps_a_valid_id_and_names_the_problem() -> None:
    parsed = parse_body(b'{"jsonrpc": "1.0", "method": "m", "id": "abc"}')
    assert isinstance(parsed, RpcFailure)
    assert parsed.request_id == "abc"
    assert parsed.data == {
        "code": "invalid_request",
        "problems": [{"field": "jsonrpc", "reason": 'must be exactly "2.0"'}],
    }


def test_well_formed_call_and_notification() -> None:
    call = parse_body(b'{"jsonrpc": "2.0", "method": "m", "params": {"a": 1}, "id": 7}')
    assert call == Call(method="m", params={"a": 1}, request_id=7, is_notification=False)
    note = parse_body(b'{"jsonrpc": "2.0", "method": "m"}')
    assert note == Call(method="m", params={}, request_id=None, is_notification=True)
    null_id = parse_body(b'{"jsonrpc": "2.0", "method": "m", "id": null}')
    assert isinstance(null_id, Call)
    assert not null_id.is_notification


def test_batch_parses_each_element_on_its_own() -> None:
    parsed = parse_body(b'[{"jsonrpc": "2.0", "method": "m", "id": 1}, 5]')
    assert isinstance(parsed, list)
    assert isinstance(parsed[0], Call)
    assert isinstance(parsed[1], RpcFailure)
    assert parsed[1].code == INVALID_REQUEST


DOMAIN_CASES: list[tuple[SchedulingError, int, str]] = [
    (SchedulingError("base"), -32000, "scheduling_error"),
    (InvalidInput("bad", problems=[Problem(field="a", reason="b")]), -32001, "invalid_input"),
    (
        InvalidDefinition("bad", problems=[Problem(field="trigger", reason="x")]),
        -32002,
        "invalid_definition",
    ),
    (NotFound("gone"), -32003, "not_found"),
    (AlreadyExists("taken"), -32004, "already_exists"),
    (RevisionConflict("stale", data={"current_revision": 3}), -32005, "revision_conflict"),
    (InvalidState("nope"), -32006, "invalid_state"),
    (SchedulerUnavailable("off"), -32007, "scheduler_unavailable"),
    # A refinement keeps its parent's number and names itself in data.code.
    (StoreFenced("fenced", data={"lock": "/s/scheduler.lock"}), -32007, "store_fenced"),
    (CoreMisuse("oops"), -32008, "core_misuse"),
    (
        InvalidParams("p", problems=[Problem(field="x", reason="y")]),
        INVALID_PARAMS,
        "invalid_params",
    ),
]


@pytest.mark.parametrize(("err", "code", "name"), DOMAIN_CASES)
def test_domain_errors_round_trip_through_the_wire(
    err: SchedulingError, code: int, name: str
) -> None:
    wire = domain_error_object(9, err)
    assert wire["id"] == 9
    assert wire["error"]["code"] == code
    assert wire["error"]["data"] == err.to_dict()
    assert wire["error"]["data"]["code"] == name
    back = error_from_wire(wire["error"]["code"], wire["error"]["message"], wire["error"]["data"])
    assert type(back) is type(err)
    assert isinstance(back, SchedulingError)
    assert back.to_dict() == err.to_dict()
    if isinstance(err, InvalidInput):
        assert isinstance(back, InvalidInput)
        assert back.problems == err.problems


def test_every_domain_class_has_a_distinct_code() -> None:
    codes = list(DOMAIN_ERROR_CODES.values())
    assert len(codes) == len(set(codes))
    assert all(-32099 <= code <= -32000 for code in codes)


def test_subclass_without_its_own_code_uses_its_parents() -> None:
    class Special(NotFound):
        pass

    assert domain_error_object(1, Special("x"))["error"]["code"] == -32003


NON_DOMAIN_CASES: list[tuple[int, Any, type[Exception]]] = [
    (-32601, {"code": "method_not_found"}, RpcError),
    (-32603, {"code": "internal_error", "incident": "abc"}, RpcError),
    (-32010, {"code": "unauthorized"}, Unauthorized),
    (-32003, None, RpcError),
]


@pytest.mark.parametrize(("code", "data", "cls"), NON_DOMAIN_CASES)
def test_other_errors_become_rpc_errors(code: int, data: Any, cls: type[Exception]) -> None:
    err = error_from_wire(code, "message", data)
    assert type(err) is cls
    assert isinstance(err, RpcError)
    assert (err.code, err.message, err.data) == (code, "message", data)
