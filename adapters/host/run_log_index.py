"""The run log's index: where each run's last frame was when the log last
wrote it, so that a start reads it instead of scanning every segment.

A start without it scans every frame of every segment: about 5 us a run
kept, 5.0 s at a million runs, at every start of the server for as long as
the store lives. The log (`run_log.FileRunLog`) writes
`<store root>/run-log.index` at its clean close, each time it seals a full
segment, and at the first write after a load that scanned a segment's
worth (so that a store whose every start follows a crash gets one too;
never at a load, which may be a reader's): per run number, the place of
its last frame (segment, offset, size) and its finished status's code (0:
not finished), as the arrays the log keeps them in, the runs' claims the
log knows (`run_claims.py`: a start with no checkpoint lists them without
reading every record again), and the size of every segment it covered. A
start takes the
arrays as they are, and scans only what was written since: the bytes past
each covered segment's size, and every segment not covered.

Why that is sound: a segment is only appended to, by one process, and then
never changed; the only other change is compaction, which copies a
segment's live frames to the active segment (past what the index covered)
before removing it. So a covered segment that still exists with at least
its covered size holds the frames the index places, and a run whose place
lies in a removed segment has a later frame among those scanned. The start
checks both, and scans every segment as before when either fails, when a
segment is shorter than covered (a crash that lost a write the index
counted, a truncation), and when the file fails its checksum or is of
another format.

What it gives up: frames in the covered bytes are not checked at a start.
A finished run's frame is checked when it is read (`FileRunLog.reread`: a
frame damaged in place fails the run closed, as a start would have), an
unfinished run's at the start (it is read whole then), and a segment is
compacted only after its live frames are checked. Damage found by a start
(a damaged segment, bytes naming no run) keeps the next close from
writing an index, so the start after it scans everything and reports it
again.

The file: a header line of JSON (format, the body's checksum, the row
count, each array's item size, the covered segments' sizes and live bytes,
the unfinished runs' numbers, the claims' row count and schedule ids), then
the presence bytes and each column's bytes of the places, then the same of
the claims. Written atomically; never trusted unchecked. An index of the
first format (no claims) is read as one that knows no claim: the listing
reads those runs' records, and learns their claims for the next index.
"""

from __future__ import annotations

import itertools
import json
import os
import zlib
from array import array
from dataclasses import dataclass
from typing import Any, Final

from shell.disk import OS_DISK, Disk
from shell.durable import atomic_write_bytes

from .number_table import NumberTable
from .run_claims import CLAIM_COLUMNS, ClaimTable

__all__ = ["INDEX_COLUMNS", "INDEX_FILE", "RunLogIndex", "read_index", "write_index"]

INDEX_FILE: Final = "run-log.index"
_FORMAT: Final = "wf-run-log-index/2"
# The first format: the same without the claims.
_FORMAT_1: Final = "wf-run-log-index/1"
# Segment, offset and size of a run's last frame, and its finished code.
INDEX_COLUMNS: Final = "IQIB"
# The codes a finished column may hold (`records.FINISHED_CODES`).
_CODES: Final = b"\x00\x01\x02\x03"
# A byte to 1 when it is 0, else to 0.
_IS_ZERO: Final = bytes([1] + [0] * 255)


@dataclass(frozen=True, slots=True)
class RunLogIndex:
    """What the log wrote: the places by run number, the bytes each covered
    segment had and how many of them were live frames, the runs not
    finished, and the claims it knew."""

    places: NumberTable
    claims: ClaimTable
    sizes: dict[int, int]
    live: dict[int, int]
    unfinished: tuple[int, ...]


def write_index(
    store_root: str | os.PathLike[str],
    places: NumberTable,
    claims: ClaimTable,
    sizes: dict[int, int],
    live: dict[int, int],
    *,
    disk: Disk = OS_DISK,
) -> bool:
    """Write the index of `places` (a table of `INDEX_COLUMNS`) and `claims`
    atomically; False when the places cannot be exported (a number kept
    apart)."""
    exported = places.export()
    if exported is None:
        return False
    present, columns = exported
    claimed = claims.export() or (b"", tuple(b"" for _ in CLAIM_COLUMNS), [])
    # Present with a code of 0, by bytes: a pass in C, not a step per run.
    unset = columns[3].translate(_IS_ZERO)
    rows = len(present)
    both = int.from_bytes(present, "little") & int.from_bytes(unset, "little")
    unfinished = list(itertools.compress(range(rows), both.to_bytes(rows, "little")))
    body = b"".join((present, *columns, claimed[0], *claimed[1]))
    header = {
        "format": _FORMAT,
        "crc32": zlib.crc32(body),
        "rows": len(present),
        "item_sizes": [array(code).itemsize for code in INDEX_COLUMNS],
        "sizes": {str(segment): size for segment, size in sorted(sizes.items())},
        "live": {str(segment): size for segment, size in sorted(live.items())},
        "unfinished": unfinished,
        "claims": {
            "rows": len(claimed[0]),
            "item_sizes": [array(code).itemsize for code in CLAIM_COLUMNS],
            "schedule_ids": claimed[2],
        },
    }
    data = json.dumps(header, separators=(",", ":")).encode() + b"\n" + body
    atomic_write_bytes(os.path.join(store_root, INDEX_FILE), data, disk=disk)
    return True


