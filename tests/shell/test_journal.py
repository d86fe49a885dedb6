"""The commit journal: a journaled group commit is all-or-nothing across a
crash at any of its points, a lost write-back is restored by the replay, and
the journal is emptied by checkpoints."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shell.disk import OsDisk
from shell.durable import CrashAt, GroupCommit, SimulatedCrash, set_fault_injector
from shell.journal import JOURNAL_FILE, CommitJournal, journal_supported, replay_journal

pytestmark = pytest.mark.skipif(not journal_supported(), reason="the journal needs syncfs")


class Recorder:
    """A fault injector that only records the points it passes."""

    def __init__(self) -> None:
        self.points: list[str] = []

    def __call__(self, point: str) -> None:
        self.points.append(point)


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != JOURNAL_FILE and not path.name.endswith(".tmp")
    }


def _seed(root: Path) -> None:
    (root / "a").mkdir()
    (root / "b").mkdir()
    (root / "a" / "log").write_bytes(b"one\n")
    (root / "b" / "state").write_bytes(b"old state\n")


def _stage(batch: GroupCommit, root: Path) -> None:
    batch.append_bytes(root / "a" / "log", b"two\n", expect_size=4)
    batch.append_bytes(root / "a" / "log", b"three\n")
    batch.append_bytes(root / "b" / "new-log", b"created\n")
    batch.append_bytes(root / "b" / "late", b"late\n", late=True)
    batch.replace_bytes(root / "b" / "state", b"new state\n")


BEFORE = {"a/log": b"one\n", "b/state": b"old state\n"}
AFTER = {
    "a/log": b"one\ntwo\nthree\n",
    "b/late": b"late\n",
    "b/new-log": b"created\n",
    "b/state": b"new state\n",
}


def _commit(root: Path, journal: CommitJournal) -> None:
    batch = GroupCommit(journal=journal)
    _stage(batch, root)
    batch.commit()


def _died_after_one_commit(root: Path) -> None:
    """A process that committed the batch of `_stage` and died: no checkpoint."""
    _seed(root)
    journal = CommitJournal(root)
    journal.open()
    _commit(root, journal)
    journal.close_file()


def test_a_journaled_batch_is_durable_in_the_journal_before_its_files_are_written(
    store_root: Path,
) -> None:
    _seed(store_root)
    journal = CommitJournal(store_root)
    journal.open()
    seen: list[dict[str, bytes]] = []
    batch = GroupCommit(journal=journal)
    _stage(batch, store_root)
    batch.on_durable(lambda: seen.append(_files(store_root)))
    batch.on_commit(lambda: seen.append(_files(store_root)))
    batch.commit()
    assert seen == [BEFORE, AFTER]
    assert journal.size > 0
    assert _files(store_root) == AFTER
    journal.close()
    assert (store_root / JOURNAL_FILE).stat().st_size == 0


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="reads /proc/self/fd")
@pytest.mark.skipif(not journal_supported(), reason="the journal needs syncfs")
def test_a_file_written_now_and_then_is_not_kept_open_after_its_journaled_write(
    store_root: Path,
) -> None:
    disk = OsDisk()
    journal = CommitJournal(store_root, disk=disk)
    journal.open()
    every_commit, now_and_then = store_root / "history.jsonl", store_root / "runtime.jsonl"
    batch = GroupCommit(journal=journal)
    batch.append_bytes(every_commit, b"row\n")
    batch.append_bytes(now_and_then, b"record\n", late=True, seldom=True)
    batch.commit()
    assert every_commit.read_bytes() == b"row\n"
    assert now_and_then.read_bytes() == b"record\n"
    open_files = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor
            open_files.add(os.readlink(f"/proc/self/fd/{fd}"))
    assert str(every_commit) in open_files
    assert str(now_and_then) not in open_files
    journal.close()
    disk.release_kept(str(store_root))


def test_an_early_append_is_written_and_appended_after_before_the_batch_completes(
    store_root: Path,
) -> None:
    """`make_durable` writes an early append right after the journal's fsync;
    its owner appends after it (`on_early`) before `complete` writes the
    batch's other files, and a crash in between loses nothing of either."""
    _seed(store_root)
    (store_root / "segment").write_bytes(b"frame0\n")
    journal = CommitJournal(store_root)
    journal.open()
    batch = GroupCommit(journal=journal)
    _stage(batch, store_root)
    batch.append_bytes(store_root / "segment", b"frame1\n", expect_size=7, early=True)
    seen: list[dict[str, bytes]] = []

    def owner_appends_after_the_early_bytes() -> None:
        seen.append(_files(store_root))
        with (store_root / "segment").open("ab") as segment:
            segment.write(b"mark\n")

    batch.on_early(owner_appends_after_the_early_bytes)
    batch.on_commit(lambda: seen.append(_files(store_root)))
    batch.make_durable()
    assert batch.state == "durable"
    # Durable and the early bytes written; the other files not yet.
    assert seen == [{**BEFORE, "segment": b"frame0\nframe1\n"}]
    with pytest.raises(RuntimeError, match="durable"):
        batch.append_bytes(store_root / "a" / "log", b"too late\n")
    # The process dies here: a replay completes the batch and keeps what the
    # owner appended after the early bytes.
    journal.close_file()
    replay_journal(store_root)
    assert _files(store_root) == {**AFTER, "segment": b"frame0\nframe1\nmark\n"}


