"""The history index (`history.idx`) and its checkpoint: how a load avoids
reading the whole log, and how the index is written and published.

The index is derived from the log (`shell/history_store.py` describes both
and the checkpoint's guarantee). `HistoryIndex.load` trusts the index up to
its checkpoint, checks it against the log, and replays only the tail by the
row rules (`shell/history_rows.py`); an index it cannot trust is rebuilt by
one full scan. The writes are plain `pwrite`s, made durable by the next group
commit's flush; the store decides when a header may be published.
"""

from __future__ import annotations

import contextlib
import json
import logging
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from core.occurrences import TERMINAL_STATUSES
from shell.disk import Disk, DiskFile, exists, write_kept
from shell.durable import atomic_write_bytes, fault_point
from shell.fence import check_fence
from shell.history_rows import Bad, Entry, Open, State, apply_row, check_decision, check_transition
from shell.jsonlog import complete_end, iter_lines, repair_torn_tail
from shell.store_format import HISTORY_INDEX_FILE, ScheduleFiles, StoreProblem, parse_instant
from shell.write_back import hold_write

__all__ = [
    "EMPTY_CHECKPOINT",
    "ENTRY_SIZE",
    "HEADER_SIZE",
    "Checkpoint",
    "HistoryIndex",
    "Loaded",
    "checkpoint_of",
    "pack_entry",
    "unpack_entry",
]

# The store's logger: operators and tests know these messages by it.
_log = logging.getLogger("shell.history_store")

# --- the file format -----------------------------------------------------------------

# On-disk status codes: append only, never reorder (the index stores the number).
_STATUS_CODES: Final = (
    "admitted",
    "running",
    "interrupted",
    "completed",
    "failed",
    "exhausted",
    "coalesced",
    "superseded",
    "skipped-overlap",
    "skipped-misfire",
    "preflight-rejected",
)
_CODE_OF: Final = {status: code for code, status in enumerate(_STATUS_CODES, start=1)}

_MAGIC: Final = b"WFHIDX\x00\x00"
_INDEX_VERSION: Final = 1
# The u32 after the entry size holds flags (zero in headers written before
# any), the i64 after the low water the newest trigger's instant.
_HEADER: Final = struct.Struct("<8sHHIQQQQq4xI")
# The header records the newest trigger row (rule P) of the rows it covers.
_KNOWS_TRIGGER: Final = 1
# ... and there is one: its instant, in microseconds since the epoch.
_HAS_TRIGGER: Final = 2
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)
_ENTRY: Final = struct.Struct("<QIQIB3xI")
HEADER_SIZE: Final = _HEADER.size
ENTRY_SIZE: Final = _ENTRY.size
_ENTRY_CHUNK: Final = 4096


def pack_entry(entry: Entry) -> bytes:
    """The index bytes of `entry`, checksummed."""
    body = _ENTRY.pack(
        entry.decision_off,
        entry.decision_len,
        entry.latest_off,
        entry.latest_len,
        _CODE_OF[entry.status],
        0,
    )[:-4]
    return body + struct.pack("<I", zlib.crc32(body))


