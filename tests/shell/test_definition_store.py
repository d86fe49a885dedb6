"""Definition store: lifecycle log as truth, snapshot reconciliation, damage."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from core.errors import AlreadyExists, InvalidInput, InvalidState, NotFound, RevisionConflict
from shell.definition_store import DefinitionStore
from shell.durable import CrashAt, SimulatedCrash, set_fault_injector
from shell.store_format import StoreDamaged
from tests.shell.history_helpers import SchedulePaths

T0 = "2024-05-01T10:00:00Z"
T1 = "2024-05-01T11:00:00Z"
T2 = "2024-05-01T12:00:00Z"
DEFN = {"deployment_id": "d.default", "trigger": {"kind": "cron", "expression": "0 * * * *"}}


def _lifecycle(root: Path, schedule_id: str) -> list[dict[str, object]]:
    path = SchedulePaths(root, schedule_id).lifecycle
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def test_create_writes_log_then_snapshot(store_root: Path) -> None:
    store = DefinitionStore(store_root)
    result = store.create("s1", DEFN, at=T0)
    assert result.record == {
        "seq": 1,
        "kind": "created",
        "at": T0,
        "revision": 1,
        "definition": DEFN,
    }
    assert result.snapshot == {
        "format": 1,
        "schedule_id": "s1",
        "revision": 1,
        "definition": DEFN,
        "created_at": T0,
        "updated_at": None,
        "paused": False,
        "paused_at": None,
        "resumed_at": None,
        "deleted": False,
        "deleted_at": None,
        "blocked": None,
        "lifecycle_seq": 1,
    }
    assert store.get("s1") == result.snapshot
    assert _lifecycle(store_root, "s1") == [result.record]
    assert store.list_ids() == ["s1"]


def test_ids_are_never_reused(store_root: Path) -> None:
    store = DefinitionStore(store_root)
    store.create("s1", DEFN, at=T0)
    store.apply_change("s1", "deleted", at=T1)
    with pytest.raises(AlreadyExists):
        store.create("s1", DEFN, at=T2)
    # A directory left by an interrupted create is no schedule: it takes no
    # id, and the next create takes it over (issue 15: an id is burned only
    # by a schedule that exists).
    (store_root / "schedules" / "s2").mkdir()
    assert store.list_ids() == ["s1"]
    assert store.load("s2").incomplete
    with pytest.raises(NotFound):
        store.get("s2")
    store.create("s2", DEFN, at=T2)
    assert store.list_ids() == ["s1", "s2"]
    with pytest.raises(AlreadyExists):
        store.create("s2", DEFN, at=T2)


@pytest.mark.parametrize("schedule_id", ["../escape", "a/b", "nul\x00", ".."])
def test_unsafe_ids_write_nothing(store_root: Path, schedule_id: str) -> None:
    store = DefinitionStore(store_root)
    with pytest.raises(InvalidInput):
        store.create(schedule_id, DEFN, at=T0)
    assert list(store_root.iterdir()) == []


def test_bad_arguments_are_rejected_before_any_write(store_root: Path) -> None:
    store = DefinitionStore(store_root)
    with pytest.raises(InvalidInput) as caught:
        store.create("s1", {"x": object()}, at=T0)
    assert caught.value.problems[0].field == "definition"
    with pytest.raises(InvalidInput) as caught:
        store.create("s1", DEFN, at="2024-05-01T10:00:00")
    assert caught.value.problems[0].field == "at"
    assert list(store_root.iterdir()) == []


def test_lifecycle_changes_update_snapshot_and_log(store_root: Path) -> None:
    store = DefinitionStore(store_root)
    store.create("s1", DEFN, at=T0)
    new_defn = dict(DEFN, misfire="latest")
    updated = store.apply_change("s1", "updated", at=T1, definition=new_defn, expected_revision=1)
    paused = store.apply_change("s1", "paused", at=T1)
    again = store.apply_change("s1", "paused", at=T2)
    resumed = store.apply_change("s1", "resumed", at=T2)
    deleted = store.apply_change("s1", "deleted", at=T2)
    assert updated.snapshot["revision"] == 2
    assert updated.snapshot["updated_at"] == T1
    assert updated.snapshot["definition"] == new_defn
    assert paused.snapshot["paused"] is True and paused.snapshot["paused_at"] == T1
    assert again.record is None
    assert resumed.snapshot["paused"] is False and resumed.snapshot["resumed_at"] == T2
    assert deleted.snapshot["deleted"] is True and deleted.snapshot["deleted_at"] == T2
    assert [r["kind"] for r in _lifecycle(store_root, "s1")] == [
        "created",
        "updated",
        "paused",
        "resumed",
        "deleted",
    ]
    assert store.get("s1")["lifecycle_seq"] == 5
    assert store.apply_change("s1", "deleted", at=T2).record is None
    with pytest.raises(InvalidState):
        store.apply_change("s1", "paused", at=T2)


def test_stale_revision_is_a_conflict_and_writes_nothing(store_root: Path) -> None:
    store = DefinitionStore(store_root)
    store.create("s1", DEFN, at=T0)
    with pytest.raises(RevisionConflict) as caught:
        store.apply_change("s1", "updated", at=T1, definition=DEFN, expected_revision=7)
    assert caught.value.data == {"schedule_id": "s1", "expected": 7, "actual": 1}
    assert len(_lifecycle(store_root, "s1")) == 1


def test_change_arguments_are_validated(store_root: Path) -> None:
    store = DefinitionStore(store_root)
    store.create("s1", DEFN, at=T0)
    with pytest.raises(InvalidInput) as caught:
        store.apply_change("s1", "updated", at=T1)
    assert [p.field for p in caught.value.problems] == ["definition"]
    with pytest.raises(NotFound):
        store.apply_change("nope", "paused", at=T1)


def test_records_after(store_root: Path) -> None:
    store = DefinitionStore(store_root)
    store.create("s1", DEFN, at=T0)
    store.apply_change("s1", "paused", at=T1)
    store.apply_change("s1", "resumed", at=T2)
    assert [r["seq"] for r in store.records_after("s1", 0)] == [1, 2, 3]
    assert [r["kind"] for r in store.records_after("s1", 1)] == ["paused", "resumed"]
    assert store.records_after("s1", 3) == ()


def test_crash_between_log_append_and_snapshot_is_reconciled(store_root: Path) -> None:
    store = DefinitionStore(store_root)
    store.create("s1", DEFN, at=T0)
    set_fault_injector(CrashAt("before:replace:definition.json"))
    with pytest.raises(SimulatedCrash):
        store.apply_change("s1", "paused", at=T1)
    set_fault_injector(None)
    files = SchedulePaths(store_root, "s1")
    assert json.loads(files.definition.read_bytes())["paused"] is False
    # A reader sees the log's truth without writing.
    assert store.load("s1").snapshot["paused"] is True  # type: ignore[index]
    assert json.loads(files.definition.read_bytes())["paused"] is False
    # The owner's load rewrites the snapshot.
    loaded = store.load("s1", repair=True)
    assert loaded.problems == ()
    assert loaded.repairs == ("rewrote schedules/s1/definition.json from the lifecycle log",)
    assert json.loads(files.definition.read_bytes())["paused"] is True
    assert json.loads(files.definition.read_bytes())["lifecycle_seq"] == 2


def test_crash_after_mkdir_on_create_leaves_an_incomplete_create_the_next_takes_over(
    store_root: Path,
) -> None:
    store = DefinitionStore(store_root)
    set_fault_injector(CrashAt("after:mkdir:schedule"))
    with pytest.raises(SimulatedCrash):
        store.create("s1", DEFN, at=T0)
    set_fault_injector(None)
    assert store.list_ids() == []
    assert store.load("s1").incomplete
    assert store.create("s1", DEFN, at=T1).snapshot["created_at"] == T1
    assert store.get("s1")["revision"] == 1


def test_crash_before_first_snapshot_rebuilds_it(store_root: Path) -> None:
    store = DefinitionStore(store_root)
    set_fault_injector(CrashAt("before:replace:definition.json"))
    with pytest.raises(SimulatedCrash):
        store.create("s1", DEFN, at=T0)
    set_fault_injector(None)
    assert store.list_ids() == ["s1"]
    loaded = store.load("s1", repair=True)
    assert loaded.problems == ()
    assert loaded.snapshot is not None and loaded.snapshot["revision"] == 1
    assert SchedulePaths(store_root, "s1").definition.exists()


def test_torn_lifecycle_line_is_dropped_with_a_warning(
    store_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = DefinitionStore(store_root)
    store.create("s1", DEFN, at=T0)
    files = SchedulePaths(store_root, "s1")
    with files.lifecycle.open("ab") as f:
        f.write(b'{"seq":2,"kind":"pau')
    with caplog.at_level(logging.WARNING):
        loaded = store.load("s1", repair=True)
    assert loaded.problems == ()
    assert "torn final line" in caplog.text
    assert files.lifecycle.read_bytes().endswith(b"}\n")
    # And the next change appends cleanly after it.
    store.apply_change("s1", "paused", at=T1)
    assert [r["seq"] for r in _lifecycle(store_root, "s1")] == [1, 2]


def test_unparseable_snapshot_is_a_problem_and_is_left_as_found(store_root: Path) -> None:
    store = DefinitionStore(store_root)
    store.create("s1", DEFN, at=T0)
    files = SchedulePaths(store_root, "s1")
    files.definition.write_bytes(b"{not json")
    loaded = store.load("s1", repair=True)
    assert [(p.file, p.record) for p in loaded.problems] == [
        ("schedules/s1/definition.json", "whole file")
    ]
    assert "unreadable snapshot" in loaded.problems[0].reason
    # Rebuilt in memory from the log, so the schedule can still be shown...
    assert loaded.snapshot is not None and loaded.snapshot["definition"] == DEFN
    # ...but the damaged file is not overwritten.
    assert files.definition.read_bytes() == b"{not json"
    shown = store.get("s1")
    assert shown["blocked"] == {
        "file": "schedules/s1/definition.json",
        "record": "whole file",
        "reason": loaded.problems[0].reason,
        "at": None,
    }
    with pytest.raises(StoreDamaged):
        store.apply_change("s1", "paused", at=T1)
    with pytest.raises(StoreDamaged):
        store.set_blocked("s1", {"file": "f", "record": "r", "reason": "x"})


LIFECYCLE_DAMAGE = [
    (b"garbage\n", "line 2", "unparseable record"),
    (
        b'{"seq":1,"kind":"created","at":"2024-05-01T10:00:00Z","revision":1,"definition":{}}\n',
        "line 2",
        "seq 1",
    ),
    (
        b'{"seq":2,"kind":"resumed","at":"2024-05-01T10:00:00Z","revision":1}\n',
        "line 2",
        "resumed while not paused",
    ),
    (
        b'{"seq":2,"kind":"paused","at":"2024-05-01T10:00:00Z","revision":5}\n',
        "line 2",
        "revision 5",
    ),
    (
        b'{"seq":2,"kind":"exploded","at":"2024-05-01T10:00:00Z","revision":1}\n',
        "line 2",
        "unknown kind",
    ),
]


@pytest.mark.parametrize(("line", "record", "reason"), LIFECYCLE_DAMAGE)
def test_damaged_lifecycle_records_are_problems(
    store_root: Path, line: bytes, record: str, reason: str
) -> None:
    store = DefinitionStore(store_root)
    store.create("s1", DEFN, at=T0)
    files = SchedulePaths(store_root, "s1")
    before = files.lifecycle.read_bytes() + line
    files.lifecycle.write_bytes(before)
    loaded = store.load("s1", repair=True)
    assert len(loaded.problems) == 1
    assert loaded.problems[0].file == "schedules/s1/lifecycle.jsonl"
    assert loaded.problems[0].record.startswith(record)
    assert reason in loaded.problems[0].reason
    assert loaded.snapshot is not None and loaded.snapshot["revision"] == 1
    assert files.lifecycle.read_bytes() == before
    with pytest.raises(StoreDamaged) as caught:
        store.records_after("s1", 1)
    assert caught.value.data["file"] == "schedules/s1/lifecycle.jsonl"


def test_snapshot_ahead_of_its_log_is_a_problem(store_root: Path) -> None:
    store = DefinitionStore(store_root)
    store.create("s1", DEFN, at=T0)
    store.apply_change("s1", "paused", at=T1)
    files = SchedulePaths(store_root, "s1")
    files.lifecycle.write_bytes(files.lifecycle.read_bytes().splitlines(keepends=True)[0])
    loaded = store.load("s1")
    assert [p.reason for p in loaded.problems] == [
        "snapshot is ahead of the lifecycle log, which ends at seq 1"
    ]


def test_missing_lifecycle_with_snapshot_is_a_problem(store_root: Path) -> None:
    store = DefinitionStore(store_root)
    store.create("s1", DEFN, at=T0)
    SchedulePaths(store_root, "s1").lifecycle.unlink()
    loaded = store.load("s1")
    assert [p.file for p in loaded.problems] == ["schedules/s1/lifecycle.jsonl"]
    assert loaded.snapshot is not None


def test_set_blocked_persists_and_clears(store_root: Path) -> None:
    store = DefinitionStore(store_root)
    store.create("s1", DEFN, at=T0)
    diag = {
        "file": "schedules/s1/history.jsonl",
        "record": "line 3",
        "reason": "status went backwards",
    }
    snapshot = store.set_blocked("s1", diag, at=T1)
    assert snapshot["blocked"] == dict(diag, at=T1)
    assert store.get("s1")["blocked"] == dict(diag, at=T1)
    # Survives a lifecycle change.
    store.apply_change("s1", "paused", at=T2)
    assert store.get("s1")["blocked"] == dict(diag, at=T1)
    assert store.set_blocked("s1", None)["blocked"] is None
    assert store.get("s1")["blocked"] is None
    with pytest.raises(InvalidInput) as caught:
        store.set_blocked("s1", {"file": "f"})
    assert [p.field for p in caught.value.problems] == ["blocked.record", "blocked.reason"]


def _twin_stores(store_root: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The same schedule files in two roots: one read the separate way, one
    through `read_for_recovery`."""
    other = tmp_path / "twin"
    shutil.copytree(store_root, other)
    return store_root, other