def test_complete_writes_the_rest_and_only_follows_make_durable(store_root: Path) -> None:
    _seed(store_root)
    (store_root / "segment").write_bytes(b"")
    journal = CommitJournal(store_root)
    journal.open()
    batch = GroupCommit(journal=journal)
    with pytest.raises(RuntimeError, match="open"):
        batch.complete()
    _stage(batch, store_root)
    batch.append_bytes(store_root / "segment", b"frame\n", early=True)
    recorder = Recorder()
    previous = set_fault_injector(recorder)
    try:
        batch.make_durable()
        early_points = list(recorder.points)
        batch.complete()
    finally:
        set_fault_injector(previous)
    # The early append is applied once, by make_durable; complete applies the rest.
    assert early_points.count("before:apply:segment") == 1
    assert recorder.points.count("before:apply:segment") == 1
    assert "before:apply:log" not in early_points and "before:apply:log" in recorder.points
    assert batch.state == "committed"
    assert _files(store_root) == {**AFTER, "segment": b"frame\n"}
    journal.close()


def test_without_a_journal_make_durable_writes_everything_and_complete_commits(
    tmp_path: Path,
) -> None:
    _seed(tmp_path)
    batch = GroupCommit()
    _stage(batch, tmp_path)
    order: list[str] = []
    batch.on_durable(lambda: order.append("durable"))
    batch.on_early(lambda: order.append("early"))
    batch.on_commit(lambda: order.append("commit"))
    batch.make_durable()
    assert _files(tmp_path) == AFTER and order == ["durable", "early"]
    batch.complete()
    assert order == ["durable", "early", "commit"] and batch.state == "committed"


def _points_of_one_commit(root: Path) -> list[str]:
    recorder = Recorder()
    root.mkdir()
    _seed(root)
    journal = CommitJournal(root)
    journal.open()
    previous = set_fault_injector(recorder)
    try:
        _commit(root, journal)
    finally:
        set_fault_injector(previous)
        journal.close_file()
    return recorder.points


def test_a_crash_at_any_point_of_a_commit_leaves_none_or_all_of_it(tmp_path: Path) -> None:
    points = _points_of_one_commit(tmp_path / "probe")
    assert "after:append:commit.journal" in points
    assert any(p.startswith("before:apply:") for p in points)
    durable_at = points.index("after:append:commit.journal")
    for number, point in enumerate(points):
        root = tmp_path / f"crash-{number}"
        root.mkdir()
        _seed(root)
        journal = CommitJournal(root)
        journal.open()
        previous = set_fault_injector(CrashAt(point))
        try:
            with pytest.raises(SimulatedCrash):
                _commit(root, journal)
        finally:
            set_fault_injector(previous)
            journal.close_file()  # the process is dead: no checkpoint
        replay_journal(root)
        expected = AFTER if number >= durable_at else BEFORE
        assert _files(root) == expected, point
        assert (root / JOURNAL_FILE).stat().st_size == 0


