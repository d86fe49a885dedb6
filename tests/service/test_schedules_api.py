"""The schedules API: validation through core, nothing written on rejection."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from core.errors import (
    AlreadyExists,
    InvalidDefinition,
    InvalidInput,
    InvalidState,
    NotFound,
    RevisionConflict,
)

from .conftest import CONSTANT_PLAN, GATE_PLAN, START, Harness

GREETING_PLAN: dict[str, Any] = {
    **CONSTANT_PLAN,
    "input_schema": {
        "type": "object",
        "properties": {"when": {"type": "string"}, "count": {"type": "integer"}},
        "required": ["when"],
    },
}

CRON = {"kind": "cron", "expression": "0 * * * *", "timezone": "Europe/Berlin"}


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture
async def ready(harness: Harness) -> Harness:
    await harness.boot()
    await harness.deploy("report.default", GREETING_PLAN)
    await harness.schedules.create_schedule(
        schedule_id="report",
        deployment_id="report.default",
        trigger=CRON,
        inputs={"when": {"$bind": "occurrence.local_instant"}},
    )
    await harness.service.settle()  # type: ignore[union-attr]
    return harness


BAD_CREATES: list[tuple[str, dict[str, Any], set[str]]] = [
    (
        "every bad field at once",
        {
            "schedule_id": "../escape",
            "trigger": {"kind": "cron", "expression": "0 * * * * *", "timezone": "Mars/Olympus"},
            "overlap": "sometimes",
            "lateness_allowance_s": -1,
        },
        {
            "schedule_id",
            "trigger.expression",
            "trigger.timezone",
            "overlap",
            "lateness_allowance_s",
        },
    ),
    (
        "naive one-shot",
        {"trigger": {"kind": "oneshot", "at": "2030-01-01T00:00:00"}},
        {"trigger.at"},
    ),
    (
        "one-shot already past",
        {"trigger": {"kind": "oneshot", "at": "2020-01-01T00:00:00Z"}},
        {"trigger.at"},
    ),
    ("unknown deployment", {"deployment_id": "nope.default"}, {"deployment_id"}),
    ("inputs fail the schema", {"inputs": {"when": 3}}, {"inputs.when"}),
    ("required input missing", {"inputs": {}}, {"inputs.when"}),
    ("parallel needs a limit", {"overlap": "parallel"}, {"max_active_runs"}),
    ("skip with a limit of 3", {"max_active_runs": 3}, {"max_active_runs"}),
    ("unknown binding", {"inputs": {"when": {"$bind": "occurrence.mood"}}}, {"inputs.when"}),
]


@pytest.mark.parametrize(
    ("label", "changes", "fields"), BAD_CREATES, ids=[c[0] for c in BAD_CREATES]
)
async def test_rejected_create_names_every_bad_field_and_writes_nothing(
    ready: Harness, label: str, changes: dict[str, Any], fields: set[str]
) -> None:
    payload: dict[str, Any] = {
        "schedule_id": "fresh",
        "deployment_id": "report.default",
        "trigger": CRON,
        "inputs": {"when": "x"},
        **changes,
    }
    before = tree(ready.root)
    with pytest.raises(InvalidDefinition) as rejected:
        await ready.schedules.create_schedule(**payload)
    named = {p.field for p in rejected.value.problems}
    assert fields <= named, named
    assert rejected.value.code == "invalid_definition"
    assert tree(ready.root) == before


async def test_ids_are_never_reused(ready: Harness) -> None:
    await ready.schedules.delete_schedule(schedule_id="report")
    with pytest.raises(AlreadyExists):
        await ready.schedules.create_schedule(
            schedule_id="report", deployment_id="report.default", trigger=CRON, inputs={"when": "x"}
        )


async def test_update_with_a_stale_revision_changes_nothing(ready: Harness) -> None:
    updated = await ready.schedules.update_schedule(
        schedule_id="report", expected_revision=1, misfire="latest"
    )
    assert (updated["revision"], updated["misfire"], updated["trigger"]) == (2, "latest", CRON)
    before = tree(ready.root)
    with pytest.raises(RevisionConflict) as conflict:
        await ready.schedules.update_schedule(
            schedule_id="report", expected_revision=1, misfire="skip"
        )
    assert conflict.value.data["actual"] == 2
    assert tree(ready.root) == before
    current = await ready.schedules.get_schedule(schedule_id="report")
    assert (current["revision"], current["misfire"]) == (2, "latest")


async def test_update_none_means_unpatched_and_bad_edits_change_nothing(ready: Harness) -> None:
    before = tree(ready.root)
    with pytest.raises(InvalidDefinition) as rejected:
        await ready.schedules.update_schedule(
            schedule_id="report", expected_revision=1, overlap="parallel", inputs={"when": 5}
        )
    assert {p.field for p in rejected.value.problems} >= {"max_active_runs"}
    with pytest.raises(InvalidDefinition):
        await ready.schedules.update_schedule(schedule_id="report", expected_revision=1)
    with pytest.raises(InvalidDefinition):
        await ready.schedules.update_schedule(
            schedule_id="report", expected_revision=-1, misfire="latest"
        )
    assert tree(ready.root) == before
    kept = await ready.schedules.update_schedule(
        schedule_id="report", expected_revision=1, lateness_allowance_s=5, max_steps=None
    )
    assert kept["inputs"] == {"when": {"$bind": "occurrence.local_instant"}}
    assert kept["lateness_allowance_s"] == 5


async def test_deleted_schedules_reject_updates_and_pause(ready: Harness) -> None:
    await ready.schedules.delete_schedule(schedule_id="report")
    again = await ready.schedules.delete_schedule(schedule_id="report")
    assert again["deleted"] is True
    with pytest.raises(InvalidState):
        await ready.schedules.pause_schedule(schedule_id="report")
    with pytest.raises(InvalidState):
        await ready.schedules.update_schedule(
            schedule_id="report", expected_revision=1, misfire="latest"
        )


@pytest.mark.parametrize("limit", [0, 101, "5", True])
async def test_occurrence_limits_are_checked(ready: Harness, limit: Any) -> None:
    with pytest.raises(InvalidInput) as rejected:
        await ready.schedules.list_schedule_occurrences(schedule_id="report", limit=limit)
    assert [p.field for p in rejected.value.problems] == ["limit"]


async def test_unknown_schedules_are_not_found(ready: Harness) -> None:
    for call in (
        ready.schedules.get_schedule(schedule_id="ghost"),
        ready.schedules.pause_schedule(schedule_id="ghost"),
        ready.schedules.list_schedule_occurrences(schedule_id="ghost"),
    ):
        with pytest.raises(NotFound):
            await call


async def test_get_schedule_shows_the_full_definition(ready: Harness) -> None:
    got = await ready.schedules.get_schedule(schedule_id="report")
    assert got["trigger"] == CRON
    assert got["overlap"] == "skip" and got["misfire"] == "skip"
    assert got["lateness_allowance_s"] == 60
    assert (got["paused"], got["deleted"], got["blocked"]) == (False, False, None)
    assert got["next_instant"] == "2026-03-02T10:00:00Z"


# --- the derived state and the lifecycle times (issue 15, item 11) ---------------


async def _oneshot(harness: Harness, schedule_id: str, deployment_id: str) -> datetime:
    at = START + timedelta(minutes=5)
    await harness.schedules.create_schedule(
        schedule_id=schedule_id,
        deployment_id=deployment_id,
        trigger={"kind": "oneshot", "at": at.isoformat()},
        inputs={"when": "now"},
    )
    return at


async def test_a_fired_oneshot_whose_run_completed_is_finished(ready: Harness) -> None:
    at = await _oneshot(ready, "soon", "report.default")
    assert (await ready.schedules.get_schedule(schedule_id="soon"))["state"] == "active"
    await ready.at(at)
    assert await ready.statuses("soon") == [("09:35", "completed")]
    got = await ready.schedules.get_schedule(schedule_id="soon")
    assert (got["state"], got["paused"], got["deleted"], got["next_instant"]) == (
        "finished",
        False,
        False,
        None,
    )
    listed = {s["schedule_id"]: s["state"] for s in await ready.schedules.list_schedules()}
    assert listed == {"report": "active", "soon": "finished"}
    # Pausing it changes the flags, not the state: nothing more can happen.
    paused = await ready.schedules.pause_schedule(schedule_id="soon")
    assert (paused["state"], paused["paused"]) == ("finished", True)
    deleted = await ready.schedules.delete_schedule(schedule_id="soon")
    assert deleted["state"] == "deleted"


async def test_a_fired_oneshot_whose_run_is_still_open_is_active(ready: Harness) -> None:
    await ready.deploy("gate.default", GATE_PLAN)
    at = await _oneshot(ready, "gated", "gate.default")
    await ready.at(at)
    [row] = await ready.occurrences("gated")
    assert row["status"] == "interrupted"  # the run waits for a resume: still open
    assert (await ready.schedules.get_schedule(schedule_id="gated"))["state"] == "active"
    await ready.api.resume_run(row["run_id"], {"go": True})
    await ready.service.settle()  # type: ignore[union-attr]
    assert await ready.statuses("gated") == [("09:35", "completed")]
    assert (await ready.schedules.get_schedule(schedule_id="gated"))["state"] == "finished"


async def test_the_state_is_read_from_the_stores_without_a_service(ready: Harness) -> None:
    at = await _oneshot(ready, "soon", "report.default")
    await ready.at(at)
    await ready.shutdown()
    # A fresh API on the same store, no service attached: runtime and history.
    alone = (await ready.build_server()).api.schedules
    got = await alone.get_schedule(schedule_id="soon")
    assert got["state"] == "finished"
    assert (await alone.get_schedule(schedule_id="report"))["state"] == "active"


async def test_a_oneshot_that_passed_while_paused_is_finished(ready: Harness) -> None:
    at = await _oneshot(ready, "soon", "report.default")
    await ready.schedules.pause_schedule(schedule_id="soon")
    assert (await ready.schedules.get_schedule(schedule_id="soon"))["state"] == "paused"
    await ready.at(at + timedelta(minutes=1))
    # A resume starts after the resume time: the instant is never replayed.
    assert (await ready.schedules.get_schedule(schedule_id="soon"))["state"] == "finished"
    resumed = await ready.schedules.resume_schedule(schedule_id="soon")
    assert resumed["state"] == "finished"
    assert await ready.statuses("soon") == []


async def test_pause_resume_and_delete_record_when_they_happened(ready: Harness) -> None:
    got = await ready.schedules.get_schedule(schedule_id="report")
    assert (got["paused_at"], got["resumed_at"], got["deleted_at"]) == (None, None, None)
    await ready.clock.set(START + timedelta(minutes=1))
    paused = await ready.schedules.pause_schedule(schedule_id="report")
    assert paused["paused_at"] == "2026-03-02T09:31:00Z" and paused["state"] == "paused"
    await ready.clock.set(START + timedelta(minutes=2))
    again = await ready.schedules.pause_schedule(schedule_id="report")
    assert again["paused_at"] == "2026-03-02T09:31:00Z"  # idempotent: the first pause
    resumed = await ready.schedules.resume_schedule(schedule_id="report")
    assert resumed["resumed_at"] == "2026-03-02T09:32:00Z" and resumed["state"] == "active"
    assert resumed["paused_at"] == "2026-03-02T09:31:00Z"  # when the span began
    await ready.clock.set(START + timedelta(minutes=3))
    deleted = await ready.schedules.delete_schedule(schedule_id="report")
    assert deleted["deleted_at"] == "2026-03-02T09:33:00Z"
    listed = await ready.schedules.list_schedules(include_deleted=True)
    assert [(s["paused_at"], s["resumed_at"], s["deleted_at"]) for s in listed] == [
        ("2026-03-02T09:31:00Z", "2026-03-02T09:32:00Z", "2026-03-02T09:33:00Z")
    ]