def unpack_entry(data: bytes) -> Entry | None:
    """The entry packed in `data`, or None when it is short or fails its checksum."""
    if len(data) != ENTRY_SIZE:
        return None
    d_off, d_len, l_off, l_len, code, crc = _ENTRY.unpack(data)
    if zlib.crc32(data[:-4]) != crc or not 1 <= code <= len(_STATUS_CODES):
        return None
    return Entry(d_off, d_len, l_off, l_len, _STATUS_CODES[code - 1])


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The index header: every entry describing `log[0:size]` was flushed
    before it was written. `last_trigger` is the instant of the newest
    trigger row among them (triggers strictly increase, rule P), which a
    load does not otherwise know without reading every row: a trigger
    requested while the clock is set back behind it is placed after it.
    `knows_trigger` is False for a header written before headers held it."""

    size: int
    count: int
    lines: int
    low_water: int
    last_trigger: datetime | None = None
    knows_trigger: bool = True

    def pack(self) -> bytes:
        trigger = self.last_trigger
        flags = _KNOWS_TRIGGER if self.knows_trigger else 0
        micros = 0
        if trigger is not None:
            flags |= _HAS_TRIGGER
            micros = (trigger - _EPOCH) // _MICROSECOND
        body = _HEADER.pack(
            _MAGIC,
            _INDEX_VERSION,
            ENTRY_SIZE,
            flags,
            self.size,
            self.count,
            self.lines,
            self.low_water,
            micros,
            0,
        )[:-4]
        return body + struct.pack("<I", zlib.crc32(body))

    @staticmethod
    def unpack(data: bytes) -> Checkpoint | str:
        """The checkpoint, or why the header cannot be trusted."""
        if len(data) != HEADER_SIZE:
            return "header is short"
        magic, version, entry_size, flags, size, count, lines, low_water, micros, crc = (
            _HEADER.unpack(data)
        )
        if magic != _MAGIC:
            return "not a history index (bad magic)"
        if zlib.crc32(data[:-4]) != crc:
            return "header fails its checksum"
        if version != _INDEX_VERSION or entry_size != ENTRY_SIZE:
            return f"unknown index version {version} / entry size {entry_size}"
        if lines < count or low_water > count:
            return "header counts are inconsistent"
        if flags & ~(_KNOWS_TRIGGER | _HAS_TRIGGER) or (
            flags & _HAS_TRIGGER and not flags & _KNOWS_TRIGGER
        ):
            return f"unknown header flags {flags:#x}"
        try:
            trigger = _EPOCH + micros * _MICROSECOND if flags & _HAS_TRIGGER else None
        except OverflowError:
            return "header's newest trigger is out of range"
        return Checkpoint(
            size, count, lines, low_water, trigger, knows_trigger=bool(flags & _KNOWS_TRIGGER)
        )


EMPTY_CHECKPOINT: Final = Checkpoint(0, 0, 0, 0)


def checkpoint_of(state: State) -> Checkpoint:
    """The checkpoint describing `state`: open occurrences start at the low water."""
    low_water = min(state.open) if state.open else state.count
    return Checkpoint(state.size, state.count, state.lines, low_water, state.last_trigger)


# --- reading during a load --------------------------------------------------------------


# A trigger's decision row says so (`shell.history_rows`: compact JSON).
_TRIGGER_MARK: Final = b'"origin":"trigger"'
_SEARCH_CHUNK: Final = 1 << 20


def _newest_trigger(log_fd: DiskFile, size: int) -> datetime | None:
    """The instant of the newest trigger decision row in `log[0:size]`,
    searched from the end a chunk at a time (triggers strictly increase, so
    the last one written is the newest). Only lines that hold the mark are
    parsed. Raises `_IndexDamaged` for such a line that is not JSON."""
    position, rest = size, b""
    while position > 0:
        start = max(0, position - _SEARCH_CHUNK)
        data = log_fd.read_at(position - start, start) + rest
        position = start
        rest = b""
        if position > 0:
            # The first line may begin in the chunk before: it waits for it.
            cut = data.find(b"\n") + 1
            if cut == 0:
                rest = data
                continue
            rest, data = data[:cut], data[cut:]
        if _TRIGGER_MARK not in data:
            continue
        for line in reversed(data.split(b"\n")):
            if _TRIGGER_MARK not in line:
                continue
            try:
                row = json.loads(line)
                if "update" in row or row.get("origin") != "trigger":
                    continue
                return parse_instant(row["instant"])
            except (ValueError, TypeError, KeyError, AttributeError):
                raise _IndexDamaged("a trigger row before the checkpoint is not readable") from None
    return None


class _IndexDamaged(Exception):
    """The index does not match the log; rebuild it from the log."""

    def __init__(
        self,
        reason: str,
        *,
        missing: bool = False,
        durable_size: int | None = None,
    ) -> None:
        super().__init__(reason)
        self.missing = missing
        # Set when the log is shorter than the size the index saw durable:
        # committed rows are gone, which no crash can do (damage, not a repair).
        self.durable_size = durable_size


class _Reader:
    """Open log and index of one schedule during a load."""

    def __init__(self, log_fd: DiskFile, idx_fd: DiskFile | None, idx_entries: int) -> None:
        self.log_fd = log_fd
        self.idx_fd = idx_fd
        self.idx_entries = idx_entries
        # The last entry's decision row is read by the spot check and again
        # when it is still open: read each row once per load.
        self._rows: dict[int, dict[str, Any]] = {}

    def entry(self, seq: int) -> Entry:
        """`entries(seq, 1)`'s one entry (a load reads one for each schedule)."""
        if self.idx_fd is None or seq >= self.idx_entries:
            raise _IndexDamaged(f"index has no entry for seq {seq}")
        entry = unpack_entry(self.idx_fd.read_at(ENTRY_SIZE, HEADER_SIZE + seq * ENTRY_SIZE))
        if entry is None:
            raise _IndexDamaged(f"index entry for seq {seq} fails its checksum")
        return entry

    def entries(self, first: int, count: int) -> list[Entry]:
        if self.idx_fd is None or first + count > self.idx_entries:
            raise _IndexDamaged(f"index has no entry for seq {first + count - 1}")
        data = self.idx_fd.read_at(count * ENTRY_SIZE, HEADER_SIZE + first * ENTRY_SIZE)
        result: list[Entry] = []
        for i in range(count):
            entry = unpack_entry(data[i * ENTRY_SIZE : (i + 1) * ENTRY_SIZE])
            if entry is None:
                raise _IndexDamaged(f"index entry for seq {first + i} fails its checksum")
            result.append(entry)
        return result

    def row(self, offset: int, length: int, seq: int, *, decision: bool) -> dict[str, Any]:
        cached = self._rows.get(offset)
        if cached is not None and cached.get("seq") == seq and ("update" in cached) != decision:
            return cached
        data = self.log_fd.read_at(length, offset)
        try:
            row = json.loads(data) if len(data) == length and data.endswith(b"\n") else None
        except ValueError:
            row = None
        if not isinstance(row, dict) or row.get("seq") != seq or ("update" in row) == decision:
            raise _IndexDamaged(f"index entry for seq {seq} does not point at its row")
        try:
            # The row rules, as for every row read back: a row that breaks
            # them sends the load to the full scan, which names it by line.
            check_decision(row, seq) if decision else check_transition(row, seq)
        except Bad as bad:
            raise _IndexDamaged(f"the row of seq {seq} is damaged: {bad.reason}") from None
        self._rows[offset] = row
        return row

    def materialize(self, seq: int, entry: Entry) -> Open:
        """Occurrence `seq` as the state holds it, from the rows its entry
        points at, or `_IndexDamaged` when they do not bear the entry out."""
        decision = self.row(entry.decision_off, entry.decision_len, seq, decision=True)
        latest = decision
        if entry.latest_off != entry.decision_off:
            latest = self.row(entry.latest_off, entry.latest_len, seq, decision=False)
        if latest["status"] != entry.status:
            raise _IndexDamaged(f"index entry for seq {seq} disagrees with its latest row")
        if latest is not decision and (
            decision["status"] != "admitted" or latest["instant"] != decision["instant"]
        ):
            # (A full scan decides, by the replay's rules, whether they do contradict.)
            raise _IndexDamaged(f"the rows of seq {seq} do not belong together")
        # `row` checked both by the row rules, and the writer stores instants
        # in canonical text: use them as they are.
        instant, decided_at, updated_at = (
            decision.get("instant"),
            decision.get("recorded_at"),
            latest.get("recorded_at"),
        )
        if not (
            isinstance(instant, str) and isinstance(decided_at, str) and isinstance(updated_at, str)
        ):
            raise _IndexDamaged(f"rows of seq {seq} lack their instants")
        return Open(
            seq=seq,
            instant=instant,
            status=entry.status,
            run_id=latest.get("run_id") or decision.get("run_id"),
            reason=latest.get("reason"),
            decision_off=entry.decision_off,
            decision_len=entry.decision_len,
            latest_off=entry.latest_off,
            latest_len=entry.latest_len,
            snapshot=decision.get("snapshot"),
            revision=decision.get("revision"),
            decided_at=decided_at,
            updated_at=updated_at,
            origin=decision.get("origin") or "schedule",
        )


