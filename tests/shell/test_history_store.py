"""History store: paging, append rules, recovery, index rebuild, damage, load cost."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from core.errors import InvalidInput, InvalidState, NotFound
from shell import history_index
from shell.disk import OsDisk
from shell.durable import GroupCommit
from shell.history_index import ENTRY_SIZE, HEADER_SIZE, Checkpoint
from shell.history_store import HistoryStore
from shell.journal import CommitJournal, journal_supported
from shell.store_format import StoreDamaged
from tests.shell.history_helpers import (
    SNAPSHOT,
    SchedulePaths,
    all_rows,
    create,
    decide,
    minute,
    move,
)


@pytest.fixture
def history(store_root: Path) -> HistoryStore:
    create(store_root, "s1", "s2")
    return HistoryStore(store_root)


def _files(root: Path, schedule_id: str = "s1") -> SchedulePaths:
    return SchedulePaths(root, schedule_id)


def _build(history: HistoryStore, n: int, schedule_id: str = "s1") -> None:
    """n occurrences in one batch: every 10th admitted and completed later."""
    with GroupCommit() as batch:
        for i in range(n):
            decide(
                history,
                schedule_id,
                i,
                "admitted" if i % 10 == 0 else "skipped-overlap",
                batch=batch,
            )
    with GroupCommit() as batch:
        for i in range(0, n, 10):
            move(history, schedule_id, i, "completed", run_id=f"run-{i}", batch=batch)


# --- paging -----------------------------------------------------------------------------------


def test_pages_walk_every_occurrence_once_oldest_first(history: HistoryStore) -> None:
    _build(history, 250)
    first, cursor = history.page("s1", limit=100)
    assert [r["seq"] for r in first] == list(range(100))
    middle, cursor2 = history.page("s1", limit=100, cursor=cursor)
    assert [r["seq"] for r in middle] == list(range(100, 200))
    last, end = history.page("s1", limit=100, cursor=cursor2)
    assert [r["seq"] for r in last] == list(range(200, 250))
    assert end is None
    assert cursor is not None and cursor2 is not None and cursor != cursor2
    # The same cursor gives the same page (cursors are stable).
    assert history.page("s1", limit=100, cursor=cursor) == (middle, cursor2)
    rows = all_rows(history, "s1", limit=7)
    assert [r["seq"] for r in rows] == list(range(250))


def test_page_entry_shows_latest_status_and_decision_fields(history: HistoryStore) -> None:
    decide(history, "s1", 0, "admitted", revision=3)
    move(history, "s1", 0, "running", run_id="run-000001")
    move(history, "s1", 0, "interrupted")
    move(history, "s1", 0, "running")
    move(history, "s1", 0, "failed", reason="boom")
    decide(history, "s1", 1, "skipped-overlap", reason="run-000001 still active")
    rows, cursor = history.page("s1", limit=10)
    assert cursor is None
    assert rows == [
        {
            "seq": 0,
            "instant": "2024-01-01T00:00:00Z",
            "status": "failed",
            "run_id": "run-000001",
            "reason": "boom",
            "count": 1,
            "first_instant": None,
            "last_instant": None,
            "revision": 3,
            "decided_at": "2024-01-01T00:00:00Z",
            "updated_at": "2024-01-01T00:00:30Z",
            "origin": "schedule",
        },
        {
            "seq": 1,
            "instant": "2024-01-01T00:01:00Z",
            "status": "skipped-overlap",
            "run_id": None,
            "reason": "run-000001 still active",
            "count": 1,
            "first_instant": None,
            "last_instant": None,
            "revision": None,
            "decided_at": "2024-01-01T00:01:00Z",
            "updated_at": "2024-01-01T00:01:00Z",
            "origin": "schedule",
        },
    ]


def test_coalesced_row_pages_with_count_and_range(history: HistoryStore) -> None:
    history.append_decision(
        "s1",
        instant=minute(9),
        status="coalesced",
        count=10,
        first_instant=minute(0),
        last_instant=minute(9),
        recorded_at=minute(20),
    )
    decide(history, "s1", 10, "superseded")
    rows, _ = history.page("s1", limit=5)
    assert [(r["instant"], r["count"], r["first_instant"], r["last_instant"]) for r in rows] == [
        ("2024-01-01T00:09:00Z", 10, "2024-01-01T00:00:00Z", "2024-01-01T00:09:00Z"),
        ("2024-01-01T00:10:00Z", 1, None, None),
    ]
    # An instant inside a recorded range is already decided.
    with pytest.raises(InvalidState, match="not after the previous decision"):
        decide(history, "s1", 5)


def test_empty_history_and_unknown_schedule(history: HistoryStore) -> None:
    assert history.page("s1", limit=1) == ([], None)
    with pytest.raises(NotFound):
        history.page("ghost", limit=1)


@pytest.mark.parametrize("limit", [0, 101, -1, True, "5", 2.0, None])
def test_limit_must_be_1_to_100(history: HistoryStore, limit: Any) -> None:
    with pytest.raises(InvalidInput) as caught:
        history.page("s1", limit=limit)
    assert [p.field for p in caught.value.problems] == ["limit"]


def test_limit_bounds_are_inclusive(history: HistoryStore) -> None:
    _build(history, 120)
    assert len(history.page("s1", limit=1)[0]) == 1
    assert len(history.page("s1", limit=100)[0]) == 100


def test_invalid_cursors_name_the_cursor(history: HistoryStore) -> None:
    _build(history, 30)
    decide(history, "s2", 0)
    decide(history, "s2", 1)
    _, other = history.page("s2", limit=1)
    _, mine = history.page("s1", limit=10)
    assert other is not None and mine is not None
    bad = ["", "not a cursor", "!!!!", mine[:-2], mine + "AA", other, 12]
    for cursor in bad:
        with pytest.raises(InvalidInput) as caught:
            history.page("s1", limit=10, cursor=cursor)  # type: ignore[arg-type]
        assert [p.field for p in caught.value.problems] == ["cursor"], cursor
    # Both problems at once when both are bad.
    with pytest.raises(InvalidInput) as caught:
        history.page("s1", limit=0, cursor="junk")
    assert [p.field for p in caught.value.problems] == ["limit", "cursor"]


def test_cursor_past_the_end_is_refused(history: HistoryStore, store_root: Path) -> None:
    _build(history, 30)
    _, cursor = history.page("s1", limit=29)
    assert cursor is not None
    # A cursor issued by a longer history of the same schedule (a forgery here).
    from shell.history_store import _encode_cursor

    with pytest.raises(InvalidInput, match="past the end"):
        history.page("s1", limit=10, cursor=_encode_cursor("s1", 31))
    assert history.page("s1", limit=10, cursor=_encode_cursor("s1", 30)) == ([], None)


# --- append rules ---------------------------------------------------------------------------------


def test_seq_is_dense_and_open_occurrences_are_tracked(history: HistoryStore) -> None:
    assert decide(history, "s1", 0, "admitted") == 0
    assert decide(history, "s1", 1) == 1
    assert decide(history, "s1", 2, "admitted") == 2
    assert move(history, "s1", 0, "running", run_id="run-1") == 0
    opened = history.open_occurrences("s1")
    assert [(o.seq, o.instant, o.status, o.run_id) for o in opened] == [
        (0, "2024-01-01T00:00:00Z", "running", "run-1"),
        (2, "2024-01-01T00:02:00Z", "admitted", None),
    ]
    assert opened[0].snapshot == SNAPSHOT
    found = history.open_occurrence("s1", "2024-01-01T00:02:00+00:00")
    assert found is not None and found.seq == 2
    assert history.open_occurrence("s1", minute(1)) is None
    assert history.last_decided_instant("s1") == "2024-01-01T00:02:00Z"
    assert history.occurrence_count("s1") == 3
    move(history, "s1", 0, "completed")
    assert [o.seq for o in history.open_occurrences("s1")] == [2]


def test_transition_by_seq_attaches_run_id_and_is_idempotent(
    history: HistoryStore, store_root: Path
) -> None:
    decide(history, "s1", 0, "admitted")
    history.append_transition("s1", seq=0, status="admitted", run_id="run-7", recorded_at=minute(1))
    size = _files(store_root).history.stat().st_size
    # Nothing new: no row.
    history.append_transition("s1", seq=0, status="admitted", recorded_at=minute(1))
    history.append_transition("s1", seq=0, status="admitted", run_id="run-7", recorded_at=minute(1))
    assert _files(store_root).history.stat().st_size == size
    history.append_transition("s1", seq=0, status="running", recorded_at=minute(2))
    last = json.loads(_files(store_root).history.read_bytes().splitlines()[-1])
    # A transition row carries the run id once it is known.
    assert last == {
        "seq": 0,
        "update": True,
        "instant": "2024-01-01T00:00:00Z",
        "status": "running",
        "run_id": "run-7",
        "recorded_at": "2024-01-01T00:02:00Z",
    }


WRITER_REFUSALS = [
    ("backwards", "running", "admitted", "went backwards"),
    ("other run", "running", "running:run-2", "run id changed"),
]


def test_writer_refuses_contradictions(history: HistoryStore, store_root: Path) -> None:
    decide(history, "s1", 0, "admitted")
    move(history, "s1", 0, "running", run_id="run-1")
    size = _files(store_root).history.stat().st_size
    with pytest.raises(InvalidState, match="went backwards"):
        move(history, "s1", 0, "admitted")
    with pytest.raises(InvalidState, match="run id changed"):
        move(history, "s1", 0, "interrupted", run_id="run-2")
    move(history, "s1", 0, "completed")
    with pytest.raises(InvalidState, match="no open occurrence"):
        move(history, "s1", 0, "running")
    with pytest.raises(InvalidState, match="no open occurrence"):
        history.append_transition("s1", seq=9, status="running", recorded_at=minute(1))
    with pytest.raises(InvalidState, match="not after the previous decision"):
        decide(history, "s1", 0)
    decide(history, "s1", 1, "skipped-overlap")
    with pytest.raises(InvalidState, match="no open occurrence"):
        move(history, "s1", 1, "running")
    assert _files(store_root).history.stat().st_size > size


def test_malformed_rows_name_each_field(history: HistoryStore) -> None:
    with pytest.raises(InvalidInput) as caught:
        history.append_decision(
            "s1",
            instant="2024-01-01T00:00:00",
            status="pending",
            recorded_at="later",
            count=0,
            run_id=5,  # type: ignore[arg-type]
        )
    assert [p.field for p in caught.value.problems] == [
        "instant",
        "recorded_at",
        "status",
        "count",
        "run_id",
    ]
    with pytest.raises(InvalidInput) as caught:
        history.append_decision("s1", instant=minute(0), status="admitted", recorded_at=minute(0))
    assert [p.field for p in caught.value.problems] == ["snapshot"]
    with pytest.raises(InvalidInput) as caught:
        history.append_decision(
            "s1", instant=minute(0), status="skipped-misfire", recorded_at=minute(0), count=3
        )
    assert [p.field for p in caught.value.problems] == ["first_instant"]
    with pytest.raises(InvalidState, match="coalesced row"):  # a span not ending at its instant
        history.append_decision(
            "s1",
            instant=minute(5),
            status="skipped-misfire",
            recorded_at=minute(5),
            count=2,
            first_instant=minute(1),
            last_instant=minute(3),
        )
    with pytest.raises(InvalidInput) as caught:
        history.append_transition("s1", status="done", recorded_at=minute(0))
    assert [p.field for p in caught.value.problems] == ["seq", "status"]
    assert history.occurrence_count("s1") == 0


@pytest.mark.parametrize("value", [float("nan"), object(), {1, 2}])
def test_a_snapshot_that_is_not_json_is_refused_and_nothing_is_staged(
    history: HistoryStore, store_root: Path, value: object
) -> None:
    snapshot = {"deployment_id": "d", "inputs": {"x": value}, "max_steps": None, "revision": 1}
    batch = GroupCommit()
    with pytest.raises(InvalidInput) as caught:
        history.append_decision(
            "s1",
            instant=minute(0),
            status="admitted",
            run_id="run-1",
            recorded_at=minute(0),
            snapshot=snapshot,
            batch=batch,
        )
    assert [p.field for p in caught.value.problems] == ["snapshot"]
    assert len(batch) == 0
    batch.commit()
    decide(history, "s1", 0, "admitted")  # the history took nothing from the refused row
    assert [r["seq"] for r in history.page("s1", limit=10)[0]] == [0]


def test_staged_rows_are_invisible_until_commit(history: HistoryStore, store_root: Path) -> None:
    decide(history, "s1", 0, "admitted")
    batch = GroupCommit()
    decide(history, "s1", 1, "admitted", batch=batch)
    move(history, "s1", 0, "running", run_id="run-1", batch=batch)
    move(history, "s1", 1, "running", run_id="run-2", batch=batch)
    assert [r["status"] for r in history.page("s1", limit=10)[0]] == ["admitted"]
    assert [o.status for o in history.open_occurrences("s1")] == ["admitted"]
    with pytest.raises(RuntimeError, match="another batch"):
        decide(history, "s1", 2, batch=GroupCommit())
    batch.commit()
    assert [r["status"] for r in history.page("s1", limit=10)[0]] == ["running", "running"]
    assert [(o.seq, o.run_id) for o in history.open_occurrences("s1")] == [
        (0, "run-1"),
        (1, "run-2"),
    ]


def test_aborted_batch_writes_nothing(history: HistoryStore, store_root: Path) -> None:
    decide(history, "s1", 0)
    size = _files(store_root).history.stat().st_size
    batch = GroupCommit()
    decide(history, "s1", 1, batch=batch)
    batch.abort()
    assert _files(store_root).history.stat().st_size == size
    assert decide(history, "s1", 1) == 1


def test_one_batch_spans_many_schedules(history: HistoryStore) -> None:
    with GroupCommit() as batch:
        for schedule_id in ("s1", "s2"):
            for i in range(3):
                decide(history, schedule_id, i, batch=batch)
    assert history.occurrence_count("s1") == history.occurrence_count("s2") == 3


# --- recovery -------------------------------------------------------------------------------------


def _restart(root: Path) -> HistoryStore:
    """A new store on the same files: what the next process sees."""
    return HistoryStore(root)


def test_restart_without_clean_close_recovers_everything(
    history: HistoryStore, store_root: Path
) -> None:
    _build(history, 95)
    decide(history, "s1", 200, "admitted")
    move(history, "s1", 200, "running", run_id="run-x")
    decide(history, "s1", 201, "admitted")
    before = all_rows(history, "s1")
    recovered = _restart(store_root).recover("s1")
    assert recovered.problems == ()
    assert recovered.occurrences == 97
    assert recovered.last_decided_instant == "2024-01-01T03:21:00Z"
    assert [(o.seq, o.status, o.run_id) for o in recovered.open_occurrences] == [
        (95, "running", "run-x"),
        (96, "admitted", None),
    ]
    assert recovered.open_occurrences[1].snapshot == SNAPSHOT
    assert not recovered.index_rebuilt
    fresh = _restart(store_root)
    assert all_rows(fresh, "s1") == before


def test_clean_close_leaves_nothing_to_replay(history: HistoryStore, store_root: Path) -> None:
    _build(history, 40)
    assert _restart(store_root).recover("s1").tail_rows > 0
    history.close()
    after = _restart(store_root).recover("s1")
    assert (after.tail_rows, after.tail_bytes, after.occurrences) == (0, 0, 40)


def test_recovered_checkpoint_is_published_by_the_next_commit(
    history: HistoryStore, store_root: Path
) -> None:
    _build(history, 40)
    owner = _restart(store_root)
    assert owner.recover("s1").tail_rows > 0
    owner.sync_recovered()
    decide(owner, "s1", 100)
    # Only the new row is left to replay: the recovered tail is behind the checkpoint.
    assert _restart(store_root).recover("s1").tail_rows == 1


def test_recovery_after_a_crash_rewrites_no_index_entry(
    history: HistoryStore, store_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _build(history, 40)
    decide(history, "s1", 100, "admitted")
    move(history, "s1", 100, "running", run_id="run-1")
    written: list[int] = []
    real_pwrite = os.pwrite

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        written.append(offset)
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    recovered = _restart(store_root).recover("s1")
    # The header lags: it describes the state before the admission (whose
    # entry the running row's commit wrote), so both rows are replayed.
    assert recovered.tail_rows == 2
    assert written == []


def test_index_ahead_of_checkpoint_is_replayed_without_false_alarms(
    history: HistoryStore, store_root: Path
) -> None:
    # Old open occurrences move along in later batches: their index entries
    # are updated after every commit while the header checkpoint lags behind.
    for i in range(5):
        decide(history, "s1", i, "admitted")
    for status in ("running", "interrupted", "running"):
        with GroupCommit() as batch:
            for i in range(5):
                move(history, "s1", i, status, run_id=f"run-{i}", batch=batch)
    with GroupCommit() as batch:
        move(history, "s1", 0, "completed", batch=batch)
        move(history, "s1", 1, "interrupted", batch=batch)
    recovered = _restart(store_root).recover("s1")
    assert recovered.problems == ()
    assert [(o.seq, o.status) for o in recovered.open_occurrences] == [
        (1, "interrupted"),
        (2, "running"),
        (3, "running"),
        (4, "running"),
    ]
    # Appending continues from the recovered state.
    again = _restart(store_root)
    move(again, "s1", 1, "completed")
    assert [o.seq for o in again.open_occurrences("s1")] == [2, 3, 4]
    assert _restart(store_root).recover("s1").problems == ()


def _index_header(root: Path) -> Checkpoint:
    header = Checkpoint.unpack(_files(root).history_index.read_bytes()[:HEADER_SIZE])
    assert isinstance(header, Checkpoint), header
    return header


@pytest.mark.skipif(not journal_supported(), reason="the journal needs syncfs")
def test_a_journaled_batch_publishes_no_index_header_before_a_flush_of_the_filesystem(
    history: HistoryStore, store_root: Path
) -> None:
    """A journaled batch flushes only its journal: the index entries it
    writes may still be in the page cache when the next batch writes the
    header, and a power cut that kept that header but lost an entry write
    would make a finished occurrence look open. The header waits for a flush
    of the whole filesystem (the journal's checkpoint)."""
    journal = CommitJournal(store_root)
    journal.open()
    entry_of_seq_1 = HEADER_SIZE + ENTRY_SIZE

    def wake_up(write: Any) -> None:
        with GroupCommit(journal=journal) as batch:
            write(batch)

    wake_up(lambda b: decide(history, "s1", 0, "admitted", batch=b))  # stays open
    wake_up(lambda b: decide(history, "s1", 1, "admitted", batch=b))
    admitted_entry = _files(store_root).history_index.read_bytes()[entry_of_seq_1:][:ENTRY_SIZE]
    wake_up(lambda b: move(history, "s1", 1, "completed", run_id="run-1", batch=b))
    wake_up(lambda b: decide(history, "s1", 2, batch=b))
    assert _index_header(store_root).count == 0
    # The power cut: the completion's entry write is lost, every other write kept.
    with _files(store_root).history_index.open("r+b") as index:
        index.seek(entry_of_seq_1)
        index.write(admitted_entry)
    journal.close_file()
    recovered = _restart(store_root).recover("s1")
    assert [(o.seq, o.status) for o in recovered.open_occurrences] == [(0, "admitted")]
    assert recovered.problems == ()

    # After the journal's checkpoint, the next batch publishes what was flushed.
    owner = _restart(store_root)
    owner.recover("s1")
    owner.sync_recovered()
    journal = CommitJournal(store_root)
    journal.open()
    wake_up(lambda b: decide(owner, "s1", 3, batch=b))
    journal.checkpoint()
    wake_up(lambda b: decide(owner, "s1", 4, batch=b))
    assert _index_header(store_root).count == 4


INDEX_DAMAGE = [
    ("deleted", lambda p: p.unlink()),
    ("truncated to half", lambda p: os.truncate(p, p.stat().st_size // 2)),
    ("truncated to nothing", lambda p: os.truncate(p, 0)),
    ("header garbage", lambda p: p.write_bytes(b"\xff" * 64 + p.read_bytes()[64:])),
    (
        "entries zeroed",
        lambda p: p.write_bytes(p.read_bytes()[:64] + b"\x00" * (p.stat().st_size - 64)),
    ),
    ("header claims more", lambda p: p.write_bytes(p.read_bytes()[:-32])),
]


@pytest.mark.parametrize(("damage", "apply"), INDEX_DAMAGE, ids=[d for d, _ in INDEX_DAMAGE])
def test_unusable_index_is_rebuilt_from_the_log(
    history: HistoryStore,
    store_root: Path,
    damage: str,
    apply: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _build(history, 60)
    decide(history, "s1", 100, "admitted")
    history.close()
    expected = all_rows(_restart(store_root), "s1")
    apply(_files(store_root).history_index)
    with caplog.at_level(logging.INFO):
        recovered = _restart(store_root).recover("s1")
    assert recovered.index_rebuilt, damage
    assert recovered.problems == ()
    assert recovered.occurrences == 61
    assert [o.seq for o in recovered.open_occurrences] == [60]
    assert "rebuilding it from the log" in caplog.text
    assert all_rows(_restart(store_root), "s1") == expected
    assert not _restart(store_root).recover("s1").index_rebuilt


def test_readers_without_ownership_page_a_damaged_index_without_writing(
    history: HistoryStore, store_root: Path
) -> None:
    _build(history, 30)
    history.close()
    expected = all_rows(_restart(store_root), "s1")
    index = _files(store_root).history_index
    index.unlink()
    assert all_rows(_restart(store_root), "s1") == expected
    assert not index.exists()


def test_torn_final_line_is_dropped_with_a_warning(
    history: HistoryStore, store_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _build(history, 20)
    log = _files(store_root).history
    intact = log.read_bytes()
    with log.open("ab") as f:
        f.write(b'{"seq":20,"instant":"2024-01-01T00:20:00Z","sta')
    # A reader ignores it and writes nothing.
    assert len(all_rows(_restart(store_root), "s1")) == 20
    assert log.read_bytes() != intact
    with caplog.at_level(logging.WARNING):
        recovered = _restart(store_root).recover("s1")
    assert recovered.problems == ()
    assert recovered.dropped_torn_bytes == 47
    assert "torn final line" in caplog.text
    assert log.read_bytes() == intact
    owner = _restart(store_root)
    assert decide(owner, "s1", 20) == 20
    assert _restart(store_root).recover("s1").problems == ()


def test_a_complete_row_missing_only_its_newline_is_still_torn(
    history: HistoryStore, store_root: Path
) -> None:
    _build(history, 3)
    log = _files(store_root).history
    whole = (
        b'{"instant":"2024-01-01T00:03:00Z","recorded_at":"2024-01-01T00:03:00Z",'
        b'"seq":3,"status":"superseded"}'
    )
    with log.open("ab") as f:
        f.write(whole)
    recovered = _restart(store_root).recover("s1")
    assert recovered.occurrences == 3
    assert recovered.dropped_torn_bytes == len(whole)


# --- damage ------------------------------------------------------------


def _row(**fields: Any) -> bytes:
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def _decision(seq: int, i: int, status: str = "skipped-misfire") -> bytes:
    return _row(
        seq=seq,
        instant=f"2024-01-01T{i // 60:02d}:{i % 60:02d}:00Z",
        status=status,
        recorded_at="2024-01-01T05:00:00Z",
    )


def _transition(seq: int, i: int, status: str, run_id: str | None = None) -> bytes:
    fields: dict[str, Any] = {
        "seq": seq,
        "update": True,
        "status": status,
        "instant": f"2024-01-01T{i // 60:02d}:{i % 60:02d}:00Z",
        "recorded_at": "2024-01-01T05:00:00Z",
    }
    if run_id:
        fields["run_id"] = run_id
    return _row(**fields)


# History before the damage: seq 0..9 at minutes 0..9; seq 8 admitted and
# running (run-8), seq 9 admitted then completed.
LOG_DAMAGE = [
    ("garbage line", b"this is not json\n", "unparseable record", None),
    ("json that is not an object", b"[1,2]\n", "not a JSON object", None),
    ("duplicate decision", _decision(9, 9), "duplicate decision for seq 9", 9),
    ("decision gap", _decision(12, 12), "where seq 10 was expected", 12),
    ("decision out of order", _decision(10, 5), "not after the previous decision", 10),
    (
        "status backwards",
        _transition(8, 8, "admitted", "run-8"),
        "went backwards from running to admitted",
        8,
    ),
    ("duplicate transition", _transition(8, 8, "running", "run-8"), "duplicate running row", 8),
    (
        "transition for unknown seq",
        _transition(42, 42, "running"),
        "transition for unknown seq 42",
        42,
    ),
    (
        "row after terminal",
        _transition(9, 9, "running"),
        "after the terminal completed row of seq 9",
        9,
    ),
    (
        "row after terminal decision",
        _transition(3, 3, "running"),
        "after the terminal skipped-misfire row",
        3,
    ),
    ("other run", _transition(8, 8, "completed", "run-9"), "run id changed from run-8 to run-9", 8),
    ("wrong instant", _transition(8, 7, "completed"), "names instant 2024-01-01T00:07:00Z", 8),
    ("bad status", _decision(10, 10, "pending"), "'pending' is not a decision status", 10),
]


@pytest.mark.parametrize(
    ("name", "line", "reason", "seq"), LOG_DAMAGE, ids=[d[0] for d in LOG_DAMAGE]
)
@pytest.mark.parametrize("clean_close", [True, False], ids=["after-close", "after-crash"])
def test_damaged_rows_are_problems_and_nothing_is_cleared(
    store_root: Path, name: str, line: bytes, reason: str, seq: int | None, clean_close: bool
) -> None:
    create(store_root, "s1", "s2")
    history = HistoryStore(store_root)
    for i in range(8):
        decide(history, "s1", i)
    decide(history, "s1", 8, "admitted")
    move(history, "s1", 8, "running", run_id="run-8")
    decide(history, "s1", 9, "admitted")
    move(history, "s1", 9, "completed", run_id="run-9")
    decide(history, "s2", 0)
    if clean_close:
        history.close()
    log = _files(store_root).history
    lines_before = log.read_bytes().count(b"\n")
    offset = log.stat().st_size
    damaged = log.read_bytes() + line + _decision(11, 11)
    log.write_bytes(damaged)
    before_pages = all_rows(_restart(store_root), "s1")

    owner = _restart(store_root)
    recovered = owner.recover("s1")
    assert len(recovered.problems) == 1, name
    problem = recovered.problems[0]
    where = f"line {lines_before + 1}, byte {offset}"
    assert problem.file == "schedules/s1/history.jsonl"
    assert problem.record == (where if seq is None else f"{where} (seq {seq})")
    assert reason in problem.reason
    # Nothing is cleared: the file is as found, the run stays open, appends are refused.
    assert log.read_bytes() == damaged
    assert [o.seq for o in recovered.open_occurrences] == [8]
    with pytest.raises(StoreDamaged) as caught:
        decide(owner, "s1", 20)
    assert caught.value.data["record"] == problem.record
    assert owner.problems("s1") == recovered.problems
    # Pages still show what precedes the damage, to the owner and to readers.
    assert all_rows(owner, "s1") == before_pages
    assert [r["seq"] for r in before_pages] == list(range(10))
    # Another schedule is unaffected.
    assert owner.recover("s2").problems == ()
    decide(owner, "s2", 1)
    assert log.read_bytes() == damaged


def test_damage_before_the_checkpoint_is_found_by_verify_and_by_pages(
    history: HistoryStore, store_root: Path
) -> None:
    _build(history, 30)
    history.close()
    log = _files(store_root).history
    data = log.read_bytes()
    start = data.index(b'{"instant":"2024-01-01T00:05:00Z"')
    end = data.index(b"\n", start)
    log.write_bytes(data[:start] + b"#" * (end - start) + data[end:])
    # Load is O(tail): damage behind the checkpoint is not re-read there...
    assert _restart(store_root).recover("s1").problems == ()
    # ...a full verification finds it...
    problems = _restart(store_root).verify("s1")
    assert [(p.record, p.reason) for p in problems] == [
        (f"line 6, byte {start}", "unparseable record")
    ]
    # ...and so does a page that reads it.
    reader = _restart(store_root)
    assert len(reader.page("s1", limit=5)[0]) == 5
    _, cursor = reader.page("s1", limit=5)
    with pytest.raises(StoreDamaged) as caught:
        reader.page("s1", limit=5, cursor=cursor)
    assert caught.value.data["file"] == "schedules/s1/history.jsonl"
    assert caught.value.data["record"] == f"line 6, byte {start} (seq 5)"


def _rewrite_in_place(log: Path, old: bytes, new: bytes, *, nth: int = 0) -> int:
    """Replace the `nth` occurrence of `old` by `new` (same length) where it
    lies, as a flipped byte or an edit in place would; returns its offset."""
    assert len(old) == len(new)
    data = log.read_bytes()
    at = -1
    for _ in range(nth + 1):
        at = data.index(old, at + 1)
    log.write_bytes(data[:at] + new + data[at + len(old) :])
    return at


@pytest.mark.parametrize(
    ("old", "new", "nth", "line", "reason"),
    [
        # One byte of an instant: valid JSON, not an instant.
        (b'"2024-01-01T00:05:00Z"', b'"2024-01-01T00:05:0jZ"', 0, 6, "not an ISO-8601 instant"),
        # A decision status no decision row has.
        (b'"skipped-overlap"', b'"skipped-overlaq"', 3, 5, "is not a decision status"),
        # A finished occurrence's latest row rewritten from completed to exhausted.
        (b'"completed"', b'"exhausted"', 1, 32, "index recorded completed"),
        # Seq 12's decision now says it is seq 13's.
        (b'"seq":12,', b'"seq":13,', 0, 13, "not this occurrence's"),
    ],
)
def test_a_page_checks_every_row_it_serves_by_the_row_rules(
    history: HistoryStore,
    store_root: Path,
    old: bytes,
    new: bytes,
    nth: int,
    line: int,
    reason: str,
) -> None:
    """A row behind the index checkpoint changed in place (still JSON) is not
    re-read by a load; a page that would serve it refuses, naming the line."""
    _build(history, 30)
    history.close()
    log = _files(store_root).history
    at = _rewrite_in_place(log, old, new, nth=nth)
    start = log.read_bytes().rfind(b"\n", 0, at) + 1
    damaged = log.read_bytes()
    for reader in (_restart(store_root), history):
        with pytest.raises(StoreDamaged) as caught:
            all_rows(reader, "s1", limit=100)
        assert caught.value.data["file"] == "schedules/s1/history.jsonl"
        assert caught.value.data["record"].startswith(f"line {line}, byte {start} (seq ")
        assert reason in caught.value.data["reason"]
    assert log.read_bytes() == damaged


def test_a_page_that_finds_damage_freezes_the_owned_history(
    history: HistoryStore, store_root: Path
) -> None:
    """The owner's later load would trust the index again; the history stays
    frozen (appends refused) as if the load had found the damage."""
    _build(history, 30)
    history.close()
    log = _files(store_root).history
    _rewrite_in_place(log, b'"2024-01-01T00:05:00Z"', b'"2024-01-01T00:05:0jZ"')
    owner = _restart(store_root)
    assert owner.recover("s1").problems == ()
    with pytest.raises(StoreDamaged) as found:
        all_rows(owner, "s1")
    damaged = log.read_bytes()
    with pytest.raises(StoreDamaged) as refused:
        decide(owner, "s1", 40)
    assert refused.value.problem == found.value.problem
    assert owner.problems("s1") == (found.value.problem,)
    assert log.read_bytes() == damaged


def test_a_load_checks_the_rows_it_takes_from_the_index_by_the_row_rules(
    history: HistoryStore, store_root: Path
) -> None:
    """An open occurrence's row behind the checkpoint, damaged in place, is
    read by the load: it scans the log and names the line."""
    decide(history, "s1", 0, "admitted")
    move(history, "s1", 0, "running", run_id="run-1")
    decide(history, "s1", 1, "skipped-overlap")
    history.close()
    log = _files(store_root).history
    _rewrite_in_place(log, b'"instant":"2024-01-01T00:00:00Z"', b'"instant":"2024-01-01T00:00:0jZ"')
    recovered = _restart(store_root).recover("s1")
    assert [(p.record, p.file) for p in recovered.problems] == [
        ("line 1, byte 0 (seq 0)", "schedules/s1/history.jsonl")
    ]
    assert "not an ISO-8601 instant" in recovered.problems[0].reason


# --- cost --------------------------------------------------------------


class _ReadCounter:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bytes = 0
        real_pread, real_read = os.pread, os.read

        def pread(fd: int, n: int, offset: int) -> bytes:
            data = real_pread(fd, n, offset)
            self.bytes += len(data)
            return data

        def read(fd: int, n: int) -> bytes:
            data = real_read(fd, n)
            self.bytes += len(data)
            return data

        monkeypatch.setattr(os, "pread", pread)
        monkeypatch.setattr(os, "read", read)


def _history_after_crash(root: Path, n: int) -> None:
    """n occurrences, cleanly closed, then two more wake-ups and a crash."""
    create(root, "s1")
    history = HistoryStore(root)
    _build(history, n)
    decide(history, "s1", n, "admitted")
    history.close()
    later = HistoryStore(root)
    decide(later, "s1", n + 1, "admitted")
    move(later, "s1", n, "running", run_id="run-a")
    move(later, "s1", n + 1, "running", run_id="run-b")


def test_recovery_reads_the_tail_not_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small, large = tmp_path / "small", tmp_path / "large"
    _history_after_crash(small, 100)
    _history_after_crash(large, 20_000)
    log_size = _files(large).history.stat().st_size
    counted: dict[str, tuple[int, Any]] = {}
    for name, root in (("small", small), ("large", large)):
        counter = _ReadCounter(monkeypatch)
        recovered = HistoryStore(root).recover("s1")
        counted[name] = (counter.bytes, recovered)
        monkeypatch.undo()
    small_bytes, small_rec = counted["small"]
    large_bytes, large_rec = counted["large"]
    assert large_rec.problems == () and large_rec.occurrences == 20_002
    assert [o.status for o in large_rec.open_occurrences] == ["running", "running"]
    # The header checkpoint lags one commit: only the last wake-up's row is replayed.
    assert large_rec.tail_rows == small_rec.tail_rows == 1
    assert not large_rec.index_rebuilt
    # Same work whatever the history size (only digits of offsets differ).
    assert large_bytes < small_bytes * 1.2
    assert large_bytes < log_size / 500


def test_a_page_reads_o_limit_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _history_after_crash(tmp_path, 20_000)
    owner = HistoryStore(tmp_path)
    owner.recover("s1")
    _, cursor = owner.page("s1", limit=100)
    for _ in range(50):
        _, cursor = owner.page("s1", limit=100, cursor=cursor)
    row_size = 160
    counter = _ReadCounter(monkeypatch)
    rows, _ = owner.page("s1", limit=100, cursor=cursor)
    assert [r["seq"] for r in rows] == list(range(5100, 5200))
    assert counter.bytes < 100 * (32 + 2 * row_size)


# --- entries held for one commit -----------------------------------------------------------------


def _entries_in_file(root: Path) -> int:
    return max(0, (_files(root).history_index.stat().st_size - HEADER_SIZE) // ENTRY_SIZE)


def _header(root: Path) -> Checkpoint:
    header = Checkpoint.unpack(_files(root).history_index.read_bytes()[:HEADER_SIZE])
    assert isinstance(header, Checkpoint)
    return header


def test_an_admission_entry_waits_for_its_end_and_is_written_once(
    history: HistoryStore, store_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    decide(history, "s1", 0, "skipped-misfire")
    assert _entries_in_file(store_root) == 1
    decide(history, "s1", 1, "admitted")
    # Not in the file yet, yet every read sees it.
    assert _entries_in_file(store_root) == 1
    assert [(r["seq"], r["status"]) for r in all_rows(history, "s1")] == [
        (0, "skipped-misfire"),
        (1, "admitted"),
    ]
    assert history.occurrence_at("s1", minute(1)) is not None
    index_writes: list[int] = []
    real_pwrite = os.pwrite
    index_path = str(_files(store_root).history_index)

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        if os.readlink(f"/proc/self/fd/{fd}") == index_path:
            index_writes.append(offset)
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    move(history, "s1", 1, "completed", run_id="run-1")
    # One write of the entry, already terminal (and the header that waited).
    assert HEADER_SIZE + ENTRY_SIZE in index_writes
    assert index_writes.count(HEADER_SIZE + ENTRY_SIZE) == 1
    assert _entries_in_file(store_root) == 2
    assert all_rows(history, "s1")[1]["status"] == "completed"


@pytest.mark.skipif(not journal_supported(), reason="the journal needs syncfs")
def test_a_journaled_commit_that_only_opens_an_occurrence_leaves_the_index_file_closed(
    store_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A disk that keeps no descriptor, as at ten thousand schedules where not
    # all of their files can stay open: every write of the index opens it.
    monkeypatch.setattr("shell.disk._kept_capacity", lambda: 0)
    create(store_root, "s1")
    history = HistoryStore(store_root, disk=OsDisk())
    journal = CommitJournal(store_root)
    journal.open()

    def wake_up(write: Any) -> None:
        with GroupCommit(journal=journal) as batch:
            write(batch)

    wake_up(lambda b: decide(history, "s1", 0, "admitted", batch=b))
    wake_up(lambda b: move(history, "s1", 0, "completed", run_id="run-0", batch=b))
    index_opens: list[str] = []
    real_open = os.open
    index_path = str(_files(store_root).history_index)

    def counting_open(path: Any, *args: Any, **kwargs: Any) -> int:
        if str(path) == index_path:
            index_opens.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_open)
    wake_up(lambda b: decide(history, "s1", 1, "admitted", batch=b))
    # Its entry waits for the run's end, and the header waits for a flush of
    # the filesystem: nothing to write, so the file is not opened.
    assert index_opens == []
    wake_up(lambda b: move(history, "s1", 1, "completed", run_id="run-1", batch=b))
    assert index_opens == [index_path]
    journal.close()
    assert _entries_in_file(store_root) == 2
    assert [r["status"] for r in all_rows(_restart(store_root), "s1")] == ["completed"] * 2


def test_a_crash_with_an_entry_held_replays_its_row(
    history: HistoryStore, store_root: Path
) -> None:
    _build(history, 20)
    history.publish()
    decide(history, "s1", 20, "admitted")
    # The process dies here: the entry was never written, no header covers it.
    assert _entries_in_file(store_root) == 20
    assert _header(store_root).count == 20
    fresh = _restart(store_root)
    recovered = fresh.recover("s1")
    assert recovered.tail_rows == 1
    assert [o.instant for o in recovered.open_occurrences] == ["2024-01-01T00:20:00Z"]
    assert all_rows(fresh, "s1")[20]["status"] == "admitted"
    assert fresh.verify("s1") == ()


def test_publish_writes_held_entries_before_the_header_covers_them(
    history: HistoryStore, store_root: Path
) -> None:
    decide(history, "s1", 0, "admitted")
    assert _entries_in_file(store_root) == 0
    history.publish()
    assert _entries_in_file(store_root) == 1
    assert _header(store_root).count == 1
    after = _restart(store_root).recover("s1")
    assert (after.tail_rows, after.occurrences) == (0, 1)
    assert [o.status for o in after.open_occurrences] == ["admitted"]
    assert history.export_state("s1") is not None


def test_overlapping_runs_still_move_the_header_on(history: HistoryStore, store_root: Path) -> None:
    # Every commit opens an occurrence while the previous one still runs: the
    # header may not cover the newest entries, but it is never more than two
    # commits behind.
    for i in range(6):
        with GroupCommit() as batch:
            decide(history, "s1", i, "admitted", batch=batch)
            if i:
                move(history, "s1", i - 1, "running", run_id=f"run-{i - 1}", batch=batch)
    assert _header(store_root).count >= 4
    recovered = _restart(store_root).recover("s1")
    assert recovered.tail_rows <= 4
    assert recovered.occurrences == 6


# --- the newest trigger in the index header ---------------------------------------------


def test_the_index_header_holds_the_newest_trigger() -> None:
    with_one = Checkpoint(640, 5, 7, 3, minute(4))
    assert Checkpoint.unpack(with_one.pack()) == with_one
    none_yet = Checkpoint(640, 5, 7, 3)
    assert Checkpoint.unpack(none_yet.pack()) == none_yet
    older = Checkpoint.unpack(Checkpoint(640, 5, 7, 3, knows_trigger=False).pack())
    assert isinstance(older, Checkpoint) and not older.knows_trigger


def _history_with_a_trigger_covered_by_the_header(history: HistoryStore, root: Path) -> None:
    decide(history, "s1", 0)
    decide(history, "s1", 5, origin="trigger")
    decide(history, "s1", 6)
    history.close()  # a clean close publishes every header: nothing is replayed
    assert _index_header(root).last_trigger == minute(5)


def test_a_load_through_the_index_knows_the_newest_trigger_from_its_header(
    history: HistoryStore, store_root: Path
) -> None:
    _history_with_a_trigger_covered_by_the_header(history, store_root)
    recovered = _restart(store_root).recover("s1")
    assert not recovered.index_rebuilt
    assert recovered.last_trigger_instant == "2024-01-01T00:05:00Z"
    # So a trigger out of order is refused, as a full scan would refuse it.
    with pytest.raises(InvalidState, match="not after the previous trigger"):
        decide(_restart(store_root), "s1", 4, origin="trigger")


def _as_an_older_version_wrote_it(root: Path) -> Checkpoint:
    """The index header without the newest trigger (its flags zero)."""
    index = _files(root).history_index
    header = _index_header(root)
    older = Checkpoint(
        header.size, header.count, header.lines, header.low_water, knows_trigger=False
    )
    index.write_bytes(older.pack() + index.read_bytes()[HEADER_SIZE:])
    return older


@pytest.mark.parametrize("later_rows", [0, 2])
def test_an_older_index_header_has_its_newest_trigger_found_in_the_log_and_replaced(
    history: HistoryStore, store_root: Path, caplog: pytest.LogCaptureFixture, later_rows: int
) -> None:
    """An upgrade: the index is used as it is (no rebuild, nothing logged
    above INFO), the newest trigger row is searched for from the log's end,
    and the owner's next publish writes a header that holds it."""
    _history_with_a_trigger_covered_by_the_header(history, store_root)
    again = _restart(store_root)
    for i in range(later_rows):  # rows after the trigger, none of them a trigger
        decide(again, "s1", 7 + i)
    again.close()
    _as_an_older_version_wrote_it(store_root)
    with caplog.at_level(logging.INFO):
        owner = _restart(store_root)
        recovered = owner.recover("s1")
    assert not recovered.index_rebuilt
    assert recovered.problems == ()
    assert recovered.last_trigger_instant == "2024-01-01T00:05:00Z"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    owner.sync_recovered()
    owner.close()
    header = _index_header(store_root)
    assert header.knows_trigger and header.last_trigger == minute(5)


def test_an_older_index_header_over_a_log_without_triggers_knows_there_is_none(
    history: HistoryStore, store_root: Path
) -> None:
    decide(history, "s1", 0)
    decide(history, "s1", 1)
    history.close()
    _as_an_older_version_wrote_it(store_root)
    owner = _restart(store_root)
    assert owner.recover("s1").last_trigger_instant is None
    # A trigger now is checked against none: any instant is after it.
    decide(owner, "s1", 2, origin="trigger")
    owner.close()
    assert _index_header(store_root).last_trigger == minute(2)


def test_an_older_index_over_a_log_cut_short_is_still_damage(
    history: HistoryStore, store_root: Path
) -> None:
    """An index from before headers held the newest trigger is used as it
    is, but not when its checkpoint says committed rows are gone."""
    _history_with_a_trigger_covered_by_the_header(history, store_root)
    log = _files(store_root).history
    older = _as_an_older_version_wrote_it(store_root)
    rows = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(rows[:-1]))
    recovered = _restart(store_root).recover("s1")
    assert recovered.index_rebuilt
    assert [p.reason for p in recovered.problems] == [
        f"the log is shorter than its durable checkpoint (it ends at byte"
        f" {older.size - len(rows[-1])}, {older.size} were committed): committed rows are missing"
    ]


@pytest.mark.parametrize("chunk", [37, 200, 1 << 20])
def test_the_newest_trigger_is_found_across_the_search_s_chunks(
    history: HistoryStore, store_root: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    # Rows longer than a chunk, and chunks ending mid-row, mid-mark.
    monkeypatch.setattr(history_index, "_SEARCH_CHUNK", chunk)
    for i in range(12):
        decide(history, "s1", i, origin="trigger" if i in (3, 8) else None)
    decide(history, "s1", 20, "admitted")
    history.close()
    _as_an_older_version_wrote_it(store_root)
    assert _restart(store_root).recover("s1").last_trigger_instant == "2024-01-01T00:08:00Z"


def test_an_unreadable_trigger_row_behind_an_older_header_has_the_index_rebuilt(
    history: HistoryStore, store_root: Path
) -> None:
    _history_with_a_trigger_covered_by_the_header(history, store_root)
    _as_an_older_version_wrote_it(store_root)
    log = _files(store_root).history
    data = log.read_bytes()
    line = data.rfind(b"\n", 0, data.index(b'"origin":"trigger"')) + 1
    log.write_bytes(data[:line] + b"#" + data[line + 1 :])  # same length, not JSON
    recovered = _restart(store_root).recover("s1")
    assert recovered.index_rebuilt
    assert recovered.problems  # the rebuild reads the row and reports it
