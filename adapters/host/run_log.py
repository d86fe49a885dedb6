"""Run records on files: append-only segment files with an index in memory.

A run changes often (admitted, executing mark, a step, a checkpoint); a file
per run paid for a file create, an open, a rename and a directory flush on
every change. Here every version of every run record is a *frame* appended
to the active segment of `<store root>/run-log/`, and a batch of frames is
one `pwrite` and one `fsync`:

```
<root>/run-log/00000001.seg   frame frame frame ...
<root>/run-log/00000002.seg   (the active segment: the highest number)
```

A frame is `MAGIC | run number (u64) | length (u32) | crc32 | payload |
run number (u64) | END`, big-endian; the payload is the record's compact
JSON; the checksum covers the run number, the length and the payload. The
last frame of a run, in segment order then offset order, is its record.

**Damage.** A frame whose checksum fails while its header and trailer agree
on its run is that run's record damaged in place: if it is the run's last
frame the run is unreadable (the store fails it closed: reads say so, nothing
executes it); an earlier damaged frame of a run superseded by an intact later
one is harmless. Bytes that hold no intact frame are skipped to the next
intact frame; when an intact header announces a frame that fills them
exactly, or the trailer just before the next frame names a run, that run is
unreadable as above, else they are reported as naming no run. Bytes at the
very end of a segment that name no run, or whose header announces a frame
longer than the segment, are the torn tail of a write that never returned (it
was never flushed, so nothing depended on it): reported, not an error.
Each process appends to a segment of its own (`open_segment` rolls at the
first write), so a torn tail is never followed by anything.

**Group commit.** The scheduler's round can carry the admitted records of
its runs in its own journaled commit (`stage_created`): the frames are an
append of the round's batch, in the same journal record as the admissions,
made durable by the journal's one fsync and written at the offset the
journal recorded: the active segment's end when the batch is written, which
the log names then (a round prepared ahead of its instant waits with its
frames staged while runs that stop append theirs). A replay after a crash
writes them again (`shell.journal`).

**Reads.** A finished run's record is not kept in memory: the store keeps
its status (`run_cache.py`) and this log the place of its last frame, which
`reread` reads again (one `pread`, its checksum checked) when it is asked
for. A load checks every frame's checksum but yields a finished run by the
status its record begins with (`records.finished_status`), unparsed.

**The index.** At a clean close, at each segment sealed and at the first
write after a long scan, the log writes where each run's last frame lies
(`run_log_index.py`); a start takes that and scans only what was written
since. A start's claims check asks which runs were written after a
position (`position`, `written_since`), or, with no checkpoint to go by,
every run's origin (`reread_origins`): the log keeps each run's origin
once it wrote or read a record of it (`run_claims.py`), in the index too.

**Compaction.** A segment other than the active one whose frames are mostly
superseded (`COMPACT_DEAD_RATIO`) has its live frames copied, checked, to the
active segment, flushed, and is then removed. Never a segment with damage
(its evidence stays) and never one a journal record may still append to
(until the journal was seen empty since).

**Older stores** kept one file per run, `<root>/runs/run-NNNNNN.json`. They
are read as before; a run with frames in the log is read from the log, the
file is then stale and left alone.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import struct
import weakref
import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from core.errors import Problem, StoreFenced
from shell.disk import OS_DISK, Disk, DiskFile, is_directory, is_file
from shell.durable import GroupCommit, fault_point
from shell.fence import check_fence
from shell.journal import JOURNAL_FILE
from shell.write_back import underlying

from .identifiers import format_run_id, parse_run_id
from .number_table import NumberTable
from .persistence import Stored
from .records import FINISHED_CODE, RunRecord, finished_status, record_json
from .run_claims import UNKNOWN_ORIGIN, ClaimTable, origin_in_json
from .run_log_index import INDEX_COLUMNS, INDEX_FILE, RunLogIndex, read_index, write_index
from .storage import is_temp_file, read_json

__all__ = [
    "COMPACT_DEAD_RATIO",
    "LOG_DIR",
    "ROLL_AT_BYTES",
    "FileRunLog",
    "LogScan",
    "decode_frame",
    "encode_frame",
    "frame_payload",
    "scan_segment",
]

_log = logging.getLogger(__name__)

LOG_DIR: Final = "run-log"
LEGACY_DIR: Final = "runs"
SEGMENT_SUFFIX: Final = ".seg"
# A position of the log (`FileRunLog.position`): `run-log@<segment>:<offset>`.
_POSITION_MARK: Final = "run-log@"
# A segment past this size is sealed and the next write opens a new one.
ROLL_AT_BYTES: Final = 32 << 20
# A sealed segment is compacted once at least this share of its bytes are
# frames superseded by later ones.
COMPACT_DEAD_RATIO: Final = 0.5

_MAGIC: Final = b"WFR1"
_END: Final = b"WFRE"
_HEADER: Final = struct.Struct(">4sQII")  # magic, run number, length, crc32
_TRAILER: Final = struct.Struct(">Q4s")  # run number, end marker
_OVERHEAD: Final = _HEADER.size + _TRAILER.size
_NOT_A_RUN_FILE: Final = "not a run record file name (expected run-NNNNNN.json)"
_NOT_A_SEGMENT: Final = "not a run log segment name (expected NNNNNNNN.seg)"

# A run's last frame as a scan found it: segment, offset, size, intact.
_Frame = tuple[int, int, int, bool]
# A frame this process writes: run number, bytes, finished status's code.
_Written = tuple[int, bytes, int]


def _checksum(number: int, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(struct.pack(">QI", number, len(payload))))


def encode_frame(number: int, payload: bytes) -> bytes:
    """The frame of one version of run `number`'s record."""
    return b"".join(
        (
            _HEADER.pack(_MAGIC, number, len(payload), _checksum(number, payload)),
            payload,
            _TRAILER.pack(number, _END),
        )
    )


