"""The seed's executable example, made real.

Run it with `uv run pytest -q tests/examples/test_scheduled_deployment_example.py`.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from adapters import build_local_static_workflow_server
from shell import SchedulerServiceConfig, build_scheduler_service

HELLO_PLAN: dict[str, Any] = {
    "name": "scheduled_hello",
    "input_schema": {"type": "object"},
    "start": "greet",
    "nodes": [
        {
            "id": "greet",
            "kind": "call",
            "capability": "wf.std.constant",
            "params": {"value": "hello on a schedule"},
        }
    ],
    "edges": {"greet": {"ok": "__end__"}},
    "output": {"result": "state.greet"},
}


async def _wait_for(predicate: Any, *, timeout_s: float = 10.0) -> Any:
    """Poll `predicate` (async, returns a value or None) until it answers."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = await predicate()
        if value is not None:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"nothing happened within {timeout_s}s")
        await asyncio.sleep(0.05)


async def test_scheduled_deployment_example(tmp_path: Path) -> None:
    root = tmp_path / ".wf_store"
    server = build_local_static_workflow_server(root, schedules=True)
    await server.api.create_artifact_from_plan(
        artifact_id="scheduled_hello",
        version=1,
        plan=HELLO_PLAN,
        title="Scheduled hello",
    )
    await server.api.save_deployment(
        {
            "deployment_id": "scheduled_hello.default",
            "artifact_id": "scheduled_hello",
            "artifact_version": 1,
        }
    )
    due = datetime.now(UTC) + timedelta(seconds=0.5)
    created = await server.api.schedules.create_schedule(
        schedule_id="hello-once",
        deployment_id="scheduled_hello.default",
        trigger={"kind": "oneshot", "at": due.isoformat()},
    )
    assert created["revision"] == 1

    service = build_scheduler_service(
        server, SchedulerServiceConfig(enabled=True, poll_interval_s=0.1, max_concurrent_runs=2)
    )
    await service.start()
    try:

        async def completed_run() -> str | None:
            page = await server.api.schedules.list_schedule_occurrences(schedule_id="hello-once")
            rows = [r for r in page["occurrences"] if r["status"] == "completed"]
            return rows[0]["run_id"] if rows else None

        run_id = await _wait_for(completed_run)
        inspected = await server.api.inspect_run(run_id=run_id)
        assert inspected["status"] == "completed"
        assert inspected["output"]["result"] == "hello on a schedule"
        assert inspected["origin"]["schedule_id"] == "hello-once"

        page = await server.api.schedules.list_schedule_occurrences(schedule_id="hello-once")
        assert [(r["status"], r["run_id"]) for r in page["occurrences"]] == [("completed", run_id)]
        assert page["next_cursor"] is None
    finally:
        await service.stop()
