"""The Starlette application: `POST <rpc_path>` (JSON-RPC 2.0) and `GET /healthz`.

Request handling, in order: authenticate (bearer token when one is
configured; otherwise only a loopback `Host` is accepted, which stops
DNS-rebinding pages from reaching a tokenless local server), require
`Content-Type: application/json` (so a browser cannot send a cross-origin
"simple" request), read the body up to `max_body_bytes`, parse, then run each
call in order. Calls in a batch run sequentially, so a batch may create a
schedule and read it back. Transport-level refusals (401/403/413/415) still
carry a JSON-RPC error object; everything after parsing is HTTP 200 with
per-call results or errors. No input can produce an HTTP 500: an unexpected
exception becomes -32603 with an incident id, and the traceback goes only to
the log.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from adapters.rpc.auth import bearer_matches, is_loopback_host
from adapters.rpc.methods import METHODS, Method, RpcContext, invoke
from adapters.rpc.protocol import (
    FORBIDDEN_HOST,
    INTERNAL_ERROR,
    REQUEST_TOO_LARGE,
    UNAUTHORIZED,
    UNSUPPORTED_MEDIA_TYPE,
    Call,
    RequestId,
    RpcError,
    RpcFailure,
    domain_error_object,
    encode_json,
    error_response,
    failure_object,
    parse_body,
    success_response,
)
from core.errors import SchedulingError
from shell.store_health import StoreHealth

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "HEALTH_PATH",
    "create_app",
    "default_health",
    "with_store_health",
]

DEFAULT_MAX_BODY_BYTES: Final = 1_048_576
HEALTH_PATH: Final = "/healthz"
_JSON: Final = "application/json"

logger = logging.getLogger("adapters.rpc")


def with_store_health(report: Mapping[str, Any], store_health: object) -> dict[str, Any]:
    """`report` as it stands while the store takes writes; while writes fail
    (see `shell.store_health`), `status` is `"degraded"` and `store` says what
    fails. The `/healthz` answer is then HTTP 503."""
    body = dict(report)
    store = store_health.report() if isinstance(store_health, StoreHealth) else None
    if store is not None:
        body["status"] = "degraded"
        body["store"] = store
    return body


def default_health(api: Any) -> Callable[[], Mapping[str, Any]]:
    """A health reporter that knows whether schedules are served and whether
    the store takes writes (when `api` has a `store_health`)."""

    def report() -> Mapping[str, Any]:
        return with_store_health(
            {"status": "ok", "schedules": getattr(api, "schedules", None) is not None},
            getattr(api, "store_health", None),
        )

    return report


def _refusal(status: int, code: int, message: str, reason: str) -> Response:
    body = encode_json(error_response(None, code, message, {"code": reason}))
    headers = {"WWW-Authenticate": 'Bearer realm="wf-scheduler"'} if status == 401 else None
    return Response(body, status_code=status, media_type=_JSON, headers=headers)


def _host_name(host_header: str) -> str:
    if host_header.startswith("["):
        return host_header[1 : host_header.find("]")] if "]" in host_header else host_header
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


class _RpcEndpoint:
    def __init__(
        self,
        ctx: RpcContext,
        registry: Mapping[str, Method],
        token: str | None,
        max_body_bytes: int,
    ) -> None:
        self._ctx = ctx
        self._registry = registry
        self._token = token
        self._max_body_bytes = max_body_bytes

    def refuse(self, request: Request) -> Response | None:
        """A refusal response when the caller may not talk to us at all."""
        if self._token is not None:
            if not bearer_matches(request.headers.get("authorization"), self._token):
                return _refusal(
                    401, UNAUTHORIZED, "unauthorized: missing or wrong bearer token", "unauthorized"
                )
            return None
        host = request.headers.get("host")
        if host is not None and not is_loopback_host(_host_name(host)):
            return _refusal(
                403,
                FORBIDDEN_HOST,
                "forbidden: this server has no token and only answers loopback Host names",
                "forbidden_host",
            )
        return None

    async def _read_body(self, request: Request) -> bytes | None:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self._max_body_bytes:
            return None
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self._max_body_bytes:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    async def rpc(self, request: Request) -> Response:
        refused = self.refuse(request)
        if refused is not None:
            return refused
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != _JSON:
            return _refusal(
                415,
                UNSUPPORTED_MEDIA_TYPE,
                "unsupported media type: send the request as Content-Type: application/json",
                "unsupported_media_type",
            )
        body = await self._read_body(request)
        if body is None:
            return _refusal(
                413,
                REQUEST_TOO_LARGE,
                f"request too large: the body limit is {self._max_body_bytes} bytes",
                "request_too_large",
            )
        parsed = parse_body(body)
        if isinstance(parsed, list):
            parts = [
                part for part in [await self._answer(item) for item in parsed] if part is not None
            ]
            if not parts:
                return Response(status_code=204)
            return Response(b"[" + b",".join(parts) + b"]", media_type=_JSON)
        single = await self._answer(parsed)
        if single is None:
            return Response(status_code=204)
        return Response(single, media_type=_JSON)

    async def _answer(self, item: Call | RpcFailure) -> bytes | None:
        if isinstance(item, RpcFailure):
            return None if item.is_notification else encode_json(failure_object(item))
        response = await self._run(item)
        if item.is_notification:
            return None
        try:
            return encode_json(response)
        except (TypeError, ValueError):
            return encode_json(self._internal(item, "result is not JSON-serialisable"))

    async def _run(self, call: Call) -> dict[str, Any]:
        try:
            result = await invoke(self._registry, self._ctx, call.method, call.params)
        except SchedulingError as err:
            return domain_error_object(call.request_id, err)
        except RpcError as err:
            return error_response(call.request_id, err.code, err.message, err.data)
        except Exception:
            return self._internal(call, None)
        return success_response(call.request_id, result)

    def _internal(self, call: Call, detail: str | None) -> dict[str, Any]:
        incident = uuid.uuid4().hex[:12]
        # The traceback stays in the server log; the caller gets only the incident id.
        logger.exception(
            "internal error in %s (incident %s)%s",
            call.method,
            incident,
            f": {detail}" if detail else "",
        )
        request_id: RequestId = call.request_id
        return error_response(
            request_id,
            INTERNAL_ERROR,
            f"internal error (incident {incident}); see the server log",
            {"code": "internal_error", "incident": incident},
        )

    async def healthz(self, request: Request) -> Response:
        refused = self.refuse(request)
        if refused is not None:
            return refused
        try:
            report = dict(self._ctx.health())
        except Exception:
            logger.exception("health reporter failed")
            report = {"status": "error"}
        status = 200 if report.get("status") == "ok" else 503
        return Response(encode_json(report), status_code=status, media_type=_JSON)


def create_app(
    api: Any,
    *,
    rpc_path: str = "/rpc",
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    health: Callable[[], Mapping[str, Any]] | None = None,
    registry: Mapping[str, Method] = METHODS,
) -> Starlette:
    """The ASGI app serving `api` over JSON-RPC at `rpc_path` plus `/healthz`.

    `token`, when given, is required on every request. `health` reports the
    `workflow.health` / `/healthz` payload (`{"status": "ok", ...}`)."""
    if not rpc_path.startswith("/") or rpc_path == HEALTH_PATH:
        raise ValueError(f"rpc_path must start with '/' and differ from {HEALTH_PATH}")
    if max_body_bytes < 1:
        raise ValueError("max_body_bytes must be positive")
    ctx = RpcContext(api=api, health=health or default_health(api))
    endpoint = _RpcEndpoint(ctx, registry, token, max_body_bytes)
    return Starlette(
        routes=[
            Route(rpc_path, endpoint.rpc, methods=["POST"]),
            Route(HEALTH_PATH, endpoint.healthz, methods=["GET"]),
        ]
    )
