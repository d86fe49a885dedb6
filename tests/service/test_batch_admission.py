"""A herd of admissions in one round: one shared preflight per deployment and
inputs, run ids reserved in host-sized chunks, and every run created and
launched through the host's batch calls."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import shell.service
from shell.ports import BatchRunHost

from .conftest import CONSTANT_PLAN, START, Harness

NOON = START.replace(hour=12, minute=0)


async def _herd(harness: Harness, inputs: list[dict[str, Any]]) -> list[str]:
    ids = []
    for index, given in enumerate(inputs):
        schedule_id = f"herd-{index}"
        await harness.schedules.create_schedule(
            schedule_id=schedule_id,
            deployment_id="report.default",
            trigger={"kind": "cron", "expression": "0 12 * * *"},
            inputs=given,
        )
        ids.append(schedule_id)
    # Every creation consumed before the clock moves (on a database the
    # rounds interleave with the calls above).
    assert harness.service is not None
    await harness.service.settle()
    return ids


class Calls:
    def __init__(self, harness: Harness, *names: str) -> None:
        self.seen: dict[str, list[Any]] = {name: [] for name in names}
        for name in names:
            self._spy(harness.api, name)

    def _spy(self, api: Any, name: str) -> None:
        real = getattr(api, name)
        # What a call is about: its requests, staged into a batch or not.
        position = 1 if name == "stage_admit_runs" else 0

        if inspect.iscoroutinefunction(real):

            async def spy(*args: Any, **kwargs: Any) -> Any:
                self.seen[name].append(args[position] if args else kwargs)
                return await real(*args, **kwargs)

            setattr(api, name, spy)
            return

        def sync_spy(*args: Any, **kwargs: Any) -> Any:
            self.seen[name].append(args[position] if args else kwargs)
            return real(*args, **kwargs)

        setattr(api, name, sync_spy)


def creating(harness: Harness) -> str:
    """The host call that creates a round's runs: inside the round's commit
    (staged into its journal record on files, its transaction on PostgreSQL)."""
    del harness
    return "stage_admit_runs"


async def test_a_herd_is_created_and_launched_in_batches(harness: Harness) -> None:
    await harness.boot(max_concurrent_runs=10)
    await harness.deploy("report.default", CONSTANT_PLAN)
    host: object = harness.api
    assert isinstance(host, BatchRunHost)
    ids = await _herd(harness, [{"when": "a"}] * 3 + [{"when": "b"}] * 2)
    calls = Calls(harness, "preflight", creating(harness), "launch_runs", "admit_run", "launch_run")
    await harness.at(NOON)
    # Same deployment and inputs: one host check for each distinct pair.
    assert len(calls.seen["preflight"]) == 2
    [requests] = calls.seen[creating(harness)]
    assert [r["origin"]["schedule_id"] for r in requests] == ids
    [launched] = calls.seen["launch_runs"]
    assert launched == [r["run_id"] for r in requests]
    assert calls.seen["admit_run"] == calls.seen["launch_run"] == []
    for schedule_id, when in zip(ids, "aaabb", strict=True):
        [row] = await harness.occurrences(schedule_id)
        assert row["status"] == "completed"
        run = await harness.api.inspect_run(row["run_id"])
        assert run["output"] == {"result": f"report for {when}"}


async def test_run_ids_are_reserved_in_chunks_the_host_accepts(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shell.service, "_RESERVE_CHUNK", 2)
    await harness.boot(max_concurrent_runs=10)
    await harness.deploy("report.default", CONSTANT_PLAN)
    ids = await _herd(harness, [{"when": "x"}] * 5)
    calls = Calls(harness, "reserve_run_ids")
    await harness.at(NOON)
    assert calls.seen["reserve_run_ids"] == [2, 2, 1]
    run_ids = {(await harness.occurrences(s))[0]["run_id"] for s in ids}
    assert len(run_ids) == 5


@pytest.mark.expected_errors
async def test_a_run_the_batch_cannot_create_fails_its_occurrence(harness: Harness) -> None:
    await harness.boot(max_concurrent_runs=10)
    await harness.deploy("report.default", CONSTANT_PLAN)
    ids = await _herd(harness, [{"when": "x"}] * 2)
    real = harness.api.preflight

    async def deployment_gone(*args: Any) -> Any:
        # Deleted between the preflight and the run's creation.
        checked = await real(*args)
        await harness.api.delete_deployment("report.default", force=True)
        return checked

    harness.api.preflight = deployment_gone
    await harness.at(NOON)
    for schedule_id in ids:
        [row] = await harness.occurrences(schedule_id)
        assert row["status"] == "failed"
        assert row["reason"].startswith("the run could not be created")


async def test_a_preflight_rejection_is_shared_by_the_same_inputs(harness: Harness) -> None:
    await harness.boot(max_concurrent_runs=10)
    await harness.deploy("report.default", CONSTANT_PLAN)
    ids = await _herd(harness, [{"when": "x"}] * 3)
    await harness.api.delete_deployment("report.default", force=True)
    calls = Calls(harness, "preflight")
    await harness.at(NOON)
    assert len(calls.seen["preflight"]) == 1
    for schedule_id in ids:
        [row] = await harness.occurrences(schedule_id)
        assert row["status"] == "preflight-rejected"
