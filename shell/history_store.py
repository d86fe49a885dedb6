"""Occurrence history: an append-only log per schedule plus a derived index.

Theory of operation
-------------------
`history.jsonl` is the truth. Each line is one row:

* a *decision* row opens occurrence `seq` (0-based, dense, assigned here):
  `{"seq", "instant", "status", "recorded_at", "run_id"?, "reason"?,
  "revision"?, "count"?, "first_instant"?, "last_instant"?, "snapshot"?}`;
  `status` is a decision status, `snapshot` (admitted rows only) is
  `{"deployment_id", "inputs", "max_steps", "revision"}`, and a row standing
  for several missed instants has `count > 1`, `first_instant`, and
  `last_instant == instant`. Decision instants strictly increase.
* a *transition* row moves an admitted occurrence along its run:
  `{"seq", "update": true, "instant", "status", "recorded_at", "run_id"?,
  "reason"?}`, carrying the run id once known. Allowed moves: admitted ->
  running/interrupted/terminal, running <-> interrupted, either -> terminal,
  and admitted -> admitted only to attach the run id. Nothing follows a
  terminal row.

`history.idx` is derived: a 64-byte header, then one 32-byte entry per seq:
offset and length of the decision row, offset and length of the latest row,
the latest status, and a CRC. A page is one read of `limit` entries and one
(or a few) reads of the rows they point to: O(limit), whatever the log size.

The index is written with plain `pwrite`s after each group commit and is
made durable by the *next* commit's flush (or `close()`). The header records a
checkpoint `(log size C, count, lines, low-water seq)` with the guarantee that
every index write describing `log[0:C]` was flushed before the header was
written; so the header always lags one commit behind. Loading trusts the
index up to `C` after checking the header CRC and the last entry against the
log, then replays only `log[C:]`: O(tail), not O(log). An entry may be
*ahead* of the checkpoint (written before the crash, describing a tail row);
replay recognises a row an entry already points at or past and skips it.
Open occurrences (admitted, not yet terminal) are entries from the low-water
seq on whose status is not terminal. If the header or a checked entry does
not match the log, the index is rebuilt by one full scan, with a warning.

Damage: a torn final line (no newline) is a crash artifact, dropped by the
owner with a warning. An unparseable line, a duplicate or out-of-order
decision, a transition for an unknown seq, a status going backwards, or a row
after a terminal row stops the replay there and is returned as a
`StoreProblem`; the log is then frozen (appends refused) and left as found,
and pages show what precedes the damage. Every row read back is checked by
the same row rules (`_check_decision`, `_check_transition`), whether replayed,
taken by a load through the index (the last decision, the open occurrences:
one that fails sends the load to a full scan, which names it), or read by a
page. Damage before the checkpoint is not re-read at load; `verify()` and
`recover(full_scan=True)` scan everything, and a page that reads a damaged
row raises `StoreDamaged` naming its line and freezes an owned log.

Not thread-safe; one owner process (the scheduler lock holder) writes.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import contextlib
import hashlib
import json
import logging
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Final, NamedTuple, NoReturn, TypeGuard

from core.errors import InvalidInput, InvalidState, NotFound, Problem
from core.occurrences import (
    DECISION_STATUSES,
    RUN_STATUSES,
    TERMINAL_STATUSES,
    decision_row_refusal,
    run_row_refusal,
    span_refusal,
)
from shell.disk import OS_DISK, Disk, DiskFile, exists, is_directory
from shell.durable import GroupCommit, atomic_write_bytes, fault_point, sync_paths
from shell.fence import check_fence
from shell.jsonlog import complete_end, iter_lines, repair_torn_tail
from shell.store_format import (
    HISTORY_INDEX_FILE,
    Instant,
    ScheduleFiles,
    StoreDamaged,
    StoreProblem,
    canonical_instant,
    canonical_json,
    encode_json_line,
    format_instant,
    parse_instant,
)

__all__ = [
    "MAX_PAGE_LIMIT",
    "HistoryRecovery",
    "HistoryStore",
    "OpenOccurrence",
]

_log = logging.getLogger(__name__)

MAX_PAGE_LIMIT: Final = 100

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
_HEADER: Final = struct.Struct("<8sHHIQQQQ12xI")
_ENTRY: Final = struct.Struct("<QIQIB3xI")
_HEADER_SIZE: Final = _HEADER.size
_ENTRY_SIZE: Final = _ENTRY.size
# A page reads rows less than this far apart with one pread.
_CLUSTER_GAP: Final = 64 << 10
_ENTRY_CHUNK: Final = 4096

_CURSOR: Final = struct.Struct("<2s8sQ")
_CURSOR_TAG: Final = b"h1"


# --- public values -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenOccurrence:
    """An admitted occurrence whose run has not reached a terminal status."""

    seq: int
    instant: str
    status: str
    run_id: str | None
    reason: str | None
    snapshot: dict[str, Any] | None
    revision: int | None
    decided_at: str
    updated_at: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryRecovery:
    """What recovering one schedule's history found.

    `tail_rows`/`tail_bytes` measure the replay after the index checkpoint
    (the load's O(tail) cost); `index_rebuilt` says the index could not be
    trusted and the whole log was scanned.
    """

    schedule_id: str
    occurrences: int
    last_decided_instant: str | None
    open_occurrences: tuple[OpenOccurrence, ...]
    problems: tuple[StoreProblem, ...] = ()
    dropped_torn_bytes: int = 0
    index_rebuilt: bool = False
    tail_rows: int = 0
    tail_bytes: int = 0


# --- index records ---------------------------------------------------------------------


class _Entry(NamedTuple):
    decision_off: int
    decision_len: int
    latest_off: int
    latest_len: int
    status: str

    def pack(self) -> bytes:
        body = _ENTRY.pack(
            self.decision_off,
            self.decision_len,
            self.latest_off,
            self.latest_len,
            _CODE_OF[self.status],
            0,
        )[:-4]
        return body + struct.pack("<I", zlib.crc32(body))

    @staticmethod
    def unpack(data: bytes) -> _Entry | None:
        if len(data) != _ENTRY_SIZE:
            return None
        d_off, d_len, l_off, l_len, code, crc = _ENTRY.unpack(data)
        if zlib.crc32(data[:-4]) != crc or not 1 <= code <= len(_STATUS_CODES):
            return None
        return _Entry(d_off, d_len, l_off, l_len, _STATUS_CODES[code - 1])


@dataclass(frozen=True, slots=True)
class _Checkpoint:
    size: int
    count: int
    lines: int
    low_water: int

    def pack(self) -> bytes:
        body = _HEADER.pack(
            _MAGIC,
            _INDEX_VERSION,
            _ENTRY_SIZE,
            0,
            self.size,
            self.count,
            self.lines,
            self.low_water,
            0,
        )[:-4]
        return body + struct.pack("<I", zlib.crc32(body))

    @staticmethod
    def unpack(data: bytes) -> _Checkpoint | str:
        """The checkpoint, or why the header cannot be trusted."""
        if len(data) != _HEADER_SIZE:
            return "header is short"
        magic, version, entry_size, _reserved, size, count, lines, low_water, crc = _HEADER.unpack(
            data
        )
        if magic != _MAGIC:
            return "not a history index (bad magic)"
        if zlib.crc32(data[:-4]) != crc:
            return "header fails its checksum"
        if version != _INDEX_VERSION or entry_size != _ENTRY_SIZE:
            return f"unknown index version {version} / entry size {entry_size}"
        if lines < count or low_water > count:
            return "header counts are inconsistent"
        return _Checkpoint(size, count, lines, low_water)


_EMPTY_CHECKPOINT: Final = _Checkpoint(0, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class _Open:
    seq: int
    instant: str
    status: str
    run_id: str | None
    reason: str | None
    decision_off: int
    decision_len: int
    latest_off: int
    latest_len: int
    snapshot: dict[str, Any] | None
    revision: int | None
    decided_at: str
    updated_at: str

    def entry(self) -> _Entry:
        return _Entry(
            self.decision_off, self.decision_len, self.latest_off, self.latest_len, self.status
        )

    def public(self) -> OpenOccurrence:
        return OpenOccurrence(
            seq=self.seq,
            instant=self.instant,
            status=self.status,
            run_id=self.run_id,
            reason=self.reason,
            snapshot=self.snapshot,
            revision=self.revision,
            decided_at=self.decided_at,
            updated_at=self.updated_at,
        )


@dataclass(slots=True)
class _State:
    """A schedule's history as of log offset `size`."""

    size: int = 0
    count: int = 0
    lines: int = 0
    last_decided: datetime | None = None
    last_decided_text: str | None = None
    open: dict[int, _Open] = field(default_factory=dict)
    by_instant: dict[str, int] = field(default_factory=dict)
    # Index entries changed since the last index write.
    touched: dict[int, _Entry] = field(default_factory=dict)

    def copy(self) -> _State:
        return _State(
            self.size,
            self.count,
            self.lines,
            self.last_decided,
            self.last_decided_text,
            dict(self.open),
            dict(self.by_instant),
            {},
        )

    def checkpoint(self) -> _Checkpoint:
        low_water = min(self.open) if self.open else self.count
        return _Checkpoint(self.size, self.count, self.lines, low_water)


class _Bad(Exception):
    """A row that cannot be parsed or contradicts the history before it."""

    def __init__(self, reason: str, seq: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.seq = seq


class _BadLatest(_Bad):
    """A page read's latest row of an occurrence is the bad one (not its decision)."""


class _IndexDamaged(Exception):
    """The index does not match the log; rebuild it from the log."""

    def __init__(
        self, reason: str, *, missing: bool = False, durable_size: int | None = None
    ) -> None:
        super().__init__(reason)
        self.missing = missing
        # Set when the log is shorter than the size the index saw durable:
        # committed rows are gone, which no crash can do (damage, not a repair).
        self.durable_size = durable_size


# --- applying rows ------------------------------------------------------------------------


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _instant_of(row: Mapping[str, Any], key: str, seq: int) -> datetime:
    try:
        return parse_instant(row.get(key))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise _Bad(f"{key} is not an ISO-8601 instant: {row.get(key)!r}", seq) from None


def _canonical_text(text: str, parsed: datetime) -> str:
    """The at-rest text of an instant already parsed from `text`.

    Rows this store wrote are canonical ("YYYY-MM-DDTHH:MM:SS[.ffffff]Z");
    recognising that shape is much cheaper than formatting again.
    """
    if (
        text[-1:] == "Z"
        and text[10:11] == "T"
        and (len(text) == 20 or (len(text) == 27 and parsed.microsecond))
    ):
        return text
    return format_instant(parsed)


def _optional_str(row: Mapping[str, Any], key: str, seq: int) -> str | None:
    value = row.get(key)
    if value is not None and not isinstance(value, str):
        raise _Bad(f"{key} must be a string", seq)
    return value


def _check_snapshot(value: object, seq: int) -> dict[str, Any]:
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("deployment_id"), str)
        or not isinstance(value.get("inputs"), dict)
        or not (value.get("max_steps") is None or _is_int(value.get("max_steps")))
        or not _is_int(value.get("revision"))
    ):
        raise _Bad(
            "an admitted row needs snapshot {deployment_id, inputs, max_steps, revision}", seq
        )
    return value


