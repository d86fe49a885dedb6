"""The run record's fast paths (adapters/host/records.py): `revised` and
`assembled` build what pydantic's `model_copy` and `model_construct` build,
down to the stored JSON, and refuse what those would silently accept;
`record_json` is `model_dump_json`'s text, as bytes."""

from __future__ import annotations

import pytest

from adapters.host.records import (
    Checkpoint,
    ExecutingMark,
    Progress,
    RunRecord,
    Snapshot,
    assembled,
    record_json,
    revised,
)

NOW = "2026-03-02T09:00:00Z"
LATER = "2026-03-02T09:00:01.000250Z"


def _admitted() -> RunRecord:
    return RunRecord(
        run_id="run-000007",
        status="admitted",
        origin={"kind": "schedule", "schedule_id": "nightly", "instant": NOW},
        snapshot=Snapshot(
            deployment_id="d.default", artifact_id="a", artifact_version=1, inputs={"n": 1}
        ),
        created_at=NOW,
        updated_at=NOW,
        attempt=0,
    )


def test_revised_is_model_copy_with_the_changes() -> None:
    record = _admitted()
    changes = {
        "status": "running",
        "attempt": 1,
        "executing": ExecutingMark(attempt=1, kind="start", since=LATER),
        "progress": Progress(node="emit", state={}, steps=0),
        "updated_at": LATER,
    }
    fast = revised(record, changes)
    slow = record.model_copy(update=changes)
    assert fast == slow
    assert fast.model_dump_json() == slow.model_dump_json()
    assert fast.model_fields_set == slow.model_fields_set
    # The original is untouched, and the copy is as frozen as it.
    assert record.status == "admitted" and record.executing is None
    with pytest.raises(ValueError, match="frozen"):
        fast.status = "failed"  # type: ignore[misc]


def test_assembled_is_model_construct_of_every_field() -> None:
    fast = assembled(
        ExecutingMark, attempt=1, kind="start", since=LATER, stopped=None, server="srv-1"
    )
    slow = ExecutingMark.model_construct(attempt=1, kind="start", since=LATER, server="srv-1")
    assert fast == slow
    assert (
        fast.model_dump_json()
        == slow.model_dump_json()
        == ('{"attempt":1,"kind":"start","since":"2026-03-02T09:00:01.000250Z","server":"srv-1"}')
    )
    checkpoint = Checkpoint(
        attempt=1, status="completed", node="__end__", state={"x": 1}, steps=1, at=LATER
    )
    progress = assembled(Progress, node=checkpoint.node, state=checkpoint.state, steps=1)
    assert progress == Progress(node="__end__", state={"x": 1}, steps=1)


def test_assembled_refuses_a_missing_or_unknown_field() -> None:
    # A default left out would be a record missing a key, not the default.
    with pytest.raises(TypeError, match="exactly the fields"):
        assembled(ExecutingMark, attempt=1, kind="start", since=LATER)
    with pytest.raises(TypeError, match="exactly the fields"):
        assembled(Progress, node="n", state={}, steps=0, extra=1)


def test_record_json_is_model_dump_json_encoded() -> None:
    admitted = _admitted()
    running = revised(
        admitted,
        {
            "status": "running",
            "attempt": 1,
            "executing": assembled(
                ExecutingMark, attempt=1, kind="start", since=LATER, stopped=None, server=None
            ),
            "progress": Progress(node="emit", state={"text": 'é \u2028 "q"'}, steps=0),
            "updated_at": LATER,
        },
    )
    completed = revised(
        running,
        {
            "status": "completed",
            "executing": None,
            "checkpoint": Checkpoint(
                attempt=1, status="completed", node="__end__", state={"f": 1.5}, steps=1, at=LATER
            ),
            "output": {"nested": [1, None, True, "ü"]},
        },
    )
    for record in (admitted, running, completed):
        assert record_json(record) == record.model_dump_json().encode("utf-8")
        assert RunRecord.model_validate_json(record_json(record)) == record
