"""The file backend's recovery reader: every schedule read when the ids are
listed, one kind of read at a time, and a read that raises failing the
recovery at its schedule, after the schedules before it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shell.file_backend import FileBackend
from shell.history_store import HistoryStore
from shell.runtime_store import RuntimeStore
from shell.store_ports import ScheduleInputs
from tests.shell.history_helpers import T0, create, decide


def _store(root: Path) -> FileBackend:
    create(root, "a", "b", "c")
    history = HistoryStore(root)
    runtime = RuntimeStore(root)
    for schedule_id in ("a", "b", "c"):
        decide(history, schedule_id, 1)
        runtime.write(schedule_id, watermark=T0, held=None, lifecycle_seq=1, written_at=T0)
    history.close()
    return FileBackend(root)


async def test_every_schedule_is_read_when_the_ids_are_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = _store(tmp_path)
    calls: list[tuple[str, str]] = []
    recover, load = HistoryStore.recover, RuntimeStore.load

    def history_spy(store: HistoryStore, schedule_id: str, **options: Any) -> Any:
        calls.append(("history", schedule_id))
        return recover(store, schedule_id, **options)

    def runtime_spy(store: RuntimeStore, schedule_id: str) -> Any:
        calls.append(("runtime", schedule_id))
        return load(store, schedule_id)

    monkeypatch.setattr(HistoryStore, "recover", history_spy)
    monkeypatch.setattr(RuntimeStore, "load", runtime_spy)
    reader = backend.recovery_reader(at_start=False)
    assert await reader.schedule_ids() == ["a", "b", "c"]
    assert calls == [
        ("history", "a"),
        ("history", "b"),
        ("history", "c"),
        ("runtime", "a"),
        ("runtime", "b"),
        ("runtime", "c"),
    ]
    for schedule_id in ("a", "b", "c"):
        read = await reader.read(schedule_id)
        assert isinstance(read, ScheduleInputs)
        assert read.recovered.occurrences == 1
        assert read.runtime.record is not None
    assert len(calls) == 6  # handed over, not read again


async def test_a_read_that_raises_fails_at_its_schedule_after_those_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = _store(tmp_path)
    recovered: list[str] = []
    loaded: list[str] = []
    recover, load = HistoryStore.recover, RuntimeStore.load

    def history_spy(store: HistoryStore, schedule_id: str, **options: Any) -> Any:
        recovered.append(schedule_id)
        if schedule_id == "b":
            raise OSError(5, "I/O error")
        return recover(store, schedule_id, **options)

    def runtime_spy(store: RuntimeStore, schedule_id: str) -> Any:
        loaded.append(schedule_id)
        return load(store, schedule_id)

    monkeypatch.setattr(HistoryStore, "recover", history_spy)
    monkeypatch.setattr(RuntimeStore, "load", runtime_spy)
    reader = backend.recovery_reader(at_start=False)
    assert await reader.schedule_ids() == ["a", "b", "c"]
    # The schedules after the one that failed are not read any further.
    assert recovered == ["a", "b"]
    assert loaded == ["a"]
    assert isinstance(await reader.read("a"), ScheduleInputs)
    with pytest.raises(OSError, match="I/O error"):
        await reader.read("b")
