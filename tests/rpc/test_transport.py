"""The HTTP/JSON-RPC transport on a live uvicorn server, over an in-memory API.

Covers the envelope (single, batch, notifications), protocol errors, params
validation, body bound, content type, auth and the Host rule, and internal
errors that must not leak. Domain behaviour is tested against the real server
in test_live_methods.py.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from adapters.client import App
from adapters.rpc.app import create_app
from adapters.rpc.methods import METHODS, Method
from adapters.rpc.protocol import InvalidParams, RpcError, Unauthorized
from core.errors import (
    AlreadyExists,
    InvalidDefinition,
    NotFound,
    RevisionConflict,
    SchedulerUnavailable,
)
from tests.rpc.fakes import FakeApi
from tests.rpc.live import SwitchableApi, serving

TOKEN = "s3cret-token-for-tests-0123456789"
JSON_HEADERS = {"Content-Type": "application/json"}


pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def plain() -> AsyncIterator[tuple[str, SwitchableApi]]:
    switch = SwitchableApi()
    async with serving(create_app(switch, max_body_bytes=4096)) as base:
        yield base, switch


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def guarded() -> AsyncIterator[tuple[str, SwitchableApi]]:
    switch = SwitchableApi()
    async with serving(create_app(switch, token=TOKEN)) as base:
        yield base, switch


@pytest.fixture
def api(plain: tuple[str, SwitchableApi], guarded: tuple[str, SwitchableApi]) -> FakeApi:
    fresh = FakeApi()
    plain[1].target = fresh
    guarded[1].target = fresh
    return fresh


@pytest.fixture
def url(plain: tuple[str, SwitchableApi], api: FakeApi) -> str:
    return plain[0]


async def post(url: str, body: Any, **kwargs: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {**JSON_HEADERS, **kwargs.pop("headers", {})}
    async with httpx.AsyncClient() as client:
        return await client.post(f"{url}/rpc", content=content, headers=headers, **kwargs)


def request(method: str, params: Any = None, request_id: Any = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": request_id}
    if params is not None:
        body["params"] = params
    return body


async def test_single_call_round_trip(url: str) -> None:
    response = await post(url, request("workflow.health", {}, "h1"))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": "h1",
        "result": {"status": "ok", "schedules": True},
    }


async def test_healthz(url: str) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.get(f"{url}/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "schedules": True}


async def test_batch_runs_in_order_and_skips_notifications(url: str, api: FakeApi) -> None:
    trigger = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}
    batch = [
        request(
            "workflow.schedules.create",
            {"schedule_id": "a", "deployment_id": "d", "trigger": trigger},
            1,
        ),
        {"jsonrpc": "2.0", "method": "workflow.schedules.pause", "params": {"schedule_id": "a"}},
        request("workflow.schedules.get", {"schedule_id": "a"}, 2),
        request("workflow.nope", {}, 3),
        17,
        request("workflow.schedules.get", {"schedule_id": "zzz"}, 4),
    ]
    response = await post(url, batch)
    assert response.status_code == 200
    answers = response.json()
    assert [a.get("id") for a in answers] == [1, 2, 3, None, 4]
    assert answers[0]["result"]["schedule_id"] == "a"
    # The notification ran (the schedule is paused) but got no answer.
    assert answers[1]["result"]["paused"] is True
    assert answers[2]["error"]["code"] == -32601
    assert answers[2]["error"]["data"] == {"code": "method_not_found", "method": "workflow.nope"}
    assert answers[3]["error"]["code"] == -32600
    assert answers[4]["error"]["code"] == -32003
    assert answers[4]["error"]["data"]["code"] == "not_found"
    assert api.schedules is not None
    assert api.schedules.items["a"]["paused"] is True


async def test_all_notifications_answer_204(url: str) -> None:
    body = [{"jsonrpc": "2.0", "method": "workflow.health"}] * 2
    response = await post(url, body)
    assert response.status_code == 204
    assert response.content == b""
    single = await post(url, {"jsonrpc": "2.0", "method": "workflow.health"})
    assert single.status_code == 204


async def test_a_notification_with_bad_params_gets_no_answer(url: str) -> None:
    # JSON-RPC 2.0: the server MUST NOT reply to a notification, also in a batch.
    bad_params = [
        {"jsonrpc": "2.0", "method": "workflow.health", "params": [1]},
        {"jsonrpc": "2.0", "method": "workflow.schedules.get", "params": {"colour": 1}},
    ]
    for note in bad_params:
        single = await post(url, note)
        assert (single.status_code, single.content) == (204, b"")
    batch = await post(url, [*bad_params, request("workflow.health", {}, 9)])
    assert [answer["id"] for answer in batch.json()] == [9]


PROTOCOL_ERRORS: list[tuple[bytes, int]] = [
    (b'{"jsonrpc": "2.0", "method": ', -32700),
    (b"not json at all", -32700),
    (b"[]", -32600),
    (b"[7]", -32600),
    (b'{"jsonrpc": "2.0", "id": 1}', -32600),
    (b'{"jsonrpc": "2.0", "method": "workflow.health", "params": "x", "id": 1}', -32600),
    (b'{"jsonrpc": "2.0", "method": "workflow.unknown", "id": 1}', -32601),
    (b'{"jsonrpc": "2.0", "method": "workflow.health", "params": [], "id": 1}', -32602),
]


@pytest.mark.parametrize(("body", "code"), PROTOCOL_ERRORS)
async def test_protocol_errors_are_json_rpc_errors_not_http_errors(
    url: str, body: bytes, code: int
) -> None:
    response = await post(url, body)
    assert response.status_code == 200
    answer = response.json()
    if isinstance(answer, list):
        (answer,) = answer
    assert answer["jsonrpc"] == "2.0"
    assert answer["error"]["code"] == code
    # docs/rpc.md: every error names itself in data.code.
    assert isinstance(answer["error"]["data"]["code"], str)
    assert "result" not in answer


PARAMS_CASES: list[tuple[str, dict[str, Any], list[dict[str, str]]]] = [
    (
        "workflow.schedules.create",
        {"schedule_id": "a", "trigger": {}, "colour": "red"},
        [
            {"field": "deployment_id", "reason": "required"},
            {"field": "colour", "reason": "unknown parameter"},
        ],
    ),
    (
        "workflow.schedules.update",
        {"schedule_id": "a", "expected_revision": "1"},
        [{"field": "expected_revision", "reason": "Input should be a valid integer"}],
    ),
    (
        "workflow.schedules.occurrences.list",
        {"schedule_id": 5, "limit": True},
        [
            {"field": "schedule_id", "reason": "Input should be a valid string"},
            {"field": "limit", "reason": "Input should be a valid integer"},
        ],
    ),
    ("workflow.health", {"verbose": True}, [{"field": "verbose", "reason": "unknown parameter"}]),
    (
        "workflow.deployments.save",
        {"payload": []},
        [{"field": "payload", "reason": "Input should be a valid dictionary"}],
    ),
]


@pytest.mark.parametrize(("method", "params", "problems"), PARAMS_CASES)
async def test_invalid_params_name_every_field(
    url: str, method: str, params: dict[str, Any], problems: list[dict[str, str]]
) -> None:
    response = await post(url, request(method, params))
    error = response.json()["error"]
    assert error["code"] == -32602
    assert error["data"]["code"] == "invalid_params"
    assert error["data"]["problems"] == problems
    for problem in problems:
        assert problem["field"] in error["message"]


async def test_null_params_are_not_passed_to_the_api(url: str, api: FakeApi) -> None:
    trigger = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}
    await post(
        url,
        request(
            "workflow.schedules.create",
            {"schedule_id": "a", "deployment_id": "d", "trigger": trigger, "misfire": None},
        ),
    )
    response = await post(
        url,
        request(
            "workflow.schedules.update",
            {"schedule_id": "a", "expected_revision": 1, "overlap": None, "misfire": "latest"},
        ),
    )
    assert response.json()["result"]["misfire"] == "latest"
    assert api.schedules is not None
    assert api.schedules.calls[0] == (
        "create_schedule",
        {"schedule_id": "a", "deployment_id": "d", "trigger": trigger},
    )
    assert api.schedules.calls[1] == (
        "update_schedule",
        {"expected_revision": 1, "misfire": "latest"},
    )


async def test_oversize_body_is_refused_with_413(url: str) -> None:
    big = request("workflow.health", {"pad": "x" * 5000})
    response = await post(url, big)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == -32011
    # Also when the client streams without a Content-Length.

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b" " * 1000

    async with httpx.AsyncClient() as client:
        streamed = await client.post(f"{url}/rpc", content=chunks(), headers=JSON_HEADERS)
    assert streamed.status_code == 413


async def test_wrong_content_type_is_refused_with_415(url: str) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{url}/rpc",
            content=json.dumps(request("workflow.health")),
            headers={"Content-Type": "text/plain"},
        )
    assert response.status_code == 415
    assert response.json()["error"]["data"] == {"code": "unsupported_media_type"}


async def test_get_on_rpc_path_is_405(url: str) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.get(f"{url}/rpc")
    assert response.status_code == 405


async def test_tokenless_server_refuses_foreign_host_header(url: str) -> None:
    response = await post(url, request("workflow.health"), headers={"Host": "evil.example:80"})
    assert response.status_code == 403
    assert response.json()["error"]["data"] == {"code": "forbidden_host"}
    ok = await post(url, request("workflow.health"), headers={"Host": "localhost:1"})
    assert ok.status_code == 200


async def test_unexpected_exception_is_internal_error_without_traceback(
    url: str, api: FakeApi, caplog: pytest.LogCaptureFixture
) -> None:
    api.explode_with = RuntimeError("secret detail /etc/passwd")
    with caplog.at_level(logging.ERROR, logger="adapters.rpc"):
        response = await post(url, request("workflow.artifacts.list", {}, 5))
    assert response.status_code == 200
    error = response.json()["error"]
    assert error["code"] == -32603
    assert error["data"]["code"] == "internal_error"
    assert "secret" not in response.text
    assert "Traceback" not in response.text
    incident = error["data"]["incident"]
    assert any(incident in record.getMessage() for record in caplog.records)
    assert any("secret detail" in (record.exc_text or "") for record in caplog.records)


async def test_unserialisable_result_is_internal_error(api: FakeApi) -> None:
    registry = {
        **METHODS,
        "test.clock": Method("test.clock", METHODS["workflow.health"].params, "api", "get_clock"),
    }
    async with serving(create_app(api, registry=registry)) as base:
        response = await post(base, request("test.clock", {}))
    assert response.status_code == 200
    assert response.json()["error"]["code"] == -32603


async def test_schedules_without_scheduler_are_unavailable() -> None:
    async with serving(create_app(FakeApi(schedules=False))) as base, App(f"{base}/rpc") as app:
        with pytest.raises(SchedulerUnavailable) as caught:
            await app.list_schedules()
        assert caught.value.to_dict()["code"] == "scheduler_unavailable"
        assert (await app.health())["schedules"] is False
        # Host methods still work.
        assert await app.list_artifacts() == []


# -- auth -------------------------------------------------------------------


@pytest.fixture
def secured(guarded: tuple[str, SwitchableApi], api: FakeApi) -> str:
    return guarded[0]


AUTH_CASES: list[tuple[dict[str, str], int]] = [
    ({}, 401),
    ({"Authorization": "Bearer wrong-token-wrong-token"}, 401),
    ({"Authorization": f"Bearer {TOKEN}x"}, 401),
    ({"Authorization": f"Basic {TOKEN}"}, 401),
    ({"Authorization": TOKEN}, 401),
    ({"Authorization": f"Bearer {TOKEN}"}, 200),
    ({"Authorization": f"bearer {TOKEN}"}, 200),
]


@pytest.mark.parametrize(("headers", "status"), AUTH_CASES)
async def test_token_is_enforced_on_rpc_and_healthz(
    secured: str, headers: dict[str, str], status: int
) -> None:
    response = await post(secured, request("workflow.health"), headers=headers)
    assert response.status_code == status
    async with httpx.AsyncClient() as client:
        health = await client.get(f"{secured}/healthz", headers=headers)
    assert health.status_code == status
    if status == 401:
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert response.json()["error"]["data"] == {"code": "unauthorized"}


async def test_secured_server_accepts_any_host_header_with_token(secured: str) -> None:
    response = await post(
        secured,
        request("workflow.health"),
        headers={"Host": "scheduler.internal:8765", "Authorization": f"Bearer {TOKEN}"},
    )
    assert response.status_code == 200


async def test_unauthorized_requests_never_reach_the_api(secured: str, api: FakeApi) -> None:
    trigger = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}
    response = await post(
        secured,
        request(
            "workflow.schedules.create",
            {"schedule_id": "a", "deployment_id": "d", "trigger": trigger},
        ),
    )
    assert response.status_code == 401
    assert api.schedules is not None
    assert api.schedules.items == {}


async def test_client_with_and_without_token(secured: str) -> None:
    async with App(f"{secured}/rpc") as anonymous:
        with pytest.raises(Unauthorized):
            await anonymous.health()
    async with App(f"{secured}/rpc", token="x" * 20) as wrong:
        with pytest.raises(Unauthorized):
            await wrong.health()
    async with App(secured, token=TOKEN) as right:
        assert (await right.health())["status"] == "ok"


# -- the client against the fake ----------------------------------------------


async def test_client_raises_the_api_exception_classes(url: str, api: FakeApi) -> None:
    trigger = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}
    async with App(url) as app:
        created = await app.create_schedule(schedule_id="a", deployment_id="d", trigger=trigger)
        assert created["revision"] == 1
        with pytest.raises(AlreadyExists):
            await app.create_schedule(schedule_id="a", deployment_id="d", trigger=trigger)
        with pytest.raises(InvalidDefinition) as bad:
            await app.create_schedule(schedule_id="b", deployment_id="d", trigger={"kind": "x"})
        assert [p.as_dict() for p in bad.value.problems] == [
            {"field": "trigger.kind", "reason": "must be 'cron' or 'oneshot'"}
        ]
        with pytest.raises(RevisionConflict) as stale:
            await app.update_schedule(schedule_id="a", expected_revision=7, misfire="latest")
        assert stale.value.data == {"current_revision": 1}
        with pytest.raises(NotFound):
            await app.get_schedule(schedule_id="missing")
        with pytest.raises(InvalidParams) as params:
            await app.call("workflow.schedules.get", {"schedule_id": 1})
        assert params.value.problems[0].field == "schedule_id"
        with pytest.raises(RpcError) as unknown:
            await app.call("workflow.nothing")
        assert unknown.value.code == -32601


async def test_client_iterates_every_occurrence_page(url: str, api: FakeApi) -> None:
    assert api.schedules is not None
    trigger = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}
    async with App(url) as app:
        await app.create_schedule(schedule_id="a", deployment_id="d", trigger=trigger)
        api.schedules.occurrences["a"] = [
            {"instant": f"t{i}", "status": "completed"} for i in range(7)
        ]
        rows = [row async for row in app.iter_schedule_occurrences(schedule_id="a", page_size=3)]
        assert [row["instant"] for row in rows] == [f"t{i}" for i in range(7)]
        first = await app.list_schedule_occurrences(schedule_id="a", limit=3)
        assert first["next_cursor"] == "3"


async def test_client_batch_returns_results_and_errors_in_order(url: str) -> None:
    async with App(url) as app:
        results = await app.batch(
            [
                ("workflow.health", {}),
                ("workflow.schedules.get", {"schedule_id": "nope"}),
                ("workflow.health", None),
            ]
        )
    assert results[0] == {"status": "ok", "schedules": True}
    assert isinstance(results[1], NotFound)
    assert results[2] == {"status": "ok", "schedules": True}
