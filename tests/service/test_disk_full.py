"""A full disk under the schedules API, the host API and the scheduler's
rounds (issue 15), injected at the stores' fault points (`FailWrites`)."""

from __future__ import annotations

import errno
from collections.abc import Iterator

import pytest

from core.errors import InvalidInput, StoreUnavailable
from shell.durable import FailWrites, set_fault_injector

from .conftest import CONSTANT_PLAN, START, Harness


@pytest.fixture
async def harness(file_harness: Harness) -> Harness:
    """These tests are about the files of the file backend."""
    return file_harness


HOURLY = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}
WHEN = {"when": {"$bind": "occurrence.instant"}}


@pytest.fixture
def disk() -> Iterator[FailWrites]:
    """A disk that is full until the test sets `failing = False`. Installed
    by the test once its setup has written what it needs."""
    full = FailWrites()
    full.failing = False
    previous = set_fault_injector(full)
    yield full
    set_fault_injector(previous)


async def test_a_create_on_a_full_disk_answers_store_unavailable_and_burns_no_id(
    harness: Harness, disk: FailWrites
) -> None:
    await harness.boot()
    await harness.deploy("report.default", CONSTANT_PLAN)
    # Full once the directory is made: the created record cannot be written.
    disk.points = frozenset({"before:append:lifecycle.jsonl", "before:write:store-probe"})
    disk.failing = True
    with pytest.raises(StoreUnavailable) as failed:
        await harness.schedules.create_schedule(
            schedule_id="hourly", deployment_id="report.default", trigger=HOURLY, inputs=WHEN
        )
    error = failed.value
    assert error.data["errno"] == "ENOSPC" and error.data["disk_full"] is True
    assert error.data["operation"] == "create_schedule(schedule_id='hourly')"
    assert error.message.startswith("disk full: create_schedule(schedule_id='hourly') failed")
    assert isinstance(error.__cause__, OSError) and error.__cause__.errno == errno.ENOSPC
    # Nothing half-created: no directory, nothing listed.
    assert not (harness.root / "schedules" / "hourly").exists()
    assert await harness.schedules.list_schedules() == []
    health = harness.api.store_health
    report = health.report()
    assert report is not None and report["failing"] == ["api"] and report["disk_full"]

    disk.failing = False  # space returns
    created = await harness.schedules.create_schedule(
        schedule_id="hourly", deployment_id="report.default", trigger=HOURLY, inputs=WHEN
    )
    assert created["revision"] == 1
    assert health.report() is None
    await harness.at(START.replace(hour=10, minute=0))
    assert await harness.statuses("hourly") == [("10:00", "completed")]


async def test_host_writes_on_a_full_disk_answer_store_unavailable(
    harness: Harness, disk: FailWrites
) -> None:
    await harness.boot()
    api = harness.api
    await api.create_artifact_from_plan("report", 1, CONSTANT_PLAN)
    disk.failing = True
    with pytest.raises(StoreUnavailable) as failed:
        await api.save_deployment(
            {"deployment_id": "report.default", "artifact_id": "report", "artifact_version": 1}
        )
    assert failed.value.data["operation"] == "save_deployment(deployment_id='report.default')"
    with pytest.raises(StoreUnavailable) as failed:
        await api.create_artifact_from_plan("other", 1, CONSTANT_PLAN)
    assert (
        failed.value.data["operation"]
        == "create_artifact_from_plan(artifact_id='other', version=1)"
    )
    assert failed.value.data["errno"] == "ENOSPC"
    assert await api.list_deployments() == []
    disk.failing = False
    await api.save_deployment(
        {"deployment_id": "report.default", "artifact_id": "report", "artifact_version": 1}
    )
    assert api.store_health.report() is None


