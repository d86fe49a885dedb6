"""The host's records as files under one store root (see persistence.py).

```
<root>/artifacts/<artifact_id>/<version>.json
<root>/deployments/<deployment_id>.json
<root>/counters/run_id
```

Every write replaces one file whole, atomically and durably (storage.py:
temporary file, fsync, rename, directory fsync), after passing the store's
write fence (`shell.fence`), on the disk port the run log and the schedule
stores use (`shell.disk`), so the crash campaigns cut the power of these
writes too. The I/O is synchronous: these coroutines never suspend.

A crash between a temp file's creation and its rename leaves the temp file
behind; loads never read one, and a server's start removes them
(`sweep_temp_files`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from core.errors import Problem
from shell.disk import OS_DISK, Disk, exists, is_directory
from shell.durable import fsync_directory, remove_stale_temp_files
from shell.fence import check_fence

from .identifiers import ID_PATTERN
from .persistence import CounterRead, Stored
from .storage import atomic_write_json, is_temp_file, read_json

# Run records live in segment files of their own: run_log.py.
__all__ = ["FileArtifacts", "FileDeployments", "FileRunCounter", "sweep_temp_files"]


def _read(path: Path, key: Any, disk: Disk) -> Stored[Any]:
    try:
        return Stored(location=str(path), key=key, document=read_json(path, disk=disk))
    except (OSError, ValueError) as exc:
        return Stored(location=str(path), key=key, error=str(exc))


def _listed(directory: Path, disk: Disk) -> list[str]:
    """The names in `directory`, sorted; none if it is missing."""
    if not is_directory(disk, str(directory)):
        return []
    return sorted(disk.list(str(directory)))


def _records(directory: Path, disk: Disk) -> list[Path]:
    """The `*.json` records in `directory`, by name, without the temp files
    of interrupted writes."""
    return [
        directory / name
        for name in _listed(directory, disk)
        if name.endswith(".json") and not is_temp_file(Path(name))
    ]


def _artifact_folders(directory: Path, disk: Disk) -> list[Path]:
    """The artifacts' folders in `directory` (`<root>/artifacts`), by id."""
    return [
        directory / name
        for name in _listed(directory, disk)
        if ID_PATTERN.match(name) and is_directory(disk, str(directory / name))
    ]


class FileArtifacts:
    """`<root>/artifacts/<artifact_id>/<version>.json`."""

    key_name = "the file name"

    def __init__(self, root: Path, *, disk: Disk = OS_DISK) -> None:
        self.dir = root / "artifacts"
        self.disk = disk

    async def load(self) -> AsyncIterator[Stored[tuple[str, str]]]:
        for folder in _artifact_folders(self.dir, self.disk):
            for path in _records(folder, self.disk):
                yield _read(path, (folder.name, path.stem), self.disk)

    def unstorable(self, field: str, value: Any) -> list[Problem]:
        return []  # any JSON value

    async def write(self, artifact_id: str, version: int, document: dict[str, Any]) -> None:
        path = self.dir / artifact_id / f"{version}.json"
        atomic_write_json(path, document, disk=self.disk)


class FileDeployments:
    """`<root>/deployments/<deployment_id>.json`."""

    key_name = "the file name"

    def __init__(self, root: Path, *, disk: Disk = OS_DISK) -> None:
        self.dir = root / "deployments"
        self.disk = disk

    def _path(self, deployment_id: str) -> Path:
        return self.dir / f"{deployment_id}.json"

    async def load(self) -> AsyncIterator[Stored[str]]:
        for path in _records(self.dir, self.disk):
            yield _read(path, path.stem, self.disk)

    def unstorable(self, field: str, value: Any) -> list[Problem]:
        return []  # any JSON value

    async def write(self, deployment_id: str, document: dict[str, Any]) -> None:
        atomic_write_json(self._path(deployment_id), document, disk=self.disk)

    async def delete(self, deployment_id: str) -> None:
        path = self._path(deployment_id)
        check_fence(path)
        self.disk.remove(str(path))
        fsync_directory(self.dir, disk=self.disk)


class FileRunCounter:
    """`<root>/counters/run_id`, holding `{"last_issued": N}`."""

    name = "counter"
    runs_where = "on disk"

    def __init__(self, path: Path, *, disk: Disk = OS_DISK) -> None:
        self.path = path
        self.disk = disk

    @property
    def location(self) -> str:
        return str(self.path)

    async def read(self) -> CounterRead:
        if not exists(self.disk, str(self.path)):
            return CounterRead(problem="counter file missing", missing=True)
        try:
            data = read_json(self.path, disk=self.disk)
        except (OSError, ValueError) as exc:
            return CounterRead(problem=f"counter file unreadable ({exc})")
        value = data.get("last_issued") if isinstance(data, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return CounterRead(stored=value)
        return CounterRead(problem=f"counter file holds no valid last_issued: {data!r}")

    async def repair(self, last: int) -> None:
        atomic_write_json(self.path, {"last_issued": last}, disk=self.disk)

    async def advance(self, last: int, count: int) -> list[int]:
        atomic_write_json(self.path, {"last_issued": last + count}, disk=self.disk)
        return list(range(last + 1, last + count + 1))


def sweep_temp_files(
    root: Path, *, older_than_ns: int, disk: Disk = OS_DISK
) -> list[tuple[Path, list[str]]]:
    """Remove the temp files interrupted writes left in the host's
    directories under the store `root`, last modified before `older_than_ns`
    (wall clock, `time.time_ns()`; a younger one may be another process's
    write in flight): `artifacts/<id>/`, `deployments/`, `counters/`, and
    the root itself (the run log's index), all on `disk`.
    The scheduler's own directories are its upkeep's (`shell.file_upkeep`).

    Returns each directory where some were removed, with their names.
    Raises OSError when a listing or a removal fails; what is left costs
    disk space only.
    """
    directories = [
        root,
        root / "deployments",
        root / "counters",
        *_artifact_folders(root / "artifacts", disk),
    ]
    removed: list[tuple[Path, list[str]]] = []
    for directory in directories:
        names = remove_stale_temp_files(directory, older_than_ns=older_than_ns, disk=disk)
        if names:
            removed.append((directory, names))
    return removed
