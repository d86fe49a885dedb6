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
  `last_instant == instant`. A row an operator's request opened names its
  `"origin"` ("trigger" or "backfill"; a calendar row names none).
  Calendar decision instants strictly increase, and so do triggers' among
  themselves; a backfill's row is keyed by the calendar instant it makes up
  for (see `shell.history_rows.State`).
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

The index is written with plain `pwrite`s after each group commit (the
entry of an occurrence a commit opens waits for the next commit, usually its
run's end, or for `publish()`: one write per occurrence instead of two; reads
take it from memory meanwhile, and no header covers it) and is made durable
by a later flush: the next commit's, which names the index
among its files, or for a journaled batch (which flushes only its journal)
the journal's next checkpoint, a `syncfs` (or `close()`); the scheduler's
disk holds those writes, and the rows' appends, until that flush
(`shell/write_back.py`). The header records
a checkpoint `(log size C, count, lines, low-water seq)` with the guarantee
that every index write describing `log[0:C]` was flushed before the header
was written; so the header lags one commit behind (two after a commit that
opened an occurrence), or until that flush.
Loading trusts the
index up to `C` after checking the header CRC and the last entry against the
log, then replays only `log[C:]`: O(tail), not O(log). An entry may be
*ahead* of the checkpoint (written before the crash, describing a tail row);
replay recognises a row an entry already points at or past and skips it.
Open occurrences (admitted, not yet terminal) are entries from the low-water
seq on whose status is not terminal. If the header or a checked entry does
not match the log, the index is rebuilt by one full scan, with a warning.

Damage: a torn final line (no newline) is a crash artifact, dropped by the
owner with a warning. An unparseable line, a duplicate or out-of-order
decision, a transition for an unknown seq, a status going backwards, or a
row after a terminal row stops the replay there and is returned as a
`StoreProblem`; the log is then frozen (appends refused) and left as found,
and pages show what precedes the damage. Every row read back is checked by
the same row rules (`check_decision`, `check_transition` in
`shell/history_rows.py`), whether replayed, taken by a load through the
index (the last decision, the open occurrences: one that fails sends the
load to a full scan, which names it), or read by a page. Damage before the
checkpoint is not re-read at load; `verify()` and `recover(full_scan=True)`
scan everything, and a page that reads a damaged row raises `StoreDamaged`
naming its line and freezes an owned log.

The code is in four modules, each readable alone: `shell/history_rows.py`
(the row rules and the state they build), `shell/history_index.py` (the
index format, loads through it, its writes), `shell/history_cursor.py` (page
cursors and page entries), and this one (`HistoryStore`: owning, appending,
committing, paging, and when an index checkpoint may be published).

Not thread-safe; one owner process (the scheduler lock holder) writes.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final, NamedTuple, NoReturn

