"""What the shell needs from the workflow host, as a structural type.

The shell never imports the host (it lives in `adapters`); the server object
handed to `build_scheduler_service` only has to look like this.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

__all__ = ["HostApi", "HostServer", "RunListener"]

RunListener = Callable[[str, str, "Mapping[str, Any] | None", "str | None"], None]


class HostApi(Protocol):
    async def preflight(self, deployment_id: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Raise NotFound / InvalidInput if a run of `deployment_id` with `inputs`
        could not be admitted; write nothing."""
        ...

    async def reserve_run_ids(self, count: int) -> list[str]: ...

    async def admit_run(
        self,
        deployment_id: str,
        inputs: Mapping[str, Any],
        max_steps: int | None = None,
        origin: Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> str: ...

    async def launch_run(self, run_id: str) -> None: ...

    async def inspect_run(self, run_id: str) -> dict[str, Any]: ...

    async def list_runs(
        self, status: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> dict[str, Any]:
        """A page of runs oldest first: {"runs": [...], "next_cursor": str | None}."""
        ...

    def add_run_listener(self, callback: RunListener) -> None: ...

    async def drain(self, timeout_s: float) -> list[str]: ...


class HostServer(Protocol):
    @property
    def store_root(self) -> Path: ...

    @property
    def api(self) -> Any: ...
