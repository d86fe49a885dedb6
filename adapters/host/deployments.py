"""Deployments: a named, runnable pin of one artifact version plus default inputs.

Stored as `<root>/deployments/<deployment_id>.json` or a row of
`wf_deployments` (persistence.py). Saving replaces the
deployment (runs already admitted keep their own snapshot). Default inputs
are merged under the inputs of each run (shallow: a run's top-level key wins)
and the merge is what must satisfy the plan's input schema.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any, Final, cast

from core.errors import InvalidInput, NotFound, Problem, StoreUnavailable
from core.limits import MAX_VERSION
from shell.durable import fault_point

from .artifacts import ArtifactStore
from .identifiers import ID_PATTERN, check_identifier, check_positive_int
from .jsonvalues import NotJson, as_json, json_problem
from .persistence import DeploymentPersistence, SharedDeploymentPersistence, answer_from_cache

__all__ = ["DeploymentStore"]

_log = logging.getLogger("adapters.host.deployments")

_PAYLOAD_KEYS: Final = frozenset(
    {"deployment_id", "artifact_id", "artifact_version", "inputs", "title"}
)


def _check_inputs(field: str, value: Any) -> list[Problem]:
    if not isinstance(value, Mapping):
        return [Problem(field=field, reason="must be an object")]
    try:
        as_json(value, field)
    except NotJson as exc:
        return [json_problem(exc)]
    return []


class DeploymentStore:
    def __init__(self, persistence: DeploymentPersistence) -> None:
        self._persistence = persistence
        self._items: dict[str, dict[str, Any]] = {}
        # Moves on every change of `_items`: an admission checked before it
        # moved may be checked differently now (`generation`).
        self._generation = 0

    @property
    def generation(self) -> int:
        """A number that changes whenever a deployment is saved, deleted or
        read anew."""
        return self._generation

    async def load(self) -> list[dict[str, Any]]:
        """Read every deployment. Unreadable ones are returned as findings."""
        findings: list[dict[str, Any]] = []
        async for stored in self._persistence.load():
            try:
                if stored.error is not None:
                    raise ValueError(stored.error)
                record = self._parse(stored.key, stored.document)
            except ValueError as exc:
                findings.append(
                    {
                        "run_id": None,
                        "file": stored.location,
                        "finding": "unreadable-deployment",
                        "reason": str(exc),
                    }
                )
                continue
            self._items[record["deployment_id"]] = record
            self._generation += 1
        return findings

    def has(self, deployment_id: Any) -> bool:
        """Whether the cache holds `deployment_id`."""
        return isinstance(deployment_id, str) and deployment_id in self._items

    async def refresh(self, deployment_id: Any) -> None:
        """On a store several servers share: cache `deployment_id` as stored
        now (another server may have saved or deleted it); an unreadable row
        is left to the load's findings. Nothing to do on a store only this
        server writes."""
        if not isinstance(self._persistence, SharedDeploymentPersistence):
            return
        if not isinstance(deployment_id, str) or not ID_PATTERN.match(deployment_id):
            return
        try:
            stored = await self._persistence.read(deployment_id)
        except StoreUnavailable as exc:
            answer_from_cache(exc)
            return
        self._generation += 1
        if stored is None:
            self._items.pop(deployment_id, None)
            return
        try:
            self._items[deployment_id] = self._parse(deployment_id, stored.document)
        except ValueError as exc:
            _log.warning("deployment %s is unreadable: %s", deployment_id, exc)

    async def reload(self) -> None:
        """Every deployment as stored now, on a shared store."""
        if not isinstance(self._persistence, SharedDeploymentPersistence):
            return
        fresh: dict[str, dict[str, Any]] = {}
        try:
            async for stored in self._persistence.load():
                try:
                    if stored.error is None:
                        fresh[stored.key] = self._parse(stored.key, stored.document)
                except ValueError:
                    continue
        except StoreUnavailable as exc:
            answer_from_cache(exc)
            return
        self._items = fresh
        self._generation += 1

    def _parse(self, deployment_id: str, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if data.get("deployment_id") != deployment_id or not ID_PATTERN.match(deployment_id):
            raise ValueError(f"deployment id does not match {self._persistence.key_name}")
        problems = [
            *check_identifier("artifact_id", data.get("artifact_id")),
            *check_positive_int("artifact_version", data.get("artifact_version")),
            *_check_inputs("inputs", data.get("inputs")),
        ]
        if data.get("title") is not None and not isinstance(data["title"], str):
            problems.append(Problem(field="title", reason="must be a string"))
        for key in ("created_at", "updated_at"):
            if not isinstance(data.get(key), str):
                problems.append(Problem(field=key, reason="is missing"))
        if problems:
            raise ValueError("; ".join(f"{p.field}: {p.reason}" for p in problems))
        return {key: data[key] for key in (*sorted(_PAYLOAD_KEYS), "created_at", "updated_at")}

    async def save(self, payload: Any, artifacts: ArtifactStore, now: str) -> dict[str, Any]:
        """Validate and create or replace a deployment. NotFound if the artifact is missing."""
        if not isinstance(payload, Mapping):
            raise InvalidInput.from_problems(
                "deployment", [Problem(field="payload", reason="must be an object")]
            )
        problems = [
            Problem(field=key, reason=f"unknown field (allowed: {sorted(_PAYLOAD_KEYS)})")
            for key in sorted(set(payload) - _PAYLOAD_KEYS, key=str)
        ]
        deployment_id = cast(str, payload.get("deployment_id"))  # checked just below
        problems += check_identifier("deployment_id", deployment_id)
        problems += check_identifier("artifact_id", payload.get("artifact_id"))
        problems += check_positive_int(
            "artifact_version", payload.get("artifact_version"), maximum=MAX_VERSION
        )
        inputs = payload.get("inputs", {})
        problems += _check_inputs("inputs", inputs)
        title = payload.get("title")
        if title is not None and not isinstance(title, str):
            problems.append(Problem(field="title", reason="must be a string"))
        if not problems:
            problems += self._persistence.unstorable("inputs", inputs)
            problems += self._persistence.unstorable("title", title)
        if problems:
            raise InvalidInput.from_problems("deployment", problems)
        artifacts.plan(payload["artifact_id"], payload["artifact_version"])  # NotFound
        previous = self._items.get(deployment_id)
        record = {
            "deployment_id": deployment_id,
            "artifact_id": payload["artifact_id"],
            "artifact_version": payload["artifact_version"],
            "inputs": as_json(inputs, "inputs"),
            "title": title,
            "created_at": previous["created_at"] if previous else now,
            "updated_at": now,
        }
        fault_point("before:write:deployment")
        await self._persistence.write(deployment_id, {"format": 1, **record})
        fault_point("after:write:deployment")
        self._items[deployment_id] = record
        self._generation += 1
        return copy.deepcopy(record)

    def _lookup(self, deployment_id: Any) -> dict[str, Any]:
        # A string that could never be an id simply names no deployment.
        if not isinstance(deployment_id, str):
            raise InvalidInput.from_problems(
                "deployment lookup", check_identifier("deployment_id", deployment_id)
            )
        record = self._items.get(deployment_id)
        if record is None:
            raise NotFound(
                f"deployment {deployment_id!r} not found", data={"deployment_id": deployment_id}
            )
        return record

    def get(self, deployment_id: Any) -> dict[str, Any]:
        """The deployment. NotFound if absent; InvalidInput for a malformed id."""
        return copy.deepcopy(self._lookup(deployment_id))

    def peek(self, deployment_id: Any) -> Mapping[str, Any]:
        """The stored deployment itself, not a copy (for admission checks, which
        run for every scheduled occurrence): never change it. Raises like `get`."""
        return self._lookup(deployment_id)

    def list(self) -> list[dict[str, Any]]:
        """Every deployment, ordered by id."""
        return [copy.deepcopy(self._items[key]) for key in sorted(self._items)]

    async def delete(self, deployment_id: Any) -> dict[str, Any]:
        """Remove the deployment and return what it was. Runs keep their snapshots."""
        record = self._lookup(deployment_id)
        await self._persistence.delete(deployment_id)
        del self._items[deployment_id]
        self._generation += 1
        return copy.deepcopy(record)
