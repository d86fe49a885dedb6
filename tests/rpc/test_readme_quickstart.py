"""Runs the README's quickstart, line by line, as written.

The server line runs the real `wf-rpc-server` process in the background
(`WF_RPC_PORT` moves it to a free port, `WF_SCHEDULER_URL` points the CLI
there); `kill %1` is SIGTERM to it, which must end it with status 0. The
`wf-schedule` lines run the real `adapters.schedule_cli.app` in this process
(the entry point itself is driven as a process in test_cli_subprocess.py):
one process per line would cost more than the whole rest of the suite.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import click
import typer.main
from click.testing import CliRunner

from adapters.schedule_cli import app
from tests.rpc.live import free_port

REPO = Path(__file__).resolve().parents[2]
SERVER_BIN = Path(sys.executable).with_name("wf-rpc-server")


def quickstart_lines() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quickstart: serve, schedule, watch", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the quickstart section has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_quickstart_is_the_one_this_test_knows() -> None:
    lines = quickstart_lines()
    assert lines[0] == "uv run wf-rpc-server --store-root .wf_store --enable-scheduler &"
    assert lines[-1] == "kill %1"
    assert all(line.startswith("uv run wf-schedule ") for line in lines[1:-1])


def test_readme_quickstart(tmp_path: Path) -> None:
    shutil.copytree(
        REPO / "docs" / "examples" / "quickstart", tmp_path / "docs/examples/quickstart"
    )
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("WF_")},
        "WF_RPC_PORT": str(port),
        "WF_SCHEDULER_URL": f"http://127.0.0.1:{port}/rpc",
    }
    command: click.Command = typer.main.get_command(app)
    runner = CliRunner()
    server: subprocess.Popen[bytes] | None = None
    outputs: dict[str, str] = {}
    log = (tmp_path / "server.log").open("wb")
    cwd = Path.cwd()
    os.chdir(tmp_path)  # the README's relative paths, as from the repository root
    try:
        for line in quickstart_lines():
            if line.endswith("&"):
                argv = shlex.split(line[:-1])
                assert argv[:3] == ["uv", "run", "wf-rpc-server"]
                server = subprocess.Popen(
                    [str(SERVER_BIN), *argv[3:]], cwd=tmp_path, env=env, stderr=log
                )
            elif line == "kill %1":
                assert server is not None
                server.send_signal(signal.SIGTERM)
                assert server.wait(timeout=20) == 0
                server = None
            else:
                argv = shlex.split(line)
                assert argv[:3] == ["uv", "run", "wf-schedule"]
                result = runner.invoke(command, argv[3:], env=env)
                assert result.exit_code == 0, f"{line}\n{result.output}"
                outputs[argv[3] if argv[3] != "run" else "run inspect"] = result.stdout
    finally:
        os.chdir(cwd)
        if server is not None:
            server.kill()
            server.wait(timeout=10)
        log.close()
    assert "hello-soon" in outputs["list"]
    assert "cron 0 * * * * (Europe/Berlin)" in outputs["list"]
    assert "completed" in outputs["occurrences"]
    assert outputs["run inspect"].startswith("run-000001 completed")
    assert '{"result": "hello world, on a schedule"}' in outputs["run inspect"]
    # The store landed where the README says, and the server stopped in order.
    assert (tmp_path / ".wf_store" / "schedules").is_dir()
    server_log = (tmp_path / "server.log").read_text(encoding="utf-8")
    assert f"listening on http://127.0.0.1:{port}/rpc (scheduler enabled" in server_log
    assert server_log.index("SIGTERM: stopping admission") < server_log.index("stopped")
