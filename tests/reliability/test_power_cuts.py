"""Power cuts at every durable write of the real file stores and the commit
journal, on the simulated disk (`shell.sim.disk.SimDisk`).

A scripted scenario (creates, lifecycle changes, journaled group commits of
history rows and runtime records, a journal checkpoint, a torn-tail repair)
runs once with a recording injector; every `(point, n-th time)` it passes
becomes cases that crash there and cut the power, losing all, none or some
of the writes not flushed. A new process then opens the journal (its replay)
and recovers every schedule. After each cut: nothing acknowledged is lost,
no store reports damage, and what survives is a prefix of what was written.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shell.definition_store import DefinitionStore
from shell.durable import GroupCommit
from shell.history_store import HistoryStore
from shell.journal import CommitJournal
from shell.runtime_store import RuntimeStore
from shell.sim.disk import SIM_STORE_ROOT, PowerCut, SimDisk

from .figures import record
from .points import crash_and_cut, sync_points

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
ROOT = SIM_STORE_ROOT
SCHEDULES = ("a", "b")
BATCHES = 4


class _Acks:
    """What the scenario was told is durable."""

    def __init__(self) -> None:
        self.revisions: dict[str, int] = {}
        self.rows: dict[str, int] = {}
        self.runtime: dict[str, str] = {}


def _scenario(disk: SimDisk, acks: _Acks) -> None:
    definitions = DefinitionStore(ROOT, disk=disk)
    for schedule_id in SCHEDULES:
        definitions.create(schedule_id, {"x": 1}, at=T0)
        acks.revisions[schedule_id] = 1
    journal = CommitJournal(ROOT, disk=disk, checkpoint_at_bytes=1500, checkpoint_after_s=0)
    journal.open()
    history, runtime = HistoryStore(ROOT, disk=disk), RuntimeStore(ROOT, disk=disk)
    for schedule_id in SCHEDULES:
        history.recover(schedule_id)
        runtime.load(schedule_id)
    for i in range(BATCHES):
        instant = T0 + timedelta(minutes=i + 1)
        batch = GroupCommit(journal=journal)
        for schedule_id in SCHEDULES:
            history.append_decision(
                schedule_id,
                instant=instant,
                status="skipped-misfire",
                recorded_at=instant,
                batch=batch,
            )
            runtime.stage(
                batch,
                schedule_id,
                watermark=instant,
                held=None,
                lifecycle_seq=1,
                written_at=instant,
            )
        batch.commit()
        for schedule_id in SCHEDULES:
            acks.rows[schedule_id] = i + 1
            acks.runtime[schedule_id] = instant.isoformat()
        if i == 1:
            definitions.apply_change("a", "updated", at=instant, definition={"x": 2})
            acks.revisions["a"] = 2
    journal.close()


POINTS = sync_points(lambda disk: _scenario(disk, _Acks()))
MODES: tuple[PowerCut, ...] = ("all", "none", "some")
CASES = [(point, n, mode) for point, n in POINTS for mode in MODES]


def _check_recovered(disk: SimDisk, acks: _Acks) -> None:
    CommitJournal(ROOT, disk=disk).open()
    definitions = DefinitionStore(ROOT, disk=disk)
    history, runtime = HistoryStore(ROOT, disk=disk), RuntimeStore(ROOT, disk=disk)
    for schedule_id in definitions.list_ids():
        loaded = definitions.load(schedule_id, repair=True)
        assert not loaded.problems, loaded.problems
        assert loaded.snapshot is not None
        assert loaded.snapshot["revision"] >= acks.revisions.get(schedule_id, 0)
        recovered = history.recover(schedule_id)
        assert not recovered.problems, recovered.problems
        rows, _ = history.page(schedule_id, limit=100)
        assert len(rows) >= acks.rows.get(schedule_id, 0)
        instants = [row["instant"] for row in rows]
        assert instants == sorted(instants)
        state = runtime.load(schedule_id)
        assert state.problem is None, state.problem
        if schedule_id in acks.runtime:
            assert state.record is not None
    assert set(acks.revisions) <= set(definitions.list_ids())


@pytest.mark.parametrize(("point", "occurrence", "mode"), CASES)
def test_a_power_cut_at_any_write_loses_nothing_acknowledged(
    point: str, occurrence: int, mode: PowerCut
) -> None:
    acks = _Acks()
    disk = crash_and_cut(lambda disk: _scenario(disk, acks), point, occurrence, mode)
    _check_recovered(disk, acks)


def test_power_cut_figures() -> None:
    record(
        "power cuts (simulated disk, real stores and journal)",
        f"{len(POINTS)} crash points x {len(MODES)} power cuts (all, none, some of the"
        f" unsynced writes lost) = {len(CASES)} cases",
    )