def frame_payload(data: bytes | mmap.mmap, offset: int, size: int) -> bytes:
    """The record's JSON in the frame of `size` bytes at `offset`."""
    return bytes(data[offset + _HEADER.size : offset + size - _TRAILER.size])


def decode_frame(data: bytes | mmap.mmap, offset: int) -> tuple[int, int, bool] | None:
    """At `offset`: (run number, frame size, checksum matches) when a frame's
    header and trailer are intact and agree; None when no frame starts there."""
    end_of_header = offset + _HEADER.size
    if end_of_header > len(data):
        return None
    magic, number, length, crc = _HEADER.unpack_from(data, offset)
    if magic != _MAGIC:
        return None
    end = end_of_header + length + _TRAILER.size
    if end > len(data):
        return None
    trailer_number, marker = _TRAILER.unpack_from(data, end - _TRAILER.size)
    if marker != _END or trailer_number != number:
        return None
    payload = data[end_of_header : end - _TRAILER.size]
    return number, end - offset, _checksum(number, bytes(payload)) == crc


def _intact_payload(data: bytes, number: int, size: int) -> bytes | None:
    """The record JSON in `data`, the `size` bytes read where run `number`'s
    last frame was written, when they still are that frame, intact (what
    `decode_frame` checks, for a frame whose place is known); else None."""
    if len(data) != size:
        return None
    magic, framed, length, crc = _HEADER.unpack_from(data)
    end = _HEADER.size + length
    payload = data[_HEADER.size : end]
    if (
        magic != _MAGIC
        or framed != number
        or end + _TRAILER.size != size
        or data[end:] != _TRAILER.pack(number, _END)
        or _checksum(number, payload) != crc
    ):
        return None
    return payload


@dataclass(slots=True)
class LogScan:
    """What one segment holds: intact frames, frames damaged in place (by
    run), spans holding no frame, and a torn tail."""

    frames: list[tuple[int, int, int]] = field(default_factory=list)  # number, offset, size
    damaged: list[tuple[int, int, int]] = field(default_factory=list)  # number, offset, size
    unattributed: list[tuple[int, int]] = field(default_factory=list)  # offset, size
    torn_tail: tuple[int, int] | None = None  # offset, size


def _next_frame(data: bytes | mmap.mmap, start: int) -> int:
    """The offset of the next intact frame at or after `start`, or len(data)."""
    position = start
    while True:
        position = data.find(_MAGIC, position)
        if position < 0:
            return len(data)
        found = decode_frame(data, position)
        if found is not None and found[2]:
            return position
        position += 1


def _whole_frame_header(data: bytes | mmap.mmap, position: int, resume: int) -> int | None:
    """The run number of an intact header at `position` whose frame ends
    exactly at `resume` (the next intact frame, or the end of the segment)."""
    if position + _HEADER.size > len(data):
        return None
    magic, number, length, _ = _HEADER.unpack_from(data, position)
    if magic != _MAGIC or position + _HEADER.size + length + _TRAILER.size != resume:
        return None
    return int(number)


