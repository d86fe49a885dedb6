"""Child process for test_crash.py: starts or resumes a sleeping run, then waits to be killed.

Usage: python -m tests.host.crash_child <store_root> start|resume
"""

from __future__ import annotations

import asyncio
import sys

from adapters import build_local_static_workflow_server

from .samples import sleep_plan


async def main(root: str, mode: str) -> None:
    server = build_local_static_workflow_server(root)
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