def read_index(
    store_root: str | os.PathLike[str], *, disk: Disk = OS_DISK
) -> RunLogIndex | str | None:
    """The index left by the last clean close; None when there is none, and
    the reason when it cannot be trusted."""
    try:
        file = disk.open(os.path.join(store_root, INDEX_FILE))
    except FileNotFoundError:
        return None
    try:
        # One read of the whole file: tens of megabytes at a million runs.
        data = file.read_at(file.size(), 0)
    finally:
        file.close()
    try:
        return _parse(data)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return str(exc) or type(exc).__name__


def _parse(data: bytes) -> RunLogIndex:
    end_of_header = data.find(b"\n")
    if end_of_header < 0:
        raise ValueError("no header line")
    header: dict[str, Any] = json.loads(data[:end_of_header])
    # Views, not copies: the columns are copied once, into their arrays.
    body = memoryview(data)[end_of_header + 1 :]
    format_ = header.get("format")
    if format_ not in (_FORMAT, _FORMAT_1):
        raise ValueError(f"unknown format (this version reads {_FORMAT} and {_FORMAT_1})")
    if zlib.crc32(body) != header["crc32"]:
        raise ValueError("its body fails its checksum")
    rows = header["rows"]
    item_sizes = [array(code).itemsize for code in INDEX_COLUMNS]
    if type(rows) is not int or rows < 0 or header["item_sizes"] != item_sizes:
        raise ValueError("its arrays are not this machine's")
    claims_rows, claim_sizes, schedule_ids = 0, [], []
    if format_ == _FORMAT:
        claims_header = header["claims"]
        claims_rows = claims_header["rows"]
        claim_sizes = [array(code).itemsize for code in CLAIM_COLUMNS]
        schedule_ids = claims_header["schedule_ids"]
        if type(claims_rows) is not int or claims_rows < 0:
            raise ValueError("its claims have no row count")
        if claims_header["item_sizes"] != claim_sizes:
            raise ValueError("its claims' arrays are not this machine's")
    expected = rows * (1 + sum(item_sizes)) + claims_rows * (1 + sum(claim_sizes))
    if len(body) != expected:
        raise ValueError("its body is not as long as its rows")
    present, columns, start = _columns(body, 0, rows, item_sizes)
    if bytes(columns[3]).strip(_CODES):
        raise ValueError("a finished code is not one")
    places = NumberTable.from_columns(INDEX_COLUMNS, present, columns)
    claims = ClaimTable()
    if format_ == _FORMAT:
        claimed, claim_columns, _ = _columns(body, start, claims_rows, claim_sizes)
        claims = ClaimTable.from_columns(claimed, claim_columns, schedule_ids)
    unfinished = tuple(header["unfinished"])
    if not all(type(n) is int and 0 <= n < rows and present[n] for n in unfinished):
        raise ValueError("an unfinished run is not in the table")
    return RunLogIndex(
        places=places,
        claims=claims,
        sizes=_segment_sizes(header["sizes"]),
        live=_segment_sizes(header["live"]),
        unfinished=unfinished,
    )


def _columns(
    body: memoryview, start: int, rows: int, item_sizes: list[int]
) -> tuple[bytearray, list[memoryview], int]:
    """The presence bytes and each column's bytes of a table of `rows` at
    `start` in `body`, and where the table ends."""
    present = bytearray(body[start : start + rows])
    columns: list[memoryview] = []
    start += rows
    for size in item_sizes:
        columns.append(body[start : start + rows * size])
        start += rows * size
    return present, columns, start


def _segment_sizes(value: Any) -> dict[int, int]:
    if not isinstance(value, dict):
        raise ValueError("segment sizes are not an object")
    sizes: dict[int, int] = {}
    for key, size in value.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit()):
            raise ValueError(f"{key!r} is not a segment's number")
        if type(size) is not int or size < 0:
            raise ValueError(f"segment {key} has no size")
        sizes[int(key)] = size
    return sizes
