"""A small in-memory stand-in for the server API, for transport-level tests.

It follows the interface contract (keyword names, result shapes, error
classes) closely enough to exercise the JSON-RPC layer; the behaviour of the
real API is tested against the real server elsewhere.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from core.errors import (
    AlreadyExists,
    InvalidDefinition,
    InvalidState,
    NotFound,
    Problem,
    RevisionConflict,
)

__all__ = ["FakeApi", "FakeSchedules"]


class FakeSchedules:
    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.occurrences: dict[str, list[dict[str, Any]]] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def create_schedule(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("create_schedule", kwargs))
        trigger = kwargs["trigger"]
        if trigger.get("kind") not in {"cron", "oneshot"}:
            raise InvalidDefinition.from_problems(
                "schedule definition",
                [Problem(field="trigger.kind", reason="must be 'cron' or 'oneshot'")],
            )
        schedule_id = kwargs["schedule_id"]
        if schedule_id in self.items:
            raise AlreadyExists(f"schedule {schedule_id!r} already exists")
        item = {
            "schedule_id": schedule_id,
            "deployment_id": kwargs["deployment_id"],
            "trigger": trigger,
            "inputs": kwargs.get("inputs", {}),
            "overlap": kwargs.get("overlap", "skip"),
            "max_active_runs": kwargs.get("max_active_runs"),
            "misfire": kwargs.get("misfire", "skip"),
            "lateness_allowance_s": kwargs.get("lateness_allowance_s", 60.0),
            "max_steps": kwargs.get("max_steps"),
            "revision": 1,
            "paused": False,
            "deleted": False,
            "blocked": None,
            "next_instant": None,
            "held": None,
        }
        self.items[schedule_id] = item
        return dict(item)

    def _get(self, schedule_id: str) -> dict[str, Any]:
        if schedule_id not in self.items:
            raise NotFound(f"schedule {schedule_id!r} does not exist")
        return self.items[schedule_id]

    async def get_schedule(self, *, schedule_id: str) -> dict[str, Any]:
        return dict(self._get(schedule_id))

    async def list_schedules(self, *, include_deleted: bool = False) -> list[dict[str, Any]]:
        self.calls.append(("list_schedules", {"include_deleted": include_deleted}))
        return [dict(i) for i in self.items.values() if include_deleted or not i["deleted"]]

    async def update_schedule(
        self, *, schedule_id: str, expected_revision: int, **patch: Any
    ) -> dict[str, Any]:
        self.calls.append(("update_schedule", {"expected_revision": expected_revision, **patch}))
        item = self._get(schedule_id)
        if expected_revision != item["revision"]:
            raise RevisionConflict(
                f"schedule {schedule_id!r} is at revision {item['revision']}",
                data={"current_revision": item["revision"]},
            )
        item.update({k: v for k, v in patch.items() if v is not None})
        item["revision"] += 1
        return dict(item)

    async def pause_schedule(self, *, schedule_id: str) -> dict[str, Any]:
        item = self._get(schedule_id)
        item["paused"] = True
        return dict(item)

    async def resume_schedule(self, *, schedule_id: str) -> dict[str, Any]:
        item = self._get(schedule_id)
        item["paused"] = False
        return dict(item)

    async def delete_schedule(self, *, schedule_id: str) -> dict[str, Any]:
        item = self._get(schedule_id)
        item["deleted"] = True
        return dict(item)

    async def list_schedule_occurrences(
        self, *, schedule_id: str, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        self._get(schedule_id)
        rows = self.occurrences.get(schedule_id, [])
        start = int(cursor) if cursor is not None else 0
        page = rows[start : start + limit]
        nxt = start + limit
        return {"occurrences": page, "next_cursor": str(nxt) if nxt < len(rows) else None}


class FakeApi:
    """Host methods plus `schedules` (None to mimic a server built without them)."""

    def __init__(self, *, schedules: bool = True) -> None:
        self.schedules: FakeSchedules | None = FakeSchedules() if schedules else None
        self.artifacts: dict[str, dict[str, Any]] = {}
        self.deployments: dict[str, dict[str, Any]] = {}
        self.runs: dict[str, dict[str, Any]] = {}
        self.explode_with: BaseException | None = None

    async def create_artifact_from_plan(
        self,
        artifact_id: str,
        version: int,
        plan: dict[str, Any],
        title: str | None = None,
        description: str | None = None,
    ) -> dict[str, Any]:
        item = {"artifact_id": artifact_id, "version": version, "plan": plan, "title": title}
        self.artifacts[artifact_id] = item
        return item

    async def get_artifact(self, artifact_id: str, version: int | None = None) -> dict[str, Any]:
        if artifact_id not in self.artifacts:
            raise NotFound(f"artifact {artifact_id!r} does not exist")
        return self.artifacts[artifact_id]

    async def list_artifacts(self) -> list[dict[str, Any]]:
        if self.explode_with is not None:
            raise self.explode_with
        return list(self.artifacts.values())

    async def save_deployment(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.deployments[payload["deployment_id"]] = payload
        return payload

    async def get_deployment(self, deployment_id: str) -> dict[str, Any]:
        if deployment_id not in self.deployments:
            raise NotFound(f"deployment {deployment_id!r} does not exist")
        return self.deployments[deployment_id]

    async def list_deployments(self) -> list[dict[str, Any]]:
        return list(self.deployments.values())

    async def delete_deployment(self, deployment_id: str) -> dict[str, Any]:
        return self.deployments.pop(deployment_id)

    async def start_run(
        self,
        deployment_id: str,
        inputs: dict[str, Any],
        max_steps: int | None = None,
        origin: Any = None,
    ) -> str:
        run_id = f"run-{len(self.runs) + 1:06d}"
        self.runs[run_id] = {"run_id": run_id, "status": "completed", "inputs": inputs}
        return run_id

    async def resume_run(self, run_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        run = await self.inspect_run(run_id)
        if run["status"] != "interrupted":
            raise InvalidState(f"run {run_id!r} is {run['status']}, not interrupted")
        return run

    async def inspect_run(self, run_id: str) -> dict[str, Any]:
        if run_id not in self.runs:
            raise NotFound(f"run {run_id!r} does not exist")
        return self.runs[run_id]

    async def list_runs(
        self, status: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> dict[str, Any]:
        runs = [r for r in self.runs.values() if status is None or r["status"] == status]
        start = int(cursor) if cursor else 0
        nxt = start + limit
        return {"runs": runs[start:nxt], "next_cursor": str(nxt) if nxt < len(runs) else None}

    async def get_clock(self) -> datetime:
        # Not JSON-safe on purpose: exercised through a custom registry.
        return datetime.now(UTC)
