"""Artifacts: immutable, versioned plans.

An artifact version is stored once at `<root>/artifacts/<artifact_id>/<version>.json`
and never changes. Saving the same version again with identical content
(plan, title, description) is idempotent; with different content it is
`AlreadyExists`. Plans are validated (and compiled) before anything is written.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from core.errors import AlreadyExists, InvalidInput, NotFound, Problem
from core.limits import MAX_VERSION
from shell.durable import fault_point

from .identifiers import ID_PATTERN, check_identifier, check_positive_int
from .plans import Plan, compile_plan
from .storage import atomic_write_json, is_temp_file, read_json

__all__ = ["ArtifactStore"]

_TEXT_MAX = 10_000


def _check_text(field: str, value: Any) -> list[Problem]:
    if value is None:
        return []
    if not isinstance(value, str) or len(value) > _TEXT_MAX:
        return [Problem(field=field, reason=f"must be a string of at most {_TEXT_MAX} characters")]
    return []


class ArtifactStore:
    def __init__(self, root: Path) -> None:
        self.dir = root / "artifacts"
        # (artifact_id, version) -> (record, compiled plan)
        self._items: dict[tuple[str, int], tuple[dict[str, Any], Plan]] = {}

    def load(self) -> list[dict[str, Any]]:
        """Read every stored version. Unreadable files are returned as findings."""
        findings: list[dict[str, Any]] = []
        if not self.dir.is_dir():
            return findings
        for folder in sorted(self.dir.iterdir()):
            if not folder.is_dir() or not ID_PATTERN.match(folder.name):
                continue
            for path in sorted(folder.glob("*.json")):
                if is_temp_file(path):
                    continue
                try:
                    record, plan = self._parse(folder.name, path)
                except (OSError, ValueError, InvalidInput) as exc:
                    findings.append(
                        {
                            "run_id": None,
                            "file": str(path),
                            "finding": "unreadable-artifact",
                            "reason": str(exc),
                        }
                    )
                    continue
                self._items[(record["artifact_id"], record["version"])] = (record, plan)
        return findings

    def _parse(self, artifact_id: str, path: Path) -> tuple[dict[str, Any], Plan]:
        data = read_json(path)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if data.get("artifact_id") != artifact_id or path.stem != str(data.get("version")):
            raise ValueError("artifact id or version does not match the file name")
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

    def create(
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
        atomic_write_json(self.dir / artifact_id / f"{version}.json", {"format": 1, **record})
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