def scan_segment(data: bytes | mmap.mmap, start: int = 0) -> LogScan:
    """Every frame of a segment's bytes from `start` (a frame's first byte;
    see the module docstring)."""
    scan = LogScan()
    position = start
    size = len(data)
    while position < size:
        found = decode_frame(data, position)
        if found is not None:
            number, frame_size, intact = found
            (scan.frames if intact else scan.damaged).append((number, position, frame_size))
            position += frame_size
            continue
        resume = _next_frame(data, position + 1)
        # Whose record the damaged bytes were: the header, when it is intact
        # and the frame it announces lies whole within the segment (a write
        # cut short leaves a shorter file, never a whole frame of other
        # bytes); else the trailer just before the next intact frame.
        named = _whole_frame_header(data, position, resume)
        trailer_at = resume - _TRAILER.size
        if named is None and trailer_at >= position:
            trailer_number, marker = _TRAILER.unpack_from(data, trailer_at)
            if marker == _END:
                named = trailer_number
        if named is not None:
            scan.damaged.append((named, position, resume - position))
        elif resume == size:
            scan.torn_tail = (position, size - position)
        else:
            scan.unattributed.append((position, resume - position))
        position = resume
    return scan


def _segment_number(name: str) -> int | None:
    stem, dot, suffix = name.partition(".")
    if "." + suffix != SEGMENT_SUFFIX or not dot or not stem.isdigit() or len(stem) != 8:
        return None
    return int(stem)