# The canonical line of an admitted row (keys sorted, as `encode_json_line`
# writes it): instant, recorded_at, revision, run_id, seq, snapshot, status.
_ADMITTED_LINE: Final = (
    b'{"instant":"%s","recorded_at":"%s","revision":%d,"run_id":%s,"seq":%d,'
    b'"snapshot":%s,"status":"admitted"}\n'
)


_SNAPSHOT_PROBLEM: Final = Problem(
    field="snapshot", reason="must be JSON {deployment_id, inputs, max_steps, revision}"
)


def _apply_row(
    state: _State,
    row: object,
    offset: int,
    length: int,
    known: Callable[[int], _Open | _Entry],
) -> None:
    """Apply the row found at `offset` to `state`, or raise `_Bad` leaving
    `state` unchanged. `known(seq)` supplies an occurrence the state does not
    hold (recovery reads it from the index)."""
    if not isinstance(row, dict):
        raise _Bad("record is not a JSON object")
    seq = row.get("seq")
    if not _is_int(seq) or seq < 0:
        raise _Bad(f"seq must be a non-negative integer, got {seq!r}")
    if "update" not in row:
        _apply_decision(state, row, seq, offset, length)
    elif row["update"] is True:
        _apply_transition(state, row, seq, offset, length, known)
    else:
        raise _Bad("update must be true when present", seq)


class _Decision(NamedTuple):
    """A decision row's fields, checked by the row rules (`_check_decision`)."""

    status: str
    instant: datetime
    instant_text: str
    first: datetime
    recorded_text: str
    run_id: str | None
    reason: str | None
    revision: int | None
    snapshot: dict[str, Any] | None


class _Transition(NamedTuple):
    """A transition row's fields, checked by the row rules (`_check_transition`)."""

    status: str
    instant_text: str
    recorded_text: str
    run_id: str | None
    reason: str | None


def _check_decision(row: Mapping[str, Any], seq: int) -> _Decision:
    """The fields of decision row `seq`, or `_Bad` naming the first one that
    breaks the row rules. Every decision row read back (replay, a page, the
    rows a load takes from the index) passes here."""
    status = row.get("status")
    if status not in DECISION_STATUSES:
        raise _Bad(f"{status!r} is not a decision status", seq)
    instant = _instant_of(row, "instant", seq)
    recorded_at = _instant_of(row, "recorded_at", seq)
    run_id = _optional_str(row, "run_id", seq)
    reason = _optional_str(row, "reason", seq)
    revision = row.get("revision")
    count = row.get("count", 1)
    has_span = row.get("first_instant") is not None or row.get("last_instant") is not None
    refusal = decision_row_refusal(revision=revision, count=count, has_span=has_span)
    if refusal is not None:
        raise _Bad(refusal, seq)
    first = instant
    if count > 1:
        first = _instant_of(row, "first_instant", seq)
        refusal = span_refusal(first, _instant_of(row, "last_instant", seq), instant)
        if refusal is not None:
            raise _Bad(refusal, seq)
    snapshot = None
    if status == "admitted":
        snapshot = _check_snapshot(row.get("snapshot"), seq)
    elif row.get("snapshot") is not None:
        raise _Bad("only an admitted row carries a snapshot", seq)
    return _Decision(
        status=status,
        instant=instant,
        instant_text=_canonical_text(row["instant"], instant),
        first=first,
        recorded_text=_canonical_text(row["recorded_at"], recorded_at),
        run_id=run_id,
        reason=reason,
        revision=revision,
        snapshot=snapshot,
    )


def _check_transition(row: Mapping[str, Any], seq: int) -> _Transition:
    """The fields of a transition row of `seq`, or `_Bad` (see `_check_decision`)."""
    status = row.get("status")
    if status not in RUN_STATUSES:
        raise _Bad(f"{status!r} is not a run status", seq)
    recorded_at = _instant_of(row, "recorded_at", seq)
    run_id = _optional_str(row, "run_id", seq)
    reason = _optional_str(row, "reason", seq)
    instant = _instant_of(row, "instant", seq)
    return _Transition(
        status=status,
        instant_text=_canonical_text(row["instant"], instant),
        recorded_text=_canonical_text(row["recorded_at"], recorded_at),
        run_id=run_id,
        reason=reason,
    )


def _apply_decision(state: _State, row: dict[str, Any], seq: int, offset: int, length: int) -> None:
    if seq < state.count:
        raise _Bad(f"duplicate decision for seq {seq}", seq)
    if seq > state.count:
        raise _Bad(f"decision for seq {seq} where seq {state.count} was expected (a gap)", seq)
    fields = _check_decision(row, seq)
    _enter_decision(
        state,
        seq,
        offset,
        length,
        status=fields.status,
        instant=fields.instant,
        instant_text=fields.instant_text,
        first=fields.first,
        recorded_text=fields.recorded_text,
        run_id=fields.run_id,
        reason=fields.reason,
        revision=fields.revision,
        snapshot=fields.snapshot,
    )


