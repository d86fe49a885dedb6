"""Startup recovery of all schedules: damage stays with its schedule."""

from __future__ import annotations

from pathlib import Path

from shell.stores import ScheduleStores
from tests.shell.history_helpers import SNAPSHOT, T0, SchedulePaths, create, decide, minute, move


def test_recover_all_reports_each_schedules_own_problems(store_root: Path) -> None:
    create(store_root, "good", "bad-history", "bad-runtime", "bad-definition")
    stores = ScheduleStores(store_root)
    for schedule_id in ("good", "bad-history", "bad-runtime", "bad-definition"):
        decide(stores.history, schedule_id, 0, "admitted")
        stores.runtime.write(
            schedule_id, watermark=minute(0), held=None, lifecycle_seq=1, written_at=minute(0)
        )
    move(stores.history, "good", 0, "running", run_id="run-1")
    stores.close()
    with SchedulePaths(store_root, "bad-history").history.open("ab") as f:
        f.write(b"garbage\n")
    SchedulePaths(store_root, "bad-runtime").runtime.write_bytes(b"{\n")
    SchedulePaths(store_root, "bad-definition").definition.write_bytes(b"[]")
    (store_root / "schedules" / "interrupted-create").mkdir()

    results = ScheduleStores(store_root).recover_all()
    by_id = {r.schedule_id: r for r in results}
    assert [r.schedule_id for r in results] == [
        "bad-definition",
        "bad-history",
        "bad-runtime",
        "good",
    ]
    assert by_id["good"].problems == ()
    assert by_id["good"].history is not None
    assert [(o.status, o.run_id, o.snapshot) for o in by_id["good"].history.open_occurrences] == [
        ("running", "run-1", SNAPSHOT)
    ]
    assert [(p.file, p.reason) for p in by_id["bad-history"].problems] == [
        ("schedules/bad-history/history.jsonl", "unparseable record")
    ]
    assert [p.file for p in by_id["bad-runtime"].problems] == [
        "schedules/bad-runtime/runtime.jsonl"
    ]
    assert by_id["bad-runtime"].runtime is None
    assert [p.file for p in by_id["bad-definition"].problems] == [
        "schedules/bad-definition/definition.json"
    ]
    # The definition is rebuilt in memory from the lifecycle log, so it can be shown blocked.
    assert by_id["bad-definition"].definition is not None
    # The open occurrence of a damaged schedule is still reported: overlap is not cleared.
    bad_history = by_id["bad-history"].history
    assert bad_history is not None and [o.status for o in bad_history.open_occurrences] == [
        "admitted"
    ]


def test_unconsumed_lifecycle_records_come_back(store_root: Path) -> None:
    create(store_root, "s1")
    stores = ScheduleStores(store_root)
    stores.runtime.write("s1", watermark=T0, held=None, lifecycle_seq=1, written_at=T0)
    stores.definitions.apply_change("s1", "paused", at=minute(5))
    stores.definitions.apply_change("s1", "resumed", at=minute(9))
    (result,) = ScheduleStores(store_root).recover_all()
    assert [(r["seq"], r["kind"]) for r in result.unconsumed_lifecycle] == [
        (2, "paused"),
        (3, "resumed"),
    ]
    assert result.definition is not None and result.definition["paused"] is False


def test_never_consumed_schedule_gets_its_whole_lifecycle(store_root: Path) -> None:
    create(store_root, "s1")
    (result,) = ScheduleStores(store_root).recover_all()
    assert result.runtime is None
    assert [r["kind"] for r in result.unconsumed_lifecycle] == ["created"]


def test_runtime_ahead_of_the_lifecycle_log_is_a_problem(store_root: Path) -> None:
    create(store_root, "s1")
    stores = ScheduleStores(store_root)
    stores.runtime.write("s1", watermark=T0, held=None, lifecycle_seq=4, written_at=T0)
    (result,) = stores.recover_all()
    assert [(p.file, p.record) for p in result.problems] == [
        ("schedules/s1/runtime.jsonl", "lifecycle_seq 4")
    ]


def test_recovery_removes_temp_files_of_interrupted_writes(store_root: Path) -> None:
    create(store_root, "s1")
    directory = SchedulePaths(store_root, "s1").directory
    (directory / ".runtime.json.123.abcd.tmp").write_bytes(b"{half")
    (result,) = ScheduleStores(store_root).recover_all()
    assert result.problems == ()
    assert sorted(p.name for p in directory.iterdir()) == ["definition.json", "lifecycle.jsonl"]
