"""`HistoryStore.append_transition` puts its row together without the general
encoder: it must be the canonical row of `TransitionAppend.build`, byte for
byte, whatever the reason, run id and instants, and read back the same."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shell.durable import GroupCommit
from shell.history_appends import TransitionAppend
from shell.history_store import HistoryStore
from shell.store_format import encode_json_line
from tests.shell.history_helpers import SNAPSHOT, SchedulePaths, create

instants = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
# Any text: quotes, backslashes, control characters, non-ASCII and lone
# surrogates all need escaping in canonical JSON.
texts = st.text(max_size=12)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    instant=instants,
    late=st.integers(min_value=0, max_value=10**9),
    admitted_run=st.none() | texts,
    status=st.sampled_from(["running", "interrupted", "completed", "failed", "exhausted"]),
    reason=st.none() | texts,
    by_seq=st.booleans(),
)
def test_the_transition_row_is_the_canonical_row_byte_for_byte(
    instant: datetime,
    late: int,
    admitted_run: str | None,
    status: str,
    reason: str | None,
    by_seq: bool,
) -> None:
    recorded_at = instant + timedelta(microseconds=late)
    # A run id the admission did not name is attached by the transition.
    run_id = "run-000007" if admitted_run is None else admitted_run
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        create(root, "s1")
        history = HistoryStore(root)
        seq = history.append_decision(
            "s1",
            instant=instant,
            status="admitted",
            recorded_at=instant,
            run_id=admitted_run,
            revision=1,
            snapshot=SNAPSHOT,
        )
        before = SchedulePaths(root, "s1").history.read_bytes()
        current = history._owned("s1").state.open[seq]
        expected = encode_json_line(
            TransitionAppend.of(
                status=status,
                recorded_at=recorded_at,
                seq=seq,
                run_id=run_id,
                reason=reason,
            ).build(current)
        )
        with GroupCommit() as batch:
            history.append_transition(
                "s1",
                status=status,
                recorded_at=recorded_at,
                run_id=run_id,
                reason=reason,
                batch=batch,
                **({"seq": seq} if by_seq else {"instant": instant}),
            )
        written = SchedulePaths(root, "s1").history.read_bytes()
        assert written == before + expected
        (row,) = HistoryStore(root).page("s1", limit=5)[0]
        kept = history.page("s1", limit=5)[0][0]
    assert row == kept
    assert row["status"] == status
    assert row["run_id"] == run_id
    assert row.get("reason") == reason
