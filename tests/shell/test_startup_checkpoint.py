"""The startup checkpoint file and the history state it carries (the service's
use of it is in tests/service/test_startup_checkpoint.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shell.history_store import HistoryStore
from shell.startup_checkpoint import (
    CHECKPOINT_FILE,
    CachedSchedule,
    file_identities,
    identities_text,
    read_startup_checkpoint,
    settled,
    take_startup_checkpoint,
    write_startup_checkpoint,
)
from shell.store_format import ScheduleFiles

from .history_helpers import create, decide, minute

SECOND = 10**9


def _entry(records: str = '[{"seq": 1}]') -> CachedSchedule:
    return CachedSchedule("1:2:3:4,-,-,-,-", records, "null", "[0, 0, 0, null, []]")


def test_a_written_checkpoint_reads_back_at_every_start_until_replaced(tmp_path: Path) -> None:
    """A start that dies before the running scheduler writes the next one
    leaves the next start this one to go by."""
    entries = {"b": _entry(), "a": _entry('[{"seq": 1}, {"seq": 2}]')}
    write_startup_checkpoint(tmp_path, entries)
    assert read_startup_checkpoint(tmp_path) == entries
    assert read_startup_checkpoint(tmp_path) == entries
    write_startup_checkpoint(tmp_path, {"a": _entry()})
    assert read_startup_checkpoint(tmp_path) == {"a": _entry()}


def test_where_the_run_records_stood_reads_back_with_the_entries(tmp_path: Path) -> None:
    entries = {"a": _entry()}
    write_startup_checkpoint(tmp_path, entries, runs_checked_at="run-log@7:123")
    assert take_startup_checkpoint(tmp_path) == (entries, "run-log@7:123")
    write_startup_checkpoint(tmp_path, entries)  # a checkpoint that does not say
    assert take_startup_checkpoint(tmp_path) == (entries, None)


def test_a_checkpoint_whose_runs_position_is_no_text_is_ignored(tmp_path: Path) -> None:
    write_startup_checkpoint(tmp_path, {"a": _entry()})
    path = tmp_path / CHECKPOINT_FILE
    header, body = path.read_bytes().split(b"\n", 1)
    path.write_bytes(header[:-1] + b', "runs_checked_at": 7}\n' + body)
    assert take_startup_checkpoint(tmp_path) == ({}, None)
    assert not path.exists()  # removed: the next start does not warn again


@pytest.mark.parametrize(
    ("now", "kept"),
    [
        ("1:2:3:4,-,-,10:500:1:1,-", True),  # unchanged
        ("1:2:3:4,-,-,10:700:2:2,-", True),  # appended to
        ("1:2:3:4,-,-,10:400:2:2,-", False),  # shorter
        ("1:2:3:4,-,-,11:900:2:2,-", False),  # another file
        ("1:2:3:4,-,-,-,-", False),  # gone
        ("1:2:3:4,-,-,10:x:2:2,-", False),  # not an identity
        ("1:2:3:4,-,-", False),  # not the same files
    ],
)
def test_a_history_is_kept_when_it_is_the_same_file_at_most_appended_to(
    now: str, kept: bool
) -> None:
    entry = CachedSchedule("1:2:3:4,-,-,10:500:1:1,-", "[]", "null", "[]")
    assert entry.history_kept(now) is kept
    assert CachedSchedule("1:2:3:4,-,-,-,-", "[]", "null", "[]").history_kept("1:2:3:4,-,-,-,-")


def test_entry_parts_decode_together_and_refuse_the_wrong_shapes() -> None:
    assert _entry().parts() == (({"seq": 1},), None, [0, 0, 0, None, []])
    with pytest.raises(ValueError, match="lifecycle records"):
        CachedSchedule("", "[1]", "null", "[]").parts()
    with pytest.raises(ValueError, match="runtime record"):
        CachedSchedule("", "[]", "[]", "[]").parts()
    with pytest.raises(ValueError, match="history state"):
        CachedSchedule("", "[]", "null", "{}").parts()


def test_identities_change_with_a_write_and_are_kept_as_text(tmp_path: Path) -> None:
    create(tmp_path, "s1")
    files = ScheduleFiles.of(tmp_path, "s1")
    before = file_identities(files)
    assert before[0] is not None and before[3] is None  # a lifecycle log, no history yet
    text = identities_text(before)
    assert text.split(",")[3] == "-"
    assert text.split(",")[0] == ":".join(map(str, before[0]))
    history = HistoryStore(tmp_path)
    decide(history, "s1", 0)
    after = file_identities(files)
    assert after[3] is not None and after[:3] == before[:3]


def test_files_others_write_are_trusted_only_once_settled() -> None:
    now = time.time_ns()
    old = (1, 10, now - 5 * SECOND, now - 5 * SECOND)
    fresh = (1, 10, now - 5 * SECOND, now - SECOND // 100)  # metadata changed 10 ms ago
    assert settled((old, old, fresh, fresh, fresh), now)  # only the first two are others'
    assert settled((None, old, None, None, None), now)
    assert not settled((fresh, old, old, old, old), now)
    assert not settled((old, fresh, old, old, old), now)


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["skipped-misfire", "admitted"]), st.booleans()),
        min_size=0,
        max_size=12,
    )
)
def test_an_adopted_history_is_the_one_recovery_reads(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, bool]]
) -> None:
    """Whatever the history (open and closed occurrences), adopting its export
    gives what recovering it from the files gives, and appends after either
    land the same."""
    root = tmp_path_factory.mktemp("adopt")
    create(root, "s1")
    writer = HistoryStore(root)
    writer.recover("s1")  # as the scheduler's start does
    for i, (status, finish) in enumerate(steps):
        decide(writer, "s1", i, status)
        if status == "admitted":
            writer.append_transition(
                "s1", seq=i, status="running", run_id=f"run-{i}", recorded_at=minute(i)
            )
            if finish:
                writer.append_transition("s1", seq=i, status="completed", recorded_at=minute(i))
    writer.publish()
    exported = writer.export_state("s1")
    assert exported is not None

    adopted, recovered = HistoryStore(root), HistoryStore(root)
    assert adopted.adopt_state("s1", exported) == recovered.recover("s1")
    assert adopted.export_state("s1") == recovered.export_state("s1") == exported

    decide(adopted, "s1", len(steps), "admitted")
    fresh = HistoryStore(root)
    rows, _ = fresh.page("s1", limit=100)
    assert [row["seq"] for row in rows] == list(range(len(steps) + 1))
    assert fresh.recover("s1").open_occurrences[-1].seq == len(steps)


def test_export_refuses_what_is_not_published(tmp_path: Path) -> None:
    create(tmp_path, "s1")
    history = HistoryStore(tmp_path)
    assert history.export_state("s1") is None  # not loaded
    decide(history, "s1", 0)
    # The row is past the index's published checkpoint: a load would replay it.
    assert history.export_state("s1") is None
    history.publish()
    assert history.export_state("s1") is not None
    # An index header that is not the held state's checkpoint (another writer).
    index = Path(ScheduleFiles.of(tmp_path, "s1").history_index)
    index.write_bytes(b"\0" * index.stat().st_size)
    assert history.export_state("s1") is None


@pytest.mark.parametrize(
    "exported",
    [
        [0, 0, 0],  # too short
        ["0", 0, 0, None, []],  # not integers
        [10, 1, 1, None, [[5] + [None] * 12]],  # an open seq past the count
        [10, 1, 1, None, [[0, "x"]]],  # an open occurrence of the wrong shape
    ],
)
def test_a_malformed_export_is_refused_and_nothing_adopted(
    tmp_path: Path, exported: list[object]
) -> None:
    create(tmp_path, "s1")
    history = HistoryStore(tmp_path)
    with pytest.raises((ValueError, TypeError)):
        history.adopt_state("s1", exported)
    assert history.export_state("s1") is None