class FileRunLog:
    """The run records of a file store (see the module docstring)."""

    key_name = "frame"

    def __init__(self, root: Path, *, disk: Disk = OS_DISK) -> None:
        self.root = root
        self._disk = disk
        self.dir = root / LOG_DIR
        self._dir_text = str(self.dir)
        self.legacy_dir = root / LEGACY_DIR
        # run number -> (segment, offset, frame size, finished code) of its last frame
        self._latest = NumberTable(INDEX_COLUMNS)
        # run number -> its origin, once a record of it was written or read
        self._claims = ClaimTable()
        # (run number, origin) of the runs created since the claims were
        # last brought up to date (`_claims_now`).
        self._unclaimed: list[tuple[int, Any]] = []
        self._live: dict[int, int] = {}  # segment -> bytes of last frames
        self._size: dict[int, int] = {}  # segment -> bytes
        self._damaged_segments: set[int] = set()
        # Segments a journal record may still append to (see `stage_created`).
        self._journal_pinned: set[int] = set()
        self._active: int | None = None
        self._file: DiskFile | None = None
        self._end = 0
        self._closer: weakref.finalize[Any, Any] | None = None
        self._staged = False
        # Bytes the last load scanned beyond the index (see `open_segment`).
        self._unindexed = 0
        # Read-only descriptors of the segments finished runs were read
        # again from (`reread`): a page of fifty reads one or two segments.
        self._readers: dict[int, DiskFile] = {}
        weakref.finalize(self, _close_all, self._readers)

    # --- reading ----------------------------------------------------------------------

    def segment_path(self, segment: int) -> Path:
        return self.dir / f"{segment:08d}{SEGMENT_SUFFIX}"

    def location(self, run_id: str) -> str:
        """How findings name a run's record: the log and the run (its frames
        move as it changes and as segments are compacted)."""
        return f"{self._dir_text} ({run_id})"

    def _names(self) -> list[str]:
        if not is_directory(self._disk, str(self.dir)):
            return []
        return sorted(self._disk.list(str(self.dir)))

    def segments(self) -> list[int]:
        numbers = [_segment_number(name) for name in self._names()]
        return sorted(n for n in numbers if n is not None)

    def _strays(self) -> list[Stored[int | None]]:
        return [
            Stored(location=str(self.dir / name), key=None, error=_NOT_A_SEGMENT)
            for name in self._names()
            if _segment_number(name) is None
        ]

    async def load(self) -> AsyncIterator[Stored[int | None]]:
        """Each run's last frame (or older file), checked, but a finished
        run's: those are taken by the status their record begins with, and
        handed over at once (`finished_codes`). What holds no record is
        yielded with key None and the reason. With the index the log last
        wrote (`run_log_index`), only what was written since is scanned."""
        index = self._usable_index()
        placed = self._place_all(index)
        if placed is None:
            index, placed = None, self._place_all(None)
            assert placed is not None
        to_read, last, contents, findings = placed
        covered = index.sizes if index is not None else {}
        self._unindexed = sum(size - covered.get(seg, 0) for seg, size in self._size.items())
        for stored in [*self._strays(), *self._load_legacy()]:
            yield stored
        for number in to_read:
            where = last.get(number)
            if where is None:
                yield self.reread(number)  # the index's: read and checked now
                continue
            segment, offset, size, intact = where
            if not intact:
                yield Stored(
                    location=self.location(format_run_id(number)),
                    key=number,
                    error=(
                        f"the checksum of its last frame ({self.segment_path(segment)}, byte"
                        f" {offset}) does not match: damaged in place"
                    ),
                )
                continue
            yield Stored(
                location=self.location(format_run_id(number)),
                key=number,
                raw=frame_payload(contents[segment], offset, size),
            )
        _unmap(contents)
        for finding in findings:
            yield finding

    def _place_all(
        self, index: RunLogIndex | None
    ) -> (
        tuple[list[int], dict[int, _Frame], dict[int, bytes | mmap.mmap], list[Stored[int | None]]]
        | None
    ):
        """Scan what `index` does not cover (everything without one) and place
        each run's last frame; the runs to read and check now (not finished
        intact ones), the frames scanned, the segments' bytes, the findings.
        None when a covered segment is shorter than the index covered, or the
        index places a run in a segment removed since that no frame scanned
        replaces (then nothing of it is kept)."""
        last, contents, findings = self._scan(index.sizes if index is not None else {})
        if index is None:
            self._latest = NumberTable(INDEX_COLUMNS)
            self._claims = ClaimTable()
            self._unclaimed = []
            self._live = {}
        else:
            for segment, covered in index.sizes.items():
                size = self._size.get(segment, covered)  # a removed one: checked below
                if size < covered:
                    path = self.segment_path(segment)
                    self._index_ignored(
                        f"{path} is shorter than it covered ({size} < {covered} bytes)"
                    )
                    _unmap(contents)
                    return None
            self._latest = index.places
            self._claims = index.claims
            self._claims.reserve(index.places.reach)
            self._unclaimed = []
            self._live = {s: live for s, live in index.live.items() if s in self._size}
        # Every run placed before the first is yielded: the store writes as
        # it takes them (recovery fails an abandoned run), and a write
        # compacts what looks superseded, which a run not yet placed here
        # would look (its frames were lost with the segment).
        to_read: list[int] = []
        live = self._live
        latest = self._latest
        for number in sorted(last):
            segment, offset, size, intact = last[number]
            code = 0
            if intact:
                finished = finished_status(contents[segment], offset + _HEADER.size, number)
                code = FINISHED_CODE[finished] if finished is not None else 0
            if index is not None:
                old = latest.get(number)
                if old is not None and old[0] in live:
                    live[old[0]] -= old[2]
            latest.set(number, segment, offset, size, code)
            live[segment] = live.get(segment, 0) + size
            if not code:
                to_read.append(number)
        if index is None:
            return to_read, last, contents, findings
        for segment in index.sizes.keys() - self._size.keys():
            if latest.column_holds(0, segment):
                self._index_ignored(
                    f"it places runs in {self.segment_path(segment)}, which is gone"
                )
                _unmap(contents)
                return None
        # Runs the index left unfinished that nothing written since changed.
        to_read = sorted({*to_read, *(n for n in index.unfinished if n not in last)})
        return to_read, last, contents, findings

    def finished_codes(self) -> bytes:
        """After `load`: by run number, the finished status's code of every
        run whose last frame is an intact finished record (0 elsewhere); the
        load yielded none of those."""
        return self._latest.column_bytes(3)

    def _usable_index(self) -> RunLogIndex | None:
        """The index the log last wrote, unless it cannot be read (its fit to
        the segments on disk is checked as they are scanned: `_place_all`)."""
        found = read_index(self.root, disk=self._disk)
        if found is None:
            return None
        if isinstance(found, str):
            self._index_ignored(found)
            return None
        return found

    def _index_ignored(self, reason: str) -> None:
        _log.warning(
            "ignoring the run log's index %s: %s; scanning every segment",
            self.root / INDEX_FILE,
            reason,
        )

    def _scan(
        self, covered: dict[int, int]
    ) -> tuple[dict[int, _Frame], dict[int, bytes | mmap.mmap], list[Stored[int | None]]]:
        """The last frame of each run among the bytes past `covered` (per
        segment: all of a segment it does not name), the segments' bytes,
        and what holds no record."""
        self._size = {}
        self._damaged_segments = set()
        last: dict[int, _Frame] = {}
        findings: list[Stored[int | None]] = []
        contents: dict[int, bytes | mmap.mmap] = {}
        for segment in self.segments():
            path = self.segment_path(segment)
            data = contents[segment] = self._read(path)
            self._size[segment] = len(data)
            scan = scan_segment(data, covered.get(segment, 0))
            for number, offset, size in scan.frames:
                last[number] = (segment, offset, size, True)
            for number, offset, size in scan.damaged:
                self._damaged_segments.add(segment)
                if last.get(number, (0, 0, 0, False))[:2] < (segment, offset):
                    last[number] = (segment, offset, size, False)
            for offset, size in scan.unattributed:
                self._damaged_segments.add(segment)
                findings.append(
                    Stored(
                        location=f"{path} at byte {offset}",
                        key=None,
                        error=f"{size} bytes hold no intact run record frame (damaged in place)",
                    )
                )
            if scan.torn_tail is not None:
                offset, size = scan.torn_tail
                # Kept out of `_live`: nothing appends after it (see `open_segment`).
                findings.append(
                    Stored(
                        location=f"{path} at byte {offset}",
                        key=None,
                        error=(
                            f"the last {size} bytes are a write that never completed"
                            " (never acknowledged); ignored"
                        ),
                        finding="torn-tail",
                    )
                )
        return last, contents, findings

    def _load_legacy(self) -> list[Stored[int | None]]:
        """The runs of an older store's files that have no frame in the log."""
        found: list[Stored[int | None]] = []
        if not is_directory(self._disk, str(self.legacy_dir)):
            return found
        for name in sorted(self._disk.list(str(self.legacy_dir))):
            path = self.legacy_dir / name
            if is_temp_file(path) or not is_file(self._disk, str(path)):
                continue
            number = parse_run_id(path.stem) if path.suffix == ".json" else None
            if number is None:
                found.append(Stored(location=str(path), key=None, error=_NOT_A_RUN_FILE))
                continue
            if number in self._latest:
                continue
            try:
                document = read_json(path, disk=self._disk)
                found.append(Stored(location=str(path), key=number, document=document))
            except (OSError, ValueError) as exc:
                found.append(Stored(location=str(path), key=number, error=str(exc)))
        return found

    def _place(self, number: int, segment: int, offset: int, size: int, code: int) -> None:
        old = self._latest.get(number)
        if old is not None:
            self._live[old[0]] -= old[2]
        self._latest.set(number, segment, offset, size, code)
        self._live[segment] = self._live.get(segment, 0) + size

    # --- the port ---------------------------------------------------------------------

    def unstorable(self, field: str, value: Any) -> list[Problem]:
        return []  # any JSON value

    def exists(self, run_id: str) -> bool:
        number = parse_run_id(run_id)
        return number is not None and number in self._latest

    def rereads(self, number: int) -> bool:
        # A run of the log (not of an older store's file): its last frame is
        # one `pread` away.
        return number in self._latest

    def reread(self, number: int) -> Stored[int | None]:
        """The run's last frame read again and checked as a load checks it:
        a frame changed in place since is unreadable (failed closed)."""
        segment, offset, size, _ = self._place_of(number)
        location = self.location(format_run_id(number))
        try:
            data = self._read_at(segment, offset, size)
        except OSError as exc:
            path = self.segment_path(segment)
            return Stored(location=location, key=number, error=f"cannot read {path}: {exc}")
        payload = _intact_payload(data, number, size)
        if payload is not None:
            return Stored(location=location, key=number, raw=payload)
        found = decode_frame(data, 0)
        if found is not None and found[:2] == (number, size) and not found[2]:
            reason = "holds its frame with a checksum that does not match"
        else:
            reason = "no longer holds its intact frame"
        return Stored(
            location=location,
            key=number,
            error=(
                f"{self.segment_path(segment)} at byte {offset} {reason}: damaged in place"
                " since it was written"
            ),
        )

    def reread_origins(self, numbers: Sequence[int]) -> list[Any]:
        """Each run's origin: the one the log keeps (`run_claims.py`), else
        its last frame's, read again and checked as `reread` checks it (and
        then kept); `UNKNOWN_ORIGIN` for a frame unreadable now or holding
        an origin not where a record's JSON puts it. A start with no
        checkpoint lists every run kept."""
        claims = self._claims_now()
        found: list[Any] = []
        for number in numbers:
            origin = claims.origin(number)
            if origin is UNKNOWN_ORIGIN:
                origin = self._origin_read(number)
            found.append(origin)
        return found

    def _origin_read(self, number: int) -> Any:
        segment, offset, size, _ = self._place_of(number)
        try:
            data = self._read_at(segment, offset, size)
        except OSError:
            return UNKNOWN_ORIGIN
        payload = _intact_payload(data, number, size)
        if payload is None:
            return UNKNOWN_ORIGIN
        origin = origin_in_json(payload)
        if origin is not UNKNOWN_ORIGIN:
            self._claims.learn(number, origin)
        return origin

    def _place_of(self, number: int) -> tuple[int, ...]:
        place = self._latest.get(number)
        if place is None:
            raise KeyError(number)
        return place

    def _read_at(self, segment: int, offset: int, size: int) -> bytes:
        reader = self._readers.get(segment)
        if reader is None:
            reader = self._readers[segment] = self._disk.open(str(self.segment_path(segment)))
        return reader.read_at(size, offset)

    def position(self) -> str:
        """The log's end now: its last segment and that segment's size."""
        segment = max(self._size, default=0)
        return f"{_POSITION_MARK}{segment}:{self._size.get(segment, 0)}"

    def written_since(self, position: str) -> list[int] | None:
        """The runs with a frame written after `position` (a `position` of
        this log), read from the segments on disk: new runs, changed ones,
        frames copied by compaction, and any frame appended by hand. None
        for a token that is not one of this log's positions."""
        parsed = _parse_position(position)
        if parsed is None:
            return None
        since_segment, since_offset = parsed
        numbers: list[int] = []
        for segment in self.segments():
            if segment < since_segment:
                continue
            data = self._read(self.segment_path(segment))
            try:
                scan = scan_segment(data, since_offset if segment == since_segment else 0)
                numbers.extend(number for number, _, _ in (*scan.frames, *scan.damaged))
            finally:
                if isinstance(data, mmap.mmap):
                    data.close()
        return numbers

    async def write(self, record: RunRecord, *, created: bool) -> bytes | None:
        return self.append([record], created={record.run_id} if created else frozenset())[0]

    async def write_many(
        self, records: Sequence[RunRecord], *, created: AbstractSet[str]
    ) -> Sequence[bytes] | None:
        return self.append(records, created=created)

    def stages_into(self, batch: object) -> bool:
        # Only a journaled batch of this very store, on the disk the log is
        # written to (the scheduler's wraps it: `shell.write_back`): the
        # journal's one fsync then covers the frames, and a replay writes them
        # again after a crash.
        return (
            isinstance(batch, GroupCommit)
            and underlying(batch.disk) is self._disk
            and batch.journal_root == str(self.root)
        )

    def stage_created(
        self, batch: object, records: Sequence[RunRecord], written: Callable[[], None]
    ) -> None:
        if not isinstance(batch, GroupCommit) or not self.stages_into(batch):
            raise RuntimeError("run records are staged only into a journaled batch of this store")
        if self._staged:
            raise RuntimeError("a scheduler batch already holds staged run records")
        segment = self.open_segment()
        path = self.segment_path(segment)
        frames = [_frame_of(record) for record in records]
        data = b"".join(frame for _, frame, _ in frames)
        # Where the frames go is the segment's end when the batch is written,
        # not now: a batch prepared ahead of its instant waits, and the runs
        # that stop meanwhile append their records to this segment (which
        # does not roll while a batch holds staged frames: `open_segment`).
        start = -1

        def expected() -> int:
            nonlocal start
            if self._active != segment or self._file is None:
                raise OSError(
                    errno.EIO,
                    f"{path} was sealed while a scheduler batch waited to append to it",
                )
            start = self._end
            return start

        # Early: written right after the journal's fsync, before the round's
        # history files, so that the runs are launched (their executing marks
        # appended after these frames) without waiting for those.
        batch.append_bytes(path, data, expect_size=expected, early=True)
        self._staged = True
        self._journal_pinned.add(segment)

        def committed() -> None:
            self._staged = False
            self._end = self._placed(frames, segment, start)
            self._size[segment] = self._end
            self._learn(frames, records)
            written()

        def aborted() -> None:
            if not self._staged:
                return  # written already; a later part of the batch failed
            self._staged = False
            if start < 0:
                return  # dropped before the batch wrote anything
            # The segment may hold part of the batch (a replay completes it):
            # nothing of this process appends after those bytes again.
            self._seal()

        batch.on_early(committed)
        batch.on_abort(aborted)

    # --- writing ----------------------------------------------------------------------

    def open_segment(self) -> int:
        """The active segment, opening a new one (this process's first write,
        or the last one is full)."""
        if (
            self._file is not None
            and self._active is not None
            and (self._end < ROLL_AT_BYTES or self._staged)
        ):
            # A segment with frames staged in a waiting batch is not rolled:
            # they go at its end (`stage_created`).
            return self._active
        rolled = self._file is not None
        self._seal()
        directory = str(self.dir)
        if not is_directory(self._disk, directory):
            self._disk.make_directory(directory, parents=True)
            self._disk.fsync_directory(str(self.root))
        existing = self.segments()
        segment = (existing[-1] if existing else 0) + 1
        path = str(self.segment_path(segment))
        check_fence(path)
        fault_point("before:run-log:open")
        file = self._disk.open(path, write=True, create=True, exclusive=True)
        try:
            self._disk.fsync_directory(directory)
        except BaseException:
            file.close()
            raise
        # A store dropped without `close` still gives its descriptor back.
        self._closer = weakref.finalize(self, file.close)
        self._file, self._active, self._end = file, segment, 0
        self._size[segment] = 0
        fault_point("after:run-log:open")
        if rolled or self._unindexed >= ROLL_AT_BYTES:
            # A full segment sealed, or this process's first write after a
            # load that scanned that much: the index follows the log every
            # `ROLL_AT_BYTES`, so that a start after a crash scans about
            # that much at most, beyond what was written since. (Not at the
            # load itself: a load may be a reader's, which writes nothing.)
            self._write_index()
        return segment

    def _seal(self) -> None:
        if self._closer is not None:
            self._closer()
        self._closer = None
        self._file = None
        self._active = None

    def _read(self, path: Path) -> bytes | mmap.mmap:
        """A segment's bytes; on the real disk mapped rather than copied onto
        the heap (a million runs are a gigabyte of frames)."""
        if self._disk is OS_DISK:
            return _map(path)
        file = self._disk.open(str(path))
        try:
            return file.read_at(file.size(), 0)
        finally:
            file.close()

    def _write(self, data: bytes) -> int:
        """Append `data` to the active segment and flush it; its offset."""
        segment = self.open_segment()
        assert self._file is not None
        check_fence(self.segment_path(segment))
        start = self._end
        try:
            self._file.write_at(data, start)
            self._file.fsync()
        except BaseException:
            # What reached the file is unknown: write nothing after it.
            self._seal()
            raise
        self._end = start + len(data)
        self._size[segment] = self._end
        return start

    def append(
        self, records: Sequence[RunRecord], *, created: AbstractSet[str] = frozenset()
    ) -> list[bytes]:
        """Append the records' frames with one write and one flush; then they
        are the runs' records (`created`: the ids of those that are a run's
        first, whose origins the log keeps). Answers their JSON, in order."""
        payloads = [record_json(record) for record in records]
        frames = [
            _frame_of(record, payload) for record, payload in zip(records, payloads, strict=True)
        ]
        self._placed_in_active(frames, self._write(b"".join(frame for _, frame, _ in frames)))
        if created:
            self._learn(frames, records, created)
        self.compact()
        return payloads

    def _learn(
        self,
        frames: Sequence[_Written],
        records: Sequence[RunRecord],
        created: AbstractSet[str] | None = None,
    ) -> None:
        """Keep the origins of the runs whose first frames these are (all of
        them without `created`): an origin never changes, so one look per
        run, not one per frame. Set aside, and taken into the table when it
        is read or written (`_claims_now`): a run's creation is on the
        scheduler's path, and the table is read at a start's listing only."""
        self._unclaimed += [
            (number, record.origin)
            for (number, _, _), record in zip(frames, records, strict=True)
            if created is None or record.run_id in created
        ]

    def _claims_now(self) -> ClaimTable:
        """The claims, with those of the runs created since taken in."""
        claims = self._claims
        if self._unclaimed:
            for number, origin in self._unclaimed:
                claims.learn(number, origin)
            self._unclaimed = []
        return claims

    def _placed_in_active(self, frames: Sequence[_Written], start: int) -> None:
        assert self._active is not None
        self._placed(frames, self._active, start)

    def _placed(self, frames: Sequence[_Written], segment: int, start: int) -> int:
        """Index `frames`, written to `segment` from `start`; where they end."""
        offset = start
        for number, frame, code in frames:
            self._place(number, segment, offset, len(frame), code)
            offset += len(frame)
        return offset

    def compact(self) -> list[int]:
        """Compact every sealed segment that is mostly superseded frames; the
        segments removed."""
        candidates = [
            segment
            for segment, size in self._size.items()
            if segment != self._active
            and segment not in self._damaged_segments
            and size > 0
            and self._live.get(segment, 0) <= size * (1 - COMPACT_DEAD_RATIO)
        ]
        if not candidates:
            return []
        if self._journal_pinned and self._journal_empty():
            self._journal_pinned.clear()
        removed: list[int] = []
        for segment in sorted(candidates):
            if segment in self._journal_pinned:
                continue
            if self._compact_one(segment):
                removed.append(segment)
        return removed

    def _journal_empty(self) -> bool:
        try:
            return self._disk.stat(str(self.root / JOURNAL_FILE)).st_size == 0
        except FileNotFoundError:
            return True

    def _compact_one(self, segment: int) -> bool:
        path = self.segment_path(segment)
        live = sorted(
            (offset, number, size, code)
            for number, (where, offset, size, code) in self._latest.items()
            if where == segment
        )
        copies: list[_Written] = []
        if live:
            data = self._read(path)
            for offset, number, size, code in live:
                found = decode_frame(data, offset)
                if found is None or not found[2] or found[0] != number:
                    # Damaged since it was read: keep the segment as evidence.
                    self._damaged_segments.add(segment)
                    return False
                copies.append((number, bytes(data[offset : offset + size]), code))
        if copies:
            fault_point("before:run-log:compact-copy")
            self._placed_in_active(copies, self._write(b"".join(frame for _, frame, _ in copies)))
            fault_point("after:run-log:compact-copy")
        check_fence(path)
        fault_point("before:run-log:compact-remove")
        self._disk.remove(str(path))
        self._disk.fsync_directory(str(self.dir))
        fault_point("after:run-log:compact-remove")
        self._size.pop(segment, None)
        self._live.pop(segment, None)
        reader = self._readers.pop(segment, None)
        if reader is not None:
            reader.close()
        return True

    def close(self) -> None:
        """Close the active segment and, when nothing damaged was found, write
        the index the next start reads instead of scanning (`run_log_index`)."""
        self._seal()
        _close_all(self._readers)
        self._write_index()

    def _write_index(self) -> None:
        """The index of the log as it stands (`run_log_index`), unless damage
        was found (the next start then scans, and reports it again); a
        failure costs the next start a scan, nothing else."""
        self._unindexed = 0
        # Taken in even when no index is written: what waits is bounded by
        # the segment's roll, which comes here.
        claims = self._claims_now()
        if self._damaged_segments or not self._size:
            return
        try:
            check_fence(self.root / INDEX_FILE)
            write_index(self.root, self._latest, claims, self._size, self._live, disk=self._disk)
        except StoreFenced:
            return  # a fenced process writes nothing: the next start scans
        except OSError as exc:
            _log.warning(
                "could not write the run log's index %s (%s); the next start scans every segment",
                self.root / INDEX_FILE,
                exc,
            )