@dataclass(slots=True)
class Loaded:
    """What a load found: the state as of the log's end (or its damage), and
    what it cost and repaired."""

    state: State
    problems: list[StoreProblem]
    dropped: int = 0
    rebuilt: bool = False
    tail_rows: int = 0
    tail_bytes: int = 0
    checkpoint: Checkpoint = EMPTY_CHECKPOINT


class HistoryIndex:
    """Loads schedules' histories through their index files, and writes those
    files, on `disk`. Holds no state of its own: the store keeps what it loads."""

    def __init__(self, disk: Disk) -> None:
        self.disk = disk

    # --- loading -----------------------------------------------------------------------

    def header_matches(self, files: ScheduleFiles, state: State) -> bool:
        """Whether the index file's header is the checkpoint of `state`, held
        for the log (so a load from the files would replay no tail)."""
        expected = checkpoint_of(state)
        if expected == EMPTY_CHECKPOINT:
            # A load of an absent log finds the empty state and writes nothing.
            return not exists(self.disk, files.history) and not exists(
                self.disk, files.history_index
            )
        try:
            fd = self.disk.open(files.history_index)
        except FileNotFoundError:
            return False
        try:
            return fd.read_at(HEADER_SIZE, 0) == expected.pack()
        finally:
            fd.close()

    def load(
        self, files: ScheduleFiles, *, repair: bool, full_open: bool, force_rebuild: bool = False
    ) -> Loaded:
        """Load one schedule's history from its files. `repair` (the owner
        only) drops a torn final line and removes an index without its log;
        `full_open` collects every open occurrence, not only the tail's;
        `force_rebuild` trusts nothing of the index and scans the whole log.
        Damage comes back as `problems`, never raised."""
        try:
            log_fd = self.disk.open(files.history)
        except FileNotFoundError:
            if repair:
                # An index without its log describes nothing.
                check_fence(files.history_index)
                with contextlib.suppress(FileNotFoundError):
                    self.disk.remove(files.history_index)
            return Loaded(state=State(), problems=[])
        try:
            dropped = 0
            size = log_fd.size()
            if size and log_fd.read_at(1, size - 1) != b"\n":
                if repair:
                    dropped = repair_torn_tail(files.history, disk=self.disk)
                    size = log_fd.size()
                else:
                    size = complete_end(log_fd, size)
            idx_fd: DiskFile | None
            try:
                idx_fd = self.disk.open(files.history_index)
            except FileNotFoundError:
                idx_fd = None
            try:
                loaded: Loaded | None = None
                durable_size: int | None = None
                if force_rebuild and idx_fd is not None:
                    # The rows are all read, but a log shorter than what the
                    # index saw committed is damage all the same.
                    header = Checkpoint.unpack(idx_fd.read_at(HEADER_SIZE, 0))
                    if isinstance(header, Checkpoint) and header.size > size:
                        durable_size = header.size
                if not force_rebuild:
                    try:
                        loaded = self._load_with_index(
                            files, log_fd, idx_fd, size, full_open, needs_trigger=repair
                        )
                    except _IndexDamaged as damage:
                        # Only the owner repairs; a missing index is what a
                        # crash right after a schedule's first row leaves.
                        durable_size = damage.durable_size
                        level = logging.WARNING if repair and not damage.missing else logging.INFO
                        if size:
                            _log.log(
                                level if repair else logging.DEBUG,
                                "history index %s cannot be used (%s); rebuilding it from the log",
                                files.history_index,
                                damage,
                            )
                if loaded is None:
                    loaded = self._replay(
                        files, _Reader(log_fd, None, 0), State(), EMPTY_CHECKPOINT, size
                    )
                    loaded.rebuilt = True
                    if durable_size is not None and not loaded.problems:
                        loaded.problems.append(
                            StoreProblem(
                                schedule_id=files.schedule_id,
                                file=files.relative(files.history),
                                record=f"bytes {size}-{durable_size}",
                                reason=(
                                    f"the log is shorter than its durable checkpoint"
                                    f" (it ends at byte {size}, {durable_size} were committed):"
                                    " committed rows are missing"
                                ),
                            )
                        )
            finally:
                if idx_fd is not None:
                    idx_fd.close()
            loaded.dropped = dropped
            return loaded
        finally:
            log_fd.close()

    def _load_with_index(
        self,
        files: ScheduleFiles,
        log_fd: DiskFile,
        idx_fd: DiskFile | None,
        size: int,
        full_open: bool,
        *,
        needs_trigger: bool,
    ) -> Loaded:
        if idx_fd is None:
            raise _IndexDamaged("index is missing", missing=True)
        idx_size = idx_fd.size()
        checkpoint = Checkpoint.unpack(idx_fd.read_at(HEADER_SIZE, 0))
        if isinstance(checkpoint, str):
            raise _IndexDamaged(checkpoint)
        entries_in_file = max(0, (idx_size - HEADER_SIZE) // ENTRY_SIZE)
        if checkpoint.size > size:
            raise _IndexDamaged(
                f"checkpoint at byte {checkpoint.size} is past the log end {size}",
                durable_size=checkpoint.size,
            )
        if checkpoint.count > entries_in_file:
            raise _IndexDamaged("index is shorter than its checkpoint")
        # A log's last byte ends a record (a torn line was dropped or left out
        # of `size`): a checkpoint at the end needs no read of it.
        if (
            checkpoint.size
            and checkpoint.size != size
            and log_fd.read_at(1, checkpoint.size - 1) != b"\n"
        ):
            raise _IndexDamaged("checkpoint does not end a record")
        reader = _Reader(log_fd, idx_fd, entries_in_file)
        last_trigger = checkpoint.last_trigger
        if not checkpoint.knows_trigger and needs_trigger:
            # An older version's header: the newest trigger row is found in
            # the log (the owner's recover publishes a header that holds it).
            last_trigger = _newest_trigger(log_fd, checkpoint.size)
        state = State(
            size=checkpoint.size,
            count=checkpoint.count,
            lines=checkpoint.lines,
            last_trigger=last_trigger,
        )
        if checkpoint.count:
            last_seq = checkpoint.count - 1
            last = reader.entry(last_seq)
            if last.decision_off + last.decision_len > checkpoint.size:
                raise _IndexDamaged("last entry points past the checkpoint")
            row = reader.row(last.decision_off, last.decision_len, last_seq, decision=True)
            # The newest calendar decision: operators' rows (rules P, Q) are
            # outside its order, so step back over them.
            while row.get("origin") is not None and last_seq > 0:
                last_seq -= 1
                last = reader.entry(last_seq)
                row = reader.row(last.decision_off, last.decision_len, last_seq, decision=True)
            if row.get("origin") is None:
                text = row.get("instant")
                try:
                    state.last_decided = parse_instant(text)  # type: ignore[arg-type]
                except (TypeError, ValueError):
                    raise _IndexDamaged("last decision row has no instant") from None
                state.last_decided_text = text
        loaded = self._replay(files, reader, state, checkpoint, size)
        if full_open:
            self._collect_open(reader, loaded.state, checkpoint)
        self._drop_unchanged(reader, loaded.state.touched)
        loaded.checkpoint = checkpoint
        return loaded

    @staticmethod
    def _drop_unchanged(reader: _Reader, touched: dict[int, Entry]) -> None:
        """Forget replayed entries the index file already holds: after a crash
        the index is usually ahead of its checkpoint, so there is nothing to write."""
        assert reader.idx_fd is not None
        if not touched:
            return  # nothing replayed (a start after a clean stop: most schedules)
        seqs = sorted(s for s in touched if s < reader.idx_entries)
        if not seqs:
            return
        first, last = seqs[0], seqs[-1]
        if last - first < _ENTRY_CHUNK:
            data = reader.idx_fd.read_at(
                (last - first + 1) * ENTRY_SIZE, HEADER_SIZE + first * ENTRY_SIZE
            )
            on_disk = {
                s: data[(s - first) * ENTRY_SIZE : (s - first + 1) * ENTRY_SIZE] for s in seqs
            }
        else:
            on_disk = {
                s: reader.idx_fd.read_at(ENTRY_SIZE, HEADER_SIZE + s * ENTRY_SIZE) for s in seqs
            }
        for seq, packed in on_disk.items():
            if packed == pack_entry(touched[seq]):
                del touched[seq]

    @staticmethod
    def _collect_open(reader: _Reader, state: State, checkpoint: Checkpoint) -> None:
        """Add the occurrences open as of the checkpoint that replay did not touch."""
        seq = checkpoint.low_water
        while seq < checkpoint.count:
            count = min(_ENTRY_CHUNK, checkpoint.count - seq)
            for offset, entry in enumerate(reader.entries(seq, count)):
                s = seq + offset
                if entry.status in TERMINAL_STATUSES or s in state.open or s in state.touched:
                    continue
                opened = reader.materialize(s, entry)
                state.open[s] = opened
                state.by_instant[opened.instant] = s
            seq += count

    def _replay(
        self,
        files: ScheduleFiles,
        reader: _Reader,
        state: State,
        checkpoint: Checkpoint,
        end: int,
    ) -> Loaded:
        problems: list[StoreProblem] = []
        materialized: dict[int, Open | Entry] = {}

        def known(seq: int) -> Open | Entry:
            if seq not in materialized:
                entry = reader.entry(seq)
                materialized[seq] = (
                    entry if entry.status in TERMINAL_STATUSES else reader.materialize(seq, entry)
                )
            return materialized[seq]

        start = state.size
        if start >= end:
            # Nothing after the checkpoint: most schedules at a start.
            return Loaded(state=state, problems=[], checkpoint=checkpoint)
        rows = 0
        for offset, line in iter_lines(reader.log_fd, start, end):
            if not line.endswith(b"\n"):
                break  # a torn final line another process is still writing
            where = f"line {state.lines + 1}, byte {offset}"
            try:
                try:
                    row = json.loads(line.decode())
                except ValueError:
                    raise Bad("unparseable record") from None
                apply_row(state, row, offset, len(line), known)
            except Bad as bad:
                record = where if bad.seq is None else f"{where} (seq {bad.seq})"
                problems.append(
                    StoreProblem(
                        schedule_id=files.schedule_id,
                        file=files.relative(files.history),
                        record=record,
                        reason=bad.reason,
                    )
                )
                _log.warning("history %s is damaged at %s: %s", files.history, record, bad.reason)
                break
            state.size = offset + len(line)
            state.lines += 1
            rows += 1
        return Loaded(
            state=state,
            problems=problems,
            tail_rows=rows,
            tail_bytes=state.size - start,
            checkpoint=checkpoint,
        )

    # --- index writes ------------------------------------------------------------------------

    def write_full(self, files: ScheduleFiles, state: State) -> None:
        """Replace the index with one describing `state`, whose `touched`
        holds every entry (as a full scan leaves it)."""
        # The rows were read from the page cache; make them durable before an
        # index that claims them is.
        fd = self.disk.open(files.history)
        try:
            fd.fsync()
        finally:
            fd.close()
        parts = [checkpoint_of(state).pack()]
        parts.extend(pack_entry(state.touched[seq]) for seq in range(state.count))
        atomic_write_bytes(files.history_index, b"".join(parts), disk=self.disk)

    def write_entries(
        self,
        files: ScheduleFiles,
        entries: Mapping[int, Entry],
        *,
        header: Checkpoint | None = None,
        fence_checked: bool = False,
        headed: bool = False,
    ) -> None:
        """Write `entries` in place (and `header`, once the entries it
        describes are durable); not flushed here. `fence_checked`: the
        caller's batch checked the index's fence before its first byte (it
        holds the index among its files), so this write is part of it.
        `headed`: the caller wrote to this index before, so it has a header
        (else a new file gets the empty one)."""
        if not fence_checked:
            check_fence(files.history_index)
        fault_point(f"before:index:{HISTORY_INDEX_FILE}")
        path = files.history_index
        if header is None and not headed:
            fd = self.disk.open(path, write=True, create=True, keep=True)
            try:
                if fd.size() < HEADER_SIZE:
                    fd.write_at(EMPTY_CHECKPOINT.pack(), 0)
            finally:
                fd.close()
        elif header is not None:
            # Not held: it follows a flush, and a start after a crash replays
            # only the rows after it (a held one would wait for the next).
            write_kept(self.disk, path, header.pack(), 0)
        # One write per run of consecutive seqs (a whole batch of new
        # decisions is one run).
        run_start, run = -1, list[bytes]()
        for seq in sorted(entries):
            if run and seq != run_start + len(run):
                hold_write(self.disk, path, b"".join(run), HEADER_SIZE + run_start * ENTRY_SIZE)
                run = []
            if not run:
                run_start = seq
            run.append(pack_entry(entries[seq]))
        if run:
            hold_write(self.disk, path, b"".join(run), HEADER_SIZE + run_start * ENTRY_SIZE)
        fault_point(f"after:index:{HISTORY_INDEX_FILE}")

    def read_entries(self, files: ScheduleFiles, start: int, end: int) -> bytes:
        """The packed entries of seqs `start` to `end - 1` as the index file
        holds them (short where the file ends first)."""
        fd = self.disk.open(files.history_index)
        try:
            return fd.read_at((end - start) * ENTRY_SIZE, HEADER_SIZE + start * ENTRY_SIZE)
        finally:
            fd.close()
