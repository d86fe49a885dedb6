"""The host's writers under a fenced store (`shell.fence`): a server holds
its store's lock from its build, with or without a scheduler, and once the
lock file is removed under it, run records, the run id counter, artifacts
and deployments refuse with `StoreFenced` and write nothing; a run
executing when the fence trips goes on in memory, but records neither its
steps nor its stop, and no stop note is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.host import LocalStaticWorkflowServer
from adapters.host.counter import RunIdCounter
from adapters.host.file_persistence import FileRunCounter
from adapters.host.run_log import FileRunLog
from adapters.host.runs import RunStore
from core.errors import StoreFenced

from .conftest import GREETING_PLAN, Builder, deploy, sleep_plan, tree_snapshot


async def _deployed(build: Builder, nap_s: float = 0.2) -> LocalStaticWorkflowServer:
    server = build()
    await deploy(server, GREETING_PLAN, "greet.default", inputs={"name": "Ada"})
    await deploy(server, sleep_plan(nap_s), "nap.default")
    return server


async def test_record_counter_artifact_and_deployment_writes_are_refused(
    tmp_path: Path, build: Builder
) -> None:
    server = await _deployed(build)
    admitted = await server.api.admit_run("greet.default", None)
    (tmp_path / "scheduler.lock").unlink()
    before = tree_snapshot(tmp_path)

    runs = RunStore(FileRunLog(tmp_path))
    await runs.load(lambda: "2026-03-02T09:00:00Z")
    record = runs.get(admitted)
    counter = RunIdCounter(FileRunCounter(tmp_path / "counters" / "run_id"))
    await counter.load(runs.highest_number())
    touched = record.model_copy(update={"updated_at": "2026-03-02T09:00:01Z"})

    with pytest.raises(StoreFenced):
        await runs.put(touched)
    with pytest.raises(StoreFenced):
        await runs.put_many([touched, touched.model_copy(update={"run_id": "run-000099"})])
    with pytest.raises(StoreFenced):
        await runs.commit(touched)
    with pytest.raises(StoreFenced):
        await counter.reserve(1)
    assert counter.last_issued == 1
    api = server.api
    with pytest.raises(StoreFenced):
        await api.start_run("greet.default", None)
    with pytest.raises(StoreFenced):
        await api.reserve_run_ids(3)
    with pytest.raises(StoreFenced):
        await api.create_artifact_from_plan("late", 1, GREETING_PLAN)
    with pytest.raises(StoreFenced):
        await api.save_deployment(
            {"deployment_id": "late.default", "artifact_id": "greet", "artifact_version": 1}
        )
    with pytest.raises(StoreFenced):
        await api.delete_deployment("nap.default")
    with pytest.raises(StoreFenced):
        await api.launch_run(admitted)
    assert tree_snapshot(tmp_path) == before
    # Not even the new artifact's directory (the snapshot holds files only).
    assert not (tmp_path / "artifacts" / "late").exists()
    # Reads keep working.
    assert (await api.inspect_run(admitted))["status"] == "admitted"
    assert [d["deployment_id"] for d in await api.list_deployments()] == [
        "greet.default",
        "nap.default",
    ]


@pytest.mark.parametrize("still_running_at_stop", [False, True], ids=["finishes", "still-running"])
async def test_a_run_executing_when_the_fence_trips_goes_on_but_records_nothing(
    tmp_path: Path, build: Builder, still_running_at_stop: bool
) -> None:
    server = await _deployed(build, 30 if still_running_at_stop else 0.2)
    told: list[tuple[str, str]] = []
    server.api.add_run_listener(lambda run_id, status, *_: told.append((run_id, status)))
    run_id = await server.api.start_run("nap.default", None)
    assert told == [(run_id, "running")]
    (tmp_path / "scheduler.lock").unlink()
    before = tree_snapshot(tmp_path)

    still = await server.api.drain(0.1 if still_running_at_stop else 10)
    assert still == ([run_id] if still_running_at_stop else [])
    # The stop note a stopping server writes is refused too (nothing noted).
    assert await server.api.note_stopped("drain-expired", 0.1) == []
    await server.api.cancel_executing()
    assert tree_snapshot(tmp_path) == before
    assert told == [(run_id, "running")], "a stop that was not recorded was told"
    await server.close()

    # The next owner finds the executing mark and fails the run as abandoned.
    reopened = build()
    run = await reopened.api.inspect_run(run_id)
    assert (run["status"], run["error"]["kind"]) == ("failed", "abandoned")
    assert "external effects may already have occurred" in run["error"]["message"]
    assert [f["finding"] for f in reopened.recovery_report] == ["abandoned"]


async def test_with_its_lock_in_place_the_host_writes(build: Builder) -> None:
    server = await _deployed(build)
    run_id = await server.api.start_run("nap.default", None)
    assert await server.api.drain(10) == []
    assert (await server.api.inspect_run(run_id))["status"] == "completed"