def _enter_decision(
    state: _State,
    seq: int,
    offset: int,
    length: int,
    *,
    status: str,
    instant: datetime,
    instant_text: str,
    first: datetime,
    recorded_text: str,
    run_id: str | None,
    reason: str | None,
    revision: int | None,
    snapshot: dict[str, Any] | None,
) -> None:
    """Enter a well-formed decision row (seq == state.count) into `state`, or
    raise `_Bad` when it is not after the previous decision."""
    if state.last_decided is not None and first <= state.last_decided:
        raise _Bad(
            f"decision for {instant_text} is not after the previous decision"
            f" {state.last_decided_text} (duplicate or out of order)",
            seq,
        )
    state.count += 1
    state.last_decided = instant
    state.last_decided_text = instant_text
    entry = _Entry(offset, length, offset, length, status)
    state.touched[seq] = entry
    if status == "admitted":
        state.open[seq] = _Open(
            seq=seq,
            instant=instant_text,
            status=status,
            run_id=run_id,
            reason=reason,
            decision_off=offset,
            decision_len=length,
            latest_off=offset,
            latest_len=length,
            snapshot=snapshot,
            revision=revision,
            decided_at=recorded_text,
            updated_at=recorded_text,
        )
        state.by_instant[instant_text] = seq


def _apply_transition(
    state: _State,
    row: dict[str, Any],
    seq: int,
    offset: int,
    length: int,
    known: Callable[[int], _Open | _Entry],
) -> None:
    fields = _check_transition(row, seq)
    status, run_id = fields.status, fields.run_id
    if seq >= state.count:
        raise _Bad(f"transition for unknown seq {seq}", seq)
    current = state.open.get(seq)
    if current is None:
        prior: _Open | _Entry | None = state.touched.get(seq)
        if prior is None:
            prior = known(seq)
        if isinstance(prior, _Open):
            current = prior
        elif prior.latest_off >= offset:
            return  # the index already reflects this row (written before a crash)
        else:
            raise _Bad(f"a row after the terminal {prior.status} row of seq {seq}", seq)
    if current.latest_off >= offset:
        return
    if fields.instant_text != current.instant:
        raise _Bad(
            f"transition names instant {row['instant']} but seq {seq} is {current.instant}", seq
        )
    refusal = run_row_refusal(current.status, current.run_id, status, run_id, seq)
    if refusal is not None:
        raise _Bad(refusal, seq)
    updated = replace(
        current,
        status=status,
        run_id=run_id if run_id is not None else current.run_id,
        reason=fields.reason,
        latest_off=offset,
        latest_len=length,
        updated_at=fields.recorded_text,
    )
    if status in TERMINAL_STATUSES:
        state.open.pop(seq, None)
        state.by_instant.pop(current.instant, None)
    else:
        state.open[seq] = updated
        state.by_instant[current.instant] = seq
    state.touched[seq] = updated.entry()


# --- reading files --------------------------------------------------------------------------


class _Reader:
    """Open log and index of one schedule during a load."""

    def __init__(self, log_fd: DiskFile, idx_fd: DiskFile | None, idx_entries: int) -> None:
        self.log_fd = log_fd
        self.idx_fd = idx_fd
        self.idx_entries = idx_entries
        # The last entry's decision row is read by the spot check and again
        # when it is still open: read each row once per load.
        self._rows: dict[int, dict[str, Any]] = {}

    def entries(self, first: int, count: int) -> list[_Entry]:
        if self.idx_fd is None or first + count > self.idx_entries:
            raise _IndexDamaged(f"index has no entry for seq {first + count - 1}")
        data = self.idx_fd.read_at(count * _ENTRY_SIZE, _HEADER_SIZE + first * _ENTRY_SIZE)
        result: list[_Entry] = []
        for i in range(count):
            entry = _Entry.unpack(data[i * _ENTRY_SIZE : (i + 1) * _ENTRY_SIZE])
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
            _check_decision(row, seq) if decision else _check_transition(row, seq)
        except _Bad as bad:
            raise _IndexDamaged(f"the row of seq {seq} is damaged: {bad.reason}") from None
        self._rows[offset] = row
        return row

    def materialize(self, seq: int, entry: _Entry) -> _Open:
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
        return _Open(
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
        )


@dataclass(slots=True)
class _Loaded:
    state: _State
    problems: list[StoreProblem]
    dropped: int = 0
    rebuilt: bool = False
    tail_rows: int = 0
    tail_bytes: int = 0
    checkpoint: _Checkpoint = _EMPTY_CHECKPOINT


@dataclass(slots=True)
class _Log:
    """An owned schedule history: committed state plus what a batch staged."""

    files: ScheduleFiles
    state: _State
    problems: tuple[StoreProblem, ...]
    # Entries not in the index file (only while frozen by a problem).
    overlay: dict[int, _Entry]
    # The header to publish once the entries it describes have been flushed.
    checkpoint_next: _Checkpoint | None = None
    pending: _State | None = None
    pending_batch: GroupCommit | None = None
    needs_sync: bool = False


def _page_row(
    seq: int,
    entry: _Entry,
    decision_data: bytes,
    latest_data: bytes | None,
    previous: datetime | None,
) -> tuple[dict[str, Any], datetime]:
    """The page entry of occurrence `seq` from its rows as read (`latest_data`
    None when its decision row is its latest), checked by the row rules and
    against the index entry that points at them and the decision before it
    (`previous`); returns it with its decision instant. Raises `_Bad`
    (`_BadLatest` when the latest row is at fault)."""
    decision_row = _page_json(decision_data, seq, decision=True)
    decision = _check_decision(decision_row, seq)
    if previous is not None and decision.first <= previous:
        raise _Bad(
            f"decision for {decision.instant_text} is not after the decision of seq {seq - 1}"
            " (duplicate or out of order)",
            seq,
        )
    status, run_id, reason, updated_at = (
        decision.status,
        decision.run_id,
        decision.reason,
        decision.recorded_text,
    )
    if latest_data is not None:
        try:
            if decision.status != "admitted":
                raise _Bad(
                    f"the index points seq {seq} at a transition, but its decision is"
                    f" {decision.status}, which no transition follows",
                    seq,
                )
            latest = _check_transition(_page_json(latest_data, seq, decision=False), seq)
            if latest.instant_text != decision.instant_text:
                raise _Bad(
                    f"transition names instant {latest.instant_text} but seq {seq} is"
                    f" {decision.instant_text}",
                    seq,
                )
            if run_id is not None and latest.run_id is not None and latest.run_id != run_id:
                raise _Bad(f"run id changed from {run_id} to {latest.run_id} for seq {seq}", seq)
        except _Bad as bad:
            raise _BadLatest(bad.reason, seq) from None
        status, reason, updated_at = latest.status, latest.reason, latest.recorded_text
        run_id = latest.run_id if latest.run_id is not None else run_id
    if status != entry.status:
        changed = (
            f"the row says {status}, but the index recorded {entry.status} when it was"
            " written: the row was changed since"
        )
        raise _BadLatest(changed, seq) if latest_data is not None else _Bad(changed, seq)
    row = {
        "seq": seq,
        "instant": decision.instant_text,
        "status": status,
        "run_id": run_id,
        "reason": reason,
        "count": decision_row.get("count", 1),
        "first_instant": decision_row.get("first_instant"),
        "last_instant": decision_row.get("last_instant"),
        "revision": decision.revision,
        "decided_at": decision.recorded_text,
        "updated_at": updated_at,
    }
    return row, decision.instant


def _page_json(data: bytes, seq: int, *, decision: bool) -> dict[str, Any]:
    """The row a page read found where the index points for `seq`: one JSON
    object of that seq, of the kind (decision or transition) expected."""
    try:
        row = json.loads(data.decode()) if data.endswith(b"\n") else None
    except ValueError:
        raise _Bad("unparseable record", seq) from None
    if not isinstance(row, dict) or row.get("seq") != seq or ("update" in row) == decision:
        raise _Bad("the row the index points at is not this occurrence's", seq)
    if not decision and row["update"] is not True:
        raise _Bad("update must be true when present", seq)
    return row


