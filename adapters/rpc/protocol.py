"""JSON-RPC 2.0 envelopes: parsing requests, building responses, mapping errors.

Theory of operation. A request body is parsed into either one `Call` or a
batch of them. Anything wrong with the envelope itself becomes an
`RpcFailure` carrying a protocol code (-32700 … -32600) and, where the spec
allows, the id it belongs to. Domain errors (`core.errors.SchedulingError`)
leave the server with their class's `rpc_code` (declared beside its `code` in
`core.errors`; the table below lists them) and `data = err.to_dict()`, so
`data["code"]` is the stable machine-readable name; the client reverses the
mapping with `error_from_wire` and raises the same classes the Python API
raises.

Application error codes (stable; never renumber, only append; a test holds
the domain ones to the classes):

    -32000  scheduling_error       (base class; should not normally escape)
    -32001  invalid_input
    -32002  invalid_definition
    -32003  not_found
    -32004  already_exists
    -32005  revision_conflict
    -32006  invalid_state
    -32007  scheduler_unavailable  (also store_fenced: the store's lock was lost)
    -32008  core_misuse
    -32009  store_unavailable      (disk full, read-only or failing store)
    -32010  unauthorized           (missing or wrong bearer token; HTTP 401)
    -32011  request_too_large      (body over the server's bound; HTTP 413)
    -32012  unsupported_media_type (body not sent as application/json; HTTP 415)
    -32013  forbidden_host         (Host header not loopback on a tokenless server; HTTP 403)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from core.errors import (
    ERROR_CLASSES,
    InvalidInput,
    Problem,
    SchedulingError,
    error_class_for_code,
)

__all__ = [
    "DOMAIN_ERROR_CODES",
    "FORBIDDEN_HOST",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MAX_INTEGER_DIGITS",
    "MAX_NESTING",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_TOO_LARGE",
    "UNAUTHORIZED",
    "UNSUPPORTED_MEDIA_TYPE",
    "Call",
    "InvalidParams",
    "RequestId",
    "RpcError",
    "RpcFailure",
    "Unauthorized",
    "domain_error_object",
    "encode_json",
    "error_from_wire",
    "error_response",
    "failure_object",
    "parse_body",
    "parse_call",
    "success_response",
]

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603

UNAUTHORIZED: Final = -32010
REQUEST_TOO_LARGE: Final = -32011
UNSUPPORTED_MEDIA_TYPE: Final = -32012
FORBIDDEN_HOST: Final = -32013

# Each domain class's number, read from the class (`core.errors`), which is the
# one place it is declared: the classes that declare their own (a refinement
# such as `StoreFenced` shares its parent's).
DOMAIN_ERROR_CODES: Final[Mapping[type[SchedulingError], int]] = {
    cls: cls.rpc_code for cls in ERROR_CLASSES if "rpc_code" in vars(cls)
}
_DOMAIN_CODE_NUMBERS: Final[frozenset[int]] = frozenset(DOMAIN_ERROR_CODES.values())

RequestId = str | int | float | None

# How deeply request values may nest (objects and arrays).
MAX_NESTING: Final = 64
# The longest integer literal a request may hold: Python's own default limit
# on int() (fixed here so a changed interpreter setting cannot move it). Each
# field then refuses what is outside its own range, naming the field.
MAX_INTEGER_DIGITS: Final = 4300


class InvalidParams(InvalidInput):
    """The method's params did not match its schema (JSON-RPC -32602).

    A subclass of `InvalidInput`, so callers that handle bad input handle this
    too; `problems` names each bad field."""

    code = "invalid_params"
    rpc_code = INVALID_PARAMS


class RpcError(Exception):
    """A JSON-RPC error that is not a domain error (protocol, auth, internal).

    `exit_status` is the `wf-schedule` exit status it ends a command with, as
    a domain error's is (`core.errors`)."""

    exit_status: ClassVar[int] = 1

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} (JSON-RPC error {code})")
        self.code = code
        self.message = message
        self.data = data


class Unauthorized(RpcError):
    """The server refused the request: bearer token missing or wrong."""

    exit_status: ClassVar[int] = 9


@dataclass(frozen=True, slots=True)
class RpcFailure:
    """A protocol-level failure of one request, ready to be put on the wire."""

    code: int
    message: str
    data: Any = None
    request_id: RequestId = None
    # A well-formed request without `id` whose params we refuse: the spec
    # forbids any response to a notification, even an error.
    is_notification: bool = False


@dataclass(frozen=True, slots=True)
class Call:
    """One well-formed request. `is_notification` calls get no response."""

    method: str
    params: dict[str, Any]
    request_id: RequestId = None
    is_notification: bool = False


def _parse_int(text: str) -> int:
    # Python refuses to convert more digits than this, with advice meant for
    # the server's programmer; no field accepts a number anywhere near it.
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise ValueError(
            f"a number has {len(text.lstrip('-'))} digits; at most {MAX_INTEGER_DIGITS} are read"
        )
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        # 1e400 is valid JSON text but no double: refuse it rather than read infinity.
        raise ValueError(f"the number {text[:40]} is too large to represent")
    return value


def _reject_constant(name: str) -> float:
    # NaN and Infinity are not JSON; Python's parser would accept them.
    raise ValueError(f"{name} is not valid JSON")


