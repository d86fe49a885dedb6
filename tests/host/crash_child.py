"""Child process for test_crash.py: starts or resumes a sleeping run, then waits to be killed.

Usage: python -m tests.host.crash_child <store_root | postgresql://...> start|resume
"""

from __future__ import annotations

import asyncio
import sys

from adapters import build_local_static_workflow_server
from adapters.host import LocalStaticWorkflowServer, build_postgres_workflow_server
from shell.pg.database import Database, is_store_url

from .samples import sleep_plan


async def _server(store: str) -> LocalStaticWorkflowServer:
    if not is_store_url(store):
        return build_local_static_workflow_server(store)
    database = Database(store)
    await database.open()
    return await build_postgres_workflow_server(database)


async def main(store: str, mode: str) -> None:
    server = await _server(store)
    if mode == "start":
        await server.api.create_artifact_from_plan("nap", 1, sleep_plan(30))
        await server.api.save_deployment(
            {"deployment_id": "nap.default", "artifact_id": "nap", "artifact_version": 1}
        )
        await server.api.start_run("nap.default", {})
        await asyncio.sleep(60)  # stay alive until the parent kills us
    elif mode == "resume":
        # resume_run returns only when the run stops, which the kill prevents.
        await asyncio.wait_for(server.api.resume_run("run-000001", {}), 60)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    raise SystemExit("crash_child was never killed")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
