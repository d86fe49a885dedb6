"""The file stores refuse the same bad records with the same reason on the
real disk and on the simulated one the deterministic simulation runs them
over (`shell.sim.disk.SimDisk`): the simulation sees the stores' own rules."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from shell.definition_store import DefinitionStore
from shell.history_store import HistoryStore
from shell.sim.disk import SIM_STORE_ROOT, SimDisk
from shell.store_format import ScheduleFiles

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def _line(**fields: Any) -> bytes:
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def _decision(seq: int, minute: int, **extra: Any) -> bytes:
    return _line(
        seq=seq,
        instant=f"2024-01-01T00:{minute:02d}:00Z",
        status="skipped-misfire",
        recorded_at="2024-01-01T05:00:00Z",
        **extra,
    )


SNAPSHOT = {"deployment_id": "d", "inputs": {}, "max_steps": None, "revision": 1}
HISTORY_DAMAGE = [
    ("bad revision", [_decision(0, 1, revision=0)], "revision must be a positive integer"),
    ("string revision", [_decision(0, 1, revision="1")], "revision must be a positive integer"),
    (
        "span on a count-1 row",
        [_decision(0, 1, first_instant="2024-01-01T00:00:00Z")],
        "first_instant/last_instant only belong to a row with count > 1",
    ),
    (
        "status backwards",
        [
            _line(
                seq=0,
                instant="2024-01-01T00:01:00Z",
                status="admitted",
                recorded_at="2024-01-01T05:00:00Z",
                run_id="run-1",
                revision=1,
                snapshot=SNAPSHOT,
            ),
            _line(
                seq=0,
                update=True,
                instant="2024-01-01T00:01:00Z",
                status="running",
                recorded_at="2024-01-01T05:00:01Z",
                run_id="run-1",
            ),
            _line(
                seq=0,
                update=True,
                instant="2024-01-01T00:01:00Z",
                status="admitted",
                recorded_at="2024-01-01T05:00:02Z",
                run_id="run-1",
            ),
        ],
        "status went backwards from running to admitted for seq 0",
    ),
]


@pytest.mark.parametrize(
    ("name", "lines", "reason"), HISTORY_DAMAGE, ids=[d[0] for d in HISTORY_DAMAGE]
)
def test_history_rows_are_refused_alike(
    tmp_path: Path, name: str, lines: list[bytes], reason: str
) -> None:
    DefinitionStore(tmp_path).create("s1", {"x": 1}, at=T0)
    Path(ScheduleFiles.of(tmp_path, "s1").history).write_bytes(b"".join(lines))
    real = HistoryStore(tmp_path).recover("s1").problems

    disk = SimDisk()
    DefinitionStore(SIM_STORE_ROOT, disk=disk).create("s1", {"x": 1}, at=T0)
    _put(disk, ScheduleFiles.of(SIM_STORE_ROOT, "s1").history, b"".join(lines))
    sim = HistoryStore(SIM_STORE_ROOT, disk=disk).recover("s1").problems

    assert len(real) == len(sim) == 1, name
    assert reason in real[0].reason
    assert real[0].reason == sim[0].reason
    assert real[0].file == sim[0].file


def _put(disk: SimDisk, path: str, data: bytes) -> None:
    file = disk.open(path, write=True, create=True)
    file.truncate(0)
    file.write_at(data, 0)
    file.close()


def _created() -> bytes:
    return _line(seq=1, kind="created", at="2024-01-01T00:00:00Z", revision=1, definition={"x": 1})


LIFECYCLE_DAMAGE = [
    (
        "bad revision",
        [_line(seq=2, kind="paused", at="2024-01-01T00:01:00Z", revision=2)],
        "revision 2 where 1 was expected",
    ),
    (
        "seq gap",
        [_line(seq=3, kind="paused", at="2024-01-01T00:01:00Z", revision=1)],
        "seq 3 where 2 was expected (missing or duplicate)",
    ),
    (
        "resumed while not paused",
        [_line(seq=2, kind="resumed", at="2024-01-01T00:01:00Z", revision=1)],
        "resumed while not paused",
    ),
]


@pytest.mark.parametrize(
    ("name", "lines", "reason"), LIFECYCLE_DAMAGE, ids=[d[0] for d in LIFECYCLE_DAMAGE]
)
def test_lifecycle_records_are_refused_alike(
    tmp_path: Path, name: str, lines: list[bytes], reason: str
) -> None:
    DefinitionStore(tmp_path).create("s1", {"x": 1}, at=T0)
    Path(ScheduleFiles.of(tmp_path, "s1").lifecycle).write_bytes(_created() + b"".join(lines))
    real = DefinitionStore(tmp_path).load("s1").problems

    disk = SimDisk()
    DefinitionStore(SIM_STORE_ROOT, disk=disk).create("s1", {"x": 1}, at=T0)
    _put(disk, ScheduleFiles.of(SIM_STORE_ROOT, "s1").lifecycle, _created() + b"".join(lines))
    sim = DefinitionStore(SIM_STORE_ROOT, disk=disk).load("s1").problems

    assert len(real) == len(sim) == 1, name
    assert real[0].reason == sim[0].reason == reason
    assert real[0].record == sim[0].record
