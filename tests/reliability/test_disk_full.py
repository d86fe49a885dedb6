"""A really full disk (issue 15): the store on a tiny tmpfs, filled to the last
page, then given its space back.

Mounting needs root (and a sandbox that lets it mount); elsewhere these tests
skip, saying why. The same behaviour is tested everywhere with ENOSPC
injected at the stores' fault points: tests/shell/test_disk_full.py,
tests/service/test_disk_full.py, tests/rpc/test_disk_full_rpc.py.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.client import App, ServerUnreachable
from adapters.host import build_local_static_workflow_server
from adapters.rpc.config import resolve_settings
from adapters.rpc_server_cli import serve
from core.errors import StoreUnavailable
from shell import ManualClock, SchedulerServiceConfig, build_scheduler_service
from shell.journal import CommitJournal, replay_journal
from tests.rpc.live import free_port, wait_until
from tests.service.conftest import CONSTANT_PLAN, START

DISK_BYTES = 4 * 1024 * 1024
HOURLY = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}


def _mount_refusal() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "mounting a tiny tmpfs needs root"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "no mount/umount command"
    return None


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs of its own, unmounted afterwards."""
    refusal = _mount_refusal()
    if refusal is not None:
        pytest.skip(refusal)
    mountpoint = tmp_path / "disk"
    mountpoint.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, check=False)


def fill(disk: Path) -> Path:
    """Write a filler file until the disk refuses another page; returns it."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    chunk = b"\0" * 65536
    try:
        while True:
            try:
                if os.write(fd, chunk) < len(chunk):
                    chunk = chunk[: len(chunk) // 2] or chunk
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                if len(chunk) <= 4096:
                    break
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)
    return filler


async def test_json_rpc_on_a_full_disk_answers_store_unavailable_and_recovers(
    tiny_disk: Path,
) -> None:
    port = free_port()
    settings = resolve_settings(
        store_root=tiny_disk / "store", port=port, enable_scheduler=True, environ={}, cwd=tiny_disk
    )
    serving = asyncio.create_task(serve(settings))
    base = f"http://127.0.0.1:{port}"

    async def health() -> Any:
        try:
            return await app.health()
        except ServerUnreachable:
            return None

    async with App(base) as app, httpx.AsyncClient() as http:
        try:
            assert (await wait_until(health, timeout_s=15))["status"] == "ok"
            await app.create_artifact_from_plan("report", 1, CONSTANT_PLAN)
            await app.save_deployment(
                {"deployment_id": "report.default", "artifact_id": "report", "artifact_version": 1}
            )
            filler = fill(tiny_disk)

            raw = await http.post(
                f"{base}/rpc",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "workflow.schedules.create",
                    "params": {
                        "schedule_id": "hourly",
                        "deployment_id": "report.default",
                        "trigger": HOURLY,
                        "inputs": {"when": "now"},
                    },
                },
            )
            error = raw.json()["error"]
            assert error["code"] == -32009
            assert error["data"]["code"] == "store_unavailable"
            assert (error["data"]["errno"], error["data"]["disk_full"]) == ("ENOSPC", True)
            assert error["message"].startswith("disk full: create_schedule(schedule_id='hourly')")
            # Nothing half-created: the id is not burned.
            assert not (tiny_disk / "store" / "schedules" / "hourly").exists()
            with pytest.raises(StoreUnavailable):
                await app.save_deployment(
                    {"deployment_id": "report.b", "artifact_id": "report", "artifact_version": 1}
                )

            healthz = await http.get(f"{base}/healthz")
            assert healthz.status_code == 503
            body = healthz.json()
            assert (body["status"], body["scheduler"]) == ("degraded", "running")
            assert body["store"]["disk_full"] is True and body["store"]["errno"] == "ENOSPC"

            filler.unlink()  # space returns
            created = await app.create_schedule(
                schedule_id="hourly",
                deployment_id="report.default",
                trigger=HOURLY,
                inputs={"when": "now"},
            )
            assert created["revision"] == 1
            healthz = await http.get(f"{base}/healthz")
            assert healthz.status_code == 200
            report = healthz.json()
            assert (report["status"], report["scheduler"], report["role"]) == (
                "ok",
                "running",
                "leader",
            )
        finally:
            os.kill(os.getpid(), signal.SIGTERM)
            assert await asyncio.wait_for(serving, timeout=15) == 0


@pytest.mark.expected_errors
async def test_scheduler_rounds_on_a_full_disk_degrade_health_and_catch_up(
    tiny_disk: Path,
) -> None:
    root = tiny_disk / "store"
    clock = ManualClock(START)
    server = build_local_static_workflow_server(root, schedules=True, clock=clock.now)
    config = SchedulerServiceConfig(enabled=True)
    service = build_scheduler_service(server, config, clock=clock)
    await service.start()
    api = server.api
    try:
        await api.create_artifact_from_plan("report", 1, CONSTANT_PLAN)
        await api.save_deployment(
            {"deployment_id": "report.default", "artifact_id": "report", "artifact_version": 1}
        )
        await api.schedules.create_schedule(
            schedule_id="hourly",
            deployment_id="report.default",
            trigger=HOURLY,
            inputs={"when": {"$bind": "occurrence.instant"}},
            lateness_allowance_s=3600,
        )
        await service.settle()
        filler = fill(tiny_disk)
        await clock.set(START.replace(hour=10, minute=0))
        with pytest.raises(RuntimeError, match="did not settle"):
            await service.settle(max_rounds=4)
        report = api.store_health.report()
        assert report is not None
        assert report["failing"] == ["scheduler"] and report["disk_full"] is True

        filler.unlink()
        await service.settle()
        assert api.store_health.report() is None
        page = await api.schedules.list_schedule_occurrences(schedule_id="hourly")
        assert [(r["instant"], r["status"]) for r in page["occurrences"]] == [
            ("2026-03-02T10:00:00Z", "completed")
        ]
    finally:
        await service.stop()
        await api.cancel_executing()
        await server.close()
    # A restart finds every store consistent: nothing blocked, nothing to repair.
    reopened = build_local_static_workflow_server(root, schedules=True, clock=clock.now)
    assert reopened.recovery_report == []
    again = build_scheduler_service(reopened, config, clock=clock)
    await again.start()
    try:
        schedule = await reopened.api.schedules.get_schedule(schedule_id="hourly")
        assert schedule["blocked"] is None
    finally:
        await again.stop()
        await reopened.close()


def test_a_journal_write_the_disk_cut_short_is_cut_back(tiny_disk: Path) -> None:
    root = tiny_disk / "store"
    root.mkdir()
    journal = CommitJournal(root)
    journal.open()
    journal.write([("append", str(root / "a.log"), 0, b"first\n")])
    size = journal.path.stat().st_size
    filler = fill(tiny_disk)
    # Bigger than what is left of the journal's last page: written in part.
    with pytest.raises(OSError) as failed:
        journal.write([("append", str(root / "b.log"), 0, b"x" * 65536)])
    assert failed.value.errno == errno.ENOSPC
    assert journal.path.stat().st_size == size
    filler.unlink()
    journal.write([("append", str(root / "c.log"), 0, b"third\n")])
    journal.close_file()
    # A replay (what the next owner runs) finds both commits that returned.
    report = replay_journal(root)
    assert (report.records, report.torn_bytes) == (2, 0)
    assert (root / "a.log").read_bytes() == b"first\n"
    assert (root / "c.log").read_bytes() == b"third\n"
    assert not (root / "b.log").exists()
