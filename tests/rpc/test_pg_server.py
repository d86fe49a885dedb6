"""`wf-rpc-server` on a PostgreSQL store: choosing it, serving on it, faults.

The store is chosen with `--store-url` (or `WF_STORE_URL`, or `server.store_url`
in the config file), never together with a store root; credentials in the URL
never show in what the server prints. A database that is down at start is a
clear error and exit status 1; one that goes away while the server runs makes
health say so, and health recovers when it is back.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from adapters.client import App, ServerUnreachable
from adapters.rpc.config import resolve_settings
from adapters.rpc_server_cli import parse_args, serve, settings_from_args
from core.errors import InvalidInput
from shell.pg.database import Database
from tests.pgserver import PostgresServer
from tests.rpc.live import free_port, wait_until

NAPPING_PLAN: dict[str, Any] = {
    "name": "nap",
    "input_schema": {"type": "object"},
    "start": "nap",
    "nodes": [
        {"id": "nap", "kind": "call", "capability": "wf.std.sleep", "params": {"seconds": 0.2}}
    ],
    "edges": {"nap": {"ok": "__end__"}},
    "output": {"slept": "state.nap"},
}
SECRET = "s3cret-pa55word"


def with_password(url: str) -> str:
    """`url` with a password (the test server trusts every connection, so any
    password is accepted: what matters is that none is ever shown)."""
    parts = urlsplit(url)
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user}:{SECRET}@{host}"))


def problems(exc: InvalidInput) -> dict[str, str]:
    return {p.field: p.reason for p in exc.problems}


# --- choosing the store -------------------------------------------------------------


def test_a_store_url_is_chosen_by_flag_env_or_file(tmp_path: Path) -> None:
    url = "postgresql://wf@db.internal:5432/wf"
    flag = resolve_settings(store_url=url, environ={}, cwd=tmp_path)
    assert (flag.store_url, flag.store_root) == (url, None)
    args = parse_args([])
    from_env = settings_from_args(args, environ={"WF_STORE_URL": url}, cwd=tmp_path)
    assert from_env.store_url == url
    config = tmp_path / "server.json"
    config.write_text(json.dumps({"server": {"store_url": url, "store_pool_size": 4}}))
    from_file = resolve_settings(config_path=config, environ={}, cwd=tmp_path)
    assert (from_file.store_url, from_file.store_pool_size) == (url, 4)
    # An explicit --store-root wins over the environment's URL.
    rooted = settings_from_args(
        parse_args(["--store-root", "s"]), environ={"WF_STORE_URL": url}, cwd=tmp_path
    )
    assert (rooted.store_root, rooted.store_url) == ((tmp_path / "s").resolve(), None)


def test_a_root_and_a_url_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as both_flags:
        resolve_settings(
            store_root=Path("s"), store_url="postgresql://wf@h/wf", environ={}, cwd=tmp_path
        )
    assert "mutually exclusive" in problems(both_flags.value)["store_url"]
    config = tmp_path / "server.json"
    config.write_text(json.dumps({"server": {"store_root": "s", "store_url": "postgresql://h/w"}}))
    with pytest.raises(InvalidInput) as both_keys:
        resolve_settings(config_path=config, environ={}, cwd=tmp_path)
    assert "mutually exclusive" in problems(both_keys.value)["server.store_url"]
    with pytest.raises(SystemExit) as argparse_exit:
        parse_args(["--store-root", "s", "--store-url", "postgresql://h/w"])
    assert argparse_exit.value.code == 2


def test_a_url_that_is_not_postgresql_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as refused:
        resolve_settings(store_url="mysql://h/w", environ={}, cwd=tmp_path)
    assert "must be a PostgreSQL URL" in problems(refused.value)["store_url"]
    with pytest.raises(InvalidInput) as pool:
        resolve_settings(store_url="postgresql://h/w", store_pool_size=0, environ={}, cwd=tmp_path)
    assert set(problems(pool.value)) == {"store_pool_size"}


# --- serving on PostgreSQL ------------------------------------------------------------


async def healthy(app: App) -> Any:
    try:
        return await app.health()
    except ServerUnreachable:
        return None


async def test_a_server_on_postgresql_serves_schedules_and_drains_on_sigterm(
    tmp_path: Path, pg_url: str
) -> None:
    port = free_port()
    settings = resolve_settings(
        store_url=with_password(pg_url),
        port=port,
        enable_scheduler=True,
        environ={},
        cwd=tmp_path,
    )
    serving = asyncio.create_task(serve(settings))
    async with App(f"http://127.0.0.1:{port}") as app:
        report = await wait_until(lambda: healthy(app), timeout_s=15)
        leader = report.pop("leader")
        server_id = report.pop("server_id")
        assert report == {
            "status": "ok",
            "schedules": True,
            "scheduler": "running",
            "role": "leader",
            "epoch": 1,
        }
        assert leader["server_id"] == server_id and leader["pid"] == os.getpid()
        await app.create_artifact_from_plan("nap", 1, NAPPING_PLAN)
        await app.save_deployment(
            {"deployment_id": "nap.default", "artifact_id": "nap", "artifact_version": 1}
        )
        created = await app.create_schedule(
            schedule_id="hourly",
            deployment_id="nap.default",
            trigger={"kind": "cron", "expression": "0 * * * *"},
        )
        assert created["revision"] == 1
        run_id = await app.start_run("nap.default")
        os.kill(os.getpid(), signal.SIGTERM)
        assert await asyncio.wait_for(serving, timeout=15) == 0
    # The run was drained to completion; the next server owns the store.
    database = Database(pg_url)
    await database.open()
    try:
        from adapters.host import build_postgres_workflow_server

        reopened = await build_postgres_workflow_server(database, schedules=True)
        run = await reopened.api.inspect_run(run_id)
        assert (run["status"], run["output"]) == ("completed", {"slept": 0.2})
        assert reopened.recovery_report == []
        schedule = await reopened.api.schedules.get_schedule(schedule_id="hourly")
        assert schedule["state"] == "active"
    finally:
        await database.close()


async def test_health_says_the_store_is_unavailable_while_the_database_is_down(
    tmp_path: Path, pg_url: str, pg_server: PostgresServer
) -> None:
    port = free_port()
    settings = resolve_settings(
        store_url=pg_url, port=port, enable_scheduler=True, environ={}, cwd=tmp_path
    )
    serving = asyncio.create_task(serve(settings))
    try:
        async with App(f"http://127.0.0.1:{port}") as app:
            await wait_until(lambda: healthy(app), timeout_s=15)
            pg_server.stop()
            try:

                async def degraded() -> Any:
                    report = await app.health()
                    return report if report.get("status") == "degraded" else None

                report = await wait_until(degraded, timeout_s=15)
                assert report["store"]["status"] == "unavailable"
                assert "is unavailable" in report["store"]["message"]
                assert pg_url.rpartition("@")[2] in report["store"]["message"]
            finally:
                pg_server.start()

            async def ok() -> Any:
                report = await app.health()
                return report if report.get("status") == "ok" else None

            assert (await wait_until(ok, timeout_s=15))["scheduler"] == "running"
    finally:
        os.kill(os.getpid(), signal.SIGTERM)
        assert await asyncio.wait_for(serving, timeout=15) == 0


def _server_process(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adapters.rpc_server_cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )


def test_a_database_that_is_down_at_start_is_a_clear_error_and_exit_1() -> None:
    url = f"postgresql://wf:{SECRET}@127.0.0.1:{free_port()}/wf"
    done = _server_process("--store-url", url, "--port", str(free_port()), "--enable-scheduler")
    assert done.returncode == 1, done.stderr
    assert "the PostgreSQL store postgresql://wf@127.0.0.1:" in done.stderr
    assert "is unavailable" in done.stderr and "connect failed" in done.stderr
    assert SECRET not in done.stderr + done.stdout


async def test_a_second_scheduler_on_the_database_is_refused_naming_the_holder(
    tmp_path: Path, pg_url: str
) -> None:
    port = free_port()
    settings = resolve_settings(
        store_url=pg_url, port=port, enable_scheduler=True, environ={}, cwd=tmp_path
    )
    serving = asyncio.create_task(serve(settings))
    try:
        async with App(f"http://127.0.0.1:{port}") as app:
            await wait_until(lambda: healthy(app), timeout_s=15)
        done = await asyncio.to_thread(
            _server_process,
            "--store-url",
            with_password(pg_url),
            "--port",
            str(free_port()),
            "--enable-scheduler",
        )
        assert done.returncode == 1, done.stderr
        assert f"owned by pid {os.getpid()}" in done.stderr
        assert SECRET not in done.stderr + done.stdout
    finally:
        os.kill(os.getpid(), signal.SIGTERM)
        assert await asyncio.wait_for(serving, timeout=15) == 0


def test_standby_implies_the_scheduler_and_needs_a_store_several_servers_share(
    tmp_path: Path,
) -> None:
    url = "postgresql://wf@db.internal:5432/wf"
    standby = settings_from_args(parse_args(["--store-url", url, "--standby"]), environ={},
                                 cwd=tmp_path)  # fmt: skip
    assert (standby.scheduler.enabled, standby.scheduler.standby) == (True, True)
    with pytest.raises(InvalidInput) as refused:
        settings_from_args(parse_args(["--store-root", "s", "--standby"]), environ={},
                           cwd=tmp_path)  # fmt: skip
    assert "several servers share" in problems(refused.value)["standby"]
    # The lease is tuned in the file; a renewal as long as the lease is refused.
    config = tmp_path / "server.json"
    config.write_text(
        json.dumps(
            {"server": {"store_url": url, "scheduler": {"lease_s": 3, "renew_interval_s": 1}}}
        )
    )
    tuned = resolve_settings(config_path=config, environ={}, cwd=tmp_path)
    assert (tuned.scheduler.lease_s, tuned.scheduler.renew_interval_s) == (3, 1)
    config.write_text(
        json.dumps(
            {"server": {"store_url": url, "scheduler": {"lease_s": 1, "renew_interval_s": 1}}}
        )
    )
    with pytest.raises(InvalidInput) as too_slow:
        resolve_settings(config_path=config, environ={}, cwd=tmp_path)
    assert "renew_interval_s must be shorter than lease_s" in str(too_slow.value.problems)
