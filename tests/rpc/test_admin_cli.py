"""The `wf-schedule` admin commands, in process, against a live server.

The commands call `asyncio.run` themselves, so each runs in a worker thread
while the test's event loop keeps serving. The real entry point is driven as
a subprocess in test_cli_subprocess.py.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import click
import pytest
import pytest_asyncio
import typer
import typer.main
from click.testing import CliRunner, Result

from adapters.rpc.app import create_app
from adapters.schedule_admin import register_admin_commands
from tests.rpc.live import SwitchableApi, build_test_server, free_port, serving

QUICKSTART = Path(__file__).resolve().parents[2] / "docs" / "examples" / "quickstart"
TOKEN = "cli-test-token-0123456789"

Cli = Callable[..., Awaitable[Result]]


def admin_app() -> typer.Typer:
    # The admin commands on their own root; test_cli_subprocess.py drives the
    # real `wf-schedule` entry point, where adapters/schedule_cli.py registers them.
    app = typer.Typer(name="wf-schedule", add_completion=False)

    @app.callback()
    def _root() -> None:
        """Administer schedules."""

    register_admin_commands(app)
    return app


@functools.cache
def admin_command() -> click.Command:
    # Built once: typer's own runner rebuilds the whole command tree per call.
    return typer.main.get_command(admin_app())


def make_cli(url: str, extra_env: dict[str, str] | None = None) -> Cli:
    runner = CliRunner()
    app = admin_command()
    env = {"WF_SCHEDULER_URL": url, "WF_SCHEDULER_TOKEN": "", **(extra_env or {})}
    if not env["WF_SCHEDULER_TOKEN"]:
        del env["WF_SCHEDULER_TOKEN"]

    async def cli(*args: str) -> Result:
        return await asyncio.to_thread(runner.invoke, app, list(args), env=env)

    return cli


pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def live() -> AsyncIterator[tuple[str, SwitchableApi]]:
    switch = SwitchableApi()
    async with serving(create_app(switch)) as base:
        yield base, switch


@pytest.fixture
def cli(tmp_path: Path, live: tuple[str, SwitchableApi]) -> Cli:
    base, switch = live
    switch.target = build_test_server(tmp_path / "store", schedules=True).api
    return make_cli(f"{base}/rpc")


def as_json(result: Result) -> Any:
    return json.loads(result.stdout)


async def setup_hello(cli: Cli) -> None:
    made = await cli("artifact", "create", str(QUICKSTART / "artifact.json"))
    assert made.exit_code == 0, made.output
    assert made.stdout.strip() == "artifact hello v1 created"
    saved = await cli("deployment", "save", str(QUICKSTART / "deployment.json"))
    assert saved.exit_code == 0, saved.output
    assert saved.stdout.strip() == "deployment hello.default saved (hello v1)"


async def test_schedule_lifecycle_human_output(cli: Cli) -> None:
    await setup_hello(cli)
    created = await cli(
        "create",
        "hourly-report",
        "--deployment",
        "hello.default",
        "--cron",
        "0 * * * *",
        "--timezone",
        "UTC",
        "--misfire",
        "latest",
        "--overlap",
        "parallel",
        "--max-active-runs",
        "2",
    )
    assert created.exit_code == 0, created.output
    assert created.stdout.strip() == "created hourly-report (revision 1, active)"
    listed = await cli("list")
    assert listed.exit_code == 0
    assert "hourly-report" in listed.stdout
    assert "cron 0 * * * * (UTC)" in listed.stdout
    shown = await cli("get", "hourly-report")
    assert shown.exit_code == 0
    assert "max_active_runs" in shown.stdout
    paused = await cli("pause", "hourly-report")
    assert paused.stdout.strip() == "paused hourly-report (revision 1, paused)"
    resumed = await cli("resume", "hourly-report")
    assert resumed.stdout.strip() == "resumed hourly-report (revision 1, active)"
    updated = await cli("update", "hourly-report", "--expected-revision", "1", "--misfire", "skip")
    assert updated.exit_code == 0, updated.output
    assert updated.stdout.strip() == "updated hourly-report (revision 2, active)"
    deleted = await cli("delete", "hourly-report")
    assert deleted.stdout.strip() == "deleted hourly-report (revision 2, deleted)"
    assert "no schedules" in (await cli("list")).stdout
    assert "hourly-report" in (await cli("list", "--include-deleted")).stdout


async def test_json_output_on_every_schedule_command(cli: Cli, tmp_path: Path) -> None:
    await setup_hello(cli)
    spec = tmp_path / "schedule.json"
    spec.write_text(
        json.dumps(
            {
                "schedule_id": "from-file",
                "deployment_id": "hello.default",
                "trigger": {"kind": "cron", "expression": "30 6 * * 1-5", "timezone": "UTC"},
                "inputs": {"name": "file"},
            }
        ),
        encoding="utf-8",
    )
    created = await cli("create", "--file", str(spec), "--timezone", "Europe/Berlin", "--json")
    assert created.exit_code == 0, created.output
    body = as_json(created)
    assert body["schedule_id"] == "from-file"
    # Flags win over the file.
    assert body["trigger"]["timezone"] == "Europe/Berlin"
    assert body["trigger"]["expression"] == "30 6 * * 1-5"
    assert body["inputs"] == {"name": "file"}
    assert as_json(await cli("get", "from-file", "--json"))["revision"] == 1
    assert [s["schedule_id"] for s in as_json(await cli("list", "--json"))] == ["from-file"]
    assert as_json(await cli("pause", "from-file", "--json"))["paused"] is True
    assert as_json(await cli("resume", "from-file", "--json"))["paused"] is False
    patched = as_json(
        await cli("update", "from-file", "--expected-revision", "1", "--inputs", "{}", "--json")
    )
    assert patched["revision"] == 2
    page = as_json(await cli("occurrences", "from-file", "--json"))
    assert set(page) == {"occurrences", "next_cursor"}
    assert as_json(await cli("delete", "from-file", "--json"))["deleted"] is True
    assert [s["schedule_id"] for s in as_json(await cli("list", "--json"))] == []


ERROR_CASES: list[tuple[list[str], int, str]] = [
    (["get", "missing"], 3, "not_found"),
    (["pause", "missing"], 3, "not_found"),
    (["occurrences", "missing"], 3, "not_found"),
    (
        ["update", "taken", "--expected-revision", "7", "--misfire", "latest"],
        4,
        "revision_conflict",
    ),
    (
        ["create", "taken", "--deployment", "hello.default", "--cron", "0 * * * *"],
        4,
        "already_exists",
    ),
    (["create", "lonely"], 5, "invalid_input"),
    (["update", "taken", "--expected-revision", "1"], 5, "invalid_input"),
    (["deployment", "get", "nope"], 3, "not_found"),
    (["run", "inspect", "run-000042"], 3, "not_found"),
]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def failing_cli(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Cli]:
    # The error cases change nothing, so they share one store set up once.
    server = build_test_server(tmp_path_factory.mktemp("errors") / "store", schedules=True)
    async with serving(create_app(server.api)) as base:
        cli = make_cli(base)
        await setup_hello(cli)
        made = await cli("create", "taken", "--deployment", "hello.default", "--cron", "0 * * * *")
        assert made.exit_code == 0, made.output
        yield cli


@pytest.mark.parametrize(("args", "code", "name"), ERROR_CASES)
async def test_errors_have_distinct_exit_codes(
    failing_cli: Cli, args: list[str], code: int, name: str
) -> None:
    human = await failing_cli(*args)
    assert human.exit_code == code, human.output
    assert human.stdout == ""
    assert human.stderr.startswith("error: ")
    machine = await failing_cli(*args, "--json")
    assert machine.exit_code == code
    assert as_json(machine)["error"]["code"] == name


async def test_invalid_definition_lists_each_problem(cli: Cli, tmp_path: Path) -> None:
    await setup_hello(cli)
    spec = tmp_path / "weekly.json"
    spec.write_text(json.dumps({"trigger": {"kind": "weekly"}}), encoding="utf-8")
    bad = await cli("create", "bad", "--deployment", "hello.default", "--file", str(spec), "--json")
    assert bad.exit_code == 5
    error = as_json(bad)["error"]
    assert error["code"] == "invalid_definition"
    assert [p["field"] for p in error["problems"]] == ["trigger.kind"]
    assert (await cli("get", "bad")).exit_code == 3
    missing = await cli("create", "x", "--json")
    assert missing.exit_code == 5
    fields = {p["field"] for p in as_json(missing)["error"]["problems"]}
    assert fields == {"deployment_id", "trigger"}


async def test_stale_update_prints_a_hint_and_changes_nothing(cli: Cli) -> None:
    await setup_hello(cli)
    await cli("create", "s", "--deployment", "hello.default", "--cron", "0 * * * *")
    await cli("update", "s", "--expected-revision", "1", "--misfire", "latest")
    stale = await cli("update", "s", "--expected-revision", "1", "--misfire", "skip")
    assert stale.exit_code == 4
    assert "hint: run `wf-schedule get`" in stale.stderr
    current = as_json(await cli("get", "s", "--json"))
    assert (current["revision"], current["misfire"]) == (2, "latest")


async def test_usage_errors_exit_2(cli: Cli, tmp_path: Path) -> None:
    both = await cli("create", "x", "--deployment", "d", "--cron", "* * * * *", "--at", "+1m")
    assert both.exit_code == 2
    naive = await cli("create", "x", "--deployment", "d", "--at", "2030-01-01T00:00:00")
    assert naive.exit_code == 2
    assert "offset" in naive.output
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{", encoding="utf-8")
    assert (await cli("create", "--file", str(bad_json))).exit_code == 2
    assert (await cli("artifact", "create", str(tmp_path / "absent.json"))).exit_code == 2
    assert (await cli("list", "--url", "ftp://nowhere")).exit_code == 2
    assert (await cli("occurrences", "x", "--limit", "0")).exit_code == 2
    assert (await cli("create", "x", "--inputs", "[1]")).exit_code == 2
    typo = await cli("occurrences", "x", "--wait-for", "complete")
    assert typo.exit_code == 2
    assert "unknown status 'complete'" in typo.output


async def test_unreachable_server_exits_8() -> None:
    cli = make_cli(f"http://127.0.0.1:{free_port()}/rpc")
    result = await cli("list", "--json")
    assert result.exit_code == 8
    assert as_json(result)["error"]["code"] == "server_unreachable"


async def test_token_enforced_from_flag_and_environment(tmp_path: Path) -> None:
    server = build_test_server(tmp_path / "store", schedules=True)
    async with serving(create_app(server.api, token=TOKEN)) as base:
        anonymous = make_cli(base)
        refused = await anonymous("list", "--json")
        assert refused.exit_code == 9
        assert as_json(refused)["error"]["code"] == "unauthorized"
        assert (await anonymous("list", "--token", "wrong-token-0123456789")).exit_code == 9
        assert (await anonymous("list", "--token", TOKEN)).exit_code == 0
        from_env = make_cli(base, {"WF_SCHEDULER_TOKEN": TOKEN})
        assert (await from_env("list")).exit_code == 0


async def test_scheduler_unavailable_exits_7(tmp_path: Path) -> None:
    server = build_test_server(tmp_path / "store", schedules=False)
    async with serving(create_app(server.api)) as base:
        cli = make_cli(base)
        result = await cli("list", "--json")
        assert result.exit_code == 7
        assert as_json(result)["error"]["code"] == "scheduler_unavailable"
        # Host commands keep working without the scheduler.
        await setup_hello(cli)


async def test_run_commands(cli: Cli) -> None:
    await setup_hello(cli)
    started = await cli("run", "start", "hello.default", "--inputs", '{"name": "Ada"}', "--json")
    assert as_json(started) == {"run_id": "run-000001"}
    for _ in range(100):
        inspected = as_json(await cli("run", "inspect", "run-000001", "--json"))
        if inspected["status"] == "completed":
            break
        await asyncio.sleep(0.05)
    assert inspected["output"] == {"result": "hello Ada, on a schedule"}
    human = await cli("run", "inspect", "run-000001")
    assert human.stdout.startswith("run-000001 completed")
    listed = await cli("run", "list")
    assert "run-000001" in listed.stdout
    assert [r["run_id"] for r in as_json(await cli("run", "list", "--json"))] == ["run-000001"]
    assert "hello v1" in (await cli("artifact", "list")).stdout
    assert as_json(await cli("artifact", "get", "hello", "--json"))["version"] == 1
    assert "hello.default" in (await cli("deployment", "list")).stdout
    assert as_json(await cli("deployment", "get", "hello.default", "--json"))["inputs"] == {
        "name": "world"
    }
    assert (await cli("deployment", "delete", "hello.default")).exit_code == 0
    assert (await cli("deployment", "get", "hello.default")).exit_code == 3


async def test_wait_for_times_out_with_exit_1(cli: Cli) -> None:
    await setup_hello(cli)
    await cli("create", "later", "--deployment", "hello.default", "--at", "+1d")
    result = await cli("occurrences", "later", "--wait-for", "completed", "--timeout", "0.2")
    assert result.exit_code == 1
    assert "no 'completed' occurrence of later" in result.stderr
