"""Shared fixtures and plans for the host tests."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from adapters import build_local_static_workflow_server
from adapters.host import LocalStaticWorkflowServer

from .samples import APPROVAL_PLAN, GREETING_PLAN, chain_plan, sleep_plan

__all__ = [
    "APPROVAL_PLAN",
    "GREETING_PLAN",
    "START",
    "Builder",
    "TickingClock",
    "chain_plan",
    "deploy",
    "sleep_plan",
    "tree_snapshot",
]

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class TickingClock:
    """A fake clock: every reading is one millisecond after the previous one."""

    def __init__(self, start: datetime = START) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


def tree_snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` with its bytes: to prove a call wrote nothing."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


Builder = Callable[..., LocalStaticWorkflowServer]


@pytest.fixture
def build(tmp_path: Path) -> Builder:
    """Build (or rebuild, as after a restart) a server on the test's store root."""

    def make(**kwargs: Any) -> LocalStaticWorkflowServer:
        kwargs.setdefault("clock", TickingClock())
        return build_local_static_workflow_server(tmp_path, **kwargs)

    return make


@pytest.fixture
def server(build: Builder) -> LocalStaticWorkflowServer:
    return build()


async def deploy(
    server: LocalStaticWorkflowServer,
    plan: dict[str, Any],
    deployment_id: str = "demo.default",
    *,
    inputs: dict[str, Any] | None = None,
    artifact_id: str | None = None,
) -> str:
    """Create an artifact (version 1) for `plan` and a deployment of it."""
    artifact_id = artifact_id or deployment_id.split(".")[0]
    await server.api.create_artifact_from_plan(artifact_id, 1, copy.deepcopy(plan))
    await server.api.save_deployment(
        {
            "deployment_id": deployment_id,
            "artifact_id": artifact_id,
            "artifact_version": 1,
            "inputs": inputs or {},
        }
    )
    return deployment_id