def _unusable(payload: Any) -> str | None:
    """Why a parsed body cannot be handed to the methods, or None.

    JSON may escape a lone surrogate (`"\\ud800"`), which is no Unicode text
    and cannot be stored; and every layer below walks values recursively, so
    nesting is bounded well inside Python's recursion limit.
    """
    stack: list[tuple[Any, int]] = [(payload, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_NESTING:
            return f"values are nested deeper than {MAX_NESTING} levels"
        if isinstance(value, str):
            items: list[Any] = [value]
        elif isinstance(value, dict):
            items = list(value)
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            items = []
            stack.extend((item, depth + 1) for item in value)
        else:
            continue
        for text in items:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                return "a string holds a lone surrogate, which is not Unicode text"
    return None


def parse_body(body: bytes) -> Call | RpcFailure | list[Call | RpcFailure]:
    """Parse a request body.

    Returns a single `Call`/`RpcFailure`, or a list of them for a batch.
    Malformed JSON (including lone surrogates and nesting deeper than
    `MAX_NESTING`) is one `RpcFailure(PARSE_ERROR)`; an empty batch is one
    `RpcFailure(INVALID_REQUEST)`; each bad batch element is its own failure.
    """
    try:
        text = body.decode("utf-8")
        payload = json.loads(
            text, parse_constant=_reject_constant, parse_int=_parse_int, parse_float=_parse_float
        )
    except RecursionError:
        payload, reason = None, f"values are nested deeper than {MAX_NESTING} levels"
    except (UnicodeDecodeError, ValueError) as exc:
        payload, reason = None, str(exc)
    else:
        reason = _unusable(payload)
    if reason is not None:
        return RpcFailure(PARSE_ERROR, "parse error", {"code": "parse_error", "reason": reason})
    if isinstance(payload, list):
        if not payload:
            return _invalid_request(
                Problem(field="(batch)", reason="an empty batch holds no request")
            )
        return [parse_call(item) for item in payload]
    return parse_call(payload)


def _invalid_request(*problems: Problem, request_id: RequestId = None) -> RpcFailure:
    return RpcFailure(
        INVALID_REQUEST,
        "invalid request: " + "; ".join(f"{p.field}: {p.reason}" for p in problems),
        {"code": "invalid_request", "problems": [p.as_dict() for p in problems]},
        request_id,
    )


def _valid_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, str | int)


def parse_call(payload: Any) -> Call | RpcFailure:
    """Validate one request object's envelope (not its params' schema)."""
    if not isinstance(payload, dict):
        return _invalid_request(Problem(field="(request)", reason="must be a JSON object"))
    has_id = "id" in payload
    raw_id = payload.get("id")
    request_id: RequestId = raw_id if _valid_id(raw_id) else None
    problems: list[Problem] = []
    if payload.get("jsonrpc") != "2.0":
        problems.append(Problem(field="jsonrpc", reason='must be exactly "2.0"'))
    method = payload.get("method")
    if not isinstance(method, str) or not method:
        problems.append(Problem(field="method", reason="must be a non-empty string"))
    if has_id and not _valid_id(raw_id):
        problems.append(Problem(field="id", reason="must be a string, a number or null"))
    params = payload.get("params")
    if "params" in payload and not isinstance(params, dict | list):
        # The spec allows only a structured value here: anything else is no Request.
        problems.append(Problem(field="params", reason="must be an object (or an array)"))
    unknown = sorted(set(payload) - {"jsonrpc", "method", "params", "id"})
    for key in unknown:
        problems.append(Problem(field=key, reason="unknown member of a request object"))
    if problems:
        return _invalid_request(*problems, request_id=request_id)
    assert isinstance(method, str)
    if isinstance(params, list):
        # The spec allows by-position arrays; this server names every parameter.
        problem = Problem(field="params", reason="must be an object of named parameters")
        return RpcFailure(
            INVALID_PARAMS,
            f"invalid params: {problem.field}: {problem.reason}",
            {"code": InvalidParams.code, "problems": [problem.as_dict()]},
            request_id,
            is_notification=not has_id,
        )
    return Call(
        method=method,
        params=dict(params) if isinstance(params, dict) else {},
        request_id=request_id,
        is_notification=not has_id,
    )


def success_response(request_id: RequestId, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(
    request_id: RequestId, code: int, message: str, data: Any = None
) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def failure_object(failure: RpcFailure) -> dict[str, Any]:
    return error_response(failure.request_id, failure.code, failure.message, failure.data)


def domain_error_object(request_id: RequestId, err: SchedulingError) -> dict[str, Any]:
    """The wire form of a domain error: its class's fixed code, data = to_dict()."""
    return error_response(request_id, err.rpc_code, err.message, err.to_dict())


def encode_json(payload: Any) -> bytes:
    """Strict JSON encoding: no NaN/Infinity, UTF-8, compact."""
    return json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode(
        "utf-8"
    )


def _problems_from(data: Mapping[str, Any]) -> list[Problem]:
    raw = data.get("problems")
    if not isinstance(raw, list):
        return []
    return [
        Problem(field=str(item.get("field", "")), reason=str(item.get("reason", "")))
        for item in raw
        if isinstance(item, dict)
    ]


def error_from_wire(code: int, message: str, data: Any) -> Exception:
    """Rebuild the exception a JSON-RPC error object stands for.

    Domain codes (and -32602) come back as the `core.errors` class named by
    `data["code"]`, with `problems` and the remaining `data` restored; every
    other code is an `RpcError` (or `Unauthorized`)."""
    detail = dict(data) if isinstance(data, Mapping) else {}
    if code == INVALID_PARAMS:
        rest = {k: v for k, v in detail.items() if k not in {"code", "message", "problems"}}
        return InvalidParams(message, problems=_problems_from(detail), data=rest)
    if code in _DOMAIN_CODE_NUMBERS and isinstance(detail.get("code"), str):
        cls = error_class_for_code(detail["code"])
        rest = {k: v for k, v in detail.items() if k not in {"code", "message", "problems"}}
        if issubclass(cls, InvalidInput):
            return cls(message, problems=_problems_from(detail), data=rest)
        return cls(message, data=rest)
    if code == UNAUTHORIZED:
        return Unauthorized(code, message, data)
    return RpcError(code, message, data)
