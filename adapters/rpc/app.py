"""The Starlette application: `POST <rpc_path>` (JSON-RPC 2.0), `GET /healthz`,
and, when given, `GET /metrics` (Prometheus) and the operator console at `/`
(`adapters/console`).

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
from typing import TYPE_CHECKING, Any, Final

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

if TYPE_CHECKING:
    from adapters.console.app import Console
    from adapters.metrics import SchedulerMetrics

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "HEALTH_PATH",
    "create_app",
    "default_health",
    "leadership_health",
    "with_store_health",
]

DEFAULT_MAX_BODY_BYTES: Final = 1_048_576
HEALTH_PATH: Final = "/healthz"
METRICS_PATH: Final = "/metrics"
# Paths of the console: the JSON-RPC path may not take one of them.
_CONSOLE_PATHS: Final = ("/", "/schedules", "/runs", "/login", "/logout", "/static")
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


def leadership_health(service: Any | None, server_id: str | None = None) -> dict[str, Any]:
    """The scheduler's place among the servers of its store, for health:
    `role` (`leader`, `standby`, or `off` when no scheduler runs here), the
    leadership `epoch` (None on files, where a lock has none) and the
    `leader` (server id, host, pid, since) as the store names it;
    `server_id` names this server on a store several servers share."""
    report: dict[str, Any] = {"role": "off", "epoch": None, "leader": None}
    if server_id is not None:
        report["server_id"] = server_id
    if service is None:
        return report
    report["role"] = service.role
    leadership = dict(getattr(service, "leadership", {}) or {})
    if leadership:
        report["epoch"] = leadership.get("epoch")
        report["leader"] = {
            key: leadership.get(key) for key in ("server_id", "host", "pid", "since")
        }
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


class _MetricsEndpoint:
    """`GET /metrics`: the same gate as `/healthz` (the bearer token when the
    server has one; a loopback `Host` when not), then the text format. The
    schedule catalog is renewed first when it is stale and cheap to renew
    (`adapters/console/catalog.py`), so `wf_schedules` is current."""

    def __init__(
        self, rpc: _RpcEndpoint, metrics: SchedulerMetrics, console: Console | None
    ) -> None:
        self._rpc = rpc
        self._metrics = metrics
        self._console = console

    async def get(self, request: Request) -> Response:
        from adapters.metrics import CONTENT_TYPE

        refused = self._rpc.refuse(request)
        if refused is not None:
            return refused
        if self._console is not None and self._console.catalog is not None:
            try:
                await self._console.catalog.snapshot()
            except SchedulingError as exc:
                logger.warning(
                    "metrics: the schedule catalog could not be read: %s",
                    exc.message,
                    extra={"event": "metrics.catalog_failed"},
                )
        return Response(self._metrics.render(), media_type=CONTENT_TYPE)


def create_app(
    api: Any,
    *,
    rpc_path: str = "/rpc",
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    health: Callable[[], Mapping[str, Any]] | None = None,
    registry: Mapping[str, Method] = METHODS,
    console: Console | None = None,
    metrics: SchedulerMetrics | None = None,
) -> Starlette:
    """The ASGI app serving `api` over JSON-RPC at `rpc_path` plus `/healthz`;
    with `metrics`, `/metrics`; with `console`, the operator console's pages.

    `token`, when given, is required on every request. `health` reports the
    `workflow.health` / `/healthz` payload (`{"status": "ok", ...}`)."""
    reserved = (HEALTH_PATH, METRICS_PATH, *_CONSOLE_PATHS)
    if not rpc_path.startswith("/") or any(
        rpc_path == path or (path != "/" and rpc_path.startswith(path + "/")) for path in reserved
    ):
        raise ValueError(f"rpc_path must start with '/' and differ from {', '.join(reserved)}")
    if max_body_bytes < 1:
        raise ValueError("max_body_bytes must be positive")
    ctx = RpcContext(api=api, health=health or default_health(api))
    endpoint = _RpcEndpoint(ctx, registry, token, max_body_bytes)
    routes: list[Any] = [
        Route(rpc_path, endpoint.rpc, methods=["POST"]),
        Route(HEALTH_PATH, endpoint.healthz, methods=["GET"]),
    ]
    if metrics is not None:
        routes.append(
            Route(METRICS_PATH, _MetricsEndpoint(endpoint, metrics, console).get, methods=["GET"])
        )
    if console is not None:
        routes.extend(console.routes())
    return Starlette(routes=routes)
