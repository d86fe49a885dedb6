"""Runs' claims kept by the run log (`adapters/host/run_claims.py`): a
listing of every run's claim, as a scheduler's start with no checkpoint asks
for it, reads no record the log wrote or read before, across a clean close;
what the table cannot give back exactly is read from the record as before."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import pytest

from adapters.host.number_table import NumberTable
from adapters.host.run_claims import CLAIM_COLUMNS, UNKNOWN_ORIGIN, ClaimTable
from adapters.host.run_log import FileRunLog
from adapters.host.run_log_index import INDEX_FILE, read_index
from adapters.host.runs import RunStore
from core.errors import InvalidState
from tests import run_log_files

from .test_run_log import _failed, _record
from .test_run_log_index import _open

CALENDAR = {
    "instant": "2026-03-02T09:00:00Z",
    "kind": "schedule",
    "revision": 3,
    "schedule_id": "nightly",
}
TRIGGER = {**CALENDAR, "instant": "2026-03-02T09:00:00.000001Z", "action": "trigger"}
BACKFILL = {**CALENDAR, "instant": "1969-07-20T20:17:40Z", "action": "backfill"}
MANUAL = {"kind": "manual"}
# Origins the table cannot give back as the record holds them.
OFFSET_TEXT = {**CALENDAR, "instant": "2026-03-02T09:00:00+00:00"}
UNKNOWN_KEY = {**CALENDAR, "note": "x"}
ORIGINS: list[Any] = [MANUAL, CALENDAR, TRIGGER, BACKFILL, None, OFFSET_TEXT, UNKNOWN_KEY]
KEPT = 4  # the first four


@pytest.mark.parametrize("origin", ORIGINS[:KEPT])
def test_an_origin_the_table_keeps_comes_back_as_it_was(origin: dict[str, Any]) -> None:
    table = ClaimTable()
    assert table.learn(7, origin)
    assert table.origin(7) == origin and 7 in table
    assert list(table.origin(7)) == list(origin)  # the keys in the record's order


@pytest.mark.parametrize(
    "origin",
    [
        *ORIGINS[KEPT:],
        {**CALENDAR, "action": "replay"},
        {**CALENDAR, "action": None},
        {**CALENDAR, "action": ["trigger"]},
        {**CALENDAR, "revision": 1 << 32},
        {**CALENDAR, "revision": True},
        {**CALENDAR, "instant": "yesterday"},
        {"kind": "manual", "extra": 1},
        {"kind": "other"},
        "manual",
    ],
)
def test_an_origin_the_table_cannot_give_back_exactly_is_not_kept(origin: Any) -> None:
    table = ClaimTable()
    assert not table.learn(7, origin)
    assert table.origin(7) is UNKNOWN_ORIGIN and 7 not in table


@pytest.mark.parametrize(
    "row", [(2, 0, 1, 0), (1, 0, 1, 3), (1, 1 << 62, 1, 0), (0, 5, 0, 0), (0, 0, 0, 1)]
)
def test_a_row_out_of_range_is_no_claim(row: tuple[int, ...]) -> None:
    """An index's row that names no schedule, action or instant the table
    can give back (checked per row listed, not at each start) is read from
    the record instead."""
    rows = NumberTable(CLAIM_COLUMNS)
    rows.set(3, *row)
    assert ClaimTable(rows, ["nightly"]).origin(3) is UNKNOWN_ORIGIN


def _with(number: int, origin: Any, *, finished: bool = True) -> Any:
    record = _record(number).model_copy(update={"origin": origin})
    return _failed(record) if finished else record


async def _store_of_every_origin(root: Path) -> list[tuple[str, str, Any]]:
    """Runs 1-7 finished, one per origin of `ORIGINS`, and 8 admitted;
    closed cleanly. Every run's claim."""
    store, _ = _open(root)
    await store.put_many([_with(n, o) for n, o in enumerate(ORIGINS, 1)])
    await store.put_many([_with(8, CALENDAR, finished=False)])
    claims = await _claims(store)
    store.close()
    return claims


