"""Helpers that build schedule histories for the store tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from shell.definition_store import DefinitionStore
from shell.durable import GroupCommit
from shell.history_store import HistoryStore
from shell.store_format import ScheduleFiles

T0 = datetime(2024, 1, 1, tzinfo=UTC)
SNAPSHOT: dict[str, Any] = {
    "deployment_id": "d.default",
    "inputs": {"n": 1},
    "max_steps": None,
    "revision": 1,
}


class SchedulePaths:
    """`pathlib` views of one schedule's files, for tests that poke at them."""

    def __init__(self, root: Path, schedule_id: str) -> None:
        files = ScheduleFiles.of(root, schedule_id)
        self.directory = Path(files.directory)
        self.definition = Path(files.definition)
        self.lifecycle = Path(files.lifecycle)
        self.runtime = Path(files.runtime)
        self.history = Path(files.history)
        self.history_index = Path(files.history_index)


def minute(i: int) -> datetime:
    return T0 + timedelta(minutes=i)


def create(root: Path, *schedule_ids: str) -> None:
    definitions = DefinitionStore(root)
    for schedule_id in schedule_ids:
        definitions.create(schedule_id, {"x": 1}, at=T0)


def decide(
    history: HistoryStore,
    schedule_id: str,
    i: int,
    status: str = "skipped-misfire",
    *,
    batch: GroupCommit | None = None,
    **extra: Any,
) -> int:
    if status == "admitted":
        extra.setdefault("snapshot", SNAPSHOT)
    return history.append_decision(
        schedule_id, instant=minute(i), status=status, recorded_at=minute(i), batch=batch, **extra
    )


def move(
    history: HistoryStore,
    schedule_id: str,
    i: int,
    status: str,
    *,
    batch: GroupCommit | None = None,
    run_id: str | None = None,
    reason: str | None = None,
) -> int:
    return history.append_transition(
        schedule_id,
        instant=minute(i),
        status=status,
        run_id=run_id,
        reason=reason,
        recorded_at=minute(i) + timedelta(seconds=30),
        batch=batch,
    )


def all_rows(history: HistoryStore, schedule_id: str, limit: int = 100) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cursor = None
    while True:
        page, cursor = history.page(schedule_id, limit=limit, cursor=cursor)
        rows.extend(page)
        if cursor is None:
            return rows
