"""Artifacts: immutable, versioned plans.

An artifact version is stored once (a file `<root>/artifacts/<artifact_id>/<version>.json`,
or a row of `wf_artifacts`: persistence.py) and never changes. Saving the same
version again with identical content (plan, title, description) is idempotent;
with different content it is `AlreadyExists`. Plans are validated (and
compiled) before anything is written.
"""

from __future__ import annotations

import copy
from typing import Any

from core.errors import AlreadyExists, InvalidInput, NotFound, Problem, StoreUnavailable
from core.limits import MAX_VERSION
from shell.durable import fault_point

from .identifiers import ID_PATTERN, check_identifier, check_positive_int
from .persistence import (
    ArtifactPersistence,
    SharedArtifactPersistence,
    Stored,
    answer_from_cache,
)
from .plans import Plan, compile_plan

__all__ = ["ArtifactStore"]

_TEXT_MAX = 10_000


def _check_text(field: str, value: Any) -> list[Problem]:
    if value is None:
        return []
    if not isinstance(value, str) or len(value) > _TEXT_MAX:
        return [Problem(field=field, reason=f"must be a string of at most {_TEXT_MAX} characters")]
    return []


class ArtifactStore:
    def __init__(self, persistence: ArtifactPersistence) -> None:
        self._persistence = persistence
        # (artifact_id, version) -> (record, compiled plan)
        self._items: dict[tuple[str, int], tuple[dict[str, Any], Plan]] = {}

    async def load(self) -> list[dict[str, Any]]:
        """Read every stored version. Unreadable ones are returned as findings."""
        findings: list[dict[str, Any]] = []
        async for stored in self._persistence.load():
            finding = self._take(stored)
            if finding is not None:
                findings.append(finding)
        return findings

    def _take(self, stored: Stored[tuple[str, str]]) -> dict[str, Any] | None:
        """Cache one stored version; the finding if it cannot be used."""
        artifact_id, version = stored.key
        try:
            if stored.error is not None:
                raise ValueError(stored.error)
            record, plan = self._parse(artifact_id, version, stored.document)
        except (ValueError, InvalidInput) as exc:
            return {
                "run_id": None,
                "file": stored.location,
                "finding": "unreadable-artifact",
                "reason": str(exc),
            }
        self._items[(record["artifact_id"], record["version"])] = (record, plan)
        return None

    def has(self, artifact_id: Any, version: Any) -> bool:
        """Whether the cache holds that version."""
        try:
            return (artifact_id, version) in self._items
        except TypeError:
            return False

    async def refresh(self, artifact_id: Any) -> None:
        """On a store several servers share: cache the versions of
        `artifact_id` another server stored (versions never change, so what
        is cached stays). Nothing to do on a store only this server writes."""
        if isinstance(self._persistence, SharedArtifactPersistence) and isinstance(
            artifact_id, str
        ):
            try:
                versions = await self._persistence.read_versions(artifact_id)
            except StoreUnavailable as exc:
                answer_from_cache(exc)
                return
            for stored in versions:
                self._take(stored)

    async def reload(self) -> None:
        """`refresh` for every artifact (a shared store's listing)."""
        if isinstance(self._persistence, SharedArtifactPersistence):
            try:
                async for stored in self._persistence.load():
                    self._take(stored)
            except StoreUnavailable as exc:
                answer_from_cache(exc)

    def _parse(self, artifact_id: str, version: str, data: Any) -> tuple[dict[str, Any], Plan]:
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if not ID_PATTERN.match(artifact_id):
            raise ValueError(f"{artifact_id!r} is not an artifact id")
        if data.get("artifact_id") != artifact_id or version != str(data.get("version")):
            raise ValueError(f"artifact id or version does not match {self._persistence.key_name}")
        for key in ("title", "description"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise ValueError(f"{key} is not a string")
        if not isinstance(data.get("created_at"), str):
            raise ValueError("created_at is missing")
        plan = compile_plan(data.get("plan"))
        record = {
            "artifact_id": artifact_id,
            "version": data["version"],
            "title": data.get("title"),
            "description": data.get("description"),
            "plan": dict(plan.source),
            "created_at": data["created_at"],
        }
        return record, plan

    async def create(
        self,
        artifact_id: Any,
        version: Any,
        plan: Any,
        title: Any,
        description: Any,
        now: str,
    ) -> dict[str, Any]:
        """Validate and store one version (idempotent for identical content)."""
        problems = [
            *check_identifier("artifact_id", artifact_id),
            *check_positive_int("version", version, maximum=MAX_VERSION),
            *_check_text("title", title),
            *_check_text("description", description),
        ]
        compiled: Plan | None = None
        try:
            compiled = compile_plan(plan)
        except InvalidInput as exc:
            problems.extend(exc.problems)
        if not problems and compiled is not None:
            problems = [
                *self._persistence.unstorable("plan", compiled.source),
                *self._persistence.unstorable("title", title),
                *self._persistence.unstorable("description", description),
            ]
        if problems or compiled is None:
            raise InvalidInput.from_problems("artifact", problems)
        key = (artifact_id, version)
        existing = self._items.get(key)
        if existing is not None:
            record = existing[0]
            same = (
                record["plan"] == compiled.source
                and record["title"] == title
                and record["description"] == description
            )
            if not same:
                raise AlreadyExists(
                    f"artifact {artifact_id!r} version {version} already exists with different "
                    "content; versions are immutable, save a new version",
                    data={"artifact_id": artifact_id, "version": version},
                )
            return copy.deepcopy(record)
        record = {
            "artifact_id": artifact_id,
            "version": version,
            "title": title,
            "description": description,
            "plan": dict(compiled.source),
            "created_at": now,
        }
        fault_point("before:write:artifact")
        await self._persistence.write(artifact_id, version, {"format": 1, **record})
        fault_point("after:write:artifact")
        self._items[key] = (record, compiled)
        return copy.deepcopy(record)

    def _lookup(self, artifact_id: Any, version: Any) -> tuple[dict[str, Any], Plan]:
        # A string that could never be an id simply names no artifact.
        problems = check_positive_int("version", version, optional=True, maximum=MAX_VERSION)
        if not isinstance(artifact_id, str):
            problems = [*check_identifier("artifact_id", artifact_id), *problems]
        if problems:
            raise InvalidInput.from_problems("artifact lookup", problems)
        if version is None:
            versions = [v for (a, v) in self._items if a == artifact_id]
            if not versions:
                raise NotFound(
                    f"artifact {artifact_id!r} not found", data={"artifact_id": artifact_id}
                )
            version = max(versions)
        item = self._items.get((artifact_id, version))
        if item is None:
            raise NotFound(
                f"artifact {artifact_id!r} version {version} not found",
                data={"artifact_id": artifact_id, "version": version},
            )
        return item

    def get(self, artifact_id: Any, version: Any = None) -> dict[str, Any]:
        """One version (the latest when `version` is None). NotFound if absent."""
        return copy.deepcopy(self._lookup(artifact_id, version)[0])

    def plan(self, artifact_id: str, version: int) -> Plan:
        """The compiled plan of a version. NotFound if absent."""
        return self._lookup(artifact_id, version)[1]

    def list(self) -> list[dict[str, Any]]:
        """Every stored version, ordered by artifact id then version."""
        return [copy.deepcopy(self._items[key][0]) for key in sorted(self._items)]