async def _claims(store: RunStore) -> list[tuple[str, str, Any]]:
    listed: list[tuple[str, str, Any]] = []
    cursor = None
    while True:
        page, cursor = await store.fetch_claims(cursor, 3)
        listed.extend(page)
        if cursor is None:
            return listed


class Reads:
    """The run numbers whose frames the log read again."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.numbers: list[int] = []
        read = FileRunLog._origin_read

        def spy(log: FileRunLog, number: int) -> Any:
            self.numbers.append(number)
            return read(log, number)

        monkeypatch.setattr(FileRunLog, "_origin_read", spy)


async def test_after_a_clean_close_the_claims_are_listed_without_reading_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = await _store_of_every_origin(tmp_path)
    assert expected == [
        (f"run-{n:06d}", "failed", origin) for n, origin in enumerate(ORIGINS, 1)
    ] + [("run-000008", "admitted", CALENDAR)]
    reads = Reads(monkeypatch)
    store, findings = _open(tmp_path)
    assert findings == []
    assert await _claims(store) == expected
    # Only the runs whose origins the table cannot give back exactly.
    assert reads.numbers == [5, 6, 7]


async def test_an_index_without_claims_is_read_and_the_claims_read_are_kept_at_the_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index of the first format (before claims were kept) is used as one
    that knows no claim: the listing reads each record, and the log keeps
    what it read for the index its next close writes."""
    expected = await _store_of_every_origin(tmp_path)
    _rewrite_as_first_format(tmp_path / INDEX_FILE)
    index = read_index(tmp_path)
    assert index is not None and not isinstance(index, str) and len(index.claims) == 0
    reads = Reads(monkeypatch)
    store, findings = _open(tmp_path)
    assert findings == []
    assert await _claims(store) == expected
    assert reads.numbers == [1, 2, 3, 4, 5, 6, 7]
    store.close()
    reads.numbers.clear()
    again, _ = _open(tmp_path)
    assert await _claims(again) == expected
    assert reads.numbers == [5, 6, 7]


def _rewrite_as_first_format(path: Path) -> None:
    header_line, _, body = path.read_bytes().partition(b"\n")
    header = json.loads(header_line)
    claims = header.pop("claims")
    kept = len(body) - claims["rows"] * (1 + sum(claims["item_sizes"]))
    body = body[:kept]
    header.update(format="wf-run-log-index/1", crc32=zlib.crc32(body))
    path.write_bytes(json.dumps(header).encode() + b"\n" + body)


async def test_an_index_whose_claims_cannot_be_read_is_ignored(tmp_path: Path) -> None:
    await _store_of_every_origin(tmp_path)
    path = tmp_path / INDEX_FILE
    header_line, _, body = path.read_bytes().partition(b"\n")
    header = json.loads(header_line)
    header["claims"]["schedule_ids"] = ["nightly", "nightly"]
    path.write_bytes(json.dumps(header).encode() + b"\n" + body)
    assert read_index(tmp_path) == "a claims' schedule id is there twice"


async def test_a_run_damaged_after_the_close_is_listed_by_its_claim_and_fails_closed_when_read(
    tmp_path: Path,
) -> None:
    """The claim a run made is listed from the index, as the frames the index
    covers are not checked at a start; its record fails closed when read."""
    expected = await _store_of_every_origin(tmp_path)
    run_log_files.damage_last_frame(tmp_path, "run-000002", at=40)
    store, findings = _open(tmp_path)
    assert findings == []
    assert await _claims(store) == expected
    with pytest.raises(InvalidState, match="damaged in place"):
        store.get("run-000002")


async def test_a_run_written_after_the_index_is_read_once_then_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start after a crash scans what was written since the index: those
    runs' claims are read from their records (the log wrote them in another
    process) and kept from then on."""
    await _store_of_every_origin(tmp_path)
    store, _ = _open(tmp_path)
    await store.put_many([_with(9, TRIGGER)])  # never closed: a crash
    reads = Reads(monkeypatch)
    again, _ = _open(tmp_path)
    claims = await _claims(again)
    assert claims[-1] == ("run-000009", "failed", TRIGGER)
    assert reads.numbers == [5, 6, 7, 9]
    reads.numbers.clear()
    assert await _claims(again) == claims
    assert reads.numbers == [5, 6, 7]
