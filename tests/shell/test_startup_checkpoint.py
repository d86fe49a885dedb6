"""The startup checkpoint file and the history state it carries (the service's
use of it is in tests/service/test_startup_checkpoint.py)."""

from __future__ import annotations

import json
import logging
import os
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shell.history_store import HistoryStore
from shell.startup_checkpoint import (
    CHECKPOINT_FILE,
    CachedSchedule,
    CheckpointFile,
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


def _ten() -> dict[str, CachedSchedule]:
    # Entries of about the size a schedule's are (its lifecycle records).
    return {f"s{n}": _entry(_records(n)) for n in range(10)}


def _records(seq: int) -> str:
    return json.dumps([{"seq": seq, "padding": "x" * 500}])


def _sections(path: Path) -> list[dict[str, object]]:
    """The headers of the sections after the base."""
    data = path.read_bytes()
    header = data.partition(b"\n")[0]
    end = len(header) + 1 + json.loads(header)["bytes"]
    found = []
    while end < len(data):
        line, _, _ = data[end:].partition(b"\n")
        found.append(json.loads(line))
        end += len(line) + 1 + found[-1]["bytes"]
    return found


def test_a_running_checkpoint_appends_only_what_changed(tmp_path: Path) -> None:
    """Changed, added and removed entries, and where the run records stood,
    go into a section after the file as it was; the read gives what a whole
    rewrite would have written."""
    path = tmp_path / CHECKPOINT_FILE
    first = _ten()
    written = write_startup_checkpoint(tmp_path, first, runs_checked_at="run-log@1:10")
    base = path.read_bytes()
    second = dict(first)  # the kept entries are the same objects
    second["s3"] = _entry(_records(33))
    second["s10"] = _entry(_records(10))
    del second["s7"]
    written = write_startup_checkpoint(tmp_path, second, written=written)
    data = path.read_bytes()
    assert data.startswith(base)
    assert [s["lines"] for s in _sections(path)] == [3]
    assert take_startup_checkpoint(tmp_path) == (second, None)  # the section says no position
    assert written.entries is second and written.size == len(data)
    third = dict(second)
    third["s3"] = _entry()
    write_startup_checkpoint(tmp_path, third, runs_checked_at="run-log@1:99", written=written)
    assert [s["lines"] for s in _sections(path)] == [3, 1]
    assert take_startup_checkpoint(tmp_path) == (third, "run-log@1:99")


def test_nothing_is_written_when_nothing_changed(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE
    entries = _ten()
    written = write_startup_checkpoint(tmp_path, entries, runs_checked_at="run-log@1:10")
    before = path.stat()
    equal = {key: CachedSchedule(*entry) for key, entry in entries.items()}  # equal, not the same
    again = write_startup_checkpoint(
        tmp_path, equal, runs_checked_at="run-log@1:10", written=written
    )
    assert again == written
    assert path.stat().st_mtime_ns == before.st_mtime_ns and path.stat().st_size == before.st_size


def test_the_file_is_rewritten_whole_once_the_sections_would_pass_half_the_base(
    tmp_path: Path,
) -> None:
    path = tmp_path / CHECKPOINT_FILE
    entries = _ten()
    written = write_startup_checkpoint(tmp_path, entries)
    rewrites = 0
    for n in range(10):
        entries = {**entries, f"s{n}": _entry(_records(n + 100))}
        written = write_startup_checkpoint(tmp_path, entries, written=written)
        assert take_startup_checkpoint(tmp_path).entries == entries
        appended = written.size - written.base_size
        assert appended <= written.base_size // 2
        assert bool(_sections(path)) == (appended > 0)
        rewrites += appended == 0
    # A tenth changed each time: about four sections fit under half the base.
    assert rewrites == 2
    # Every entry changed at once: rewritten whole.
    changed = {key: _entry(_records(200)) for key in entries}
    written = write_startup_checkpoint(tmp_path, changed, written=written)
    assert written.size == written.base_size and not _sections(path)
    assert read_startup_checkpoint(tmp_path) == changed


def test_a_file_replaced_since_it_was_written_is_rewritten_whole(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE
    entries = _ten()
    written = write_startup_checkpoint(tmp_path, entries)
    path.unlink()  # an operator's, or a start's removal of a damaged one
    changed = {**entries, "s1": _entry()}
    written = write_startup_checkpoint(tmp_path, changed, written=written)
    assert read_startup_checkpoint(tmp_path) == changed  # not a section of nothing
    assert not _sections(path)


@pytest.mark.parametrize("cut", ["in the header", "in the body", "in the checksum"])
def test_a_section_cut_short_or_damaged_leaves_the_checkpoint_before_it(
    tmp_path: Path, cut: str, caplog: pytest.LogCaptureFixture
) -> None:
    """As a crash while it was appended leaves it: the checkpoint written
    before, its entries and its position, with no warning, and the file kept
    (the next start's first checkpoint rewrites it)."""
    path = tmp_path / CHECKPOINT_FILE
    first = _ten()
    written = write_startup_checkpoint(tmp_path, first, runs_checked_at="run-log@1:10")
    second = {**first, "s2": _entry(_records(22))}
    written = write_startup_checkpoint(
        tmp_path, second, runs_checked_at="run-log@1:20", written=written
    )
    third = {**second, "s4": _entry(_records(44))}
    before_third = path.stat().st_size
    write_startup_checkpoint(tmp_path, third, runs_checked_at="run-log@1:30", written=written)
    data = bytearray(path.read_bytes())
    header_end = data.index(b"\n", before_third)
    if cut == "in the header":
        del data[header_end - 5 :]
    elif cut == "in the body":
        del data[-3:]
    else:
        data[-3] ^= 0x01
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        assert take_startup_checkpoint(tmp_path) == (second, "run-log@1:20")
    assert not caplog.records
    assert path.exists()


def test_a_checkpoint_of_the_version_before_reads(tmp_path: Path) -> None:
    """A base without its body's size, as the version before wrote it: the
    first start after an upgrade goes by it."""
    entries = _ten()
    body = "".join(
        f"{key}\t{e.identities_text}\t{e.records_json}\t{e.runtime_json}\t{e.history_json}\n"
        for key, e in sorted(entries.items())
    ).encode()
    header = {
        "format": "wf-startup-checkpoint/1",
        "schedules": 10,
        "crc32": zlib.crc32(body),
        "runs_checked_at": "run-log@1:10",
        "written_at_ns": 1,
    }
    (tmp_path / CHECKPOINT_FILE).write_bytes(json.dumps(header).encode() + b"\n" + body)
    assert take_startup_checkpoint(tmp_path) == (entries, "run-log@1:10")


def test_a_damaged_base_is_ignored_and_removed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / CHECKPOINT_FILE
    write_startup_checkpoint(tmp_path, _ten())
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        assert take_startup_checkpoint(tmp_path) == ({}, None)
    assert "fails its checksum" in caplog.text
    assert not path.exists()


def test_what_was_written_describes_the_file(tmp_path: Path) -> None:
    written = write_startup_checkpoint(tmp_path, _ten(), runs_checked_at="run-log@1:10")
    st = os.stat(tmp_path / CHECKPOINT_FILE)
    assert written == CheckpointFile(_ten(), "run-log@1:10", st.st_ino, st.st_size, st.st_size)


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


def test_an_export_of_a_version_that_did_not_always_know_the_newest_trigger_is_not_adopted(
    tmp_path: Path,
) -> None:
    """Such a version, loading a history through its index, knew the newest
    trigger only from the rows it replayed: its export may say none. The
    history is then read from its files."""
    create(tmp_path, "s1")
    history = HistoryStore(tmp_path)
    decide(history, "s1", 0, origin="trigger")
    history.publish()
    exported = history.export_state("s1")
    assert exported is not None
    older = [*exported[:-1]]  # as written before the export's last element
    older[-2] = None  # and not knowing the trigger
    assert HistoryStore(tmp_path).adopt_state("s1", older) is None
    assert HistoryStore(tmp_path).adopt_state("s1", exported) is not None