def _close_all(readers: dict[int, DiskFile]) -> None:
    for reader in readers.values():
        reader.close()
    readers.clear()


def _unmap(contents: dict[int, bytes | mmap.mmap]) -> None:
    for data in contents.values():
        if isinstance(data, mmap.mmap):
            data.close()


def _parse_position(position: str) -> tuple[int, int] | None:
    segment, colon, offset = position.removeprefix(_POSITION_MARK).partition(":")
    if not position.startswith(_POSITION_MARK) or not colon:
        return None
    if not (segment.isascii() and segment.isdigit() and offset.isascii() and offset.isdigit()):
        return None
    return int(segment), int(offset)


def _map(path: Path) -> bytes | mmap.mmap:
    """A segment's bytes, mapped rather than copied onto the heap."""
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            return b""
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)


def _frame_of(record: RunRecord, payload: bytes | None = None) -> _Written:
    """The run's number, the frame of `record` (`payload`: its JSON, when the
    caller encoded it) and its finished status's code."""
    number = parse_run_id(record.run_id)
    if number is None:
        raise ValueError(f"{record.run_id!r} is not a run id")
    if payload is None:
        # pydantic's own encoder: about a third of `json.dumps(record.to_json())`.
        payload = record_json(record)
    return number, encode_frame(number, payload), FINISHED_CODE.get(record.status, 0)