def _lose_write_back(root: Path) -> None:
    """What a power cut can do to writes the kernel had not written back:
    the files as they were before the batch (the journal was fsynced)."""
    (root / "a" / "log").write_bytes(b"one\ntw")  # half of the append reached the disk
    (root / "b" / "new-log").unlink()
    (root / "b" / "late").write_bytes(b"")
    (root / "b" / "state").write_bytes(b"old state\n")


def test_a_replay_restores_writes_lost_after_the_journal_was_flushed(store_root: Path) -> None:
    _died_after_one_commit(store_root)
    _lose_write_back(store_root)
    report = replay_journal(store_root)
    assert _files(store_root) == AFTER
    assert (report.records, report.appends_written, report.replaces_written) == (1, 3, 1)
    assert report.problems == []
    again = replay_journal(store_root)  # emptied by the first replay
    assert again.records == 0
    assert _files(store_root) == AFTER


def test_a_torn_record_is_dropped_and_nothing_of_it_is_written(store_root: Path) -> None:
    _seed(store_root)
    journal = CommitJournal(store_root)
    journal.open()
    _commit(store_root, journal)
    first_record = journal.size
    batch = GroupCommit(journal=journal)
    batch.append_bytes(store_root / "a" / "log", b"four\n")
    batch.commit()
    journal.close_file()
    path = store_root / JOURNAL_FILE
    torn = path.read_bytes()[:-3]
    path.write_bytes(torn)
    _lose_write_back(store_root)  # the last batch was never acknowledged
    report = replay_journal(store_root)
    assert report.records == 1
    assert report.torn_bytes == len(torn) - first_record
    assert _files(store_root) == AFTER


def test_appends_before_a_replace_of_the_same_file_are_not_replayed(store_root: Path) -> None:
    _seed(store_root)
    target = store_root / "b" / "state"
    journal = CommitJournal(store_root)
    journal.open()
    for data in (b"x" * 50 + b"\n", b"y\n"):
        batch = GroupCommit(journal=journal)
        batch.append_bytes(target, data)
        batch.commit()
    batch = GroupCommit(journal=journal)
    batch.replace_bytes(target, b"c\n")  # shorter than where the old appends start
    batch.commit()
    batch = GroupCommit(journal=journal)
    batch.append_bytes(target, b"after\n", expect_size=2)
    batch.commit()
    journal.close_file()
    target.write_bytes(b"c\n")  # the last append was lost
    report = replay_journal(store_root)
    assert target.read_bytes() == b"c\nafter\n"
    assert report.problems == []  # the old appends' offsets belong to the old file


def test_bytes_lost_before_a_journaled_offset_are_reported_not_papered_over(
    store_root: Path,
) -> None:
    _died_after_one_commit(store_root)
    (store_root / "a" / "log").write_bytes(b"on")  # shorter than before the batch: damage
    report = replay_journal(store_root)
    assert (store_root / "a" / "log").read_bytes() == b"on"  # no hole written
    assert len(report.problems) == 1
    assert "a/log" in report.problems[0] and "offset 4" in report.problems[0]


def test_a_file_changed_under_its_owner_fails_the_commit_before_the_journal(
    store_root: Path,
) -> None:
    _seed(store_root)
    journal = CommitJournal(store_root)
    journal.open()
    aborted: list[bool] = []
    batch = GroupCommit(journal=journal)
    batch.append_bytes(store_root / "a" / "log", b"two\n", expect_size=3)
    batch.on_abort(lambda: aborted.append(True))
    with pytest.raises(OSError) as caught:
        batch.commit()
    assert caught.value.errno == errno.EIO
    assert aborted == [True]
    assert journal.size == 0
    assert _files(store_root) == BEFORE