def _line_number(fd: DiskFile, offset: int) -> int:
    """The 1-based line of the log that starts at byte `offset` (a diagnostic
    names it; counting reads the log up to there, once, when damage is found)."""
    newlines, position = 0, 0
    while position < offset:
        chunk = fd.read_at(min(1 << 20, offset - position), position)
        if not chunk:
            break
        newlines += chunk.count(b"\n")
        position += len(chunk)
    return newlines + 1


class HistoryStore:
    """Occurrence history of every schedule under `<store_root>/schedules`.

    The scheduler (the lock holder) recovers each schedule once with
    `recover()`, then appends through `append_decision`/`append_transition`,
    normally staged in the wake-up's `GroupCommit`. `page()` serves the API;
    in a process that has not recovered the schedule it reads the files
    without writing anything.
    """

    def __init__(self, store_root: str | os.PathLike[str], *, disk: Disk = OS_DISK) -> None:
        self.store_root = Path(store_root)
        self.disk = disk
        self._logs: dict[str, _Log] = {}
        self._paths: dict[str, ScheduleFiles] = {}

    def _files(self, schedule_id: str) -> ScheduleFiles:
        files = self._paths.get(schedule_id)
        if files is None:
            files = self._paths[schedule_id] = ScheduleFiles.of(self.store_root, schedule_id)
        return files

    # --- loading -----------------------------------------------------------------------

    def recover(self, schedule_id: str, *, full_scan: bool = False) -> HistoryRecovery:
        """Load one schedule's history as its owner, repairing crash artifacts.

        Drops a torn final line (warning), replays the log after the index
        checkpoint, brings the index up to date (rebuilding it from the log if
        it cannot be trusted), and keeps the result for appends. Damaged rows
        come back as `problems` and freeze the log. Never raises for damage.
        With `full_scan` the index is not trusted at all: every row is read
        and the index rebuilt (O(log): for a log written other than by
        appends since it was last known sound). Call `sync_recovered()` once
        after recovering every schedule.
        """
        files = self._files(schedule_id)
        existing = self._logs.get(schedule_id)
        if existing is not None and existing.pending is not None:
            raise RuntimeError(f"history of {schedule_id!r} has writes staged in an open batch")
        loaded = self._load(files, repair=True, full_open=True, force_rebuild=full_scan)
        state = loaded.state
        problems = tuple(loaded.problems)
        log = _Log(files=files, state=state, problems=problems, overlay={})
        if problems:
            log.overlay = dict(state.touched)
        elif loaded.rebuilt:
            self._write_full_index(files, state)
        else:
            if state.touched:
                self._write_entries(files, state.touched)
            if loaded.tail_rows or state.touched:
                # Published by the next commit that touches this schedule, once
                # its flush has made these entries durable.
                log.checkpoint_next = state.checkpoint()
                log.needs_sync = True
        state.touched = {}
        self._logs[schedule_id] = log
        return HistoryRecovery(
            schedule_id=schedule_id,
            occurrences=state.count,
            last_decided_instant=state.last_decided_text,
            open_occurrences=tuple(state.open[s].public() for s in sorted(state.open)),
            problems=problems,
            dropped_torn_bytes=loaded.dropped,
            index_rebuilt=loaded.rebuilt,
            tail_rows=loaded.tail_rows,
            tail_bytes=loaded.tail_bytes,
        )

    def export_state(self, schedule_id: str) -> list[Any] | None:
        """A clean, fully published recovered history as JSON-able values, for
        the startup checkpoint (`shell/startup_checkpoint.py`); None when there
        is none to give: not loaded, staged writes, problems, or an index
        header on disk that is not the held state's checkpoint (the next load
        would replay a tail, or another writer touched the index)."""
        log = self._logs.get(schedule_id)
        if (
            log is None
            or log.pending is not None
            or log.problems
            or log.overlay
            or log.checkpoint_next is not None
            or log.needs_sync
            or not self._header_matches(log)
        ):
            return None
        state = log.state
        return [
            state.size,
            state.count,
            state.lines,
            state.last_decided_text,
            [
                [
                    o.seq,
                    o.instant,
                    o.status,
                    o.run_id,
                    o.reason,
                    o.decision_off,
                    o.decision_len,
                    o.latest_off,
                    o.latest_len,
                    o.snapshot,
                    o.revision,
                    o.decided_at,
                    o.updated_at,
                ]
                for o in (state.open[seq] for seq in sorted(state.open))
            ],
        ]

    def _header_matches(self, log: _Log) -> bool:
        """Whether the index file's header is the checkpoint of the state held
        for the log (so a load from the files would replay no tail)."""
        expected = log.state.checkpoint()
        if expected == _EMPTY_CHECKPOINT:
            # A load of an absent log finds the empty state and writes nothing.
            files = log.files
            return not exists(self.disk, files.history) and not exists(
                self.disk, files.history_index
            )
        try:
            fd = self.disk.open(log.files.history_index)
        except FileNotFoundError:
            return False
        try:
            return fd.read_at(_HEADER_SIZE, 0) == expected.pack()
        finally:
            fd.close()

    def adopt_state(self, schedule_id: str, exported: Sequence[Any]) -> HistoryRecovery:
        """Take a history exported by `export_state` as this store's recovered
        state, without reading the files; the caller has established that the
        files are the ones it was exported from. Returns what `recover()` would
        have. Raises `ValueError` or `TypeError` for a malformed export,
        leaving nothing adopted."""
        size, count, lines, last_text, open_rows = exported
        if not (_is_int(size) and _is_int(count) and _is_int(lines)) or min(size, count) < 0:
            raise ValueError(f"malformed history export for {schedule_id!r}")
        state = _State(size=size, count=count, lines=lines)
        if last_text is not None:
            state.last_decided = parse_instant(last_text)
            state.last_decided_text = last_text
        for row in open_rows:
            occurrence = _Open(*row)
            if not _is_int(occurrence.seq) or not 0 <= occurrence.seq < count:
                raise ValueError(f"malformed history export for {schedule_id!r}")
            state.open[occurrence.seq] = occurrence
            state.by_instant[occurrence.instant] = occurrence.seq
        existing = self._logs.get(schedule_id)
        if existing is not None and existing.pending is not None:
            raise RuntimeError(f"history of {schedule_id!r} has writes staged in an open batch")
        self._logs[schedule_id] = _Log(
            files=self._files(schedule_id), state=state, problems=(), overlay={}
        )
        return HistoryRecovery(
            schedule_id=schedule_id,
            occurrences=count,
            last_decided_instant=last_text,
            open_occurrences=tuple(state.open[s].public() for s in sorted(state.open)),
        )

    def sync_recovered(self) -> None:
        """Flush every log and index `recover()` replayed a tail of, with one
        flush for all of them.

        Rows found after a crash may exist only in the page cache; they must
        be durable before the scheduler acts on them. (Their index checkpoints
        are published by the next commit touching each schedule, or `close()`.)
        """
        logs = [log for log in self._logs.values() if log.needs_sync and log.pending is None]
        if not logs:
            return
        paths = [p for log in logs for p in (log.files.history, log.files.history_index)]
        sync_paths(paths, mode="auto", disk=self.disk)
        for log in logs:
            log.needs_sync = False

    def verify(self, schedule_id: str) -> tuple[StoreProblem, ...]:
        """Scan the whole log (read-only) and return every problem found before
        the first one that stops the replay. O(log): for operators and tests."""
        files = self._files(schedule_id)
        if not is_directory(self.disk, files.directory):
            raise NotFound(
                f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
            )
        return tuple(self._load(files, repair=False, full_open=False, force_rebuild=True).problems)

    def _load(
        self, files: ScheduleFiles, *, repair: bool, full_open: bool, force_rebuild: bool = False
    ) -> _Loaded:
        try:
            log_fd = self.disk.open(files.history)
        except FileNotFoundError:
            if repair:
                # An index without its log describes nothing.
                check_fence(files.history_index)
                with contextlib.suppress(FileNotFoundError):
                    self.disk.remove(files.history_index)
            return _Loaded(state=_State(), problems=[])
        try:
            dropped = 0
            size = log_fd.size()
            if size and log_fd.read_at(1, size - 1) != b"\n":
                if repair:
                    dropped = repair_torn_tail(files.history, disk=self.disk)
                    size = log_fd.size()
                else:
                    size = complete_end(log_fd, size)
            idx_fd: DiskFile | None = None
            with contextlib.suppress(FileNotFoundError):
                idx_fd = self.disk.open(files.history_index)
            try:
                loaded: _Loaded | None = None
                durable_size: int | None = None
                if force_rebuild and idx_fd is not None:
                    # The rows are all read, but a log shorter than what the
                    # index saw committed is damage all the same.
                    header = _Checkpoint.unpack(idx_fd.read_at(_HEADER_SIZE, 0))
                    if isinstance(header, _Checkpoint) and header.size > size:
                        durable_size = header.size
                if not force_rebuild:
                    try:
                        loaded = self._load_with_index(files, log_fd, idx_fd, size, full_open)
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
                        files, _Reader(log_fd, None, 0), _State(), _EMPTY_CHECKPOINT, size
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
    ) -> _Loaded:
        if idx_fd is None:
            raise _IndexDamaged("index is missing", missing=True)
        idx_size = idx_fd.size()
        checkpoint = _Checkpoint.unpack(idx_fd.read_at(_HEADER_SIZE, 0))
        if isinstance(checkpoint, str):
            raise _IndexDamaged(checkpoint)
        entries_in_file = max(0, (idx_size - _HEADER_SIZE) // _ENTRY_SIZE)
        if checkpoint.size > size:
            raise _IndexDamaged(
                f"checkpoint at byte {checkpoint.size} is past the log end {size}",
                durable_size=checkpoint.size,
            )
        if checkpoint.count > entries_in_file:
            raise _IndexDamaged("index is shorter than its checkpoint")
        if checkpoint.size and log_fd.read_at(1, checkpoint.size - 1) != b"\n":
            raise _IndexDamaged("checkpoint does not end a record")
        reader = _Reader(log_fd, idx_fd, entries_in_file)
        state = _State(size=checkpoint.size, count=checkpoint.count, lines=checkpoint.lines)
        if checkpoint.count:
            last_seq = checkpoint.count - 1
            (last,) = reader.entries(last_seq, 1)
            if last.decision_off + last.decision_len > checkpoint.size:
                raise _IndexDamaged("last entry points past the checkpoint")
            row = reader.row(last.decision_off, last.decision_len, last_seq, decision=True)
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
    def _drop_unchanged(reader: _Reader, touched: dict[int, _Entry]) -> None:
        """Forget replayed entries the index file already holds: after a crash
        the index is usually ahead of its checkpoint, so there is nothing to write."""
        assert reader.idx_fd is not None
        seqs = sorted(s for s in touched if s < reader.idx_entries)
        if not seqs:
            return
        first, last = seqs[0], seqs[-1]
        if last - first < _ENTRY_CHUNK:
            data = reader.idx_fd.read_at(
                (last - first + 1) * _ENTRY_SIZE, _HEADER_SIZE + first * _ENTRY_SIZE
            )
            on_disk = {
                s: data[(s - first) * _ENTRY_SIZE : (s - first + 1) * _ENTRY_SIZE] for s in seqs
            }
        else:
            on_disk = {
                s: reader.idx_fd.read_at(_ENTRY_SIZE, _HEADER_SIZE + s * _ENTRY_SIZE) for s in seqs
            }
        for seq, packed in on_disk.items():
            if packed == touched[seq].pack():
                del touched[seq]

    @staticmethod
    def _collect_open(reader: _Reader, state: _State, checkpoint: _Checkpoint) -> None:
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
        state: _State,
        checkpoint: _Checkpoint,
        end: int,
    ) -> _Loaded:
        problems: list[StoreProblem] = []
        materialized: dict[int, _Open | _Entry] = {}

        def known(seq: int) -> _Open | _Entry:
            if seq not in materialized:
                (entry,) = reader.entries(seq, 1)
                materialized[seq] = (
                    entry if entry.status in TERMINAL_STATUSES else reader.materialize(seq, entry)
                )
            return materialized[seq]

        start = state.size
        rows = 0
        for offset, line in iter_lines(reader.log_fd, start, end):
            if not line.endswith(b"\n"):
                break  # a torn final line another process is still writing
            where = f"line {state.lines + 1}, byte {offset}"
            try:
                try:
                    row = json.loads(line.decode())
                except ValueError:
                    raise _Bad("unparseable record") from None
                _apply_row(state, row, offset, len(line), known)
            except _Bad as bad:
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
        return _Loaded(
            state=state,
            problems=problems,
            tail_rows=rows,
            tail_bytes=state.size - start,
            checkpoint=checkpoint,
        )

    # --- index writes ------------------------------------------------------------------------

    def _write_full_index(self, files: ScheduleFiles, state: _State) -> None:
        # The rows were read from the page cache; make them durable before an
        # index that claims them is.
        fd = self.disk.open(files.history)
        try:
            fd.fsync()
        finally:
            fd.close()
        parts = [state.checkpoint().pack()]
        parts.extend(state.touched[seq].pack() for seq in range(state.count))
        atomic_write_bytes(files.history_index, b"".join(parts), disk=self.disk)

    def _write_entries(
        self,
        files: ScheduleFiles,
        entries: Mapping[int, _Entry],
        *,
        header: _Checkpoint | None = None,
        truncate_to: int | None = None,
    ) -> None:
        check_fence(files.history_index)
        fault_point(f"before:index:{HISTORY_INDEX_FILE}")
        fd = self.disk.open(files.history_index, write=True, create=True)
        try:
            if fd.size() < _HEADER_SIZE:
                fd.write_at((header or _EMPTY_CHECKPOINT).pack(), 0)
            elif header is not None:
                fd.write_at(header.pack(), 0)
            # One write per run of consecutive seqs (a whole batch of new
            # decisions is one run).
            run_start, run = -1, list[bytes]()
            for seq in sorted(entries):
                if run and seq != run_start + len(run):
                    fd.write_at(b"".join(run), _HEADER_SIZE + run_start * _ENTRY_SIZE)
                    run = []
                if not run:
                    run_start = seq
                run.append(entries[seq].pack())
            if run:
                fd.write_at(b"".join(run), _HEADER_SIZE + run_start * _ENTRY_SIZE)
            if truncate_to is not None:
                end = _HEADER_SIZE + truncate_to * _ENTRY_SIZE
                if fd.size() > end:
                    fd.truncate(end)
        finally:
            fd.close()
        fault_point(f"after:index:{HISTORY_INDEX_FILE}")

    def _publish_checkpoint(self, log: _Log) -> None:
        if log.checkpoint_next is None:
            return
        self._write_entries(log.files, {}, header=log.checkpoint_next)
        log.checkpoint_next = None

    # --- appends -------------------------------------------------------------------------------

    def _owned(self, schedule_id: str) -> _Log:
        log = self._logs.get(schedule_id)
        if log is None:
            files = self._files(schedule_id)
            if not is_directory(self.disk, files.directory):
                raise NotFound(
                    f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
                )
            self.recover(schedule_id)
            log = self._logs[schedule_id]
        return log

    def _stage(
        self,
        log: _Log,
        batch: GroupCommit | None,
        build: Callable[[_State], dict[str, Any]],
        enter: Callable[[_State, dict[str, Any], int, int], None] | None = None,
    ) -> int:
        """Stage the row `build` makes; `enter` (default: parse it back like a
        row read from disk) applies it to the pending state."""
        active, shadow, first = self._open_shadow(log, batch)
        row = build(shadow)
        try:
            line = encode_json_line(row)
        except (TypeError, ValueError):
            # Every other field is checked to be a string, an integer or an
            # instant; only a snapshot's inputs can hold what JSON cannot.
            raise InvalidInput.from_problems("history row", [_SNAPSHOT_PROBLEM]) from None
        seq = int(row["seq"])
        if enter is None:
            self._enter(log, lambda: _apply_row(shadow, row, shadow.size, len(line), _unknown))
        else:
            self._enter(log, lambda: enter(shadow, row, shadow.size, len(line)))
        self._append_staged(log, active, shadow, line, first)
        if batch is None:
            active.commit()
        return seq

    def _open_shadow(
        self, log: _Log, batch: GroupCommit | None
    ) -> tuple[GroupCommit, _State, bool]:
        """The batch to stage into, the pending state to apply rows to, and
        whether this is the log's first row in the batch."""
        if log.problems:
            raise StoreDamaged(log.problems[0])
        active = GroupCommit() if batch is None else batch
        if log.pending_batch is not None and log.pending_batch is not active:
            raise RuntimeError(
                f"history of {log.files.schedule_id!r} has writes staged in another batch"
            )
        first = log.pending is None
        shadow = log.state.copy() if log.pending is None else log.pending
        return active, shadow, first

    @staticmethod
    def _enter(log: _Log, apply: Callable[[], None]) -> None:
        try:
            apply()
        except _Bad as bad:
            raise InvalidState(
                f"history of {log.files.schedule_id!r} refuses the row: {bad.reason}",
                data={"schedule_id": log.files.schedule_id},
            ) from None

    def _append_staged(
        self, log: _Log, active: GroupCommit, shadow: _State, line: bytes, first: bool
    ) -> None:
        shadow.size += len(line)
        shadow.lines += 1
        active.append_bytes(log.files.history, line, expect_size=log.state.size if first else None)
        if first:
            log.pending = shadow
            log.pending_batch = active
            active.sync_also(log.files.history_index)
            active.on_commit(lambda: self._publish(log))
            active.on_abort(lambda: self._drop(log))

    def stage_admitted(
        self,
        schedule_id: str,
        *,
        instant: datetime,
        run_id: str,
        snapshot: Mapping[str, Any],
        recorded_at: datetime,
        batch: GroupCommit,
    ) -> int:
        """Stage the `admitted` row of `instant` in `batch`; returns its seq.

        The scheduler's path for a herd of admissions: the row is the one
        `append_decision(status="admitted", revision=snapshot["revision"], ...)`
        would write, byte for byte, built without the general row machinery
        (no row dict to encode, no parse back). The same errors: `InvalidInput` for a naive
        instant, a run id that is not a string or a malformed snapshot,
        `InvalidState` for an instant not after the last decision,
        `StoreDamaged`, `NotFound`.
        """
        problems: list[Problem] = []

        def aware(value: datetime, name: str) -> str:
            try:
                return format_instant(value)
            except (AttributeError, TypeError, ValueError) as exc:
                problems.append(Problem(field=name, reason=f"must be an aware instant: {exc}"))
                return ""

        instant_text = aware(instant, "instant")
        recorded_text = aware(recorded_at, "recorded_at")
        if not isinstance(run_id, str):
            problems.append(Problem(field="run_id", reason="must be a string"))
        entered: dict[str, Any] | None = None
        try:
            entered = _check_snapshot(dict(snapshot), 0)
            snapshot_json = canonical_json(entered)
            revision = entered["revision"]
            if revision < 1:
                raise _Bad("revision must be positive")
        except (_Bad, TypeError, ValueError):
            problems.append(_SNAPSHOT_PROBLEM)
        if problems:
            raise InvalidInput.from_problems("history row", problems)
        assert entered is not None
        log = self._owned(schedule_id)
        active, shadow, first = self._open_shadow(log, batch)
        seq = shadow.count
        line = _ADMITTED_LINE % (
            instant_text.encode(),
            recorded_text.encode(),
            revision,
            canonical_json(run_id),
            seq,
            snapshot_json,
        )
        at = parse_instant(instant_text)

        def enter() -> None:
            _enter_decision(
                shadow,
                seq,
                shadow.size,
                len(line),
                status="admitted",
                instant=at,
                instant_text=instant_text,
                first=at,
                recorded_text=recorded_text,
                run_id=run_id,
                reason=None,
                revision=revision,
                snapshot=entered,
            )

        self._enter(log, enter)
        self._append_staged(log, active, shadow, line, first)
        return seq

    def _publish(self, log: _Log) -> None:
        shadow = log.pending
        assert shadow is not None
        log.pending = None
        log.pending_batch = None
        touched, shadow.touched = shadow.touched, {}
        log.state = shadow
        try:
            self._write_entries(log.files, touched, header=log.checkpoint_next)
        except OSError as exc:
            # The rows are durable; the index is derived. Reload (and repair
            # the index) before the next use.
            _log.warning(
                "could not update %s (%s); it will be rebuilt", log.files.history_index, exc
            )
            self._logs.pop(log.files.schedule_id, None)
            return
        log.checkpoint_next = shadow.checkpoint()

    def _drop(self, log: _Log) -> None:
        log.pending = None
        log.pending_batch = None
        # Some of the batch may have reached the disk: re-read it before the next use.
        self._logs.pop(log.files.schedule_id, None)

    def append_decision(
        self,
        schedule_id: str,
        *,
        instant: Instant,
        status: str,
        recorded_at: Instant,
        run_id: str | None = None,
        reason: str | None = None,
        count: int = 1,
        first_instant: Instant | None = None,
        last_instant: Instant | None = None,
        revision: int | None = None,
        snapshot: Mapping[str, Any] | None = None,
        batch: GroupCommit | None = None,
    ) -> int:
        """Append the decision row that opens the occurrence at `instant`;
        returns its seq.

        With `batch` the row is staged and becomes durable (and visible to
        pages and queries) when the batch commits; without it, it is written
        and fsynced now. `status` is a decision status; `admitted` needs
        `snapshot` ({deployment_id, inputs, max_steps, revision}); `count > 1`
        needs `first_instant < last_instant == instant`. Raises `InvalidInput`
        for malformed arguments, `InvalidState` when the row would contradict
        the history (an instant not after the last decision), `StoreDamaged`
        when the history is frozen by damage, `NotFound` for an unknown
        schedule.
        """
        problems: list[Problem] = []

        def instant_field(value: Instant | None, name: str) -> str | None:
            if value is None:
                return None
            try:
                return canonical_instant(value)
            except (TypeError, ValueError) as exc:
                problems.append(Problem(field=name, reason=f"must be an aware instant: {exc}"))
                return None

        instant_text = instant_field(instant, "instant")
        recorded_text = instant_field(recorded_at, "recorded_at")
        first_text = instant_field(first_instant, "first_instant")
        last_text = instant_field(last_instant, "last_instant")
        if status not in DECISION_STATUSES:
            problems.append(
                Problem(field="status", reason=f"must be one of {sorted(DECISION_STATUSES)}")
            )
        if not _is_int(count) or count < 1:
            problems.append(Problem(field="count", reason="must be a positive integer"))
        elif count > 1 and (first_text is None or last_text is None):
            problems.append(
                Problem(field="first_instant", reason="count > 1 needs first and last instants")
            )
        elif count == 1 and (first_text is not None or last_text is not None):
            problems.append(
                Problem(field="first_instant", reason="only a row with count > 1 has them")
            )
        if (status == "admitted") != (snapshot is not None):
            problems.append(
                Problem(field="snapshot", reason="is required for admitted and only for it")
            )
        elif snapshot is not None:
            # Whether it is JSON at all is found when the row is encoded, before
            # anything is staged (see `_stage`).
            try:
                _check_snapshot(dict(snapshot), 0)
            except _Bad:
                problems.append(_SNAPSHOT_PROBLEM)
        for name, value in (("run_id", run_id), ("reason", reason)):
            if value is not None and not isinstance(value, str):
                problems.append(Problem(field=name, reason="must be a string"))
        if revision is not None and (not _is_int(revision) or revision < 1):
            problems.append(Problem(field="revision", reason="must be a positive integer"))
        if problems:
            raise InvalidInput.from_problems("history row", problems)

        def build(state: _State) -> dict[str, Any]:
            row: dict[str, Any] = {
                "seq": state.count,
                "instant": instant_text,
                "status": status,
                "recorded_at": recorded_text,
            }
            optional = {"run_id": run_id, "reason": reason, "revision": revision}
            row.update({k: v for k, v in optional.items() if v is not None})
            if snapshot is not None:
                row["snapshot"] = dict(snapshot)
            if count > 1:
                row.update(count=count, first_instant=first_text, last_instant=last_text)
            return row

        # Every field is checked above: entering the row needs no second parse.
        assert instant_text is not None and recorded_text is not None
        instant_at = parse_instant(instant_text)
        first_at = parse_instant(first_text) if first_text is not None else instant_at
        last_at = parse_instant(last_text) if last_text is not None else instant_at
        entered_snapshot = dict(snapshot) if snapshot is not None else None

        def enter(state: _State, row: dict[str, Any], offset: int, length: int) -> None:
            if count > 1 and (not first_at < last_at or last_at != instant_at):
                # As a row read back would be refused (`_apply_decision`).
                raise _Bad(
                    "a coalesced row needs first_instant < last_instant == instant", row["seq"]
                )
            _enter_decision(
                state,
                row["seq"],
                offset,
                length,
                status=status,
                instant=instant_at,
                instant_text=instant_text,
                first=first_at,
                recorded_text=recorded_text,
                run_id=run_id,
                reason=reason,
                revision=revision,
                snapshot=entered_snapshot,
            )

        return self._stage(self._owned(schedule_id), batch, build, enter)

    def append_transition(
        self,
        schedule_id: str,
        *,
        status: str,
        recorded_at: Instant,
        seq: int | None = None,
        instant: Instant | None = None,
        run_id: str | None = None,
        reason: str | None = None,
        batch: GroupCommit | None = None,
    ) -> int:
        """Append a row moving an open occurrence (named by `seq` or `instant`)
        to `status`; returns its seq.

        Idempotent: the same status with nothing new (no run id to attach)
        writes nothing. The row carries the occurrence's run id once known.
        Raises `InvalidState` when no such open occurrence exists or the move
        is not allowed (backwards, after a terminal status, a different run
        id), `InvalidInput` for malformed arguments, `StoreDamaged` when the
        history is frozen by damage.
        """
        problems: list[Problem] = []
        if (seq is None) == (instant is None):
            problems.append(Problem(field="seq", reason="give exactly one of seq and instant"))
        if seq is not None and (not _is_int(seq) or seq < 0):
            problems.append(Problem(field="seq", reason="must be a non-negative integer"))
        if status not in RUN_STATUSES:
            problems.append(
                Problem(field="status", reason=f"must be one of {sorted(RUN_STATUSES)}")
            )
        instant_text: str | None = None
        recorded_text = ""
        for name, value in (("instant", instant), ("recorded_at", recorded_at)):
            if value is None:
                continue
            try:
                text = canonical_instant(value)
            except (TypeError, ValueError) as exc:
                problems.append(Problem(field=name, reason=f"must be an aware instant: {exc}"))
                continue
            if name == "instant":
                instant_text = text
            else:
                recorded_text = text
        for name, value in (("run_id", run_id), ("reason", reason)):
            if value is not None and not isinstance(value, str):
                problems.append(Problem(field=name, reason="must be a string"))
        if problems:
            raise InvalidInput.from_problems("history row", problems)

        log = self._owned(schedule_id)
        state = log.pending if log.pending is not None else log.state
        target = seq if seq is not None else state.by_instant.get(instant_text or "")
        current = state.open.get(target) if target is not None else None
        if current is None:
            what = f"seq {seq}" if seq is not None else f"instant {instant_text}"
            raise InvalidState(
                f"history of {schedule_id!r} has no open occurrence at {what}",
                data={"schedule_id": schedule_id},
            )
        if status == current.status and (run_id is None or run_id == current.run_id):
            return current.seq

        def build(_state: _State) -> dict[str, Any]:
            row: dict[str, Any] = {
                "seq": current.seq,
                "update": True,
                "instant": current.instant,
                "status": status,
                "recorded_at": recorded_text,
            }
            known_run = run_id if run_id is not None else current.run_id
            if known_run is not None:
                row["run_id"] = known_run
            if reason is not None:
                row["reason"] = reason
            return row

        return self._stage(log, batch, build)

    # --- queries --------------------------------------------------------------------------------

    def open_occurrences(self, schedule_id: str) -> tuple[OpenOccurrence, ...]:
        """Committed open occurrences of an owned schedule, oldest first."""
        state = self._owned(schedule_id).state
        return tuple(state.open[s].public() for s in sorted(state.open))

    def open_occurrence(self, schedule_id: str, instant: Instant) -> OpenOccurrence | None:
        """The committed open occurrence at `instant`, if any."""
        state = self._owned(schedule_id).state
        seq = state.by_instant.get(canonical_instant(instant))
        return state.open[seq].public() if seq is not None else None

    def last_decided_instant(self, schedule_id: str) -> str | None:
        return self._owned(schedule_id).state.last_decided_text

    def occurrence_count(self, schedule_id: str) -> int:
        return self._owned(schedule_id).state.count

    def problems(self, schedule_id: str) -> tuple[StoreProblem, ...]:
        """The damage that froze an owned schedule's history (empty if none)."""
        return self._owned(schedule_id).problems

    def page(
        self, schedule_id: str, *, limit: int, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of occurrences, oldest first: one entry per occurrence with
        its latest status.

        Each entry: `seq`, `instant`, `count`, `first_instant`,
        `last_instant`, `revision`, `decided_at` (from the decision row) and
        `status`, `run_id`, `reason`, `updated_at` (from the latest row).
        `next_cursor` is None when the page reaches the newest occurrence.
        Reads O(limit) bytes of index and rows. Raises `InvalidInput` naming
        `limit` (not 1..100) or `cursor` (not issued for this history),
        `NotFound`, or `StoreDamaged` when a row it reads is damaged.
        """
        problems: list[Problem] = []
        if not _is_int(limit) or not 1 <= limit <= MAX_PAGE_LIMIT:
            problems.append(
                Problem(field="limit", reason=f"must be an integer from 1 to {MAX_PAGE_LIMIT}")
            )
        start = 0
        if cursor is not None:
            decoded = _decode_cursor(schedule_id, cursor)
            if decoded is None:
                problems.append(
                    Problem(field="cursor", reason="is not a cursor of this schedule's history")
                )
            else:
                start = decoded
        if problems:
            raise InvalidInput.from_problems("history page", problems)
        files = self._files(schedule_id)
        state, overlay, _ = self._reading_state(files)
        if start > state.count:
            raise InvalidInput.from_problems(
                "history page", [Problem(field="cursor", reason="is past the end of this history")]
            )
        end = min(state.count, start + limit)
        if start == end:
            return [], None
        entries = self._page_entries(files, state, overlay, start, end)
        rows = self._page_rows(files, state, overlay, entries, start)
        return rows, (_encode_cursor(schedule_id, end) if end < state.count else None)

    def _reading_state(
        self, files: ScheduleFiles
    ) -> tuple[_State, Mapping[int, _Entry], Sequence[StoreProblem]]:
        """The state a read works from (the owned one, or one loaded from the
        files without writing anything) and the damage it stops at."""
        if not is_directory(self.disk, files.directory):
            raise NotFound(
                f"schedule {files.schedule_id!r} does not exist",
                data={"schedule_id": files.schedule_id},
            )
        log = self._logs.get(files.schedule_id)
        if log is not None:
            return log.state, log.overlay, log.problems
        loaded = self._load(files, repair=False, full_open=False)
        return loaded.state, loaded.state.touched, loaded.problems

    def occurrence_at(self, schedule_id: str, instant: Instant) -> dict[str, Any] | None:
        """The page entry (see `page`) of the occurrence decided at `instant`,
        or None when no decision row has that instant. A binary search over
        the decisions, which strictly increase: O(log n) reads, each row read
        checked as a page checks it. Raises `NotFound`, `StoreDamaged` (also
        when the history stops at damage before `instant`), and `InvalidInput`
        for an instant that is not one."""
        try:
            target = parse_instant(canonical_instant(instant))
        except (TypeError, ValueError) as exc:
            raise InvalidInput.from_problems(
                "occurrence", [Problem(field="instant", reason=f"must be an instant: {exc}")]
            ) from None
        files = self._files(schedule_id)
        state, overlay, problems = self._reading_state(files)
        if problems and (state.last_decided is None or target > state.last_decided):
            # Its decision, if any, lies behind the damage the history stops at.
            raise StoreDamaged(problems[0])

        def entry_at(seq: int) -> dict[str, Any]:
            entries = self._page_entries(files, state, overlay, seq, seq + 1)
            return self._page_rows(files, state, overlay, entries, seq)[0]

        opened = state.by_instant.get(format_instant(target))
        if opened is not None:
            return entry_at(opened)
        low, high = 0, state.count
        while low < high:
            middle = (low + high) // 2
            row = entry_at(middle)
            at = parse_instant(row["instant"])
            if at == target:
                return row
            if at < target:
                low = middle + 1
            else:
                high = middle
        return None

    def locate(self, schedule_id: str, seq: int) -> str:
        """Where occurrence `seq`'s latest row is, as diagnostics name a row
        ("line N, byte B (seq S)"); "seq S" when it cannot be found. Reads the
        log up to that row: for diagnostics only."""
        files = self._files(schedule_id)
        try:
            state, overlay, _ = self._reading_state(files)
            if not _is_int(seq) or not 0 <= seq < state.count:
                return f"seq {seq}"
            (entry,) = self._page_entries(files, state, overlay, seq, seq + 1)
            fd = self.disk.open(files.history)
            try:
                line = _line_number(fd, entry.latest_off)
            finally:
                fd.close()
        except (OSError, StoreDamaged, NotFound):
            return f"seq {seq}"
        return f"line {line}, byte {entry.latest_off} (seq {seq})"

    def _page_entries(
        self,
        files: ScheduleFiles,
        state: _State,
        overlay: Mapping[int, _Entry],
        start: int,
        end: int,
    ) -> list[_Entry]:
        raw = b""
        if any(s not in state.open and s not in overlay for s in range(start, end)):
            fd = self.disk.open(files.history_index)
            try:
                raw = fd.read_at((end - start) * _ENTRY_SIZE, _HEADER_SIZE + start * _ENTRY_SIZE)
            finally:
                fd.close()
        entries: list[_Entry] = []
        for seq in range(start, end):
            opened = state.open.get(seq)
            entry = opened.entry() if opened is not None else overlay.get(seq)
            if entry is None:
                i = seq - start
                entry = _Entry.unpack(raw[i * _ENTRY_SIZE : (i + 1) * _ENTRY_SIZE])
            if entry is None:
                self._damaged(
                    files, files.history_index, f"entry for seq {seq}", "fails its checksum"
                )
            entries.append(entry)
        return entries

    def _page_rows(
        self,
        files: ScheduleFiles,
        state: _State,
        overlay: Mapping[int, _Entry],
        entries: list[_Entry],
        start: int,
    ) -> list[dict[str, Any]]:
        spans = {(e.decision_off, e.decision_len) for e in entries}
        spans.update((e.latest_off, e.latest_len) for e in entries)
        fd = self.disk.open(files.history)
        try:
            # Decision rows of consecutive seqs sit together, but the latest
            # row of an admitted occurrence was appended later, elsewhere:
            # read each cluster of nearby rows with one pread.
            chunks: dict[int, bytes] = {}
            cluster_start = cluster_end = -1
            for offset, length in sorted(spans):
                if cluster_end >= 0 and offset - cluster_end <= _CLUSTER_GAP:
                    cluster_end = max(cluster_end, offset + length)
                    continue
                if cluster_end >= 0:
                    chunks[cluster_start] = fd.read_at(cluster_end - cluster_start, cluster_start)
                cluster_start, cluster_end = offset, offset + length
            chunks[cluster_start] = fd.read_at(cluster_end - cluster_start, cluster_start)
        finally:
            fd.close()
        bases = sorted(chunks)

        def read(offset: int, length: int) -> bytes:
            base = bases[bisect.bisect_right(bases, offset) - 1]
            return chunks[base][offset - base : offset - base + length]

        rows: list[dict[str, Any]] = []
        previous = self._previous_decision(files, state, overlay, start)
        for i, entry in enumerate(entries):
            seq = start + i
            latest = None
            if entry.latest_off != entry.decision_off:
                latest = read(entry.latest_off, entry.latest_len)
            try:
                row, previous = _page_row(
                    seq, entry, read(entry.decision_off, entry.decision_len), latest, previous
                )
            except _Bad as bad:
                at_latest = isinstance(bad, _BadLatest)
                offset = entry.latest_off if at_latest else entry.decision_off
                self._row_damaged(files, offset, seq, bad.reason)
            rows.append(row)
        return rows

    def _previous_decision(
        self, files: ScheduleFiles, state: _State, overlay: Mapping[int, _Entry], start: int
    ) -> datetime | None:
        """The instant of the decision before `start`, which the page's first
        decision must follow (read and checked like a page row)."""
        if start == 0:
            return None
        (entry,) = self._page_entries(files, state, overlay, start - 1, start)
        fd = self.disk.open(files.history)
        try:
            data = fd.read_at(entry.decision_len, entry.decision_off)
        finally:
            fd.close()
        try:
            return _check_decision(_page_json(data, start - 1, decision=True), start - 1).instant
        except _Bad as bad:
            self._row_damaged(files, entry.decision_off, start - 1, bad.reason)

    def _row_damaged(self, files: ScheduleFiles, offset: int, seq: int, reason: str) -> NoReturn:
        """A row a read found where the index points breaks the row rules: the
        history is damaged there. Names the row by line, as a load does."""
        fd = self.disk.open(files.history)
        try:
            line = _line_number(fd, offset)
        finally:
            fd.close()
        self._damaged(
            files, files.history, f"line {line}, byte {offset} (seq {seq})", reason, freeze=True
        )

    def _damaged(
        self, files: ScheduleFiles, path: str, record: str, reason: str, *, freeze: bool = False
    ) -> NoReturn:
        """Raise `StoreDamaged` for damage a read found. Damage to the log
        (`freeze`) freezes an owned history as a load that found it would:
        appends are refused and the files stay as found, whatever a later
        load, which trusts what precedes the index checkpoint, makes of them."""
        problem = StoreProblem(
            schedule_id=files.schedule_id, file=files.relative(path), record=record, reason=reason
        )
        _log.warning("history %s is damaged: %s", files.history, problem.describe())
        log = self._logs.get(files.schedule_id)
        if log is not None and freeze:
            if not log.problems:
                log.problems = (problem,)
        elif log is not None and log.pending is None:
            # The next owner access re-reads the files (and rebuilds the index).
            self._logs.pop(files.schedule_id, None)
        raise StoreDamaged(problem)

    # --- shutdown ------------------------------------------------------------------------------

    def publish(self) -> None:
        """Publish every index checkpoint durably, so the next start replays
        nothing: one flush of all index files, the headers, one more flush."""
        logs = [
            log
            for log in self._logs.values()
            if log.checkpoint_next is not None and log.pending is None
        ]
        if logs:
            paths = [p for log in logs for p in (log.files.history, log.files.history_index)]
            sync_paths(paths, mode="auto", disk=self.disk)
            for log in logs:
                log.needs_sync = False
                self._publish_checkpoint(log)
            sync_paths([log.files.history_index for log in logs], mode="auto", disk=self.disk)

    def close(self) -> None:
        """`publish()`, then forget every log without staged writes."""
        self.publish()
        self._logs = {k: v for k, v in self._logs.items() if v.pending is not None}

    def forget(self, schedule_ids: Iterable[str] | None = None) -> None:
        """Drop cached state (all schedules when None); the next use reloads."""
        if schedule_ids is None:
            self._logs = {k: v for k, v in self._logs.items() if v.pending is not None}
            return
        for schedule_id in schedule_ids:
            log = self._logs.get(schedule_id)
            if log is not None and log.pending is None:
                del self._logs[schedule_id]


def _unknown(seq: int) -> _Open | _Entry:
    raise _Bad(f"no open occurrence with seq {seq}", seq)


def _cursor_tag(schedule_id: str) -> bytes:
    return hashlib.sha256(schedule_id.encode()).digest()[:8]


def _encode_cursor(schedule_id: str, seq: int) -> str:
    raw = _CURSOR.pack(_CURSOR_TAG, _cursor_tag(schedule_id), seq)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _decode_cursor(schedule_id: str, cursor: object) -> int | None:
    if not isinstance(cursor, str) or not 0 < len(cursor) <= 64:
        return None
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) != _CURSOR.size:
        return None
    tag, owner, seq = _CURSOR.unpack(raw)
    if tag != _CURSOR_TAG or owner != _cursor_tag(schedule_id):
        return None
    return int(seq)
