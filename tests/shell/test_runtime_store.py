"""Runtime store: watermark, held candidate, consumed lifecycle seq."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from core.errors import InvalidInput, NotFound
from shell.definition_store import DefinitionStore
from shell.durable import GroupCommit
from shell.runtime_store import COMPACT_AT_BYTES, RuntimeLoad, RuntimeStore
from tests.shell.history_helpers import SchedulePaths

T0 = "2024-05-01T10:00:00Z"


@pytest.fixture
def store(store_root: Path) -> RuntimeStore:
    DefinitionStore(store_root).create("s1", {"x": 1}, at=T0)
    return RuntimeStore(store_root)


def test_absent_runtime_loads_as_none(store: RuntimeStore) -> None:
    loaded = store.load("s1")
    assert loaded.record is None and loaded.problem is None


def test_write_and_load_round_trip(store: RuntimeStore) -> None:
    written = store.write(
        "s1", watermark="2024-05-01T10:05:00+00:00", held=None, lifecycle_seq=1, written_at=T0
    )
    assert written == {
        "format": 1,
        "watermark": "2024-05-01T10:05:00Z",
        "held": None,
        "waiting": [],
        "lifecycle_seq": 1,
        "written_at": T0,
    }
    assert store.load("s1").record == written


def test_waiting_instants_are_kept_sorted_and_unique(store: RuntimeStore) -> None:
    written = store.write(
        "s1",
        watermark=T0,
        held=None,
        waiting=["2024-05-01T10:02:00Z", "2024-05-01T10:01:00.5+00:00", "2024-05-01T10:02:00Z"],
        lifecycle_seq=1,
        written_at=T0,
    )
    assert written["waiting"] == ["2024-05-01T10:01:00.500000Z", "2024-05-01T10:02:00Z"]
    loaded = store.load("s1").record
    assert loaded is not None and loaded["waiting"] == written["waiting"]


def test_records_written_before_waiting_existed_read_as_empty(
    store: RuntimeStore, store_root: Path
) -> None:
    SchedulePaths(store_root, "s1").runtime.write_bytes(
        b'{"format":1,"watermark":"2024-05-01T10:00:00Z","held":null,'
        b'"lifecycle_seq":0,"written_at":"2024-05-01T10:00:00Z"}\n'
    )
    loaded = store.load("s1").record
    assert loaded is not None and loaded["waiting"] == []


def test_stage_writes_only_at_commit(store: RuntimeStore, store_root: Path) -> None:
    batch = GroupCommit()
    store.stage(batch, "s1", watermark=T0, held=T0, lifecycle_seq=2, written_at=T0)
    assert store.load("s1").record is None
    batch.commit()
    record = store.load("s1").record
    assert record is not None and record["held"] == T0 and record["lifecycle_seq"] == 2


def test_bad_values_name_each_field(store: RuntimeStore) -> None:
    with pytest.raises(InvalidInput) as caught:
        store.write(
            "s1",
            watermark="noon",
            held="2024-01-01T00:00:00",
            waiting=["2024-01-01T00:00:00Z", "later"],
            lifecycle_seq=-1,
            written_at=T0,
        )
    assert [p.field for p in caught.value.problems] == [
        "watermark",
        "held",
        "lifecycle_seq",
        "waiting[1]",
    ]
    assert store.load("s1").record is None


def test_unknown_schedule(store: RuntimeStore) -> None:
    with pytest.raises(NotFound):
        store.write("nope", watermark=T0, held=None, lifecycle_seq=0, written_at=T0)


@pytest.mark.parametrize(
    "content",
    [
        b"{oops",
        b'{"format":2}',
        b'{"format":1,"watermark":"x","held":null,"lifecycle_seq":0,"written_at":"x"}',
        b'{"format":1,"watermark":"2024-05-01T10:00:00Z","held":null,"waiting":["x"],'
        b'"lifecycle_seq":0,"written_at":"2024-05-01T10:00:00Z"}',
    ],
)
def test_damaged_runtime_is_a_problem(
    store: RuntimeStore, store_root: Path, content: bytes
) -> None:
    store.write("s1", watermark=T0, held=None, lifecycle_seq=1, written_at=T0)
    path = SchedulePaths(store_root, "s1").runtime
    path.write_bytes(path.read_bytes() + content + b"\n")
    loaded = store.load("s1")
    assert loaded.record is None
    assert loaded.problem is not None
    assert loaded.problem.file == "schedules/s1/runtime.jsonl"
    assert loaded.problem.record == f"last record (ends at byte {path.stat().st_size})"
    assert "unreadable runtime record" in loaded.problem.reason


def test_last_record_wins_and_a_torn_one_is_ignored_then_dropped(
    store: RuntimeStore, store_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store.write("s1", watermark=T0, held=None, lifecycle_seq=1, written_at=T0)
    store.write("s1", watermark="2024-05-01T10:01:00Z", held=None, lifecycle_seq=2, written_at=T0)
    path = SchedulePaths(store_root, "s1").runtime
    with path.open("ab") as f:
        f.write(b'{"format":1,"watermark":"2024-05-01T10:0')
    record = store.load("s1").record
    assert record is not None and record["lifecycle_seq"] == 2
    owner = RuntimeStore(store_root)
    with caplog.at_level(logging.WARNING):
        owner.write(
            "s1", watermark="2024-05-01T10:02:00Z", held=None, lifecycle_seq=3, written_at=T0
        )
    assert "torn final line" in caplog.text
    assert path.read_bytes().count(b"\n") == 3
    assert path.read_bytes().endswith(b"}\n")
    record = owner.load("s1").record
    assert record is not None and record["lifecycle_seq"] == 3


def test_only_a_torn_record_reads_as_absent(store: RuntimeStore, store_root: Path) -> None:
    SchedulePaths(store_root, "s1").runtime.write_bytes(b'{"format":1,"water')
    assert store.load("s1") == RuntimeLoad(schedule_id="s1", record=None)


def test_log_is_compacted_to_its_latest_record(store: RuntimeStore, store_root: Path) -> None:
    path = SchedulePaths(store_root, "s1").runtime
    largest, seq = 0, 0
    # Records are ~150 bytes: the log must compact before twice the base threshold.
    for seq in range(1, 2 * COMPACT_AT_BYTES // 100):
        batch = GroupCommit()
        store.stage(batch, "s1", watermark=T0, held=None, lifecycle_seq=seq, written_at=T0)
        batch.commit()
        size = path.stat().st_size
        if size < largest:
            break
        largest = size
    else:
        pytest.fail("the runtime log was never compacted")
    assert COMPACT_AT_BYTES <= largest < 2 * COMPACT_AT_BYTES
    assert path.read_bytes().count(b"\n") == 1
    record = RuntimeStore(store_root).load("s1").record
    assert record is not None and record["lifecycle_seq"] == seq
    # And appending goes on after it.
    store.write("s1", watermark=T0, held=None, lifecycle_seq=seq + 1, written_at=T0)
    assert path.read_bytes().count(b"\n") == 2


def test_staging_twice_in_one_batch_keeps_the_latest(store: RuntimeStore) -> None:
    batch = GroupCommit()
    store.stage(batch, "s1", watermark=T0, held=None, lifecycle_seq=1, written_at=T0)
    store.stage(batch, "s1", watermark=T0, held=None, lifecycle_seq=2, written_at=T0)
    with pytest.raises(RuntimeError, match="another batch"):
        store.stage(GroupCommit(), "s1", watermark=T0, held=None, lifecycle_seq=3, written_at=T0)
    with pytest.raises(RuntimeError, match="open batch"):
        store.write("s1", watermark=T0, held=None, lifecycle_seq=3, written_at=T0)
    batch.commit()
    record = store.load("s1").record
    assert record is not None and record["lifecycle_seq"] == 2
    store.write("s1", watermark=T0, held=None, lifecycle_seq=3, written_at=T0)
    record = store.load("s1").record
    assert record is not None and record["lifecycle_seq"] == 3


def test_aborted_stage_writes_nothing(store: RuntimeStore, store_root: Path) -> None:
    store.write("s1", watermark=T0, held=None, lifecycle_seq=1, written_at=T0)
    before = SchedulePaths(store_root, "s1").runtime.read_bytes()
    batch = GroupCommit()
    store.stage(batch, "s1", watermark=T0, held=None, lifecycle_seq=2, written_at=T0)
    batch.abort()
    assert SchedulePaths(store_root, "s1").runtime.read_bytes() == before
    store.write("s1", watermark=T0, held=None, lifecycle_seq=3, written_at=T0)
    record = store.load("s1").record
    assert record is not None and record["lifecycle_seq"] == 3