@pytest.mark.parametrize("size", ["same", "other"])
def test_a_file_another_process_renamed_over_gets_the_next_append(
    store_root: Path, size: str
) -> None:
    # The disk keeps the history's descriptor between commits; the file it
    # names is replaced, not written through it (an editor's save, `sed -i`).
    disk = OsDisk()
    journal = CommitJournal(store_root, disk=disk)
    journal.open()
    log = store_root / "history.jsonl"
    with GroupCommit(journal=journal) as batch:
        batch.append_bytes(log, b"one\n", expect_size=0)
    replacement = b"ONE\n" if size == "same" else b"ONE!\n"
    (store_root / "edited").write_bytes(replacement)
    os.replace(store_root / "edited", log)
    batch = GroupCommit(journal=journal)
    batch.append_bytes(log, b"two\n", expect_size=4)
    if size == "same":
        batch.commit()
        assert log.read_bytes() == b"ONE\ntwo\n"
    else:
        with pytest.raises(OSError) as caught:
            batch.commit()
        assert caught.value.errno == errno.EIO
        assert log.read_bytes() == replacement
    journal.close()
    disk.release_kept(str(store_root))


def test_a_write_into_a_missing_directory_fails_before_the_journal(store_root: Path) -> None:
    _seed(store_root)
    journal = CommitJournal(store_root)
    journal.open()
    batch = GroupCommit(journal=journal)
    batch.append_bytes(store_root / "gone" / "log", b"x\n")
    with pytest.raises(FileNotFoundError):
        batch.commit()
    assert journal.size == 0


def test_the_journal_is_checkpointed_once_it_outgrows_its_bound(store_root: Path) -> None:
    _seed(store_root)
    journal = CommitJournal(store_root, checkpoint_at_bytes=200, checkpoint_after_s=0.0)
    journal.open()
    sizes: list[int] = []
    for number in range(6):
        batch = GroupCommit(journal=journal)
        batch.append_bytes(store_root / "a" / "log", f"row {number}\n".encode())
        batch.commit()
        sizes.append(journal.size)
    assert 0 in sizes  # emptied at least once
    assert max(sizes) < 200 + 100
    assert (store_root / JOURNAL_FILE).stat().st_size == journal.size
    journal.close()
    assert (store_root / "a" / "log").read_bytes() == b"one\n" + b"".join(
        f"row {n}\n".encode() for n in range(6)
    )


def test_opening_replays_what_the_previous_owner_left(store_root: Path) -> None:
    _died_after_one_commit(store_root)
    _lose_write_back(store_root)
    successor = CommitJournal(store_root)
    report = successor.open()
    assert report.records == 1
    assert _files(store_root) == AFTER
    assert successor.size == 0
    successor.close()


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: b"XXXX" + data[4:],  # bad magic
        lambda data: data[:20] + bytes([data[20] ^ 0xFF]) + data[21:],  # checksum fails
    ],
    ids=["magic", "checksum"],
)
def test_a_damaged_record_ends_the_replay(
    store_root: Path, damage: Callable[[bytes], bytes]
) -> None:
    _died_after_one_commit(store_root)
    path = store_root / JOURNAL_FILE
    path.write_bytes(damage(path.read_bytes()))
    _lose_write_back(store_root)
    report = replay_journal(store_root)
    assert report.records == 0 and report.torn_bytes > 0
    assert os.path.getsize(path) == 0


def test_a_file_outside_the_store_root_is_refused_before_anything_is_written(
    store_root: Path, tmp_path: Path
) -> None:
    _seed(store_root)
    journal = CommitJournal(store_root)
    journal.open()
    outside = tmp_path / "elsewhere.log"
    batch = GroupCommit(journal=journal)
    batch.append_bytes(store_root / "a" / "log", b"two\n")
    batch.append_bytes(outside, b"x\n")
    with pytest.raises(ValueError, match="not under the store root"):
        batch.commit()
    assert journal.size == 0
    assert not outside.exists()
    assert _files(store_root) == BEFORE


