"""`HistoryStore.stage_admitted`, the scheduler's fast path for admissions:
the very row `append_decision` writes, byte for byte, and the same refusals."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import InvalidInput, InvalidState
from shell.durable import GroupCommit
from shell.history_store import HistoryStore
from tests.shell.history_helpers import SNAPSHOT, SchedulePaths, create, minute

json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)
instants = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


def _write_both(
    root: Path, instant: datetime, recorded_at: datetime, run_id: str, snapshot: dict[str, Any]
) -> tuple[bytes, bytes, list[dict[str, Any]], list[dict[str, Any]]]:
    create(root, "general", "fast")
    history = HistoryStore(root)
    with GroupCommit() as batch:
        history.append_decision(
            "general",
            instant=instant,
            status="admitted",
            recorded_at=recorded_at,
            run_id=run_id,
            revision=snapshot["revision"],
            snapshot=snapshot,
            batch=batch,
        )
        history.stage_admitted(
            "fast",
            instant=instant,
            run_id=run_id,
            snapshot=snapshot,
            recorded_at=recorded_at,
            batch=batch,
        )
    reread = HistoryStore(root)
    return (
        SchedulePaths(root, "general").history.read_bytes(),
        SchedulePaths(root, "fast").history.read_bytes(),
        reread.page("general", limit=5)[0],
        reread.page("fast", limit=5)[0],
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    instant=instants,
    late=st.integers(min_value=0, max_value=10**9),
    run_id=st.text(max_size=12),
    deployment=st.text(min_size=1, max_size=10),
    inputs=st.dictionaries(st.text(max_size=6), json_values, max_size=3),
    max_steps=st.none() | st.integers(min_value=1, max_value=10**6),
    revision=st.integers(min_value=1, max_value=10**6),
)
def test_the_fast_row_is_the_general_row_byte_for_byte(
    instant: datetime,
    late: int,
    run_id: str,
    deployment: str,
    inputs: dict[str, Any],
    max_steps: int | None,
    revision: int,
) -> None:
    snapshot = {
        "deployment_id": deployment,
        "inputs": inputs,
        "max_steps": max_steps,
        "revision": revision,
    }
    recorded_at = instant + timedelta(microseconds=late)
    with tempfile.TemporaryDirectory() as tmp:
        general, fast, general_page, fast_page = _write_both(
            Path(tmp), instant, recorded_at, run_id, snapshot
        )
    assert fast == general
    assert fast_page == general_page


@pytest.fixture
def history(store_root: Path) -> HistoryStore:
    create(store_root, "s1")
    return HistoryStore(store_root)


@pytest.mark.parametrize(
    ("arguments", "fields"),
    [
        ({"instant": datetime(2024, 1, 1, 0, 5)}, ["instant"]),  # naive
        ({"recorded_at": "2024-01-01T00:05:00Z"}, ["recorded_at"]),  # text, not an instant
        ({"run_id": 7}, ["run_id"]),
        ({"snapshot": {**SNAPSHOT, "inputs": {"x": float("nan")}}}, ["snapshot"]),
        ({"snapshot": {**SNAPSHOT, "revision": 0}}, ["snapshot"]),
        ({"snapshot": {"deployment_id": "d"}}, ["snapshot"]),
        ({"run_id": None, "snapshot": None}, ["run_id", "snapshot"]),
    ],
)
def test_bad_arguments_are_refused_naming_each_field_and_nothing_is_staged(
    history: HistoryStore, store_root: Path, arguments: dict[str, Any], fields: list[str]
) -> None:
    call: dict[str, Any] = {
        "instant": minute(5),
        "run_id": "run-1",
        "snapshot": SNAPSHOT,
        "recorded_at": minute(5),
        **arguments,
    }
    batch = GroupCommit()
    with pytest.raises(InvalidInput) as caught:
        history.stage_admitted("s1", batch=batch, **call)
    assert [p.field for p in caught.value.problems] == fields
    assert len(batch) == 0
    batch.commit()
    assert history.occurrence_count("s1") == 0
    assert not SchedulePaths(store_root, "s1").history.exists()


def test_an_instant_not_after_the_last_decision_is_refused(history: HistoryStore) -> None:
    with GroupCommit() as batch:
        history.stage_admitted(
            "s1",
            instant=minute(5),
            run_id="r1",
            snapshot=SNAPSHOT,
            recorded_at=minute(5),
            batch=batch,
        )
    with pytest.raises(InvalidState, match="not after the previous decision"):
        history.stage_admitted(
            "s1",
            instant=minute(5),
            run_id="r2",
            snapshot=SNAPSHOT,
            recorded_at=minute(6),
            batch=GroupCommit(),
        )
    assert [o.run_id for o in history.open_occurrences("s1")] == ["r1"]