@pytest.mark.parametrize(
    "shape",
    ["clean", "snapshot behind", "snapshot missing", "torn line", "snapshot revision differs"],
)
def test_read_for_recovery_is_records_after_then_load(
    store_root: Path, tmp_path: Path, shape: str
) -> None:
    store = DefinitionStore(store_root)
    store.create("s1", DEFN, at=T0)
    store.apply_change("s1", "paused", at=T1)
    store.apply_change("s1", "updated", at=T2, definition=DEFN, expected_revision=1)
    files = SchedulePaths(store_root, "s1")
    if shape == "snapshot behind":
        snapshot = json.loads(files.definition.read_bytes())
        files.definition.write_text(json.dumps(dict(snapshot, lifecycle_seq=2, revision=1)))
    elif shape == "snapshot missing":
        files.definition.unlink()
    elif shape == "torn line":
        with files.lifecycle.open("ab") as handle:
            handle.write(b'{"seq":4,"kind":"res')
    elif shape == "snapshot revision differs":
        snapshot = json.loads(files.definition.read_bytes())
        files.definition.write_text(json.dumps(dict(snapshot, revision=5)))
    separate_root, together_root = _twin_stores(store_root, tmp_path)
    separate = DefinitionStore(separate_root)
    expected = (separate.records_after("s1", 0), separate.load("s1", repair=True))
    together = DefinitionStore(together_root)
    assert together.read_for_recovery("s1", repair=True) == expected
    for name in ("lifecycle", "definition"):
        left = getattr(SchedulePaths(separate_root, "s1"), name)
        right = getattr(SchedulePaths(together_root, "s1"), name)
        assert left.exists() == right.exists()
        assert not left.exists() or left.read_bytes() == right.read_bytes()


def test_read_for_recovery_raises_for_a_damaged_log_before_repairing_anything(
    store_root: Path,
) -> None:
    store = DefinitionStore(store_root)
    store.create("s1", DEFN, at=T0)
    files = SchedulePaths(store_root, "s1")
    damaged = files.lifecycle.read_bytes() + LIFECYCLE_DAMAGE[0][0] + b'{"seq":3,"ki'
    files.lifecycle.write_bytes(damaged)
    with pytest.raises(StoreDamaged) as caught:
        store.read_for_recovery("s1", repair=True)
    assert caught.value.data["file"] == "schedules/s1/lifecycle.jsonl"
    assert files.lifecycle.read_bytes() == damaged  # the torn line is still there
    with pytest.raises(NotFound):
        store.read_for_recovery("nope")