from core.errors import InvalidInput, InvalidState, NotFound, Problem
from core.occurrences import RUN_STATUSES
from shell.disk import OS_DISK, Disk, DiskFile, is_directory
from shell.durable import GroupCommit, filesystem_flushes, sync_paths
from shell.fence import check_fence_all
from shell.history_appends import SNAPSHOT_PROBLEM, DecisionAppend, TransitionAppend
from shell.history_cursor import encode_cursor, page_json, page_row, page_start
from shell.history_index import (
    ENTRY_SIZE,
    Checkpoint,
    HistoryIndex,
    checkpoint_of,
    unpack_entry,
)
from shell.history_rows import (
    Bad,
    BadLatest,
    Entry,
    Open,
    OpenOccurrence,
    State,
    apply_row,
    check_decision,
    check_snapshot,
    enter_decision,
    enter_transition,
    is_int,
    unknown,
)
from shell.jsonlog import read_lines
from shell.store_format import (
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

# The name the cursor encoder had here before it moved to `shell.history_cursor`;
# tests forge cursors through it.
_encode_cursor: Final = encode_cursor

# The last element of an export whose newest trigger is exact (before it,
# a history loaded through its index knew only the rows it replayed).
_EXPORT_KNOWS_TRIGGER: Final = 1

# A page reads rows less than this far apart with one pread.
_CLUSTER_GAP: Final = 64 << 10
# Bytes of the log read at once by a sequential search.
_READ_CHUNK: Final = 4 << 20

# --- public values -------------------------------------------------------------------


class HistoryRecovery(NamedTuple):
    """What recovering one schedule's history found.

    `tail_rows`/`tail_bytes` measure the replay after the index checkpoint
    (the load's O(tail) cost); `index_rebuilt` says the index could not be
    trusted and the whole log was scanned. (A tuple: a start makes one per
    schedule, and a frozen dataclass set each field with a call.)
    """

    schedule_id: str
    occurrences: int
    last_decided_instant: str | None
    open_occurrences: tuple[OpenOccurrence, ...]
    problems: tuple[StoreProblem, ...] = ()
    # The newest trigger row replayed or scanned (see `State.last_trigger`),
    # and the lifecycle seq of its request.
    last_trigger_instant: str | None = None
    last_trigger_request: int | None = None
    dropped_torn_bytes: int = 0
    index_rebuilt: bool = False
    tail_rows: int = 0
    tail_bytes: int = 0


# The canonical line of an admitted row (keys sorted, as `encode_json_line`
# writes it): instant, recorded_at, revision, run_id, seq, snapshot, status.
_ADMITTED_LINE: Final = (
    b'{"instant":"%s","recorded_at":"%s","revision":%d,"run_id":%s,"seq":%d,'
    b'"snapshot":%s,"status":"admitted"}\n'
)
# The canonical line of a transition row (`TransitionAppend.build`): its keys
# sorted, "reason" and "run_id" only when given.
_TRANSITION_LINE: Final = (
    b'{"instant":%s,%s"recorded_at":%s,%s"seq":%d,"status":%s,"update":true}\n'
)


@dataclass(slots=True)
class _Log:
    """An owned schedule history: committed state plus what a batch staged."""

    files: ScheduleFiles
    state: State
    problems: tuple[StoreProblem, ...]
    # Entries not in the index file (only while frozen by a problem).
    overlay: dict[int, Entry]
    # The header to publish once the entries it describes have been flushed.
    checkpoint_next: Checkpoint | None = None
    # Set while those entries may not be durable yet: the count of flushes
    # of the whole filesystem (`filesystem_flushes`) when a journaled batch
    # wrote them. A journaled batch flushes only its journal, so the header
    # waits for the journal's next checkpoint (a `syncfs`) or `publish()`.
    written_at_flush: int | None = None
    pending: State | None = None
    pending_batch: GroupCommit | None = None
    needs_sync: bool = False
    # This process wrote to the index file since the log was loaded, so the
    # file has its header (an `fstat` less per write).
    index_headed: bool = False
    # Occurrences the last commit opened whose entries are not in the index
    # file yet (`_publish`); reads take them from `state.open`.
    held: frozenset[int] = frozenset()


def _open_entries(state: State, seqs: frozenset[int]) -> dict[int, Entry]:
    """The index entries of the occurrences `seqs` that are open in `state`."""
    return {seq: state.open[seq].entry() for seq in seqs if seq in state.open}


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
        self._index = HistoryIndex(disk)
        self._logs: dict[str, _Log] = {}
        self._paths: dict[str, ScheduleFiles] = {}
        # The logs each open batch stages rows of, published (or dropped)
        # together when it ends: two callbacks per batch rather than per log.
        self._batch_logs: dict[GroupCommit, list[_Log]] = {}

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
        loaded = self._index.load(files, repair=True, full_open=True, force_rebuild=full_scan)
        state = loaded.state
        problems = tuple(loaded.problems)
        log = _Log(files=files, state=state, problems=problems, overlay={})
        if problems:
            log.overlay = dict(state.touched)
        elif loaded.rebuilt:
            self._index.write_full(files, state)
        else:
            if state.touched:
                self._index.write_entries(files, state.touched)
            if loaded.tail_rows or state.touched or not loaded.checkpoint.knows_trigger:
                # Published by the next commit that touches this schedule once
                # `sync_recovered` has made these entries durable (and a
                # header an older version wrote, without the newest trigger,
                # replaced by one that holds it).
                log.checkpoint_next = checkpoint_of(state)
                log.written_at_flush = filesystem_flushes(files.directory, disk=self.disk)
                log.needs_sync = True
        state.touched = {}
        self._logs[schedule_id] = log
        return HistoryRecovery(
            schedule_id=schedule_id,
            occurrences=state.count,
            last_decided_instant=state.last_decided_text,
            open_occurrences=tuple(state.open[s].public() for s in sorted(state.open))
            if state.open
            else (),
            problems=problems,
            last_trigger_instant=None
            if state.last_trigger is None
            else format_instant(state.last_trigger),
            last_trigger_request=state.last_trigger_request,
            dropped_torn_bytes=loaded.dropped,
            index_rebuilt=loaded.rebuilt,
            tail_rows=loaded.tail_rows,
            tail_bytes=loaded.tail_bytes,
        )

    def export_state(self, schedule_id: str) -> list[Any] | None:
        """A clean, fully published recovered history as JSON-able values, for
        the startup checkpoint (`shell/startup_checkpoint.py`); None when there
        is none to give: not loaded, staged writes, problems, or an index
        header on disk that is not the checkpoint of the state in memory, or
        entries not written to the index yet (the next load would replay a
        tail, or another writer touched the index)."""
        log = self._logs.get(schedule_id)
        if (
            log is None
            or log.pending is not None
            or log.problems
            or log.overlay
            or log.held
            or log.checkpoint_next is not None
            or log.needs_sync
            or not self._index.header_matches(log.files, log.state)
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
                    o.origin,
                ]
                for o in (state.open[seq] for seq in sorted(state.open))
            ],
            None if state.last_trigger is None else format_instant(state.last_trigger),
            state.last_trigger_request,
            _EXPORT_KNOWS_TRIGGER,
        ]

    def adopt_state(self, schedule_id: str, exported: Sequence[Any]) -> HistoryRecovery | None:
        """Take a history exported by `export_state` as this store's recovered
        state, without reading the files; the caller has established that the
        files are the ones it was exported from. Returns what `recover()` would
        have; None for an export of a version that did not always know the
        newest trigger (the history is then read from its files). Raises
        `ValueError` or `TypeError` for a malformed export, leaving nothing
        adopted."""
        size, count, lines, last_text, open_rows, *later = exported
        if not (is_int(size) and is_int(count) and is_int(lines)) or min(size, count) < 0:
            raise ValueError(f"malformed history export for {schedule_id!r}")
        state = State(size=size, count=count, lines=lines)
        last_trigger = later[0] if later else None
        if last_trigger is not None:
            state.last_trigger = parse_instant(last_trigger)
        last_request = later[1] if len(later) > 1 else None
        if last_request is not None and not is_int(last_request):
            raise ValueError(f"malformed history export for {schedule_id!r}")
        state.last_trigger_request = last_request
        if last_text is not None:
            state.last_decided = parse_instant(last_text)
            state.last_decided_text = last_text
        for row in open_rows:
            occurrence = Open(*row)
            if not is_int(occurrence.seq) or not 0 <= occurrence.seq < count:
                raise ValueError(f"malformed history export for {schedule_id!r}")
            state.open[occurrence.seq] = occurrence
            state.by_instant[occurrence.instant] = occurrence.seq
        if len(later) < 3 or later[2] != _EXPORT_KNOWS_TRIGGER:
            return None
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
            last_trigger_instant=last_trigger,
            last_trigger_request=last_request,
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
            log.written_at_flush = None

    def verify(self, schedule_id: str) -> tuple[StoreProblem, ...]:
        """Scan the whole log (read-only) and return every problem found before
        the first one that stops the replay. O(log): for operators and tests."""
        files = self._files(schedule_id)
        if not is_directory(self.disk, files.directory):
            raise NotFound(
                f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
            )
        return tuple(
            self._index.load(files, repair=False, full_open=False, force_rebuild=True).problems
        )

    def rows(self, schedule_id: str) -> list[tuple[int, dict[str, Any], dict[str, Any] | None]]:
        """Every occurrence of the log, read whole and checked by the row rules
        (read-only): (seq, decision row, latest transition row or None), in
        seq order. A torn final line is left out, as a load drops it; damage
        raises `StoreDamaged` naming its line. O(log): for moving a store."""
        files = self._files(schedule_id)
        if not is_directory(self.disk, files.directory):
            raise NotFound(
                f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
            )
        read = read_lines(files.history, disk=self.disk)
        lines = read[0] if read is not None else []
        state = State()
        decisions: list[dict[str, Any]] = []
        latest: dict[int, dict[str, Any]] = {}
        for number, line in enumerate(lines, start=1):
            try:
                row = json.loads(line)
                apply_row(state, row, state.size, len(line), unknown)
            except (ValueError, Bad) as exc:
                reason = exc.reason if isinstance(exc, Bad) else "unparseable record"
                raise StoreDamaged(
                    StoreProblem(
                        schedule_id=schedule_id,
                        file=files.relative(files.history),
                        record=f"line {number}",
                        reason=reason,
                    )
                ) from None
            state.size += len(line)
            if "update" in row:
                latest[row["seq"]] = row
            else:
                decisions.append(row)
        return [(seq, row, latest.get(seq)) for seq, row in enumerate(decisions)]

    # --- publishing index checkpoints -------------------------------------------------------

    def _publish_checkpoint(self, log: _Log) -> None:
        """Write the header that waited (`publish` checked the fence)."""
        if log.checkpoint_next is None:
            return
        self._index.write_entries(log.files, {}, header=log.checkpoint_next, fence_checked=True)
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
        build: Callable[[State], dict[str, Any]],
        enter: Callable[[State, dict[str, Any], int, int], None] | None = None,
    ) -> int:
        """Stage the row `build` makes; `enter` (default: parse it back like a
        row read from disk) applies it to the pending state."""
        opened = self._open_shadow(log, batch)
        shadow = opened[1]
        row = build(shadow)
        try:
            line = encode_json_line(row)
        except (TypeError, ValueError):
            # Every other field is checked to be a string, an integer or an
            # instant; only a snapshot's inputs can hold what JSON cannot.
            raise InvalidInput.from_problems("history row", [SNAPSHOT_PROBLEM]) from None

        def apply() -> None:
            if enter is None:
                apply_row(shadow, row, shadow.size, len(line), unknown)
            else:
                enter(shadow, row, shadow.size, len(line))

        self._stage_line(log, batch, opened, line, apply)
        return int(row["seq"])

    def _stage_line(
        self,
        log: _Log,
        batch: GroupCommit | None,
        opened: tuple[GroupCommit, State, bool],
        line: bytes,
        apply: Callable[[], None],
    ) -> None:
        """Stage `line` into the batch `_open_shadow` gave (`opened`), once
        `apply` entered it into the pending state; committed here when the
        caller gave no batch."""
        active, shadow, first = opened
        self._enter(log, apply)
        self._append_staged(log, active, shadow, line, first)
        if batch is None:
            active.commit()

    def _open_shadow(self, log: _Log, batch: GroupCommit | None) -> tuple[GroupCommit, State, bool]:
        """The batch to stage into, the pending state to apply rows to, and
        whether this is the log's first row in the batch."""
        if log.problems:
            raise StoreDamaged(log.problems[0])
        active = GroupCommit(disk=self.disk) if batch is None else batch
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
        except Bad as bad:
            raise InvalidState(
                f"history of {log.files.schedule_id!r} refuses the row: {bad.reason}",
                data={"schedule_id": log.files.schedule_id},
            ) from None

    def _append_staged(
        self, log: _Log, active: GroupCommit, shadow: State, line: bytes, first: bool
    ) -> None:
        shadow.size += len(line)
        shadow.lines += 1
        active.append_bytes(log.files.history, line, expect_size=log.state.size if first else None)
        if first:
            log.pending = shadow
            log.pending_batch = active
            active.sync_also(log.files.history_index)
            logs = self._batch_logs.get(active)
            if logs is None:
                logs = self._batch_logs[active] = []
                active.on_commit(lambda: self._publish_batch(active))
                active.on_abort(lambda: self._drop_batch(active))
            logs.append(log)

    def _publish_batch(self, batch: GroupCommit) -> None:
        for log in self._batch_logs.pop(batch, ()):
            self._publish(log)

    def _drop_batch(self, batch: GroupCommit) -> None:
        for log in self._batch_logs.pop(batch, ()):
            self._drop(log, batch)

    def stage_admitted(
        self,
        schedule_id: str,
        *,
        instant: datetime,
        run_id: str,
        snapshot: Mapping[str, Any],
        recorded_at: datetime,
        batch: GroupCommit,
        origin: str | None = None,
        request: int | None = None,
    ) -> int:
        """Stage the `admitted` row of `instant` in `batch`; returns its seq.

        The scheduler's path for a herd of admissions: the row is the one
        `append_decision(status="admitted", revision=snapshot["revision"], ...)`
        would write, byte for byte, built without the general row machinery
        (no row dict to encode, no parse back). The same errors: `InvalidInput` for a naive
        instant, a run id that is not a string or a malformed snapshot,
        `InvalidState` for an instant not after the last decision,
        `StoreDamaged`, `NotFound`. An operator's row (`origin`) takes the
        general path: they are few.
        """
        if origin is not None:
            append = DecisionAppend.admitted(
                instant=instant,
                run_id=run_id,
                snapshot=snapshot,
                recorded_at=recorded_at,
                origin=origin,
                request=request,
            )
            return self._stage(self._owned(schedule_id), batch, append.build, append.enter)
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
            entered = check_snapshot(dict(snapshot), 0)
            snapshot_json = canonical_json(entered)
            revision = entered["revision"]
            if revision < 1:
                raise Bad("revision must be positive")
        except (Bad, TypeError, ValueError):
            problems.append(SNAPSHOT_PROBLEM)
        if problems:
            raise InvalidInput.from_problems("history row", problems)
        assert entered is not None
        log = self._owned(schedule_id)
        opened = self._open_shadow(log, batch)
        shadow = opened[1]
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
            enter_decision(
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

        self._stage_line(log, batch, opened, line, enter)
        return seq

    def _publish(self, log: _Log) -> None:
        shadow = log.pending
        assert shadow is not None and log.pending_batch is not None
        journaled = log.pending_batch.journal_root is not None
        log.pending = None
        log.pending_batch = None
        touched, shadow.touched = shadow.touched, {}
        previous, log.state = log.state, shadow
        # An occurrence this commit opened is held out of the index file for
        # one commit: its entry is in `state.open` for every read, and the next
        # commit writes it, usually already terminal (its run's end), so the
        # entry is written once rather than twice. Not yet in the file, it is
        # not under any header: a load replays its row.
        entries = _open_entries(shadow, log.held) if log.held else {}
        opened: list[int] = []
        first_new, still_open = previous.count, shadow.open
        for seq, entry in touched.items():
            if seq >= first_new and seq in still_open:
                opened.append(seq)
            else:
                entries[seq] = entry
        held = frozenset(opened)
        header = log.checkpoint_next
        if log.written_at_flush is not None:
            if filesystem_flushes(log.files.directory, disk=self.disk) > log.written_at_flush:
                log.written_at_flush = None
            else:
                # Its entries may still be only in the page cache: a power cut
                # could keep this header and lose them.
                header = None
        try:
            # Part of the batch, which checked the fence for the index too
            # (`sync_also` made it one of the batch's files). A commit that
            # only opened occurrences usually has nothing to write: no open
            # of the file then (at ten thousand schedules not all of their
            # files can stay open).
            if entries or header is not None or not log.index_headed:
                self._index.write_entries(
                    log.files, entries, header=header, fence_checked=True, headed=log.index_headed
                )
        except OSError as exc:
            # The rows are durable; the index is derived. Reload (and repair
            # the index) before the next use.
            _log.warning(
                "could not update %s (%s); it will be rebuilt", log.files.history_index, exc
            )
            self._logs.pop(log.files.schedule_id, None)
            return
        log.index_headed = True
        held_before, log.held = log.held, held
        if header is not None:
            log.checkpoint_next = None
        elif log.checkpoint_next is not None:
            return  # the waiting header describes less; it goes first
        if held and not held_before:
            # A header may describe only entries in the file. The next commit,
            # usually the run's end seconds later, gives one describing more
            # than the state before this one would.
            return
        # With entries held again (runs that overlap), the state before this
        # commit, whose held entries went out just now: a header never waits
        # for more than two commits.
        log.checkpoint_next = checkpoint_of(previous if held else shadow)
        if journaled:
            log.written_at_flush = filesystem_flushes(log.files.directory, disk=self.disk)

    def _write_held(self, log: _Log) -> None:
        """Write the entries `_publish` held (before a flush that publishes
        headers; `publish` checked the fence)."""
        self._index.write_entries(
            log.files,
            _open_entries(log.state, log.held),
            headed=log.index_headed,
            fence_checked=True,
        )
        log.index_headed = True
        log.held = frozenset()

    def _drop(self, log: _Log, batch: GroupCommit) -> None:
        log.pending = None
        log.pending_batch = None
        if batch.may_have_written:
            # Some of the batch may have reached the disk: re-read it before
            # the next use.
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
        origin: str | None = None,
        request: int | None = None,
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
        append = DecisionAppend.of(
            instant=instant,
            status=status,
            recorded_at=recorded_at,
            run_id=run_id,
            reason=reason,
            count=count,
            first_instant=first_instant,
            last_instant=last_instant,
            revision=revision,
            snapshot=snapshot,
            origin=origin,
            request=request,
        )
        return self._stage(self._owned(schedule_id), batch, append.build, append.enter)

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
        append = TransitionAppend.of(
            status=status,
            recorded_at=recorded_at,
            seq=seq,
            instant=instant,
            run_id=run_id,
            reason=reason,
        )
        log = self._owned(schedule_id)
        current = append.target(schedule_id, log.pending if log.pending is not None else log.state)
        if append.says_nothing_new(current):
            return current.seq

        # The row `append.build(current)` makes, byte for byte, put together
        # without its dict and the general encoder: a row for most scheduled
        # runs' ends. The fields were checked by `TransitionAppend.of` and the
        # rest come from `current`: no parse back of what was just built.
        run_id = append.run_id if append.run_id is not None else current.run_id
        line = _TRANSITION_LINE % (
            canonical_json(current.instant),
            b"" if append.reason is None else b'"reason":%s,' % canonical_json(append.reason),
            canonical_json(append.recorded_text),
            b"" if run_id is None else b'"run_id":%s,' % canonical_json(run_id),
            current.seq,
            canonical_json(append.status),
        )
        opened = self._open_shadow(log, batch)
        shadow = opened[1]
        self._stage_line(
            log,
            batch,
            opened,
            line,
            lambda: enter_transition(
                shadow,
                current,
                shadow.size,
                len(line),
                status=append.status,
                run_id=run_id,
                reason=append.reason,
                recorded_text=append.recorded_text,
            ),
        )
        return current.seq

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

    def length(self, schedule_id: str) -> int:
        """How many occurrences the history holds (owned or read from its
        index without writing). NotFound if the schedule has no history."""
        state, _, _ = self._reading_state(self._files(schedule_id))
        return int(state.count)

    def page(
        self, schedule_id: str, *, limit: int, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of occurrences in the order decided (by seq), oldest
        first: one entry per occurrence with its latest status.

        Each entry: `seq`, `instant`, `count`, `first_instant`,
        `last_instant`, `revision`, `decided_at` (from the decision row) and
        `status`, `run_id`, `reason`, `updated_at` (from the latest row).
        `next_cursor` is None when the page reaches the newest occurrence.
        Reads O(limit) bytes of index and rows. Raises `InvalidInput` naming
        `limit` (not 1..100) or `cursor` (not issued for this history),
        `NotFound`, or `StoreDamaged` when a row it reads is damaged.
        """
        start = page_start(schedule_id, limit, cursor, max_limit=MAX_PAGE_LIMIT)
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
        return rows, (encode_cursor(schedule_id, end) if end < state.count else None)

    def _reading_state(
        self, files: ScheduleFiles
    ) -> tuple[State, Mapping[int, Entry], Sequence[StoreProblem]]:
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
        loaded = self._index.load(files, repair=False, full_open=False)
        return loaded.state, loaded.state.touched, loaded.problems

    def occurrence_at(
        self, schedule_id: str, instant: Instant, origin: str = "schedule"
    ) -> dict[str, Any] | None:
        """The page entry (see `page`) of the occurrence of `origin` decided
        at `instant`, or None when there is none. A calendar decision is
        found by a binary search over the calendar decisions, which strictly
        increase (stepping over operators' rows): O(log n) reads. A
        trigger's or a backfill's row by one sequential search of the log
        for its origin (`_operator_rows`). Each row read is checked as a
        page checks it. Raises `NotFound`, `StoreDamaged` (also when the
        history stops at damage before `instant`), and `InvalidInput` for an
        instant that is not one."""
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
        if opened is not None and state.open[opened].origin == origin:
            return entry_at(opened)
        if origin != "schedule":
            for seq, decision in self._operator_rows(files, state, origin):
                if decision.instant == target:
                    return entry_at(seq)  # an operator's instant is decided once
            return None
        seq = self._first_calendar_at_or_after(files, state, overlay, target)
        found, decision = self._next_calendar(files, state, overlay, seq)
        if decision is not None and decision.instant == target:
            return entry_at(found)
        return None

    def backfill_decided(
        self, schedule_id: str, start: datetime, end: datetime
    ) -> frozenset[datetime]:
        """The instants of `[start, end)` a backfill may not admit (rule Q):
        admitted by the calendar (whatever their run became), or decided by
        a backfill.

        The calendar rows of the range follow one another among the calendar
        rows: a binary search finds the first, and they are read up to `end`.
        Backfill rows are found by `_operator_rows`. O(log n + the range's
        rows) row reads and one sequential read of the log
        (`bench/backfill.py`)."""
        files = self._files(schedule_id)
        state, overlay, problems = self._reading_state(files)
        if problems:
            raise StoreDamaged(problems[0])
        found: set[datetime] = set()
        first = self._first_calendar_at_or_after(files, state, overlay, start)
        seq, decision = self._next_calendar(files, state, overlay, first)
        while decision is not None and decision.instant < end:
            (entry,) = self._page_entries(files, state, overlay, seq, seq + 1)
            if entry.status in RUN_STATUSES:
                found.add(decision.instant)
            seq, decision = self._next_calendar(files, state, overlay, seq + 1)
        for _, backfilled in self._operator_rows(files, state, "backfill"):
            if start <= backfilled.instant < end:
                found.add(backfilled.instant)
        return frozenset(found)

    def _operator_rows(
        self, files: ScheduleFiles, state: State, origin: str
    ) -> Iterator[tuple[int, Any]]:
        """(seq, checked decision) of every row of `origin` ("trigger" or
        "backfill"), oldest first. Their instants follow no order of the log
        that a search could narrow down safely (a held calendar instant may
        be decided after a backfill of newer ones, a clock may step back), so
        the whole log is searched for the bytes of `origin` and only the
        lines that hold them are parsed: one sequential read."""
        for offset, line in self._lines_holding(files, origin.encode(), 0, state.size):
            try:
                row = json.loads(line)
            except ValueError:
                continue  # damage is a page's to name; this line names no operator
            if not isinstance(row, dict) or row.get("origin") != origin or "update" in row:
                continue
            row_seq = row.get("seq")
            if not is_int(row_seq):
                continue
            try:
                yield row_seq, check_decision(row, row_seq)
            except Bad as bad:
                self._row_damaged(files, offset, row_seq, bad.reason)

    def _next_calendar(
        self, files: ScheduleFiles, state: State, overlay: Mapping[int, Entry], seq: int
    ) -> tuple[int, Any]:
        """The first calendar decision at or after `seq` and its checked row
        (`state.count` and None when there is none)."""
        while seq < state.count:
            decision = self._decision_at(files, state, overlay, seq)
            if decision.origin is None:
                return seq, decision
            seq += 1
        return state.count, None

    def _first_calendar_at_or_after(
        self, files: ScheduleFiles, state: State, overlay: Mapping[int, Entry], target: datetime
    ) -> int:
        """The seq of the first calendar decision at or after `target`
        (`state.count` when there is none). A binary search: "the first
        calendar row from seq on is at or after `target`, or there is none"
        holds from some seq on, since calendar decisions strictly increase."""
        low, high = 0, state.count
        while low < high:
            middle = (low + high) // 2
            seq, decision = self._next_calendar(files, state, overlay, middle)
            if decision is None or decision.instant >= target:
                high = middle
            else:
                low = seq + 1
        return self._next_calendar(files, state, overlay, low)[0]

    def _lines_holding(
        self, files: ScheduleFiles, needle: bytes, begin: int, end: int
    ) -> Iterator[tuple[int, bytes]]:
        """(offset, line) of each complete line of the log in `[begin, end)`
        that holds `needle`, read sequentially in chunks."""
        if begin >= end:
            return  # nothing to read (a history with no rows has no log yet)
        fd = self.disk.open(files.history)
        try:
            position, carry = begin, b""
            while position < end:
                chunk = fd.read_at(min(_READ_CHUNK, end - position), position)
                if not chunk:
                    break
                data = carry + chunk
                base = position - len(carry)
                position += len(chunk)
                cut = data.rfind(b"\n") + 1
                carry = data[cut:]
                hit = data.find(needle, 0, cut)
                while hit >= 0:
                    line_start = data.rfind(b"\n", 0, hit) + 1
                    line_end = data.index(b"\n", hit) + 1
                    yield base + line_start, data[line_start:line_end]
                    hit = data.find(needle, line_end, cut)
        finally:
            fd.close()

    def _decision_at(
        self, files: ScheduleFiles, state: State, overlay: Mapping[int, Entry], seq: int
    ) -> Any:
        (entry,) = self._page_entries(files, state, overlay, seq, seq + 1)
        return self._decision_row(files, entry, seq)

    def _decision_row(self, files: ScheduleFiles, entry: Entry, seq: int) -> Any:
        """The checked decision row of `seq`, which `entry` points at."""
        fd = self.disk.open(files.history)
        try:
            data = fd.read_at(entry.decision_len, entry.decision_off)
        finally:
            fd.close()
        try:
            return check_decision(page_json(data, seq, decision=True), seq)
        except Bad as bad:
            self._row_damaged(files, entry.decision_off, seq, bad.reason)

    def locate(self, schedule_id: str, seq: int) -> str:
        """Where occurrence `seq`'s latest row is, as diagnostics name a row
        ("line N, byte B (seq S)"); "seq S" when it cannot be found. Reads the
        log up to that row: for diagnostics only."""
        files = self._files(schedule_id)
        try:
            state, overlay, _ = self._reading_state(files)
            if not is_int(seq) or not 0 <= seq < state.count:
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
        state: State,
        overlay: Mapping[int, Entry],
        start: int,
        end: int,
    ) -> list[Entry]:
        raw = b""
        if any(s not in state.open and s not in overlay for s in range(start, end)):
            raw = self._index.read_entries(files, start, end)
        entries: list[Entry] = []
        for seq in range(start, end):
            opened = state.open.get(seq)
            entry = opened.entry() if opened is not None else overlay.get(seq)
            if entry is None:
                i = seq - start
                entry = unpack_entry(raw[i * ENTRY_SIZE : (i + 1) * ENTRY_SIZE])
            if entry is None:
                self._damaged(
                    files, files.history_index, f"entry for seq {seq}", "fails its checksum"
                )
            entries.append(entry)
        return entries

    def _page_rows(
        self,
        files: ScheduleFiles,
        state: State,
        overlay: Mapping[int, Entry],
        entries: list[Entry],
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
                row, previous = page_row(
                    seq, entry, read(entry.decision_off, entry.decision_len), latest, previous
                )
            except Bad as bad:
                at_latest = isinstance(bad, BadLatest)
                offset = entry.latest_off if at_latest else entry.decision_off
                self._row_damaged(files, offset, seq, bad.reason)
            rows.append(row)
        return rows

    def _previous_decision(
        self, files: ScheduleFiles, state: State, overlay: Mapping[int, Entry], start: int
    ) -> datetime | None:
        """The instant of the decision before `start`, which the page's first
        decision must follow (read and checked like a page row)."""
        # The newest calendar decision before it: operators' rows are
        # outside the order (`State`).
        seq = start - 1
        while seq >= 0:
            decision = self._decision_at(files, state, overlay, seq)
            if decision.origin is None:
                return decision.instant  # type: ignore[no-any-return]
            seq -= 1
        return None

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
        nothing: the held entries written, one flush of all index files, the
        headers, one more flush."""
        logs = [
            log
            for log in self._logs.values()
            if (log.checkpoint_next is not None or log.held) and log.pending is None
        ]
        if logs:
            # One look at the store's fence for all of them, as for a batch's
            # files: two `stat`s per index were a quarter of this at 1,000
            # schedules.
            check_fence_all(log.files.history_index for log in logs)
            for log in logs:
                if log.held:
                    self._write_held(log)
            paths = [p for log in logs for p in (log.files.history, log.files.history_index)]
            sync_paths(paths, mode="auto", disk=self.disk)
            for log in logs:
                log.needs_sync = False
                log.written_at_flush = None
                # Every entry of the state is written and now flushed: its
                # checkpoint, not only the one that waited, can go out.
                log.checkpoint_next = checkpoint_of(log.state)
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
