"""A full disk over JSON-RPC (issue 15): a live server on a real store whose
writes fail with ENOSPC at the stores' fault points (`FailWrites`), so this
runs everywhere. `tests/reliability/test_disk_full.py` does it on a real tiny
disk."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.client import App
from adapters.host import build_local_static_workflow_server
from adapters.rpc.app import create_app
from core.errors import StoreUnavailable
from shell.durable import FailWrites, set_fault_injector
from tests.rpc.live import serving
from tests.rpc.test_admin_cli import make_cli

QUICKSTART = Path(__file__).resolve().parents[2] / "docs" / "examples" / "quickstart"
HOURLY = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}


def quickstart(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((QUICKSTART / name).read_text(encoding="utf-8"))
    return payload


@dataclass
class Live:
    base: str
    app: App
    disk: FailWrites
    root: Path


@pytest.fixture
def disk() -> Iterator[FailWrites]:
    full = FailWrites()
    full.failing = False
    previous = set_fault_injector(full)
    yield full
    set_fault_injector(previous)


@pytest.fixture
async def live(tmp_path: Path, disk: FailWrites) -> AsyncIterator[Live]:
    server = build_local_static_workflow_server(tmp_path / "store", schedules=True)
    # Every health check may probe (the server's default is once a second).
    server.api.store_health.probe_interval_s = 0
    async with serving(create_app(server.api)) as base, App(base) as app:
        await app.create_artifact_from_plan(**quickstart("artifact.json"))
        await app.save_deployment(quickstart("deployment.json"))
        yield Live(base=base, app=app, disk=disk, root=tmp_path / "store")
    await server.api.cancel_executing()


async def rpc(base: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{base}/rpc", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        )
    assert response.status_code == 200
    answer: dict[str, Any] = response.json()
    return answer


async def healthz(base: str) -> tuple[int, dict[str, Any]]:
    async with httpx.AsyncClient() as client:
        response = await client.get(f"{base}/healthz")
    body: dict[str, Any] = response.json()
    return response.status_code, body


CREATE = {"schedule_id": "hourly", "deployment_id": "hello.default", "trigger": HOURLY}


async def test_a_create_on_a_full_disk_answers_store_unavailable_then_succeeds(
    live: Live,
) -> None:
    # Full from the created record on: the schedule's directory is made first.
    live.disk.points = frozenset({"before:append:lifecycle.jsonl", "before:write:store-probe"})
    live.disk.failing = True
    answer = await rpc(live.base, "workflow.schedules.create", CREATE)
    error = answer["error"]
    assert error["code"] == -32009
    assert error["message"].startswith("disk full: create_schedule(schedule_id='hourly') failed")
    data = error["data"]
    assert data["code"] == "store_unavailable"
    assert (data["errno"], data["disk_full"]) == ("ENOSPC", True)
    assert data["operation"] == "create_schedule(schedule_id='hourly')"
    assert not (live.root / "schedules" / "hourly").exists()

    status, body = await healthz(live.base)
    assert status == 503
    assert body["status"] == "degraded" and body["schedules"] is True
    assert body["store"]["disk_full"] is True and body["store"]["failing"] == ["api"]
    assert (await live.app.health())["status"] == "degraded"
    # The client raises the domain class.
    with pytest.raises(StoreUnavailable) as raised:
        await live.app.create_schedule(**CREATE)
    assert raised.value.data["errno"] == "ENOSPC"

    live.disk.failing = False  # space returns: the next health check's probe sees it
    assert await healthz(live.base) == (200, {"status": "ok", "schedules": True})
    created = await live.app.create_schedule(**CREATE)
    assert created["revision"] == 1
    assert (await live.app.get_schedule(schedule_id="hourly"))["schedule_id"] == "hourly"


async def test_host_methods_on_a_full_disk_answer_store_unavailable(live: Live) -> None:
    live.disk.failing = True
    deployment = {**quickstart("deployment.json"), "deployment_id": "hello.other"}
    answer = await rpc(live.base, "workflow.deployments.save", {"payload": deployment})
    assert answer["error"]["code"] == -32009
    assert answer["error"]["data"]["operation"] == "save_deployment(deployment_id='hello.other')"
    answer = await rpc(live.base, "workflow.runs.start", {"deployment_id": "hello.default"})
    assert answer["error"]["code"] == -32009
    assert answer["error"]["data"]["errno"] == "ENOSPC"
    live.disk.failing = False
    assert (await live.app.save_deployment(deployment))["deployment_id"] == "hello.other"


async def test_the_cli_exits_10_on_a_full_disk_and_while_health_is_degraded(live: Live) -> None:
    cli = make_cli(f"{live.base}/rpc")
    live.disk.failing = True
    created = await cli("create", "hourly", "--deployment", "hello.default", "--cron", "0 * * * *")
    assert created.exit_code == 10, created.output
    assert "disk full" in created.output
    health = await cli("health")
    assert health.exit_code == 10, health.output
    assert "degraded" in health.output
    live.disk.failing = False
    health = await cli("health")
    assert health.exit_code == 0, health.output