@pytest.mark.expected_errors
async def test_rounds_on_a_full_disk_report_degraded_until_a_round_completes(
    harness: Harness, disk: FailWrites, caplog: pytest.LogCaptureFixture
) -> None:
    service = await harness.boot()
    await harness.deploy("report.default", CONSTANT_PLAN)
    await harness.schedules.create_schedule(
        schedule_id="hourly", deployment_id="report.default", trigger=HOURLY, inputs=WHEN
    )
    await service.settle()
    health = harness.api.store_health
    disk.failing = True
    await harness.clock.set(START.replace(hour=10, minute=0))
    # Every round fails (and the service retries), so it never settles.
    with pytest.raises(RuntimeError, match="did not settle"):
        await service.settle(max_rounds=4)
    report = health.report()
    assert report is not None
    assert report["failing"] == ["scheduler"] and report["disk_full"] is True
    assert report["operation"] == "scheduler round" and report["failures"] >= 2
    failures = [r for r in caplog.records if r.getMessage().startswith("scheduler round failed")]
    assert len(failures) >= 2
    assert all("disk full" in r.getMessage() for r in failures)
    # The traceback once, then one line per failed round.
    assert [r.exc_info is not None for r in failures] == [True] + [False] * (len(failures) - 1)
    assert await harness.statuses("hourly") == []

    disk.failing = False
    await service.settle()
    assert health.report() is None
    assert await harness.statuses("hourly") == [("10:00", "completed")]


@pytest.mark.expected_errors
async def test_a_stop_that_cannot_publish_the_history_index_still_releases_the_store(
    harness: Harness, disk: FailWrites, caplog: pytest.LogCaptureFixture
) -> None:
    """The index checkpoints are derived: a disk that refuses them at a clean
    stop is logged, the stop goes on and releases the store, and the next
    start replays the rows they would have covered."""
    # No running checkpoint: the stop is the first to publish the indexes.
    await harness.boot(checkpoint_interval_s=0)
    await harness.deploy("report.default", CONSTANT_PLAN)
    await harness.schedules.create_schedule(
        schedule_id="hourly", deployment_id="report.default", trigger=HOURLY, inputs=WHEN
    )
    await harness.at(START.replace(hour=10, minute=0))
    assert await harness.statuses("hourly") == [("10:00", "completed")]
    disk.points = frozenset({"before:index:history.idx"})
    disk.failing = True
    await harness.shutdown()
    assert disk.failed == ["before:index:history.idx"]
    assert "could not publish the history index checkpoints at the stop" in caplog.text
    disk.failing = False
    await harness.boot()
    assert await harness.statuses("hourly") == [("10:00", "completed")]
    await harness.at(START.replace(hour=11, minute=0))
    assert await harness.statuses("hourly") == [("10:00", "completed"), ("11:00", "completed")]
    await harness.shutdown()


@pytest.mark.expected_errors
async def test_a_capacity_change_outlives_a_round_that_failed_before_deciding(
    harness: Harness,
) -> None:
    # The round that takes the change first makes the new schedule's first
    # runtime record durable, and the disk is full: the round fails before
    # `decide` saw the change, and the state is rebuilt from the stores.
    service = await harness.boot(max_concurrent_runs=3)
    await harness.deploy("report.default", CONSTANT_PLAN)
    full = FailWrites(points={"before:append:commit.journal", "before:commit"})
    previous = set_fault_injector(full)
    try:
        await harness.schedules.create_schedule(
            schedule_id="hourly", deployment_id="report.default", trigger=HOURLY, inputs=WHEN
        )
        service.set_capacity(1)
        with pytest.raises(RuntimeError, match="did not settle"):
            await service.settle(max_rounds=3)
        assert full.failed
    finally:
        set_fault_injector(previous)
    await service.settle()
    assert service.state.max_concurrent_runs == 1
    await harness.clock.set(START.replace(hour=10, minute=0))
    await service.settle()
    assert await harness.statuses("hourly") == [("10:00", "completed")]


async def test_set_capacity_refuses_a_bound_below_one(harness: Harness) -> None:
    service = await harness.boot(max_concurrent_runs=3)
    with pytest.raises(InvalidInput, match="max_concurrent_runs"):
        service.set_capacity(0)
    await service.settle()
    assert service.state.max_concurrent_runs == 3
