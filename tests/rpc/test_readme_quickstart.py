"""Runs the README's quickstart as a user's shell would: every line, as written.

The quickstart's bash block runs in a real `bash` with job control on
(`set -m`, as in an interactive shell), so the `&` line is job 1 in its own
process group and `kill %1` signals that whole group: `uv` and the
`wf-rpc-server` it started both get the SIGTERM, and uv forwards its own,
which is how a user stops the server. Every line runs through `uv run`.

What the test adds around the README's lines, and only this: it runs them in
a scratch directory holding a copy of `docs/examples/quickstart` (so the
relative paths resolve as from the repository root, and `.wf_store` lands in
the scratch directory), with `UV_PROJECT` naming the repository (so `uv run`
finds the project from there), `WF_RPC_PORT` moving the server to a free port
and `WF_SCHEDULER_URL` pointing `wf-schedule` at it; it echoes a marker before
each line, to attribute the output, and after `kill %1` waits for the job's
process to learn its exit status.

Each `uv run wf-schedule` line is a process paying the interpreter's and the
CLI's imports (about 1 s), so this file costs some seconds; it is the one
test of the README as a user meets it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.client import App, ServerUnreachable
from adapters.host import build_local_static_workflow_server
from tests.rpc.live import free_port, wait_until

REPO = Path(__file__).resolve().parents[2]
MARK = "### "
SERVER_LINE = "uv run wf-rpc-server --store-root .wf_store --enable-scheduler &"


def quickstart_lines() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quickstart: serve, schedule, watch", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the quickstart section has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_quickstart_is_the_one_this_test_knows() -> None:
    lines = quickstart_lines()
    assert lines[0] == SERVER_LINE
    assert lines[-1] == "kill %1"
    assert all(line.startswith("uv run wf-schedule ") for line in lines[1:-1])


def test_the_readme_opens_with_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    first = re.search(r"```bash\n(.*?)```", readme, re.DOTALL)
    assert first is not None
    assert first.group(1).splitlines() == [
        "uv run wf-rpc-server --store-root .wf_store --enable-scheduler",
        "uv run pytest",
    ]


def shell_script(lines: list[str]) -> str:
    """`lines` as a bash script with job control on, each line after a marker,
    then the wait for job 1 and its exit status."""
    body = [
        "set -m",
        # If a line fails, the script stops here: take the server down with it.
        "trap 'kill -KILL %1 2>/dev/null' EXIT",
    ]
    for line in lines:
        body.append(f"echo {shlex.quote(MARK + line)}")
        body.append(f"{line} || {{ echo {shlex.quote(MARK + 'failed: ' + line)}; exit 1; }}")
        if line.endswith("&"):
            # `$!` is job 1's process group: the test's last resort if bash hangs.
            body[-1] = line
            body.append('server=$!; echo "$server" > server.pgid')
    # By pid, not %1: bash keeps a reaped child's status, not a reaped job's.
    body.append('status=0; wait "$server" || status=$?; echo "### server exit status $status"')
    return "\n".join(body) + "\n"


def shell_env(port: int) -> dict[str, str]:
    assert shutil.which("uv") is not None, "uv is a prerequisite (README): not on PATH"
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("WF_", "UV_"))},
        "UV_PROJECT": str(REPO),
        "WF_RPC_PORT": str(port),
        "WF_SCHEDULER_URL": f"http://127.0.0.1:{port}/rpc",
    }


def outputs_by_line(stdout: str) -> dict[str, str]:
    """Each line's output, keyed by the line (the markers split them)."""
    found: dict[str, str] = {}
    current = ""
    for line in stdout.splitlines(keepends=True):
        if line.startswith(MARK):
            current = line[len(MARK) :].rstrip("\n")
            found[current] = ""
        else:
            found[current] = found.get(current, "") + line
    return found


def kill_leftovers(cwd: Path) -> None:
    """If bash was stopped before it waited for job 1, end the server's group."""
    pgid_file = cwd / "server.pgid"
    if pgid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.killpg(int(pgid_file.read_text()), signal.SIGKILL)


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    shutil.copytree(
        REPO / "docs" / "examples" / "quickstart", tmp_path / "docs/examples/quickstart"
    )
    yield tmp_path
    kill_leftovers(tmp_path)


def test_readme_quickstart(scratch: Path) -> None:
    port = free_port()
    lines = quickstart_lines()
    log = scratch / "server.log"
    with log.open("wb") as stderr:
        done = subprocess.run(
            ["bash", "-c", shell_script(lines)],
            cwd=scratch,
            env=shell_env(port),
            stdout=subprocess.PIPE,
            stderr=stderr,
            timeout=180,
            check=False,
        )
    stdout = done.stdout.decode()
    server_log = log.read_text(encoding="utf-8")
    assert done.returncode == 0, f"{stdout}\n{server_log}"
    out = outputs_by_line(stdout)
    assert [line for line in out if line in lines] == lines
    assert out["server exit status 0"] == ""
    listed = out["uv run wf-schedule list"]
    assert "hello-soon" in listed
    assert "cron 0 * * * * (Europe/Berlin)" in listed
    assert "completed" in out[lines[-3]]
    inspected = out["uv run wf-schedule run inspect run-000001"]
    assert inspected.startswith("run-000001 completed")
    assert '{"result": "hello world, on a schedule"}' in inspected
    # The store landed where the README says, and the server stopped in order:
    # admission first, then a drain nothing cut, though uv forwarded a second
    # SIGTERM to the one the shell sent the job's process group.
    assert (scratch / ".wf_store" / "schedules").is_dir()
    assert f"listening on http://127.0.0.1:{port}/rpc (scheduler enabled" in server_log
    assert f"; console http://127.0.0.1:{port}/\n" in server_log
    assert server_log.index("SIGTERM: stopping admission") < server_log.index("stopped")
    assert "not waiting for the drain" not in server_log
    assert "drained: no run was executing at exit" in server_log


