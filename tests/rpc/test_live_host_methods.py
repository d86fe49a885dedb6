"""Artifact, deployment and run methods round-trip through a live server over the real host."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from adapters.client import App
from adapters.rpc.app import create_app
from core.errors import AlreadyExists, InvalidInput, InvalidState, NotFound
from tests.rpc.live import BACKENDS, SwitchableApi, server_on, serving, wait_until

QUICKSTART = Path(__file__).resolve().parents[2] / "docs" / "examples" / "quickstart"

ASK_PLAN: dict[str, Any] = {
    "name": "ask",
    "input_schema": {"type": "object"},
    "start": "ask",
    "nodes": [
        {"id": "ask", "kind": "interrupt", "prompt": "Who?", "resume_schema": {"type": "string"}},
        {
            "id": "greet",
            "kind": "call",
            "capability": "wf.std.format",
            "params": {"template": "hello {state.ask}"},
        },
    ],
    "edges": {"ask": {"ok": "greet"}, "greet": {"ok": "__end__"}},
    "output": {"result": "state.greet"},
}


def quickstart(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((QUICKSTART / name).read_text(encoding="utf-8"))
    return payload


pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def live() -> AsyncIterator[tuple[str, SwitchableApi]]:
    switch = SwitchableApi()
    async with serving(create_app(switch)) as base:
        yield base, switch


@pytest_asyncio.fixture(loop_scope="module", params=BACKENDS)
async def app(
    tmp_path: Path, live: tuple[str, SwitchableApi], request: pytest.FixtureRequest
) -> AsyncIterator[App]:
    base, switch = live
    pg_url = request.getfixturevalue("pg_url") if request.param == "pg" else None
    async with server_on(request.param, tmp_path / "store", pg_url, schedules=False) as server:
        switch.target = server.api
        async with App(base) as client:
            yield client


async def status_of(app: App, run_id: str, wanted: str) -> dict[str, Any] | None:
    run = await app.inspect_run(run_id)
    return run if run["status"] == wanted else None


async def test_artifacts_round_trip(app: App) -> None:
    spec = quickstart("artifact.json")
    created = await app.create_artifact_from_plan(**spec)
    assert (created["artifact_id"], created["version"]) == ("hello", 1)
    assert created["title"] == "Hello"
    assert await app.get_artifact("hello") == created
    assert await app.get_artifact("hello", 1) == created
    assert await app.list_artifacts() == [created]
    # Identical content is idempotent; different content under the same version is not.
    assert await app.create_artifact_from_plan(**spec) == created
    with pytest.raises(AlreadyExists):
        await app.create_artifact_from_plan(**{**spec, "title": "Other"})
    with pytest.raises(NotFound):
        await app.get_artifact("hello", 2)


async def test_bad_plan_is_invalid_input_naming_each_field(app: App) -> None:
    plan = {**quickstart("artifact.json")["plan"], "start": "nowhere", "colour": "red"}
    with pytest.raises(InvalidInput) as caught:
        await app.create_artifact_from_plan("broken", 1, plan)
    fields = {problem.field for problem in caught.value.problems}
    assert {"plan.start", "plan.colour"} <= fields
    assert caught.value.to_dict()["code"] == "invalid_input"


async def test_deployments_round_trip(app: App) -> None:
    await app.create_artifact_from_plan(**quickstart("artifact.json"))
    saved = await app.save_deployment(quickstart("deployment.json"))
    assert saved["deployment_id"] == "hello.default"
    assert saved["inputs"] == {"name": "world"}
    assert await app.get_deployment("hello.default") == saved
    assert await app.list_deployments() == [saved]
    assert (await app.delete_deployment("hello.default"))["deployment_id"] == "hello.default"
    with pytest.raises(NotFound):
        await app.get_deployment("hello.default")
    with pytest.raises(NotFound):
        await app.save_deployment({**quickstart("deployment.json"), "artifact_version": 9})


async def test_runs_start_inspect_list(app: App) -> None:
    await app.create_artifact_from_plan(**quickstart("artifact.json"))
    await app.save_deployment(quickstart("deployment.json"))
    first = await app.start_run("hello.default")
    second = await app.start_run("hello.default", {"name": "Ada"})
    assert (first, second) == ("run-000001", "run-000002")
    done = await wait_until(lambda: status_of(app, second, "completed"))
    assert done["output"] == {"result": "hello Ada, on a schedule"}
    assert done["origin"] == {"kind": "manual"}
    await wait_until(lambda: status_of(app, first, "completed"))
    page = await app.list_runs(limit=1)
    assert [run["run_id"] for run in page["runs"]] == [first]
    assert page["next_cursor"] is not None
    assert [run["run_id"] async for run in app.iter_runs(page_size=1)] == [first, second]
    completed = await app.list_runs(status="completed")
    assert len(completed["runs"]) == 2
    with pytest.raises(InvalidState):
        await app.resume_run(first, "anything")
    with pytest.raises(NotFound):
        await app.inspect_run("run-000099")
    with pytest.raises(InvalidInput) as bad:
        await app.start_run("hello.default", {"name": 5})
    assert bad.value.problems[0].field.startswith("inputs")


async def test_interrupted_run_resumes_over_rpc(app: App) -> None:
    await app.create_artifact_from_plan("ask", 1, ASK_PLAN)
    await app.save_deployment(
        {"deployment_id": "ask.default", "artifact_id": "ask", "artifact_version": 1}
    )
    run_id = await app.start_run("ask.default")
    waiting = await wait_until(lambda: status_of(app, run_id, "interrupted"))
    assert waiting["interrupt"]["prompt"] == "Who?"
    with pytest.raises(InvalidInput):
        await app.resume_run(run_id, 42)
    finished = await app.resume_run(run_id, "Grace")
    assert finished["status"] == "completed"
    assert finished["output"] == {"result": "hello Grace"}
