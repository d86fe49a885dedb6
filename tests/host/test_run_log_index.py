"""The run log's index (`adapters/host/run_log_index.py`): a start after a
clean close takes each run's place from it and scans only what was written
since, and ends with what a scan of every segment gives; an index that
cannot be trusted is ignored, and every segment scanned."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from adapters.host import run_log
from adapters.host.persistence import complete
from adapters.host.run_log import FileRunLog
from adapters.host.run_log_index import INDEX_FILE, read_index
from adapters.host.runs import RunStore
from core.errors import InvalidState
from tests import run_log_files

from .test_run_log import NOW, _failed, _record


class Scans:
    """Where each segment scan of a load began (segment size, start)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.starts: list[tuple[int, int]] = []
        scan = run_log.scan_segment

        def spy(data: Any, start: int = 0) -> run_log.LogScan:
            self.starts.append((len(data), start))
            return scan(data, start)

        monkeypatch.setattr(run_log, "scan_segment", spy)


def _open(root: Path) -> tuple[RunStore, list[dict[str, Any]]]:
    store = RunStore(FileRunLog(root))
    return store, complete(store.load(lambda: NOW))


def _state(store: RunStore) -> list[tuple[str, str, str]]:
    """Every run as a page lists it, oldest first: id, status, updated."""
    runs: list[tuple[str, str, str]] = []
    cursor = None
    while True:
        page, cursor = store.page(None, cursor, 100)
        runs.extend((r.run_id, r.status, r.updated_at) for r in page)
        if cursor is None:
            return runs


async def _closed_store(root: Path) -> list[tuple[str, str, str]]:
    """Runs 1-6 finished, 7 admitted, 8 finished; closed cleanly."""
    store, _ = _open(root)
    await store.put_many([_failed(_record(n)) for n in range(1, 7)])
    await store.put_many([_record(7), _failed(_record(8))])
    store.close()
    assert (root / INDEX_FILE).exists()
    return _state(store)


async def test_a_start_after_a_clean_close_scans_nothing_the_index_covers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = await _closed_store(tmp_path)
    scans = Scans(monkeypatch)
    store, findings = _open(tmp_path)
    assert findings == []
    assert scans.starts == [(size, size) for size, _ in scans.starts]  # from each end
    assert _state(store) == before
    assert store.get("run-000007").status == "admitted"  # read whole: not finished
    assert store.get("run-000003") == _failed(_record(3))
    assert [r.run_id for r in store.page("admitted", None, 10)[0]] == ["run-000007"]


async def test_what_a_process_wrote_after_the_index_is_scanned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _closed_store(tmp_path)
    # A later process changes run 7 and 2, adds 9, and dies without closing.
    later, _ = _open(tmp_path)
    await later.put(_failed(_record(7)))
    await later.put(_failed(_record(2, updated_at="2026-03-02T09:05:00Z")))
    await later.put_many([_record(9)])
    expected = _state(later)
    scans = Scans(monkeypatch)
    store, findings = _open(tmp_path)
    assert findings == []
    assert scans.starts[-1] == (scans.starts[-1][0], 0)  # the later process's segment, whole
    assert _state(store) == expected
    assert store.get("run-000002").updated_at == "2026-03-02T09:05:00Z"
    assert store.get("run-000009").status == "admitted"