def test_a_file_write_failing_after_the_record_is_durable_fails_the_commit_and_the_replay(
    store_root: Path,
) -> None:
    _seed(store_root)
    blocker = store_root / "a" / "blocked"
    blocker.mkdir()  # a directory where a file is expected: every write to it fails
    journal = CommitJournal(store_root)
    journal.open()
    aborted: list[bool] = []
    durable: list[bool] = []
    batch = GroupCommit(journal=journal)
    batch.append_bytes(store_root / "a" / "log", b"two\n")
    batch.append_bytes(blocker, b"x\n")
    batch.on_durable(lambda: durable.append(True))
    batch.on_abort(lambda: aborted.append(True))
    with pytest.raises(IsADirectoryError):
        batch.commit()
    assert durable == [True] and aborted == [True] and batch.state == "aborted"
    journal.close_file()
    # The next owner cannot make the write either: it refuses to go on.
    with pytest.raises(IsADirectoryError):
        replay_journal(store_root)
    assert (store_root / JOURNAL_FILE).stat().st_size > 0  # kept for after the repair
    blocker.rmdir()
    blocker.write_bytes(b"")
    replay_journal(store_root)
    assert (store_root / "a" / "log").read_bytes() == b"one\ntwo\n"


def test_a_young_journal_waits_for_its_records_to_age_up_to_a_hard_limit(
    store_root: Path,
) -> None:
    _seed(store_root)
    now = [100.0]
    journal = CommitJournal(
        store_root,
        checkpoint_at_bytes=100,
        checkpoint_after_s=30.0,
        checkpoint_limit_bytes=1000,
        monotonic=lambda: now[0],
    )
    journal.open()

    def commit(row: bytes) -> int:
        batch = GroupCommit(journal=journal)
        batch.append_bytes(store_root / "a" / "log", row)
        batch.commit()
        return journal.size

    assert commit(b"x" * 200 + b"\n") > 100  # past the size bound, but young
    now[0] += 29.0
    assert commit(b"y\n") > 100
    now[0] += 1.0  # the oldest record is 30 s old
    assert commit(b"z\n") == 0
    sizes = [commit(b"w" * 300 + b"\n") for _ in range(4)]  # young, until the hard limit
    assert sizes[:2] == sorted(sizes[:2]) and sizes[1] > 0
    assert 0 in sizes
    journal.close()


def test_a_quiet_moment_checkpoints_an_aged_journal_whatever_its_size(store_root: Path) -> None:
    _seed(store_root)
    now = [100.0]
    journal = CommitJournal(store_root, quiet_checkpoint_after_s=30.0, monotonic=lambda: now[0])
    journal.open()
    assert not journal.checkpoint_if_aged()  # empty
    batch = GroupCommit(journal=journal)
    batch.append_bytes(store_root / "a" / "log", b"small\n")
    batch.commit()
    now[0] += 29.0
    assert not journal.checkpoint_if_aged() and journal.size > 0
    now[0] += 1.0
    assert journal.checkpoint_if_aged() and journal.size == 0
    assert (store_root / JOURNAL_FILE).stat().st_size == 0
    assert (store_root / "a" / "log").read_bytes() == b"one\nsmall\n"
    journal.close()


# --- random batches, a crash anywhere, a lost write-back --------------------------

_FILES = ("a/log", "a/other", "b/log", "b/state")


@st.composite
def _batches(draw: st.DrawFn) -> list[list[tuple[str, str, bytes]]]:
    """Batches of ("append"|"replace", file, bytes); one kind of write per file per batch."""
    batches = []
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        files = draw(st.lists(st.sampled_from(_FILES), min_size=1, max_size=4, unique=True))
        writes = []
        for name in files:
            kind = "replace" if name == "b/state" and draw(st.booleans()) else "append"
            data = draw(st.binary(min_size=1, max_size=40))
            writes.append((kind, name, data))
        batches.append(writes)
    return batches


