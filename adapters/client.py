"""`App`: the async Python client of `wf-rpc-server`.

    async with App("http://127.0.0.1:8765/rpc", token=None) as app:
        schedule = await app.create_schedule(schedule_id="nightly", ...)
        async for row in app.iter_schedule_occurrences(schedule_id="nightly"):
            ...

The schedule methods mirror `server.api.schedules` (same keyword names, same
results, same exceptions): a domain error on the server is raised here as the
same `core.errors` class, with `problems` and the rest of its data restored.
Protocol failures raise `RpcError` (`Unauthorized` for a refused token);
failing to reach the server raises `ServerUnreachable`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Final
from urllib.parse import urlsplit, urlunsplit

from adapters.rpc.protocol import (
    INTERNAL_ERROR,
    REQUEST_TOO_LARGE,
    RpcError,
    Unauthorized,
    error_from_wire,
)

if TYPE_CHECKING:
    import httpx

__all__ = ["DEFAULT_URL", "App", "RpcError", "ServerUnreachable", "Unauthorized", "endpoint_url"]

DEFAULT_URL: Final = "http://127.0.0.1:8765/rpc"


class ServerUnreachable(RpcError):
    """The server could not be reached, or answered with something that is not JSON-RPC."""

    exit_status: ClassVar[int] = 8

    def __init__(self, message: str, *, connected: bool = False) -> None:
        super().__init__(0, message)
        # False: nothing answered at all (no server there); True: something
        # answered, but not a JSON-RPC server.
        self.connected = connected


def endpoint_url(url: str) -> str:
    """The JSON-RPC endpoint for `url`: a bare origin gets the default `/rpc` path."""
    parts = urlsplit(url.strip())
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise ValueError(f"not an http(s) URL: {url!r}")
    path = parts.path if parts.path not in {"", "/"} else "/rpc"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _compact(**params: Any) -> dict[str, Any]:
    # `None` means "not given" on the wire too: the server applies its default.
    return {name: value for name, value in params.items() if value is not None}


def _instant(value: datetime | str) -> str:
    """An instant as the wire carries it: ISO-8601 text (a datetime's own
    `isoformat`, so a naive one is sent without an offset and refused by the
    server, naming its field)."""
    return value.isoformat() if isinstance(value, datetime) else value


def _arguments(given: Mapping[str, Any]) -> dict[str, Any]:
    """A method's arguments (its `locals()` on entry) as params: without
    `self`, None (not given) left out, mappings as the JSON objects they are."""
    return _compact(
        **{
            name: dict(value) if isinstance(value, Mapping) else value
            for name, value in given.items()
            if name != "self"
        }
    )


class App:
    """Async client of the `workflow.*` JSON-RPC methods.

    Use as `async with App(url, token=...) as app:`; `url` is the endpoint
    (`http://host:port/rpc`; a bare `http://host:port` gets `/rpc`)."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str | None = None,
        *,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        # Imported here: `import adapters` (and `wf-schedule preview`) should not
        # pay for the HTTP stack, which costs as much as the rest together.
        import httpx

        self.url = endpoint_url(url)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        # Plain-http endpoints never do TLS (redirects are not followed), so skip
        # loading the CA bundle, which costs more than a whole local call.
        verify = urlsplit(self.url).scheme == "https"
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=timeout_s,
            transport=transport,
            follow_redirects=False,
            verify=verify,
        )
        self._ids = itertools.count(1)

    async def __aenter__(self) -> App:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    # -- transport ---------------------------------------------------------

    async def _post(self, payload: Any) -> Any:
        import httpx

        try:
            response = await self._client.post(self.url, content=json.dumps(payload))
        except httpx.HTTPError as exc:
            raise ServerUnreachable(f"cannot reach the server at {self.url}: {exc}") from exc
        if response.status_code == 204:
            return None
        try:
            body = response.json()
        except ValueError:
            raise ServerUnreachable(
                f"{self.url} answered HTTP {response.status_code} without a JSON-RPC body",
                connected=True,
            ) from None
        if response.status_code == 401:
            error = body.get("error", {}) if isinstance(body, dict) else {}
            raise Unauthorized(error.get("code", 0), error.get("message", "unauthorized"))
        if response.status_code == 413:
            raise RpcError(REQUEST_TOO_LARGE, "request too large for the server")
        return body

    @staticmethod
    def _unwrap(response: Any) -> Any:
        if not isinstance(response, dict) or response.get("jsonrpc") != "2.0":
            raise RpcError(INTERNAL_ERROR, f"malformed JSON-RPC response: {response!r}")
        if "error" in response:
            error = response["error"]
            if not isinstance(error, dict):
                raise RpcError(INTERNAL_ERROR, f"malformed JSON-RPC error: {error!r}")
            raise error_from_wire(
                int(error.get("code", INTERNAL_ERROR)),
                str(error.get("message", "")),
                error.get("data"),
            )
        return response.get("result")

    async def call(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """Call one JSON-RPC method; return its result or raise its error."""
        request = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        if params is not None:
            request["params"] = dict(params)
        return self._unwrap(await self._post(request))

    async def batch(
        self, calls: Sequence[tuple[str, Mapping[str, Any] | None]]
    ) -> list[Any | Exception]:
        """Send several calls in one request (run in order on the server).

        Returns one entry per call, in order: its result, or the exception it
        would have raised (returned, not raised, so one failure does not hide
        the others)."""
        if not calls:
            return []
        ids = [next(self._ids) for _ in calls]
        requests = []
        for request_id, (method, params) in zip(ids, calls, strict=True):
            request: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
            if params is not None:
                request["params"] = dict(params)
            requests.append(request)
        body = await self._post(requests)
        if not isinstance(body, list):
            # A batch-level failure (e.g. parse error) comes back as one object.
            self._unwrap(body)
            raise RpcError(INTERNAL_ERROR, f"malformed JSON-RPC batch response: {body!r}")
        by_id = {item.get("id"): item for item in body if isinstance(item, dict)}
        results: list[Any | Exception] = []
        for request_id in ids:
            item = by_id.get(request_id)
            try:
                results.append(self._unwrap(item))
            except Exception as exc:
                # Returned, not raised: one failed call must not hide the others.
                results.append(exc)
        return results

    # -- schedules -----------------------------------------------------------

    async def create_schedule(
        self,
        *,
        schedule_id: str,
        deployment_id: str,
        trigger: Mapping[str, Any],
        inputs: Mapping[str, Any] | None = None,
        overlap: str | None = None,
        max_active_runs: int | None = None,
        misfire: str | None = None,
        lateness_allowance_s: float | None = None,
        max_steps: int | None = None,
    ) -> dict[str, Any]:
        """Create a schedule. Raises InvalidDefinition, AlreadyExists, NotFound,
        SchedulerUnavailable."""
        # The keyword arguments are the definition's fields (a test holds them
        # to the model), sent under their own names.
        params = _arguments(locals())
        result: dict[str, Any] = await self.call("workflow.schedules.create", params)
        return result

    async def get_schedule(self, *, schedule_id: str) -> dict[str, Any]:
        """The schedule's full payload. Raises NotFound."""
        result: dict[str, Any] = await self.call(
            "workflow.schedules.get", {"schedule_id": schedule_id}
        )
        return result

    async def list_schedules(self, *, include_deleted: bool = False) -> list[dict[str, Any]]:
        """Every schedule; deleted ones only when `include_deleted`."""
        result: list[dict[str, Any]] = await self.call(
            "workflow.schedules.list", {"include_deleted": include_deleted}
        )
        return result

    async def update_schedule(
        self,
        *,
        schedule_id: str,
        expected_revision: int,
        deployment_id: str | None = None,
        trigger: Mapping[str, Any] | None = None,
        inputs: Mapping[str, Any] | None = None,
        overlap: str | None = None,
        max_active_runs: int | None = None,
        misfire: str | None = None,
        lateness_allowance_s: float | None = None,
        max_steps: int | None = None,
    ) -> dict[str, Any]:
        """Patch the given fields (None = unpatched). Raises RevisionConflict when
        `expected_revision` is stale, InvalidDefinition, NotFound."""
        params = _arguments(locals())
        result: dict[str, Any] = await self.call("workflow.schedules.update", params)
        return result

    async def pause_schedule(self, *, schedule_id: str) -> dict[str, Any]:
        """Stop future admission (idempotent). Raises NotFound."""
        result: dict[str, Any] = await self.call(
            "workflow.schedules.pause", {"schedule_id": schedule_id}
        )
        return result

    async def resume_schedule(self, *, schedule_id: str) -> dict[str, Any]:
        """Resume from the next future instant (idempotent). Raises NotFound."""
        result: dict[str, Any] = await self.call(
            "workflow.schedules.resume", {"schedule_id": schedule_id}
        )
        return result

    async def delete_schedule(self, *, schedule_id: str) -> dict[str, Any]:
        """Soft delete; runs and history survive. Raises NotFound."""
        result: dict[str, Any] = await self.call(
            "workflow.schedules.delete", {"schedule_id": schedule_id}
        )
        return result

    async def trigger_schedule(
        self, *, schedule_id: str, overlap: str | None = None
    ) -> dict[str, Any]:
        """Run the schedule now, once: `{"schedule_id", "requested_at",
        "instant", "status", "run_id", "overlap"}` (`status` "requested" when
        the scheduler had not decided within 10 s). `overlap="allow"` runs it
        whatever the schedule's overlap policy. Raises InvalidState (the
        overlap policy refuses: nothing recorded; deleted; blocked),
        InvalidInput (`overlap`), NotFound."""
        result: dict[str, Any] = await self.call(
            "workflow.schedules.trigger", _compact(schedule_id=schedule_id, overlap=overlap)
        )
        return result

    async def backfill_schedule(
        self,
        *,
        schedule_id: str,
        start: datetime | str,
        end: datetime | str,
        overlap: str | None = None,
    ) -> dict[str, Any]:
        """Admit the calendar instants of `[start, end)` (past, with a UTC
        offset) that did not run, oldest first: `{"schedule_id", "backfill":
        plan}`; `get_schedule`'s `backfill` shows the progress. Raises
        InvalidInput naming `start`, `end` or `overlap`, InvalidState (a
        backfill already running, deleted, blocked), NotFound."""
        result: dict[str, Any] = await self.call(
            "workflow.schedules.backfill",
            _compact(
                schedule_id=schedule_id, start=_instant(start), end=_instant(end), overlap=overlap
            ),
        )
        return result

    async def cancel_backfill(self, *, schedule_id: str) -> dict[str, Any]:
        """Stop the running backfill (its runs already admitted go on):
        `{"schedule_id", "cancelled_at", "backfill"}`. Raises InvalidState
        when none is running, NotFound."""
        result: dict[str, Any] = await self.call(
            "workflow.schedules.backfill.cancel", {"schedule_id": schedule_id}
        )
        return result

    async def list_schedule_occurrences(
        self, *, schedule_id: str, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        """One page: `{"occurrences": [...], "next_cursor": str | None}`."""
        result: dict[str, Any] = await self.call(
            "workflow.schedules.occurrences.list",
            _compact(schedule_id=schedule_id, limit=limit, cursor=cursor),
        )
        return result

    async def iter_schedule_occurrences(
        self, *, schedule_id: str, page_size: int = 100
    ) -> AsyncIterator[dict[str, Any]]:
        """Every occurrence row, oldest first, fetching page after page until
        `next_cursor` is null."""
        cursor: str | None = None
        while True:
            page = await self.list_schedule_occurrences(
                schedule_id=schedule_id, limit=page_size, cursor=cursor
            )
            for row in page.get("occurrences", []):
                yield row
            cursor = page.get("next_cursor")
            if cursor is None:
                return

    # -- artifacts, deployments, runs ------------------------------------------

    async def create_artifact_from_plan(
        self,
        artifact_id: str,
        version: int,
        plan: Mapping[str, Any],
        title: str | None = None,
        description: str | None = None,
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self.call(
            "workflow.artifacts.create_from_plan",
            _compact(
                artifact_id=artifact_id,
                version=version,
                plan=dict(plan),
                title=title,
                description=description,
            ),
        )
        return result

    async def get_artifact(self, artifact_id: str, version: int | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self.call(
            "workflow.artifacts.get", _compact(artifact_id=artifact_id, version=version)
        )
        return result

    async def list_artifacts(self) -> Any:
        return await self.call("workflow.artifacts.list", {})

    async def save_deployment(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self.call(
            "workflow.deployments.save", {"payload": dict(payload)}
        )
        return result

    async def get_deployment(self, deployment_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await self.call(
            "workflow.deployments.get", {"deployment_id": deployment_id}
        )
        return result

    async def list_deployments(self) -> Any:
        return await self.call("workflow.deployments.list", {})

    async def delete_deployment(self, deployment_id: str, force: bool = False) -> Any:
        """Delete a deployment. InvalidState (data `schedule_ids`) while schedules
        use it, unless `force`."""
        params: dict[str, Any] = {"deployment_id": deployment_id}
        if force:
            params["force"] = True
        return await self.call("workflow.deployments.delete", params)

    async def start_run(
        self,
        deployment_id: str,
        inputs: Mapping[str, Any] | None = None,
        max_steps: int | None = None,
    ) -> str:
        """Start a manual run; returns its run id at once."""
        result: str = await self.call(
            "workflow.runs.start",
            _compact(
                deployment_id=deployment_id,
                inputs=dict(inputs) if inputs is not None else None,
                max_steps=max_steps,
            ),
        )
        return result

    async def resume_run(self, run_id: str, payload: Any) -> dict[str, Any]:
        """Resume an interrupted run; returns the run once it stops again."""
        result: dict[str, Any] = await self.call(
            "workflow.runs.resume", {"run_id": run_id, "payload": payload}
        )
        return result

    async def inspect_run(self, run_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await self.call("workflow.runs.inspect", {"run_id": run_id})
        return result

    async def list_runs(
        self, status: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> dict[str, Any]:
        """One page: `{"runs": [...], "next_cursor": str | None}`."""
        result: dict[str, Any] = await self.call(
            "workflow.runs.list", _compact(status=status, cursor=cursor, limit=limit)
        )
        return result

    async def iter_runs(
        self, status: str | None = None, page_size: int = 50
    ) -> AsyncIterator[dict[str, Any]]:
        """Every run, page after page."""
        cursor: str | None = None
        while True:
            page = await self.list_runs(status=status, cursor=cursor, limit=page_size)
            for run in page.get("runs", []):
                yield run
            cursor = page.get("next_cursor")
            if cursor is None:
                return

    async def health(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.call("workflow.health", {})
        return result