def sleeper(seconds: float) -> dict[str, Any]:
    return {
        "name": "sleeper",
        "input_schema": {"type": "object"},
        "start": "nap",
        "nodes": [
            {
                "id": "nap",
                "kind": "call",
                "capability": "wf.std.sleep",
                "params": {"seconds": seconds},
            }
        ],
        "edges": {"nap": {"ok": "__end__"}},
        "output": {"slept": "state.nap"},
    }


async def stop_with_a_run_still_running(
    scratch: Path, stop_lines: list[str], seconds: float
) -> tuple[str, str]:
    """Start the server as the README does, start a run that sleeps `seconds`,
    then run `stop_lines` in the same shell. Each `read -r go` in them waits
    for the test: the first until the run is running, a later one until the
    server has logged the signal before it. Returns the run id and the log."""
    port = free_port()
    script = shell_script([SERVER_LINE, *stop_lines])
    log = scratch / "server.log"
    with log.open("wb") as stderr:
        shell = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            script,
            cwd=scratch,
            env=shell_env(port),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
        assert shell.stdin is not None
        try:
            async with App(f"http://127.0.0.1:{port}") as app:
                await wait_until(lambda: healthy(app), timeout_s=30)
                await app.create_artifact_from_plan("sleeper", 1, sleeper(seconds))
                await app.save_deployment(
                    {
                        "deployment_id": "sleeper.default",
                        "artifact_id": "sleeper",
                        "artifact_version": 1,
                    }
                )
                run_id = await app.start_run("sleeper.default")
                assert (await app.inspect_run(run_id))["status"] == "running"
            signals_sent = 0
            for line in stop_lines:
                if line.startswith("kill"):
                    signals_sent += 1
                elif line == "read -r go":
                    if signals_sent:
                        await wait_until(
                            lambda n=signals_sent: logged_signals(log, n), timeout_s=15
                        )
                    shell.stdin.write(b"go\n")
                    await shell.stdin.drain()
            shell.stdin.close()
            stdout, _ = await asyncio.wait_for(shell.communicate(), timeout=60)
        finally:
            if shell.returncode is None:
                # The server holds bash's stdout: end it first, or the wait
                # for bash (which waits for its pipes) never returns.
                kill_leftovers(scratch)
                shell.kill()
                await shell.wait()
    server_log = log.read_text(encoding="utf-8")
    assert "### server exit status 0" in stdout.decode(), server_log
    return run_id, server_log


async def logged_signals(log: Path, count: int) -> bool:
    text = log.read_text(encoding="utf-8")
    return text.count(": stopping admission") + text.count(": already stopping") >= count


async def test_kill_percent_1_drains_a_run_still_running(scratch: Path) -> None:
    """The README's way to stop the server, on a run that is still running:
    the same shell and process-group kill, with the run started in between."""
    run_id, server_log = await stop_with_a_run_still_running(
        scratch, ["read -r go", "kill %1"], 1.5
    )
    # uv forwards its SIGTERM on top of the shell's. Whether the server sees it
    # as a second signal depends on timing (two pending SIGTERMs merge into one),
    # so what is asserted is that the drain was never cut.
    assert "not waiting for the drain" not in server_log
    reopened = build_local_static_workflow_server(scratch / ".wf_store")
    run = await reopened.api.inspect_run(run_id)
    assert (run["status"], run["output"]) == ("completed", {"slept": 1.5}), json.dumps(run)
    assert reopened.recovery_report == []


async def test_a_second_ctrl_c_through_uv_cuts_the_drain(scratch: Path) -> None:
    """Ctrl-C twice, as the terminal sends it (to the job's process group;
    uv forwards only the second, 200 ms late), cuts the drain: the server
    exits 0 at once and the next start says the run was cut off by the stop.
    More Ctrl-C after that, until the job is gone, change nothing either: the
    exit status stays 0 (a late SIGINT used to kill the exiting process)."""
    stop_lines = [
        "read -r go",
        "kill -INT %1",
        "read -r go",
        "kill -INT %1",
        # Ctrl-C every 10 ms until the job is gone (at most 2 s): some land
        # while the server exits.
        "for _ in $(seq 200); do kill -INT %1 2>/dev/null || break; sleep 0.01; done",
    ]
    run_id, server_log = await stop_with_a_run_still_running(scratch, stop_lines, 600)
    assert "SIGINT while draining: not waiting for the drain" in server_log, server_log
    reopened = build_local_static_workflow_server(scratch / ".wf_store")
    run = await reopened.api.inspect_run(run_id)
    assert (run["status"], run["error"]["kind"]) == ("failed", "abandoned")
    assert "a second SIGINT cut its drain short" in run["error"]["message"]
    assert "the process died" not in run["error"]["message"]


async def healthy(app: App) -> Any:
    try:
        return await app.health()
    except ServerUnreachable:
        return None
