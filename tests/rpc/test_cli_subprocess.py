"""The `wf-schedule` entry point as a separate process against a live server.

Independent commands run concurrently: each process pays the interpreter and
import start-up, which dominates their cost.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.client import App
from adapters.rpc.app import create_app
from tests.rpc.live import build_test_server, free_port, serving, wait_until
from tests.rpc.test_live_host_methods import ASK_PLAN, status_of

QUICKSTART = Path(__file__).resolve().parents[2] / "docs" / "examples" / "quickstart"
CLI_BIN = Path(sys.executable).with_name("wf-schedule")
TOKEN = "subprocess-token-0123456789"


async def wf_schedule(*args: str, url: str, token: str | None = None) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WF_")}
    env["WF_SCHEDULER_URL"] = url
    if token is not None:
        env["WF_SCHEDULER_TOKEN"] = token
    process = await asyncio.create_subprocess_exec(
        str(CLI_BIN),
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.fixture
async def url(tmp_path: Path) -> AsyncIterator[str]:
    server = build_test_server(tmp_path / "store", schedules=True)
    async with serving(create_app(server.api, token=TOKEN)) as base, App(base, TOKEN) as app:
        spec = json.loads((QUICKSTART / "artifact.json").read_text(encoding="utf-8"))
        await app.create_artifact_from_plan(**spec)
        await app.save_deployment(
            json.loads((QUICKSTART / "deployment.json").read_text(encoding="utf-8"))
        )
        await app.create_schedule(
            schedule_id="existing",
            deployment_id="hello.default",
            trigger={"kind": "cron", "expression": "0 * * * *"},
        )
        yield f"{base}/rpc"


async def test_wf_schedule_process_exit_codes_and_output(url: str) -> None:
    # Exit codes and output across a real process boundary; every command and
    # error class is covered in process by test_admin_cli.py.
    created, missing, stale = await asyncio.gather(
        wf_schedule(
            "create",
            "hourly-report",
            "--deployment",
            "hello.default",
            "--cron",
            "0 * * * *",
            "--misfire",
            "latest",
            "--overlap",
            "parallel",
            "--max-active-runs",
            "2",
            "--json",
            url=url,
            token=TOKEN,
        ),
        wf_schedule("get", "missing", "--json", url=url, token=TOKEN),
        wf_schedule(
            "update",
            "existing",
            "--expected-revision",
            "9",
            "--misfire",
            "skip",
            url=url,
            token=TOKEN,
        ),
    )

    code, out, err = created
    assert code == 0, err
    body = json.loads(out)
    assert body["schedule_id"] == "hourly-report"
    assert (body["revision"], body["misfire"], body["max_active_runs"]) == (1, "latest", 2)

    code, out, _ = missing
    assert code == 3
    assert json.loads(out)["error"]["code"] == "not_found"

    code, out, err = stale
    assert code == 4
    assert out == ""
    assert err.startswith("error: ")
    assert "hint: run `wf-schedule get`" in err


async def test_piped_tables_have_no_trailing_spaces(url: str) -> None:
    # A schedule's long field (its trigger's text) pads every other row's
    # last cell to its width in rich's rendering.
    code, _, err = await wf_schedule("run", "start", "hello.default", url=url, token=TOKEN)
    assert code == 0, err
    listed, shown, runs = await asyncio.gather(
        wf_schedule("list", url=url, token=TOKEN),
        wf_schedule("get", "existing", url=url, token=TOKEN),
        wf_schedule("run", "list", url=url, token=TOKEN),
    )
    for code, out, err in (listed, shown, runs):
        assert code == 0, err
        lines = out.splitlines()
        assert len(lines) >= 2, out
        assert [line for line in lines if line != line.rstrip()] == []
    assert "existing" in listed[1] and "cron 0 * * * * (UTC)" in shown[1]


# What `wf-schedule --help` must not load: the host, the HTTP stack, pydantic,
# croniter and rich are paid for only by the commands that use them.
HEAVY_MODULES = ("adapters.host", "shell", "httpx", "pydantic", "croniter", "rich", "jsonschema")

_IMPORTS_AFTER_HELP = """
import contextlib, io, json, sys
from adapters.schedule_cli import main
sys.argv = ["wf-schedule", *sys.argv[1:]]
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main()
print(json.dumps(sorted(sys.modules)))
"""


@pytest.mark.parametrize("args", [("--help",), ("--version",)])
async def test_help_loads_no_heavy_module(args: tuple[str, ...]) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _IMPORTS_AFTER_HELP,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode == 0, err.decode()
    loaded = json.loads(out)
    heavy = [
        name
        for name in loaded
        if any(name == root or name.startswith(f"{root}.") for root in HEAVY_MODULES)
    ]
    assert heavy == []


async def test_errors_are_reported_once_with_their_exit_codes(url: str) -> None:
    unknown_deployment, usage_json, usage_text, version = await asyncio.gather(
        wf_schedule(
            "create", "orphan", "--deployment", "nope", "--cron", "0 * * * *", url=url, token=TOKEN
        ),
        wf_schedule("list", "--bogus", "--json", url=url, token=TOKEN),
        wf_schedule("occurrences", "existing", "--wait-for", "bogus", url=url, token=TOKEN),
        wf_schedule("--version", url=url),
    )

    code, out, err = unknown_deployment
    assert code == 3  # not found, like `deployment get nope`
    assert out == ""
    assert err.count("deployment 'nope' not found") == 1

    code, out, err = usage_json
    assert code == 2
    assert err == ""
    assert json.loads(out) == {
        "error": {"code": "usage_error", "message": "No such option: --bogus"}
    }

    code, out, err = usage_text
    assert code == 2
    assert out == ""
    assert err.count("unknown status 'bogus'") == 1

    code, out, err = version
    assert (code, err) == (0, "")
    assert out.startswith("wf-schedule ")


async def test_unreachable_server_is_one_line_suggesting_to_start_it() -> None:
    port = free_port()  # nothing listens there
    code, out, err = await wf_schedule("list", url=f"http://127.0.0.1:{port}")
    assert code == 8
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: cannot reach the server at http://127.0.0.1:{port}/rpc:")
    assert "uv run wf-rpc-server" in lines[0]

    code, out, err = await wf_schedule("list", "--json", url=f"http://127.0.0.1:{port}")
    assert (code, err) == (8, "")
    error = json.loads(out)["error"]
    assert error["code"] == "server_unreachable"
    assert "wf-rpc-server" in error["hint"]

    # The connection options before the command's name, as people also write
    # them: the URL given there is the one used (the environment's is not).
    elsewhere = free_port()
    code, out, err = await wf_schedule(
        "--url", f"http://127.0.0.1:{elsewhere}", "--json", "list", url=f"http://127.0.0.1:{port}"
    )
    assert (code, err) == (8, "")
    error = json.loads(out)["error"]
    assert f"http://127.0.0.1:{elsewhere}/rpc" in error["message"]


async def test_deleting_a_deployment_in_use_is_refused_naming_the_schedules(url: str) -> None:
    code, out, err = await wf_schedule(
        "deployment", "delete", "hello.default", "--json", url=url, token=TOKEN
    )
    assert (code, err) == (6, "")
    error = json.loads(out)["error"]
    assert error["code"] == "invalid_state"
    assert error["schedule_ids"] == ["existing"]
    code, out, err = await wf_schedule(
        "deployment", "delete", "hello.default", url=url, token=TOKEN
    )
    assert code == 6
    assert "existing" in err
    assert "--force" in err

    # A deleted schedule admits nothing, so it does not hold its deployment.
    async with App(url, TOKEN) as app:
        spare = json.loads((QUICKSTART / "deployment.json").read_text(encoding="utf-8"))
        await app.save_deployment({**spare, "deployment_id": "hello.spare"})
        await app.create_schedule(
            schedule_id="gone",
            deployment_id="hello.spare",
            trigger={"kind": "cron", "expression": "0 * * * *"},
        )
        await app.delete_schedule(schedule_id="gone")
    code, _, err = await wf_schedule("deployment", "delete", "hello.spare", url=url, token=TOKEN)
    assert (code, err) == (0, "")

    code, _, err = await wf_schedule(
        "deployment", "delete", "hello.default", "--force", url=url, token=TOKEN
    )
    assert (code, err) == (0, "")
    code, _, _ = await wf_schedule("deployment", "get", "hello.default", url=url, token=TOKEN)
    assert code == 3


async def test_run_resume_sends_the_payload(url: str) -> None:
    async with App(url, TOKEN) as app:
        await app.create_artifact_from_plan("ask", 1, ASK_PLAN)
        await app.save_deployment(
            {"deployment_id": "ask.default", "artifact_id": "ask", "artifact_version": 1}
        )
        run_id = await app.start_run("ask.default")
        await wait_until(lambda: status_of(app, run_id, "interrupted"))
    code, out, err = await wf_schedule(
        "run", "resume", run_id, "--payload", "{not json", "--json", url=url, token=TOKEN
    )
    assert (code, err) == (2, "")
    assert json.loads(out)["error"]["param"] == "--payload"
    code, out, err = await wf_schedule(
        "run", "resume", run_id, "--payload", '"Grace"', "--json", url=url, token=TOKEN
    )
    assert (code, err) == (0, "")
    finished = json.loads(out)
    assert finished["status"] == "completed"
    assert finished["output"] == {"result": "hello Grace"}
