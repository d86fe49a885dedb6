"""Child process for test_crash.py: starts or resumes a sleeping run, then waits to be killed.

Usage: python -m tests.host.crash_child <store_root | postgresql://...> start|resume|stall-save

`stall-save` (files only) saves a deployment whose write stops just before
its rename, with its temp file written and flushed, and says so on stdout.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

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
    elif mode == "stall-save":
        await server.api.create_artifact_from_plan("nap", 1, sleep_plan(30))

        def stalled(source: str, target: str) -> None:
            print(f"stalled {source}", flush=True)
            time.sleep(60)  # until the parent kills us, before the rename

        os.replace = stalled  # type: ignore[assignment]  # this process only
        await server.api.save_deployment(
            {"deployment_id": "nap.default", "artifact_id": "nap", "artifact_version": 1}
        )
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    raise SystemExit("crash_child was never killed")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
