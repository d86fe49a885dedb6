"""The host's records as files under one store root (see persistence.py).

```
<root>/artifacts/<artifact_id>/<version>.json
<root>/deployments/<deployment_id>.json
<root>/runs/run-NNNNNN.json
<root>/counters/run_id
```

Every write replaces one file whole, atomically and durably (storage.py:
temporary file or recycled spare, fsync, rename or swap, directory fsync),
after passing the store's write fence (`shell.fence`). The I/O is synchronous:
these coroutines never suspend.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any, Final

from core.errors import Problem
from shell.fence import check_fence

from .identifiers import ID_PATTERN, parse_run_id
from .persistence import CounterRead, Stored
from .records import RunRecord
from .storage import (
    SparePool,
    atomic_write_json,
    atomic_write_many,
    dump_json,
    fsync_dir,
    is_temp_file,
    read_json,
)

__all__ = ["FileArtifacts", "FileDeployments", "FileRunCounter", "FileRuns"]

_NOT_A_RUN_FILE: Final = "not a run record file name (expected run-NNNNNN.json)"


def _read(path: Path, key: Any) -> Stored[Any]:
    try:
        return Stored(location=str(path), key=key, document=read_json(path))
    except (OSError, ValueError) as exc:
        return Stored(location=str(path), key=key, error=str(exc))


class FileArtifacts:
    """`<root>/artifacts/<artifact_id>/<version>.json`."""

    key_name = "the file name"

    def __init__(self, root: Path) -> None:
        self.dir = root / "artifacts"

    async def load(self) -> AsyncIterator[Stored[tuple[str, str]]]:
        if not self.dir.is_dir():
            return
        for folder in sorted(self.dir.iterdir()):
            if not folder.is_dir() or not ID_PATTERN.match(folder.name):
                continue
            for path in sorted(folder.glob("*.json")):
                if not is_temp_file(path):
                    yield _read(path, (folder.name, path.stem))

    def unstorable(self, field: str, value: Any) -> list[Problem]:
        return []  # any JSON value

    async def write(self, artifact_id: str, version: int, document: dict[str, Any]) -> None:
        atomic_write_json(self.dir / artifact_id / f"{version}.json", document)


class FileDeployments:
    """`<root>/deployments/<deployment_id>.json`."""

    key_name = "the file name"

    def __init__(self, root: Path) -> None:
        self.dir = root / "deployments"

    def _path(self, deployment_id: str) -> Path:
        return self.dir / f"{deployment_id}.json"

    async def load(self) -> AsyncIterator[Stored[str]]:
        if not self.dir.is_dir():
            return
        for path in sorted(self.dir.glob("*.json")):
            if not is_temp_file(path):
                yield _read(path, path.stem)

    def unstorable(self, field: str, value: Any) -> list[Problem]:
        return []  # any JSON value

    async def write(self, deployment_id: str, document: dict[str, Any]) -> None:
        atomic_write_json(self._path(deployment_id), document)

    async def delete(self, deployment_id: str) -> None:
        path = self._path(deployment_id)
        check_fence(path)
        os.unlink(path)
        fsync_dir(self.dir)


class FileRuns:
    """`<root>/runs/run-NNNNNN.json`, written compact into recycled files
    (`SparePool`: the spares found at load are adopted)."""

    key_name = "file"

    def __init__(self, root: Path) -> None:
        self.dir = root / "runs"
        self.spares = SparePool(self.dir)

    def path(self, run_id: str) -> Path:
        return self.dir / f"{run_id}.json"

    async def load(self) -> AsyncIterator[Stored[int | None]]:
        if not self.dir.is_dir():
            return
        for path in sorted(self.dir.iterdir()):
            if SparePool.is_spare(path.name):
                self.spares.adopt(path)
                continue
            if is_temp_file(path) or not path.is_file():
                continue
            number = parse_run_id(path.stem) if path.suffix == ".json" else None
            if number is None:
                yield Stored(location=str(path), key=None, error=_NOT_A_RUN_FILE)
                continue
            yield _read(path, number)

    def unstorable(self, field: str, value: Any) -> list[Problem]:
        return []  # any JSON value

    def exists(self, run_id: str) -> bool:
        return self.path(run_id).exists()

    async def write(self, record: RunRecord, *, created: bool) -> None:
        atomic_write_json(
            self.path(record.run_id), record.to_json(), spares=self.spares, compact=True
        )

    async def write_many(self, records: Sequence[RunRecord], *, created: AbstractSet[str]) -> None:
        atomic_write_many(
            [(self.path(r.run_id), dump_json(r.to_json(), compact=True)) for r in records],
            spares=self.spares,
        )

    def stages_into(self, batch: object) -> bool:
        # A run is a file of its own, outside the schedules' journal: the
        # scheduler creates its runs after its round's commit.
        return False

    def stage_created(self, batch: object, records: Sequence[RunRecord]) -> None:
        raise RuntimeError("run records on files are not staged into a scheduler's batch")


class FileRunCounter:
    """`<root>/counters/run_id`, holding `{"last_issued": N}`."""

    name = "counter"
    runs_where = "on disk"

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def location(self) -> str:
        return str(self.path)

    async def read(self) -> CounterRead:
        if not self.path.exists():
            return CounterRead(problem="counter file missing", missing=True)
        try:
            data = read_json(self.path)
        except (OSError, ValueError) as exc:
            return CounterRead(problem=f"counter file unreadable ({exc})")
        value = data.get("last_issued") if isinstance(data, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return CounterRead(stored=value)
        return CounterRead(problem=f"counter file holds no valid last_issued: {data!r}")

    async def repair(self, last: int) -> None:
        atomic_write_json(self.path, {"last_issued": last})

    async def advance(self, last: int, count: int) -> list[int]:
        atomic_write_json(self.path, {"last_issued": last + count})
        return list(range(last + 1, last + count + 1))
