"""A full disk at the schedule stores and the commit journal (issue 15).

ENOSPC is injected at the stores' fault points (`FailWrites`), so this runs
everywhere; `tests/reliability/test_disk_full.py` fills a real tiny disk.
"""

from __future__ import annotations

import errno
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.errors import AlreadyExists, NotFound, StoreUnavailable
from shell.definition_store import DefinitionStore
from shell.durable import FailWrites, set_fault_injector
from shell.lock import SchedulerLock
from shell.store_health import StoreHealth

DEFN = {"trigger": {"kind": "cron", "expression": "0 * * * *"}, "deployment_id": "d"}
T0 = "2026-03-02T09:00:00Z"
T1 = "2026-03-02T10:00:00Z"


@pytest.mark.parametrize(
    "point", ["before:append:lifecycle.jsonl", "before:replace:definition.json"]
)
def test_a_create_that_hits_a_full_disk_leaves_nothing_and_the_id_free(
    store_root: Path, point: str
) -> None:
    store = DefinitionStore(store_root)
    disk = FailWrites(points=[point])
    set_fault_injector(disk)
    with pytest.raises(OSError) as failed:
        store.create("s1", DEFN, at=T0)
    assert failed.value.errno == errno.ENOSPC
    assert disk.failed == [point]
    assert not (store_root / "schedules" / "s1").exists()
    assert store.list_ids() == []
    with pytest.raises(NotFound):
        store.get("s1")
    disk.failing = False
    created = store.create("s1", DEFN, at=T1)
    assert created.snapshot["created_at"] == T1
    assert store.get("s1")["revision"] == 1
    with pytest.raises(AlreadyExists):
        store.create("s1", DEFN, at=T1)


@pytest.mark.parametrize("left", [b"", b'{"seq": 1, "kind": "crea'])
def test_the_directory_an_earlier_failed_create_left_does_not_burn_the_id(
    store_root: Path, left: bytes
) -> None:
    # What a create that hit ENOSPC used to leave: its directory, and a
    # lifecycle log that is empty or holds part of the created record.
    directory = store_root / "schedules" / "s1"
    directory.mkdir(parents=True)
    (directory / "lifecycle.jsonl").write_bytes(left)
    store = DefinitionStore(store_root)
    assert store.load("s1").incomplete
    with pytest.raises(NotFound):
        store.get("s1")
    store.create("s1", DEFN, at=T1)
    lines = (directory / "lifecycle.jsonl").read_bytes().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["created"]
    assert store.list_ids() == ["s1"]


def test_a_directory_holding_other_files_still_takes_the_id(store_root: Path) -> None:
    # No lifecycle record, but a history: damage to report, never to delete.
    directory = store_root / "schedules" / "s1"
    directory.mkdir(parents=True)
    (directory / "history.jsonl").write_bytes(b"{}\n")
    store = DefinitionStore(store_root)
    with pytest.raises(AlreadyExists):
        store.create("s1", DEFN, at=T1)
    assert (directory / "history.jsonl").exists()


def test_store_unavailable_names_the_errno_the_path_and_the_operation() -> None:
    exc = OSError(errno.ENOSPC, "No space left on device", "/store/schedules/s1/lifecycle.jsonl")
    error = StoreUnavailable.from_os_error(exc, operation="create_schedule(schedule_id='s1')")
    assert error.message.startswith("disk full: create_schedule(schedule_id='s1') failed at")
    assert "(ENOSPC)" in error.message and "free space" in error.message
    assert error.to_dict() == {
        "code": "store_unavailable",
        "message": error.message,
        "operation": "create_schedule(schedule_id='s1')",
        "errno": "ENOSPC",
        "path": "/store/schedules/s1/lifecycle.jsonl",
        "disk_full": True,
    }
    quota = StoreUnavailable.from_os_error(OSError(errno.EDQUOT, "quota"), operation="x")
    assert quota.data["disk_full"] is True and quota.message.startswith("disk quota exceeded")
    read_only = StoreUnavailable.from_os_error(OSError(errno.EROFS, "ro"), operation="x")
    assert read_only.data["disk_full"] is False
    assert read_only.message.startswith("store is read-only")


def test_health_is_degraded_per_source_until_that_source_succeeds(store_root: Path) -> None:
    health = StoreHealth(store_root)
    full = StoreUnavailable.from_os_error(OSError(errno.ENOSPC, "full"), operation="round")
    assert health.report() is None
    health.failed("scheduler", full)
    health.failed("scheduler", full)
    report = health.report()
    assert report is not None
    assert report["status"] == "unavailable" and report["disk_full"] is True
    assert report["failing"] == ["scheduler"] and report["failures"] == 2
    # A write by the API does not say the scheduler's rounds work again.
    health.succeeded("api")
    assert health.degraded
    health.succeeded("scheduler")
    assert health.report() is None


def test_an_api_failure_is_cleared_by_the_probe_once_the_disk_takes_writes(
    store_root: Path,
) -> None:
    ticks = iter(float(n) for n in range(100))
    health = StoreHealth(store_root, monotonic=lambda: next(ticks), probe_interval_s=1.5)
    disk = FailWrites()
    set_fault_injector(disk)
    health.unavailable(OSError(errno.ENOSPC, "full"), operation="save_deployment()")
    report = health.report()  # probes, and the probe fails too
    assert report is not None and report["failing"] == ["api"]
    assert disk.failed == ["before:write:store-probe"]
    disk.failing = False
    assert health.report() is not None  # too soon to probe again
    assert health.report() is None  # the probe wrote: the store takes writes
    assert [p.name for p in store_root.iterdir()] == []  # and left nothing


def test_a_fenced_store_reports_fenced_from_the_first_report_on(store_root: Path) -> None:
    moments = iter([datetime(2026, 3, 2, 9, 0, s, tzinfo=UTC) for s in range(10)])
    health = StoreHealth(store_root, now=lambda: next(moments))
    lock = SchedulerLock(store_root)
    lock.acquire()
    try:
        assert health.report() is None
        (store_root / "scheduler.lock").unlink()
        # No write found it yet: the report checks the fence itself.
        report = health.report()
        assert report is not None
        assert report["status"] == "fenced" and report["failing"] == ["fence"]
        assert report["path"] == str(store_root / "scheduler.lock")
        assert report["message"].startswith(f"store {store_root} is fenced")
        assert report["since"] == "2026-03-02T09:00:00Z"
        # Sticky, and dated from the first report that found it.
        again = health.report()
        assert again is not None and again["since"] == "2026-03-02T09:00:00Z"
        # Another source failing meanwhile is named beside it.
        health.failed("scheduler", StoreUnavailable("disk full"))
        after = health.report()
        assert after is not None and after["failing"] == ["fence", "scheduler"]
    finally:
        lock.release()
