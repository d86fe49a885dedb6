"""Artifacts (immutable versions) and deployments (pins with default inputs), on
files and on PostgreSQL (the `host` and `server` fixtures)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from adapters.host import LocalStaticWorkflowServer
from core.errors import AlreadyExists, InvalidInput, NotFound

from .conftest import APPROVAL_PLAN, GREETING_PLAN, Builder, HostStore


async def test_create_get_and_list_artifacts(server: LocalStaticWorkflowServer) -> None:
    created = await server.api.create_artifact_from_plan(
        "hello", 1, GREETING_PLAN, title="Hello", description="says hello"
    )
    assert created == {
        "artifact_id": "hello",
        "version": 1,
        "title": "Hello",
        "description": "says hello",
        "plan": GREETING_PLAN,
        "created_at": created["created_at"],
    }
    await server.api.create_artifact_from_plan("hello", 2, APPROVAL_PLAN)
    await server.api.create_artifact_from_plan("aaa", 1, GREETING_PLAN)
    assert (await server.api.get_artifact("hello"))["version"] == 2  # latest
    assert (await server.api.get_artifact("hello", 1)) == created
    listed = await server.api.list_artifacts()
    assert [(a["artifact_id"], a["version"]) for a in listed] == [
        ("aaa", 1),
        ("hello", 1),
        ("hello", 2),
    ]


async def test_artifact_versions_are_immutable(
    host: HostStore, server: LocalStaticWorkflowServer
) -> None:
    first = await server.api.create_artifact_from_plan("hello", 1, GREETING_PLAN, title="t")
    # Identical content: idempotent, the original record comes back.
    before = host.snapshot()
    assert await server.api.create_artifact_from_plan("hello", 1, GREETING_PLAN, title="t") == first
    assert host.snapshot() == before
    changed = copy.deepcopy(GREETING_PLAN)
    changed["name"] = "hello-2"
    for plan, title in [(changed, "t"), (GREETING_PLAN, "other title"), (GREETING_PLAN, None)]:
        with pytest.raises(AlreadyExists) as caught:
            await server.api.create_artifact_from_plan("hello", 1, plan, title=title)
        assert "'hello' version 1 already exists with different content" in caught.value.message
    assert host.snapshot() == before


async def test_returned_artifacts_are_copies(server: LocalStaticWorkflowServer) -> None:
    created = await server.api.create_artifact_from_plan("hello", 1, GREETING_PLAN)
    created["plan"]["name"] = "mutated"
    assert (await server.api.get_artifact("hello", 1))["plan"]["name"] == "hello"


async def test_artifacts_survive_a_restart(host: HostStore) -> None:
    first = await host.build()
    created = await first.api.create_artifact_from_plan("hello", 1, GREETING_PLAN)
    again = await host.build()
    assert await again.api.get_artifact("hello", 1) == created
    assert await again.api.list_artifacts() == [created]
    assert again.recovery_report == []


@pytest.mark.parametrize(
    ("args", "fields"),
    [
        (("bad id!", 1, GREETING_PLAN), ["artifact_id"]),
        ((".hidden", 1, GREETING_PLAN), ["artifact_id"]),
        (("x" * 129, 1, GREETING_PLAN), ["artifact_id"]),
        (("hello", 0, GREETING_PLAN), ["version"]),
        (("hello", "1", GREETING_PLAN), ["version"]),
        (("hello", True, GREETING_PLAN), ["version"]),
        (("hello", 1, {**GREETING_PLAN, "start": "nope"}), ["plan.start"]),
        ((None, None, None), ["artifact_id", "version", "plan"]),
    ],
)
async def test_invalid_artifact_names_every_field(
    host: HostStore, server: LocalStaticWorkflowServer, args: tuple[Any, ...], fields: list[str]
) -> None:
    before = host.snapshot()
    with pytest.raises(InvalidInput) as caught:
        await server.api.create_artifact_from_plan(*args)
    assert [p.field for p in caught.value.problems] == fields
    assert host.snapshot() == before


async def test_invalid_title_and_description(server: LocalStaticWorkflowServer) -> None:
    with pytest.raises(InvalidInput) as caught:
        await server.api.create_artifact_from_plan("a", 1, GREETING_PLAN, title=3, description=[])  # type: ignore[arg-type]
    assert [p.field for p in caught.value.problems] == ["title", "description"]


async def test_unknown_artifact(server: LocalStaticWorkflowServer) -> None:
    await server.api.create_artifact_from_plan("hello", 1, GREETING_PLAN)
    with pytest.raises(NotFound, match="artifact 'nope' not found"):
        await server.api.get_artifact("nope")
    with pytest.raises(NotFound, match="artifact 'hello' version 2 not found"):
        await server.api.get_artifact("hello", 2)
    # A string that can never be an id names nothing; a wrong type is bad input.
    with pytest.raises(NotFound, match=r"artifact '\.\./etc' not found"):
        await server.api.get_artifact("../etc")
    with pytest.raises(InvalidInput) as caught:
        await server.api.get_artifact(7, 0)  # type: ignore[arg-type]
    assert [p.field for p in caught.value.problems] == ["artifact_id", "version"]
    with pytest.raises(NotFound, match="deployment 'a/b' not found"):
        await server.api.get_deployment("a/b")
    with pytest.raises(InvalidInput) as caught:
        await server.api.get_deployment(None)  # type: ignore[arg-type]
    assert [(p.field, p.reason) for p in caught.value.problems] == [
        ("deployment_id", "is required")
    ]


# --- deployments ------------------------------------------------------------------


def _payload(**overrides: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "deployment_id": "hello.default",
        "artifact_id": "hello",
        "artifact_version": 1,
        "inputs": {"name": "world"},
        "title": "Hello",
    }
    payload.update(overrides)
    return payload


async def test_deployment_lifecycle(host: HostStore, server: LocalStaticWorkflowServer) -> None:
    await server.api.create_artifact_from_plan("hello", 1, GREETING_PLAN)
    await server.api.create_artifact_from_plan("hello", 2, GREETING_PLAN, title="v2")
    saved = await server.api.save_deployment(_payload())
    assert saved == {
        "deployment_id": "hello.default",
        "artifact_id": "hello",
        "artifact_version": 1,
        "inputs": {"name": "world"},
        "title": "Hello",
        "created_at": saved["created_at"],
        "updated_at": saved["updated_at"],
    }
    assert await server.api.get_deployment("hello.default") == saved
    # Saving again replaces it (re-pinning), keeping the creation time.
    moved = await server.api.save_deployment(_payload(artifact_version=2, inputs={}))
    assert (moved["artifact_version"], moved["inputs"], moved["created_at"]) == (
        2,
        {},
        saved["created_at"],
    )
    assert moved["updated_at"] > saved["updated_at"]
    await server.api.save_deployment(_payload(deployment_id="a_first", title=None))
    assert [d["deployment_id"] for d in await server.api.list_deployments()] == [
        "a_first",
        "hello.default",
    ]
    deleted = await server.api.delete_deployment("hello.default")
    assert deleted == moved
    with pytest.raises(NotFound, match=r"deployment 'hello\.default' not found"):
        await server.api.get_deployment("hello.default")
    with pytest.raises(NotFound):
        await server.api.delete_deployment("hello.default")
    # The delete is durable: a restart finds only the other one.
    again = await host.build()
    assert [d["deployment_id"] for d in await again.api.list_deployments()] == ["a_first"]
    assert again.recovery_report == []


async def test_deployments_survive_a_restart(host: HostStore) -> None:
    first = await host.build()
    await first.api.create_artifact_from_plan("hello", 1, GREETING_PLAN)
    saved = await first.api.save_deployment(_payload())
    assert await (await host.build()).api.list_deployments() == [saved]


@pytest.mark.parametrize(
    ("payload", "fields"),
    [
        (_payload(deployment_id="bad/id"), ["deployment_id"]),
        (_payload(deployment_id="-dash-first"), ["deployment_id"]),
        (_payload(deployment_id=None), ["deployment_id"]),
        (_payload(artifact_id=""), ["artifact_id"]),
        (_payload(artifact_version=0), ["artifact_version"]),
        (_payload(inputs=[1]), ["inputs"]),
        (_payload(inputs={"x": float("inf")}), ["inputs.x"]),
        (_payload(inputs={"x": {1: 2}}), ["inputs.x"]),
        (_payload(title=5), ["title"]),
        (_payload(colour="blue"), ["colour"]),
        ({}, ["deployment_id", "artifact_id", "artifact_version"]),
    ],
)
async def test_invalid_deployment_names_every_field(
    host: HostStore,
    server: LocalStaticWorkflowServer,
    payload: dict[str, Any],
    fields: list[str],
) -> None:
    await server.api.create_artifact_from_plan("hello", 1, GREETING_PLAN)
    before = host.snapshot()
    with pytest.raises(InvalidInput) as caught:
        await server.api.save_deployment(payload)
    assert [p.field for p in caught.value.problems] == fields
    assert host.snapshot() == before


async def test_deployment_payload_must_be_an_object(server: LocalStaticWorkflowServer) -> None:
    with pytest.raises(InvalidInput) as caught:
        await server.api.save_deployment(["x"])  # type: ignore[arg-type]
    assert [p.field for p in caught.value.problems] == ["payload"]


async def test_deployment_of_a_missing_artifact(
    host: HostStore, server: LocalStaticWorkflowServer
) -> None:
    before = host.snapshot()
    with pytest.raises(NotFound, match="artifact 'hello' version 1 not found"):
        await server.api.save_deployment(_payload())
    assert host.snapshot() == before


# Files only; tests/host/test_postgres.py damages rows.
async def test_unreadable_artifact_and_deployment_files_are_reported(
    build: Builder, tmp_path: Path
) -> None:
    first = build()
    await first.api.create_artifact_from_plan("hello", 1, GREETING_PLAN)
    await first.api.save_deployment(_payload())
    (tmp_path / "artifacts" / "hello" / "1.json").write_text("{torn")
    (tmp_path / "deployments" / "hello.default.json").write_text('{"deployment_id": "other"}')
    second = build()
    assert [(f["finding"], Path(f["file"]).name) for f in second.recovery_report] == [
        ("unreadable-artifact", "1.json"),
        ("unreadable-deployment", "hello.default.json"),
    ]
    with pytest.raises(NotFound):
        await second.api.get_deployment("hello.default")
