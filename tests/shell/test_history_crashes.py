"""Crash at every durable write of a wake-up, and a seeded model of the history
store under restarts, lost indexes and torn appends."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

from shell.durable import CrashAt, GroupCommit, SimulatedCrash, set_fault_injector
from shell.history_store import HistoryStore
from shell.store_format import format_instant
from shell.stores import ScheduleStores
from tests.shell.history_helpers import SNAPSHOT, SchedulePaths, all_rows, create, minute

SCHEDULES = ("s1", "s2")


def _wakeup(stores: ScheduleStores, k: int) -> None:
    """One wake-up: s1 admits minute k and completes minute k-1's run; s2 skips
    minute k; both persist their watermark. One group commit."""
    with stores.new_batch() as batch:
        stores.history.append_decision(
            "s1",
            instant=minute(k),
            status="admitted",
            snapshot=SNAPSHOT,
            recorded_at=minute(k),
            batch=batch,
        )
        if k > 0:
            stores.history.append_transition(
                "s1",
                instant=minute(k - 1),
                status="completed",
                run_id=f"run-{k - 1}",
                recorded_at=minute(k),
                batch=batch,
            )
        stores.history.append_decision(
            "s2", instant=minute(k), status="skipped-overlap", recorded_at=minute(k), batch=batch
        )
        for schedule_id in SCHEDULES:
            stores.runtime.stage(
                batch,
                schedule_id,
                watermark=minute(k),
                held=None,
                lifecycle_seq=1,
                written_at=minute(k),
            )


def _setup(root: Path) -> ScheduleStores:
    create(root, *SCHEDULES)
    stores = ScheduleStores(root)
    stores.recover_all()
    _wakeup(stores, 0)
    _wakeup(stores, 1)
    return stores


def _points(tmp_path: Path) -> list[tuple[str, int]]:
    stores = _setup(tmp_path / "enumerate")
    recorder = CrashAt(None)
    set_fault_injector(recorder)
    _wakeup(stores, 2)
    set_fault_injector(None)
    seen: dict[str, int] = {}
    points = []
    for point in recorder.seen:
        seen[point] = seen.get(point, 0) + 1
        points.append((point, seen[point]))
    return points


def test_crash_at_every_write_of_a_wakeup_recovers_consistently(tmp_path: Path) -> None:
    points = _points(tmp_path)
    assert ("before:sync", 1) in points and ("after:index:history.idx", 2) in points
    outcomes: dict[str, int] = {"rows kept": 0, "rows lost": 0}
    for n, (point, occurrence) in enumerate(points):
        root = tmp_path / f"crash-{n}"
        stores = _setup(root)
        set_fault_injector(CrashAt(point, occurrence=occurrence))
        with pytest.raises(SimulatedCrash):
            _wakeup(stores, 2)
        set_fault_injector(None)

        restarted = ScheduleStores(root)
        recovered = {r.schedule_id: r for r in restarted.recover_all()}
        for schedule_id in SCHEDULES:
            r = recovered[schedule_id]
            assert r.problems == (), (point, occurrence)
            assert r.history is not None and r.runtime is not None
            count = r.history.occurrences
            assert count in (2, 3), (point, count)
            outcomes["rows kept" if count == 3 else "rows lost"] += 1
            # A runtime record is never ahead of the history rows it depends on.
            if r.runtime["watermark"] == format_instant(minute(2)):
                assert count == 3, (point, occurrence, schedule_id)
            else:
                assert r.runtime["watermark"] == format_instant(minute(1))
        s1 = recovered["s1"].history
        assert s1 is not None
        open_instants = [o.instant for o in s1.open_occurrences]
        if s1.occurrences == 3:
            assert open_instants == [format_instant(minute(2))]
        else:
            assert open_instants == [format_instant(minute(1))]
        assert not list(SchedulePaths(root, "s1").directory.glob(".*.tmp"))
        # The recovered store goes on; so does the one after it.
        if s1.occurrences == 3:
            _wakeup(restarted, 3)
        else:
            _wakeup(restarted, 2)
        assert all(r.problems == () for r in ScheduleStores(root).recover_all())
    print(f"history crash points covered: {len(points)} ({outcomes})")
    assert outcomes["rows kept"] and outcomes["rows lost"]


# --- seeded model ---------------------------------------------------------------------------------

_NEXT = {
    "admitted": ("running", "interrupted", "completed", "failed", "exhausted"),
    "running": ("interrupted", "completed", "failed", "exhausted"),
    "interrupted": ("running", "completed", "failed", "exhausted"),
}
_DECISIONS = (
    "admitted",
    "admitted",
    "skipped-overlap",
    "skipped-misfire",
    "superseded",
    "preflight-rejected",
)


class _Model:
    def __init__(self) -> None:
        self.rows: dict[str, list[dict[str, Any]]] = {s: [] for s in SCHEDULES}
        self.minute: dict[str, int] = dict.fromkeys(SCHEDULES, 0)

    def view(self, schedule_id: str) -> list[tuple[Any, ...]]:
        return [
            (r["seq"], r["instant"], r["status"], r["run_id"], r["reason"])
            for r in self.rows[schedule_id]
        ]

    def open(self, schedule_id: str) -> list[tuple[int, str]]:
        return [(r["seq"], r["status"]) for r in self.rows[schedule_id] if r["status"] in _NEXT]


def _stage_random(
    rng: random.Random, history: HistoryStore, model: _Model, batch: GroupCommit
) -> list[tuple[str, str, Any]]:
    """Stage a few random rows; return the model changes to apply on commit."""
    changes: list[tuple[str, str, Any]] = []
    staged_open: dict[str, dict[int, str]] = {s: dict(model.open(s)) for s in SCHEDULES}
    next_minute = dict(model.minute)
    next_seq = {s: len(model.rows[s]) for s in SCHEDULES}
    for _ in range(rng.randint(1, 5)):
        schedule_id = rng.choice(SCHEDULES)
        opened = staged_open[schedule_id]
        if opened and rng.random() < 0.5:
            seq = rng.choice(sorted(opened))
            status = rng.choice(_NEXT[opened[seq]])
            run_id = f"run-{schedule_id}-{seq}"
            reason = "boom" if status == "failed" else None
            history.append_transition(
                schedule_id,
                seq=seq,
                status=status,
                run_id=run_id,
                reason=reason,
                recorded_at=minute(next_minute[schedule_id]),
                batch=batch,
            )
            if status in _NEXT:
                opened[seq] = status
            else:
                del opened[seq]
            changes.append(("move", schedule_id, (seq, status, run_id, reason)))
        else:
            next_minute[schedule_id] += rng.randint(1, 3)
            i = next_minute[schedule_id]
            status = rng.choice(_DECISIONS)
            history.append_decision(
                schedule_id,
                instant=minute(i),
                status=status,
                recorded_at=minute(i),
                snapshot=SNAPSHOT if status == "admitted" else None,
                batch=batch,
            )
            seq = next_seq[schedule_id]
            next_seq[schedule_id] += 1
            if status == "admitted":
                opened[seq] = status
            changes.append(("decide", schedule_id, (seq, format_instant(minute(i)), status, i)))
    return changes


def _apply(model: _Model, changes: list[tuple[str, str, Any]]) -> None:
    for kind, schedule_id, data in changes:
        if kind == "decide":
            seq, instant, status, i = data
            model.rows[schedule_id].append(
                {"seq": seq, "instant": instant, "status": status, "run_id": None, "reason": None}
            )
            model.minute[schedule_id] = i
        else:
            seq, status, run_id, reason = data
            row = model.rows[schedule_id][seq]
            row.update(status=status, run_id=run_id, reason=reason)


def _check(root: Path, model: _Model) -> HistoryStore:
    history = HistoryStore(root)
    for schedule_id in SCHEDULES:
        recovered = history.recover(schedule_id)
        assert recovered.problems == ()
        assert [(o.seq, o.status) for o in recovered.open_occurrences] == model.open(schedule_id)
        assert recovered.occurrences == len(model.rows[schedule_id])
        rows = all_rows(HistoryStore(root), schedule_id, limit=3)
        assert [
            (r["seq"], r["instant"], r["status"], r["run_id"], r["reason"]) for r in rows
        ] == model.view(schedule_id)
        assert all_rows(history, schedule_id, limit=100) == rows
    history.sync_recovered()
    return history


@pytest.mark.parametrize("seed", range(6))
def test_history_matches_a_model_across_restarts_and_damage(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    create(tmp_path, *SCHEDULES)
    model = _Model()
    history = HistoryStore(tmp_path)
    for _step in range(120):
        action = rng.random()
        if action < 0.7:
            batch = GroupCommit()
            changes = _stage_random(rng, history, model, batch)
            if rng.random() < 0.9:
                batch.commit()
                _apply(model, changes)
            else:
                batch.abort()
        elif action < 0.8:
            if rng.random() < 0.5:
                history.close()
            history = _check(tmp_path, model)
        elif action < 0.9:
            victim = SchedulePaths(tmp_path, rng.choice(SCHEDULES)).history_index
            if victim.exists():
                victim.unlink() if rng.random() < 0.5 else os.truncate(
                    victim, victim.stat().st_size // 3
                )
            history = _check(tmp_path, model)
        else:
            log = SchedulePaths(tmp_path, rng.choice(SCHEDULES)).history
            with log.open("ab") as f:
                f.write(b'{"seq":99,"update":true,"sta')
            history = _check(tmp_path, model)
    _check(tmp_path, model)
