"""Building the server: the store root, the schedules hook, the clock, the storage helpers."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from adapters import build_local_static_workflow_server
from adapters.host import LocalStaticWorkflowServer
from adapters.host.storage import atomic_write_json, atomic_write_text, is_temp_file, read_json
from core.errors import SchedulerUnavailable
from shell import SchedulerServiceConfig, build_scheduler_service

from .conftest import GREETING_PLAN, Builder, deploy


def test_root_is_created_and_exposed(tmp_path: Path) -> None:
    root = tmp_path / "a" / "b"
    server = build_local_static_workflow_server(str(root))
    assert server.store_root == root and root.is_dir()
    assert server.api.schedules is None


def test_schedules_factory_is_called_with_the_server(build: Builder) -> None:
    seen: list[LocalStaticWorkflowServer] = []

    def factory(server: LocalStaticWorkflowServer) -> Any:
        seen.append(server)
        return "the schedules api"

    server = build(schedules=True, schedules_factory=factory)
    assert seen == [server]
    assert server.api.schedules == "the schedules api"
    # Without schedules=True the factory is not used.
    assert build(schedules_factory=factory).api.schedules is None
    assert len(seen) == 1


def test_schedules_without_the_scheduler_module_is_a_clear_error(
    build: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "shell.schedules_api", None)  # makes the import fail
    with pytest.raises(SchedulerUnavailable, match=r"shell\.schedules_api\.build_schedules_api"):
        build(schedules=True)


async def test_the_clock_stamps_records(build: Builder) -> None:
    moments = iter(datetime.fromisoformat(f"2026-03-02T09:00:0{i}+01:00") for i in range(10))
    server = build(clock=lambda: next(moments))
    await deploy(server, GREETING_PLAN, "hello.default")
    artifact = await server.api.get_artifact("hello")
    deployment = await server.api.get_deployment("hello.default")
    # Stored as UTC with a Z suffix, whatever the clock's zone.
    assert artifact["created_at"] == "2026-03-02T08:00:00Z"
    assert deployment["created_at"] == "2026-03-02T08:00:01Z"


async def test_a_naive_clock_is_refused(build: Builder) -> None:
    server = build(clock=lambda: datetime(2026, 3, 2, 9))
    with pytest.raises(ValueError, match="aware"):
        await server.api.create_artifact_from_plan("hello", 1, GREETING_PLAN)


# --- storage helpers ----------------------------------------------------------------


def test_atomic_write_replaces_whole_files(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "record.json"
    atomic_write_json(target, {"b": 1, "a": [1, 2]})
    assert read_json(target) == {"a": [1, 2], "b": 1}
    assert target.read_text().startswith('{\n "a"')  # canonical: sorted keys
    atomic_write_json(target, {"b": 2})
    assert read_json(target) == {"b": 2}
    assert os.listdir(target.parent) == ["record.json"]  # no temporary left behind


def test_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "record.json"
    atomic_write_text(target, "old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["record.json"]


def test_values_that_are_not_json_are_refused_before_writing(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    with pytest.raises(ValueError):
        atomic_write_json(target, {"x": float("nan")})
    assert not target.exists()


def test_temp_file_names() -> None:
    assert is_temp_file(Path(".run-000001.json.abc123.tmp"))
    assert not is_temp_file(Path("run-000001.json"))
    assert not is_temp_file(Path("x.tmp"))


def test_the_system_clock_stamps_records_as_datetime_now_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from adapters.host import server

    before = datetime.now(UTC)
    stamped = server._system_timestamp()
    after = datetime.now(UTC)
    assert stamped.endswith("Z")
    assert before <= datetime.fromisoformat(stamped) <= after
    # Formatted as `datetime.isoformat` formats it, a zero fraction left out
    # and the second's text not kept past its second.
    for instant in (
        datetime(2026, 12, 6, 5, 18, 17, 509331, tzinfo=UTC),
        datetime(2026, 12, 6, 5, 18, 17, tzinfo=UTC),
        datetime(2026, 12, 6, 5, 18, 18, 5, tzinfo=UTC),
    ):
        nanoseconds = int(instant.timestamp()) * 1_000_000_000 + instant.microsecond * 1000 + 999
        monkeypatch.setattr(server.time, "time_ns", lambda ns=nanoseconds: ns)
        assert server._system_timestamp() == instant.isoformat()[:-6] + "Z"


async def test_a_server_not_closed_holds_its_store_and_the_refusal_says_so(
    tmp_path: Path,
) -> None:
    # What a notebook cell run twice does: the first server is never closed.
    first = build_local_static_workflow_server(tmp_path, schedules=True)
    with pytest.raises(SchedulerUnavailable) as refused:
        build_local_static_workflow_server(tmp_path)
    assert refused.value.message.endswith(
        f"is owned by pid {os.getpid()} on host {os.uname().nodename} since"
        f" {first.store_lock.holder['since']} (this process: a server opened on the"  # type: ignore[union-attr,index]
        " store and not closed holds it; `await server.close()` it first)"
    )
    # Its scheduler service runs under its lock, one at a time.
    service = build_scheduler_service(first, SchedulerServiceConfig(enabled=True))
    await service.start()
    try:
        with pytest.raises(SchedulerUnavailable, match="already runs on it; stop that service"):
            await build_scheduler_service(first, SchedulerServiceConfig(enabled=True)).start()
    finally:
        await service.stop()
    # Stopping the service leaves the store the server's; closing it frees it.
    with pytest.raises(SchedulerUnavailable):
        build_local_static_workflow_server(tmp_path)
    await first.close()
    second = build_local_static_workflow_server(tmp_path)
    await second.close()
