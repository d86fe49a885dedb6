"""A fenced `wf-rpc-server` writes nothing, in a real process.

The server runs as its own process (the `wf-rpc-server` entry point) with its
scheduler on a store; two runs execute, one that finishes after the fence
and one still executing at the stop. The test removes `scheduler.lock` under
it: from then on no file under the store root changes, not the finishing
run's terminal record, not the drain's stop notes, not the scheduler's
checkpoint; `run start` answers `store_fenced` (JSON-RPC -32007, the CLI's
exit status 7, naming the fence) rather than an internal error; SIGTERM
stops the process; a server started afterwards recovers both runs as
abandoned, saying so.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters import build_local_static_workflow_server
from adapters.client import App, ServerUnreachable
from core.errors import StoreFenced
from tests import run_log_files
from tests.rpc.live import free_port, wait_until
from tests.service.conftest import sleep_plan

SERVER_BIN = Path(sys.executable).with_name("wf-rpc-server")
CLI_BIN = Path(sys.executable).with_name("wf-schedule")


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture
def server_process(
    store_root: Path, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    port = free_port()
    config = tmp_path / "server.json"
    # A short drain, so the long run is still executing when the server stops.
    config.write_text(json.dumps({"server": {"scheduler": {"drain_grace_s": 0.3}}}))
    log = tmp_path / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WF_")}
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [
                str(SERVER_BIN),
                "--store-root",
                str(store_root),
                "--port",
                str(port),
                "--enable-scheduler",
                "--config",
                str(config),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
        )
    try:
        yield process, port, log
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


async def _healthy(app: App) -> Any:
    try:
        return await app.health()
    except ServerUnreachable:
        return None


async def _logged(log: Path, text: str) -> bool:
    return text in log.read_text(errors="replace")


async def _cli(*args: str, url: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WF_")}
    env["WF_SCHEDULER_URL"] = url
    process = await asyncio.create_subprocess_exec(
        str(CLI_BIN),
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode is not None
    return process.returncode, out.decode() + err.decode()


@pytest.mark.expected_errors
async def test_a_fenced_server_process_writes_nothing_and_its_successor_recovers(
    store_root: Path, server_process: tuple[subprocess.Popen[bytes], int, Path]
) -> None:
    process, port, log = server_process
    base = f"http://127.0.0.1:{port}"
    async with App(base) as app:
        await wait_until(lambda: _healthy(app), timeout_s=30)
        for name, seconds in (("short", 0.5), ("long", 600.0)):
            plan = sleep_plan(seconds)
            plan["name"] = name
            await app.create_artifact_from_plan(name, 1, plan)
            await app.save_deployment(
                {"deployment_id": f"{name}.default", "artifact_id": name, "artifact_version": 1}
            )
        finishing = await app.start_run("short.default")
        unfinished = await app.start_run("long.default")
        assert (await app.inspect_run(finishing))["status"] == "running"

        (store_root / "scheduler.lock").unlink()
        fenced = _tree(store_root)
        marked = run_log_files.read_record(store_root, finishing)
        assert marked["status"] == "running", "the run's executing mark is on disk"
        # Health says so at once, before any write found it (until 2026-12-08
        # it answered "ok" while every write was refused).
        async with httpx.AsyncClient() as raw:
            answer = await raw.get(f"{base}/healthz")
        assert answer.status_code == 503, answer.text
        store = answer.json()["store"]
        assert answer.json()["status"] == "degraded" and store["status"] == "fenced"
        assert store["path"] == str(store_root / "scheduler.lock") and "fence" in store["failing"]
        status, output = await _cli("health", url=f"{base}/rpc")
        assert status == 10 and "is fenced" in output, output

        # The short run finishes in memory; writing its stop trips the fence.
        await wait_until(lambda: _logged(log, "writes to the store are stopped"), timeout_s=15)
        await wait_until(lambda: _logged(log, "its stop is not recorded"), timeout_s=15)
        # Reads keep working; writes answer the fence, not an internal error.
        assert (await app.inspect_run(finishing))["status"] == "running"
        with pytest.raises(StoreFenced, match="fenced"):
            await app.start_run("short.default")
        async with httpx.AsyncClient() as raw:
            reply = (
                await raw.post(
                    f"{base}/rpc",
                    json={
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "workflow.runs.start",
                        "params": {"deployment_id": "short.default"},
                    },
                )
            ).json()
        assert reply["error"]["code"] == -32007, reply
        assert reply["error"]["data"]["code"] == "store_fenced"
        assert reply["error"]["data"]["lock"] == str(store_root / "scheduler.lock")
        status, output = await _cli("run", "start", "short.default", url=f"{base}/rpc")
        assert status == 7, output
        assert "fenced" in output and "Traceback" not in output
        assert _tree(store_root) == fenced

        process.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(process.wait, 15) == 0
    assert _tree(store_root) == fenced, "the fenced server wrote to the store"
    text = log.read_text(errors="replace")
    assert "stops without writing the store" in text
    on_disk = run_log_files.read_record(store_root, finishing)
    assert on_disk["status"] == "running" and "stopped" not in on_disk["executing"]

    # The next owner recovers both runs as abandoned, disclosing what it knows.
    successor = build_local_static_workflow_server(store_root, schedules=True)
    findings = {f["run_id"]: f["finding"] for f in successor.recovery_report}
    assert findings == {finishing: "abandoned", unfinished: "abandoned"}
    for run_id in (finishing, unfinished):
        run = await successor.api.inspect_run(run_id)
        assert (run["status"], run["error"]["kind"]) == ("failed", "abandoned")
        assert "external effects may already have occurred" in run["error"]["message"]