def _expected(batches: list[list[tuple[str, str, bytes]]]) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for writes in batches:
        for kind, name, data in writes:
            files[name] = data if kind == "replace" else files.get(name, b"") + data
    return files


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=_batches(),
    crash_at=st.integers(min_value=1, max_value=80),
    lost=st.sampled_from(["none", "all", "some"]),
)
def test_any_crash_and_lost_write_back_replays_to_the_last_durable_batch(
    tmp_path_factory: pytest.TempPathFactory,
    batches: list[list[tuple[str, str, bytes]]],
    crash_at: int,
    lost: str,
) -> None:
    """A crash at the n-th fault point of a run of batches (or none, when n is
    past the end); then a power cut loses none, all or some of the file writes
    made since the journal's last checkpoint. The replay must leave the files
    exactly as the batches durable at the crash made them."""
    root = tmp_path_factory.mktemp("store")
    (root / "a").mkdir()
    (root / "b").mkdir()
    journal = CommitJournal(root, checkpoint_at_bytes=120, checkpoint_after_s=0.0)
    journal.open()
    passed: list[str] = []
    checkpointed: dict[str, bytes] = {}  # the files as the last checkpoint made them durable

    def injector(point: str) -> None:
        passed.append(point)
        if point == "after:checkpoint":
            checkpointed.clear()
            checkpointed.update(_files(root))
        if len(passed) == crash_at:
            raise SimulatedCrash(point)

    durable = 0
    previous = set_fault_injector(injector)
    try:
        for writes in batches:
            began = len(passed)
            batch = GroupCommit(journal=journal)
            for kind, name, data in writes:
                if kind == "replace":
                    batch.replace_bytes(root / name, data)
                else:
                    batch.append_bytes(root / name, data)
            try:
                batch.commit()
            except SimulatedCrash:
                # Raised at or after its journal flush: the batch is durable.
                durable += f"after:append:{JOURNAL_FILE}" in passed[began:]
                break
            durable += 1
    finally:
        set_fault_injector(previous)
        journal.close_file()
    for number, name in enumerate(_FILES):
        if lost == "all" or (lost == "some" and number % 2 == 0):
            path = root / name
            if name in checkpointed:
                path.write_bytes(checkpointed[name])
            elif path.exists():
                path.unlink()
    replay_journal(root)
    assert _files(root) == _expected(batches[:durable])
    assert (root / JOURNAL_FILE).stat().st_size == 0


def test_an_expected_size_asked_at_commit_places_an_append_after_the_owners_own_writes(
    store_root: Path,
) -> None:
    """An owner that goes on appending to its file while a batch waits (a
    round prepared ahead of its instant) names the size at commit: the
    batch's bytes go after everything it wrote meanwhile."""
    _seed(store_root)
    segment = store_root / "segment"
    segment.write_bytes(b"frame0\n")
    journal = CommitJournal(store_root)
    journal.open()
    batch = GroupCommit(journal=journal)
    asked: list[int] = []

    def size_now() -> int:
        asked.append(segment.stat().st_size)
        return asked[-1]

    batch.append_bytes(segment, b"staged\n", expect_size=size_now, early=True)
    assert asked == []  # not asked while staging
    with segment.open("ab") as owner:
        owner.write(b"meanwhile\n")
    batch.commit()
    assert asked == [17]
    assert segment.read_bytes() == b"frame0\nmeanwhile\nstaged\n"


def test_an_owner_that_cannot_name_the_size_fails_the_commit_before_its_first_byte(
    store_root: Path,
) -> None:
    _seed(store_root)
    journal = CommitJournal(store_root)
    journal.open()
    batch = GroupCommit(journal=journal)
    _stage(batch, store_root)

    def sealed() -> int:
        raise OSError(errno.EIO, "sealed while the batch waited")

    batch.append_bytes(store_root / "segment", b"staged\n", expect_size=sealed)
    aborted: list[bool] = []
    batch.on_abort(lambda: aborted.append(batch.may_have_written))
    with pytest.raises(OSError, match="sealed"):
        batch.commit()
    assert aborted == [True]  # the commit had begun: its owners read again
    journal.close_file()
    replay_journal(store_root)
    assert _files(store_root) == BEFORE


def test_a_batch_dropped_before_its_commit_wrote_nothing(store_root: Path) -> None:
    _seed(store_root)
    journal = CommitJournal(store_root)
    journal.open()
    batch = GroupCommit(journal=journal)
    _stage(batch, store_root)
    seen: list[bool] = []
    batch.on_abort(lambda: seen.append(batch.may_have_written))
    batch.abort()
    assert seen == [False]
    journal.close_file()
    replay_journal(store_root)
    assert _files(store_root) == BEFORE