async def test_a_segment_compacted_after_the_index_is_found_in_its_copies(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, _ = _open(tmp_path)
    await store.put_many([_failed(_record(n)) for n in range(1, 4)])
    for second in range(8):  # superseded frames of run 4: most of the segment
        await store.put(_record(4, updated_at=f"2026-03-02T09:00:{second:02d}Z"))
    store.close()
    [covered] = run_log_files.segment_paths(tmp_path)
    # A later process's first write compacts the segment the index covers
    # (its live frames copied past what the index covered), then it dies.
    later, _ = _open(tmp_path)
    await later.put(_record(4, updated_at="2026-03-02T09:01:00Z"))
    assert not covered.exists()
    expected = _state(later)
    caplog.set_level(logging.WARNING)
    again, findings = _open(tmp_path)
    assert findings == [] and _state(again) == expected
    assert not [r for r in caplog.records if "index" in r.getMessage()]  # the index was used
    assert again.get("run-000001") == _failed(_record(1))


@pytest.mark.parametrize(
    "damage", ["garbage", "no object", "checksum", "shorter segment", "segment gone"]
)
async def test_an_index_that_cannot_be_trusted_is_ignored_and_every_segment_scanned(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    before = await _closed_store(tmp_path)
    index = tmp_path / INDEX_FILE
    [segment] = run_log_files.segment_paths(tmp_path)
    if damage == "garbage":
        index.write_bytes(b"not an index\n")
    elif damage == "no object":
        index.write_bytes(b'["a header that is no object"]\n')
    elif damage == "checksum":
        data = bytearray(index.read_bytes())
        data[-1] ^= 0xFF
        index.write_bytes(bytes(data))
    elif damage == "shorter segment":
        with segment.open("r+b") as handle:  # its last frame cut short
            handle.truncate(segment.stat().st_size - 10)
    else:
        segment.unlink()
    caplog.set_level(logging.WARNING)
    store, findings = _open(tmp_path)
    warnings = [r.getMessage() for r in caplog.records if "run log's index" in r.getMessage()]
    assert warnings and "scanning every segment" in warnings[0], warnings
    if damage in ("garbage", "no object", "checksum"):
        assert findings == [] and _state(store) == before
    elif damage == "shorter segment":
        # The scan reports the cut frame as a full scan does.
        assert [f["finding"] for f in findings] == ["torn-tail"]
        assert [run_id for run_id, _, _ in _state(store)] == [f"run-{n:06d}" for n in range(1, 8)]
    else:
        assert _state(store) == []


async def test_a_finished_run_damaged_after_the_close_fails_closed_when_read(
    tmp_path: Path,
) -> None:
    """Frames the index covers are not checked at the start: a finished run
    damaged in place is found when it is read, an unfinished one at the
    start (it is read whole then)."""
    await _closed_store(tmp_path)
    run_log_files.damage_last_frame(tmp_path, "run-000003", at=40)
    run_log_files.damage_last_frame(tmp_path, "run-000007", at=40)
    store, findings = _open(tmp_path)
    assert [(f["run_id"], f["finding"]) for f in findings] == [("run-000007", "unreadable")]
    with pytest.raises(InvalidState, match="damaged in place"):
        store.get("run-000003")
    assert store.get("run-000004") == _failed(_record(4))


async def test_the_index_reads_back_as_written_and_refuses_another_machines_arrays(
    tmp_path: Path,
) -> None:
    await _closed_store(tmp_path)
    index = read_index(tmp_path)
    assert index is not None and not isinstance(index, str)
    assert index.unfinished == (7,)
    assert [number for number, _ in index.places.items()] == list(range(1, 9))
    assert {row[3] for _, row in index.places.items()} == {0, 3}  # admitted, failed
    path = tmp_path / INDEX_FILE
    header, _, body = path.read_bytes().partition(b"\n")
    path.write_bytes(header.replace(b'"item_sizes":[', b'"item_sizes":[9,') + b"\n" + body)
    assert read_index(tmp_path) == "its arrays are not this machine's"


async def test_a_close_after_damage_was_found_writes_no_index(tmp_path: Path) -> None:
    await _closed_store(tmp_path)
    (tmp_path / INDEX_FILE).unlink()
    run_log_files.damage_last_frame(tmp_path, "run-000003", at=40)
    store, findings = _open(tmp_path)
    assert [f["run_id"] for f in findings] == ["run-000003"]
    store.close()
    assert not (tmp_path / INDEX_FILE).exists()  # the next start scans, and reports it again


async def test_a_segment_rolled_writes_the_index_so_a_crash_rescans_little(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_log, "ROLL_AT_BYTES", 4096)
    store, _ = _open(tmp_path)
    for number in range(1, 20):  # several segments rolled, never closed: a crash
        await store.put_many([_failed(_record(number))])
    await store.put_many([_record(20)])
    assert len(run_log_files.segment_paths(tmp_path)) > 2
    index = read_index(tmp_path)
    assert index is not None and not isinstance(index, str)
    expected = _state(store)
    scans = Scans(monkeypatch)
    again, findings = _open(tmp_path)
    assert findings == [] and _state(again) == expected
    # Only the segment written after the last roll was scanned whole.
    assert [start for _, start in scans.starts if start == 0] == [0]
    assert again.get("run-000020").status == "admitted"


async def test_the_first_write_after_a_long_scan_writes_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store never closed cleanly (every start a crash) still gets an
    index: the first write of a process whose load scanned more than a
    segment's worth writes it; a load alone writes nothing."""
    store, _ = _open(tmp_path)
    await store.put_many([_failed(_record(n)) for n in range(1, 30)])
    monkeypatch.setattr(run_log, "ROLL_AT_BYTES", 1024)
    reader, _ = _open(tmp_path)
    assert not (tmp_path / INDEX_FILE).exists()
    await reader.put_many([_record(30)])
    assert (tmp_path / INDEX_FILE).exists()
    scans = Scans(monkeypatch)
    again, findings = _open(tmp_path)
    assert findings == [] and _state(again) == _state(reader)
    assert [start for _, start in scans.starts if start == 0] == [0]  # the last segment only
