"""The startup checkpoint: what the scheduler knew of each schedule's files,
so that the next start can `stat` them instead of reading and parsing them.

A start recovers every schedule from its files (lifecycle log, definition
snapshot, runtime record, history and its index): at 10,000 schedules that
is 50,000 files opened and parsed, seconds of work, although most of them
have not changed since the scheduler last looked. So the lock holder writes
one file, `<store_root>/startup.checkpoint`, holding per schedule the
identity of each file (inode, size, modification and change times, in
nanoseconds) and what recovery reads from them: the lifecycle records, the
runtime record, and the history store's recovered state. The next start
takes from a schedule's entry what files with unchanged identities hold
(see below), and reads the rest as before.

When it is written: at a clean stop, and while the scheduler runs, at its
first quiet moment after a start and then every `checkpoint_interval_s`
(`shell.service`), so that a start after a crash also reads only the
schedules that changed since. Before writing, the holder publishes every
history index checkpoint and empties the commit journal, so each entry
describes files that are durable and need no replay. A running checkpoint
examines only the schedules the scheduler's rounds touched since the last
one and are not due again before the next (`shell.service_housekeeping`),
and keeps every other entry as it was (`checkpoint_entries`): an entry
holds the identities its parts were read with, so whatever happened to
those files since, a start takes only what is still true of them.

Why an identity is enough: every writer of these files but the lock holder
appends to them or replaces them by a rename, so any write changes a size
or an inode, and the change time, which no user can set, moves too. The
lock holder writes one file in place, a history index, and only together
with an append to its history log (whose size then changes) or, when it
publishes, with the header of a state whose rows are already in that log:
the entry's history state is taken only with the index header it describes
(`HistoryStore.export_state`). Files that processes other than the
scheduler write (the lifecycle log and the snapshot, written by any
server's schedule API) are taken only if their change time is 0.1 s older
than the moment they were examined, so an edit in place racing the
examination within one tick of the file system's clock cannot go unseen.

An entry is used part by part: the lifecycle records only if the
lifecycle log and the snapshot are unchanged (else the schedule is read
whole), the runtime record and the history state each if its own files
are (else that part is read), so a schedule that only fired since costs
two file reads, not five. A start leaves the checkpoint where it is, and the
running scheduler replaces it at its first quiet moment: an entry stays true
of every file whose identity is unchanged, whatever happened since, so a
start after a crash that came before that moment goes by the last checkpoint
written, as one after a later crash does. A store no scheduler has
checkpointed yet is read whole.

The file is a base, written whole and atomically (a header with the
format, the body's size and checksum, then a line per schedule), and after
it the sections running checkpoints append: each holds only the entries
that changed since the one before (a line per schedule added or changed,
the id alone for one left out) and its own header and checksum, so that a
store of 10,000 hourly schedules, a tenth of which fire between two
checkpoints, writes that tenth and not the whole file (about 8 MB) every
`checkpoint_interval_s`. A start reads the base and then each section in
turn, and gets what a whole rewrite would have written. The base is checked
whole; a damaged or unknown one is ignored with a warning and removed,
never trusted. A section that does not check (cut short by a crash while it
was appended) ends the read there: what it holds is the checkpoint written
before it, which is as sound: its entries are taken only for files that
still have the identities they hold, and its run position is older (more
runs checked). The file is rewritten whole once the
sections would pass half the base's size, at the first checkpoint after a
start, and at a clean stop.

What is not in the files, the run records, is cross-checked
at a start: each header also says where the host's run records stood when
it was written (`runs_checked_at`, the host's token),
and a start that finds every schedule's history as the checkpoint
described it, at most appended to, checks only the runs written since and
the unfinished ones (`core.recovery_checks.claims_since`).

The rule a change to any store must keep: what a store reads from a file
must depend only on the file's bytes, and `_FORMAT` must change whenever
what a store makes of those bytes does.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import zlib
from collections.abc import Collection, Mapping
from typing import Any, Final, NamedTuple

from core.errors import SchedulingError
from shell.definition_store import DefinitionLoad, DefinitionStore
from shell.disk import OS_DISK, Disk
from shell.durable import append_data, atomic_write_bytes
from shell.fence import check_fence
from shell.history_store import HistoryStore
from shell.runtime_store import RuntimeStore
from shell.store_format import ScheduleFiles, read_file

__all__ = [
    "CHECKPOINT_FILE",
    "CachedSchedule",
    "CheckpointFile",
    "FileIdentity",
    "Identities",
    "StartupCheckpoint",
    "UnchangedParts",
    "checkpoint_entries",
    "current_identities_text",
    "file_identities",
    "identities_text",
    "read_startup_checkpoint",
    "settled",
    "take_startup_checkpoint",
    "write_startup_checkpoint",
]

_log = logging.getLogger(__name__)

CHECKPOINT_FILE: Final = "startup.checkpoint"
_FORMAT: Final = "wf-startup-checkpoint/2"
# Read too: the version before wrote bases only, without the body's size.
_FORMAT_1: Final = "wf-startup-checkpoint/1"
_SECTION_FORMAT: Final = "wf-startup-checkpoint-section/2"
# A file others write is trusted only once its change time is this much older
# than the examination: file times come from a clock that ticks every 1-10 ms,
# so a write landing in the tick of the examination could leave a time (and,
# written in place, a size) unchanged; the margin also absorbs small clock
# adjustments. A file changed more recently is read by the next start.
_SETTLE_NS: Final = 100_000_000

# (inode, size, mtime_ns, ctime_ns)
FileIdentity = tuple[int, int, int, int]
# One per file of `_paths`, None for a file that does not exist.
Identities = tuple[FileIdentity | None, ...]

# Positions in `Identities`.
_LIFECYCLE, _DEFINITION, _RUNTIME, _HISTORY, _INDEX = range(5)
# Those of the files processes other than the scheduler write.
_OTHERS: Final = (_LIFECYCLE, _DEFINITION)


def _paths(files: ScheduleFiles) -> tuple[str, ...]:
    return (
        files.lifecycle,
        files.definition,
        files.runtime,
        files.history,
        files.history_index,
    )


def file_identities(files: ScheduleFiles, *, disk: Disk = OS_DISK) -> Identities:
    """The identity of each file a recovery reads."""
    result: list[FileIdentity | None] = []
    for path in _paths(files):
        try:
            st = disk.stat(path)
        except FileNotFoundError:
            result.append(None)
        else:
            result.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(result)


def _inode(identity_text: str) -> int | None:
    inode, _, _ = identity_text.partition(":")
    return int(inode) if inode.isdigit() else None


def current_identities_text(files: ScheduleFiles, *, disk: Disk = OS_DISK) -> str:
    """`identities_text(file_identities(files))`, without the tuples: a start
    computes it for every schedule."""
    parts: list[str] = []
    for path in _paths(files):
        try:
            st = disk.stat(path)
        except FileNotFoundError:
            parts.append("-")
        else:
            parts.append(f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}")
    return ",".join(parts)


def identities_text(identities: Identities) -> str:
    """The form an entry stores identities in, compared as text at a start
    (parsing 10,000 of them would cost more than the `stat` calls)."""
    return ",".join("-" if i is None else ":".join(map(str, i)) for i in identities)


def settled(identities: Identities, examined_ns: int) -> bool:
    """Whether the files others write were last changed a margin before
    `examined_ns` (a `time.time_ns()` taken before they were examined)."""
    for position in _OTHERS:
        identity = identities[position]
        if identity is not None and max(identity[2], identity[3]) > examined_ns - _SETTLE_NS:
            return False
    return True


def _clean_definition_read(loaded: DefinitionLoad) -> bool:
    """Whether a `DefinitionLoad` is one a start may skip next time: nothing
    damaged, repaired, missing or blocked (those go through the full read,
    which reports or lifts them)."""
    snapshot = loaded.snapshot
    return (
        not loaded.problems
        and not loaded.repairs
        and not loaded.incomplete
        and loaded.snapshot_file_ok
        and snapshot is not None
        and snapshot.get("blocked") is None
    )


class UnchangedParts(NamedTuple):
    """Whether the files each part of an entry was read from are unchanged:
    the lifecycle records (lifecycle log and snapshot), the runtime record,
    the history state (log and index)."""

    lifecycle: bool
    runtime: bool
    history: bool


class CachedSchedule(NamedTuple):
    """One schedule's entry. The parts are kept as their JSON text: a process
    holds 10,000 of them from its start to its stop, and a stop writes the
    unchanged ones back as they are. (A tuple: a start builds 10,000 of
    them, and a frozen dataclass sets each field with a call.)"""

    identities_text: str
    records_json: str
    runtime_json: str
    history_json: str

    def compare(self, current_text: str) -> tuple[UnchangedParts | None, bool]:
        """Which parts' files still have the identities this entry was read
        with, given `current_identities_text` of the schedule (None for a
        malformed entry), and whether the history log was rewritten (see
        `_rewritten`; False where the history's files are unchanged).
        Compared as text, file by file, splitting the two texts once: a
        start compares 10,000 entries."""
        if current_text == self.identities_text:
            return _ALL_UNCHANGED, False
        was, now = self.identities_text.split(","), current_text.split(",")
        if len(was) != len(_OTHERS) + 3 or len(now) != len(was):
            return None, False
        history = was[_HISTORY] == now[_HISTORY] and was[_INDEX] == now[_INDEX]
        unchanged = UnchangedParts(
            lifecycle=was[_LIFECYCLE] == now[_LIFECYCLE] and was[_DEFINITION] == now[_DEFINITION],
            runtime=was[_RUNTIME] == now[_RUNTIME],
            history=history,
        )
        return unchanged, not history and _rewritten(was, now)

    def history_kept(self, current_text: str) -> bool:
        """Whether the schedule's history log is still the file this entry was
        read with, at most appended to (the same inode, no shorter), given
        `current_identities_text` of the schedule; also when neither exists."""
        was, now = self.identities_text.split(","), current_text.split(",")
        if len(was) != len(_OTHERS) + 3 or len(now) != len(was):
            return False
        before, after = was[_HISTORY], now[_HISTORY]
        if before == after:
            return True
        if before == "-" or after == "-":
            return False
        try:
            inode, size = (int(v) for v in before.split(":")[:2])
            new_inode, new_size = (int(v) for v in after.split(":")[:2])
        except ValueError:
            return False
        return new_inode == inode and new_size >= size

    def parts(self) -> tuple[tuple[dict[str, Any], ...], dict[str, Any] | None, list[Any]]:
        """The lifecycle records, the runtime record and the history state,
        decoded in one call (a start decodes 10,000 entries). Raises
        `ValueError` for a malformed entry."""
        records, runtime, history = json.loads(
            f"[{self.records_json},{self.runtime_json},{self.history_json}]"
        )
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise ValueError("lifecycle records are not a list of objects")
        if runtime is not None and not isinstance(runtime, dict):
            raise ValueError("runtime record is not an object")
        if not isinstance(history, list):
            raise ValueError("history state is not a list")
        return tuple(records), runtime, history


_ALL_UNCHANGED: Final = UnchangedParts(lifecycle=True, runtime=True, history=True)


def _rewritten(was: list[str], now: list[str]) -> bool:
    """Whether the history log is no longer the one an entry was read from
    with rows appended (identity texts `was` and `now`, split by file): the
    same size with other times (written in place), or another file while the
    schedule's lifecycle log is still the same file (the log alone replaced,
    as `sed -i` does). The scheduler only appends to it, so such a log was
    changed by someone else, anywhere in it, and the index that describes it
    cannot vouch for its rows (a start reads it whole). Every file new at
    once is a copied or restored store, not a rewrite: the entry does not
    describe those files, and they are read as without a checkpoint. Shorter
    is not counted: a load finds that by itself."""
    before, after = was[_HISTORY], now[_HISTORY]
    if before == after or before == "-" or after == "-":
        return False
    try:
        inode, size, mtime, _ = (int(v) for v in before.split(":"))
        new_inode, new_size, new_mtime, _ = (int(v) for v in after.split(":"))
    except ValueError:
        return False
    if new_inode != inode:
        return _inode(was[_LIFECYCLE]) == _inode(now[_LIFECYCLE]) is not None
    return new_size == size and new_mtime != mtime


class StartupCheckpoint(NamedTuple):
    """A checkpoint as a start takes it: its entries, and where the host's
    run records stood when it was written (None: it does not say; see
    `core.recovery_checks.claims_since`)."""

    entries: dict[str, CachedSchedule]
    runs_checked_at: str | None = None


class CheckpointFile(NamedTuple):
    """What this process last wrote to the checkpoint file (`write_startup_checkpoint`
    answers it, and takes it back to append the next checkpoint's changes):
    the entries the file now holds, where the host's run records stood, the
    file's inode and size, and the size of its base (the part a whole
    rewrite writes)."""

    entries: Mapping[str, CachedSchedule]
    runs_checked_at: str | None
    inode: int
    size: int
    base_size: int


def write_startup_checkpoint(
    store_root: str | os.PathLike[str],
    entries: Mapping[str, CachedSchedule],
    *,
    disk: Disk = OS_DISK,
    runs_checked_at: str | None = None,
    written: CheckpointFile | None = None,
) -> CheckpointFile:
    """Write the checkpoint durably: `entries` and where the host's run
    records stood. The caller does not change `entries` afterwards: the
    answer holds it, and the next append is computed against it.

    Whole, atomically, as a base: a header (the format, the body's size and
    checksum, the number of schedules, when given where the run records
    stood) and one line per schedule. With `written`, what this process
    wrote last, only what changed since is appended, as a section (its own
    header, then a line per schedule added or changed and one holding only
    the id per schedule left out), when the file is still the one written
    then and the sections stay under half the base's size; else the file
    is rewritten whole. Nothing is written when nothing changed.
    """
    path = os.path.join(store_root, CHECKPOINT_FILE)
    if written is not None:
        appended = _append_changes(path, written, entries, runs_checked_at, disk)
        if appended is not None:
            return appended
    body = b"".join(_line(schedule_id, entry) for schedule_id, entry in sorted(entries.items()))
    data = _headed(body, runs_checked_at, format=_FORMAT, schedules=len(entries))
    atomic_write_bytes(path, data, disk=disk)
    st = disk.stat(path)
    return CheckpointFile(entries, runs_checked_at, st.st_ino, len(data), len(data))


def _append_changes(
    path: str,
    written: CheckpointFile,
    entries: Mapping[str, CachedSchedule],
    runs_checked_at: str | None,
    disk: Disk,
) -> CheckpointFile | None:
    """What changed since `written`, appended to the file as a section; the
    file as it is when nothing changed; None when it must be rewritten
    whole (the sections would pass half the base, or the file is not the
    one written then)."""
    changed, removed = _changes(written.entries, entries)
    if not changed and not removed and runs_checked_at == written.runs_checked_at:
        return written._replace(entries=entries)
    room = written.base_size // 2 - (written.size - written.base_size)
    # Estimated before the section is built (a line is its five fields, four
    # tabs and a newline): when most entries changed, as after a herd of
    # hourly schedules fired, the file is rewritten at once.
    if sum(len(key) + sum(map(len, entry)) + 5 for key, entry in changed) > room:
        return None
    section = _section(changed, removed, runs_checked_at)
    try:
        st = disk.stat(path)
    except FileNotFoundError:
        return None
    if len(section) > room or (st.st_ino, st.st_size) != (written.inode, written.size):
        return None
    # Cut short by a crash, the section is a torn tail that a read leaves
    # out (`_parse`); the next start's first checkpoint rewrites the file
    # whole.
    append_data(path, section, create=False, disk=disk)
    return written._replace(
        entries=entries, runs_checked_at=runs_checked_at, size=written.size + len(section)
    )


def _line(schedule_id: str, entry: CachedSchedule) -> bytes:
    return (
        f"{schedule_id}\t{entry.identities_text}\t{entry.records_json}"
        f"\t{entry.runtime_json}\t{entry.history_json}\n"
    ).encode()


def _changes(
    before: Mapping[str, CachedSchedule], entries: Mapping[str, CachedSchedule]
) -> tuple[list[tuple[str, CachedSchedule]], list[str]]:
    """The entries added or changed from `before` to `entries`, and the ids
    left out."""
    # An entry kept as it was is the same object: most are, at 10,000.
    changed = [
        (schedule_id, entry)
        for schedule_id, entry in entries.items()
        if (was := before.get(schedule_id)) is not entry and was != entry
    ]
    return changed, sorted(before.keys() - entries.keys())


def _section(
    changed: list[tuple[str, CachedSchedule]], removed: list[str], runs_checked_at: str | None
) -> bytes:
    """The section that turns what the file holds into the checkpoint now."""
    lines = [_line(schedule_id, entry) for schedule_id, entry in sorted(changed)]
    lines.extend(f"{schedule_id}\n".encode() for schedule_id in removed)
    return _headed(b"".join(lines), runs_checked_at, format=_SECTION_FORMAT, lines=len(lines))


def _headed(body: bytes, runs_checked_at: str | None, **fields: Any) -> bytes:
    """`body` after its header line: `fields`, the body's size and checksum,
    when it was written and, when given, where the run records stood."""
    header = {
        **fields,
        "bytes": len(body),
        "crc32": zlib.crc32(body),
        "written_at_ns": time.time_ns(),
    }
    if runs_checked_at is not None:
        header["runs_checked_at"] = runs_checked_at
    return json.dumps(header, sort_keys=True).encode() + b"\n" + body


def read_startup_checkpoint(
    store_root: str | os.PathLike[str], *, disk: Disk = OS_DISK
) -> dict[str, CachedSchedule]:
    """The entries of the last checkpoint written; empty when there is none
    or it cannot be trusted."""
    return take_startup_checkpoint(store_root, disk=disk).entries


def take_startup_checkpoint(
    store_root: str | os.PathLike[str], *, disk: Disk = OS_DISK
) -> StartupCheckpoint:
    """The last checkpoint written, left in place (a start that crashes
    before the running scheduler writes the next goes by it again); empty,
    vouching for no run, when there is none or it cannot be trusted (then
    removed, so the warning is not repeated at every start)."""
    path = os.path.join(store_root, CHECKPOINT_FILE)
    data = read_file(path, disk=disk)
    if data is None:
        return StartupCheckpoint({})
    try:
        return _parse(data)
    except (ValueError, UnicodeDecodeError) as exc:
        _log.warning("ignoring the startup checkpoint %s: %s; reading every schedule", path, exc)
        check_fence(path)
        with contextlib.suppress(FileNotFoundError):
            disk.remove(path)
        return StartupCheckpoint({})


def _parse(data: bytes) -> StartupCheckpoint:
    """The checkpoint `data` holds: its base, then each whole section in
    turn. Raises `ValueError` for a base that cannot be trusted. A section
    that cannot be (cut short by a crash while it was appended, or damaged)
    ends the read there: the checkpoint is then the one written before it,
    whose entries are as true of the files as any (an entry is taken only
    for files whose identities it holds) and whose run position is older."""
    header, body, end = _header_and_body(data, 0, _FORMAT, _FORMAT_1)
    entries: dict[str, CachedSchedule] = {}
    make = CachedSchedule._make
    for line in body.decode().splitlines():
        parts = line.split("\t")
        if len(parts) != 5:
            raise ValueError("a line does not have five fields")
        entries[parts[0]] = make(parts[1:])
    if len(entries) != header.get("schedules"):
        raise ValueError("it does not hold the number of schedules its header says")
    position = _runs_checked_at(header)
    while end < len(data):
        try:
            header, body, after = _header_and_body(data, end, _SECTION_FORMAT)
            lines = [line.split("\t") for line in body.decode().splitlines()]
            if len(lines) != header.get("lines") or any(len(p) not in (1, 5) for p in lines):
                raise ValueError("its lines are not as its header says")
            section_position = _runs_checked_at(header)
        except (ValueError, UnicodeDecodeError):
            break
        for parts in lines:
            if len(parts) == 1:
                entries.pop(parts[0], None)
            else:
                entries[parts[0]] = make(parts[1:])
        position, end = section_position, after
    return StartupCheckpoint(entries, position)


def _header_and_body(data: bytes, start: int, *formats: str) -> tuple[dict[str, Any], bytes, int]:
    """The header line at `start` (of one of `formats`), the body it checks,
    and where that body ends. A base of the version before (`_FORMAT_1`)
    says no size: its body is the rest of the file."""
    newline = data.find(b"\n", start)
    if newline < 0:
        raise ValueError("no header line")
    header = json.loads(data[start:newline])
    if not isinstance(header, dict) or header.get("format") not in formats:
        raise ValueError(f"unknown format (this version reads {formats[0]})")
    begin = newline + 1
    if header["format"] == _FORMAT_1:
        end = len(data)
    else:
        size = header.get("bytes")
        if type(size) is not int or size < 0 or begin + size > len(data):
            raise ValueError("its body is not the size its header says")
        end = begin + size
    body = data[begin:end]
    if zlib.crc32(body) != header.get("crc32"):
        raise ValueError("its body fails its checksum")
    return header, body, end


def _runs_checked_at(header: dict[str, Any]) -> str | None:
    position = header.get("runs_checked_at")
    if position is not None and not isinstance(position, str):
        raise ValueError("its runs_checked_at is not a host's position")
    return position


def checkpoint_entries(
    captured: Mapping[str, CachedSchedule],
    *,
    definitions: DefinitionStore,
    runtime: RuntimeStore,
    history: HistoryStore,
    examine: Collection[str] | None = None,
) -> dict[str, CachedSchedule]:
    """The checkpoint's entries now, with the lock held, after the history
    indexes were published and the commit journal emptied, and with no
    group commit in progress.

    `captured` holds the entries this process took from the last checkpoint
    (its start's, or the last one it wrote); a part whose files changed
    since, and every part of a schedule the start read from its files, is
    read now (the history state
    always comes from the history store, which alone writes it). A schedule
    whose files are damaged, blocked, or changed under the examination is
    left out: the next start reads it.

    With `examine`, only those schedules (and any not in `captured`) are
    examined; the entry of every other one is kept as captured, without a
    `stat`. That is sound whatever happened to its files since: an entry
    holds the identities its parts were read with, and a start takes only
    parts whose files still have them. Leaving out a schedule whose files
    this process changed only costs the next start a read.
    """
    entries: dict[str, CachedSchedule] = {}
    # A kept entry's files are not looked at, whether they still exist included.
    for schedule_id in definitions.list_ids(present=captured if examine is not None else ()):
        if examine is not None and schedule_id not in examine:
            kept = captured.get(schedule_id)
            if kept is not None:
                entries[schedule_id] = kept
                continue
        exported = history.export_state(schedule_id)
        if exported is None:
            continue
        files = ScheduleFiles.of(definitions.store_root, schedule_id)
        examined_ns = time.time_ns()
        now = file_identities(files, disk=definitions.disk)
        history_file = now[_HISTORY]
        history_size = history_file[1] if history_file is not None else 0
        if now[_LIFECYCLE] is None or exported[0] != history_size:
            # The held history must be the whole log on disk.
            continue
        now_text = identities_text(now)
        # Compared as text, file by file, as a start compares them: parsing
        # the captured entry's text back into integers was a fifth of this
        # examination (10,000 entries every `checkpoint_interval_s`). The
        # text is canonical, so equal texts are equal identities; a malformed
        # part equals no file's and its part is read again.
        now_parts = now_text.split(",")
        before = captured.get(schedule_id)
        was_parts = before.identities_text.split(",") if before is not None else []
        if before is None or len(was_parts) != len(now_parts):
            # "?" is no file's identity text: every part is read.
            was_parts, runtime_json, records_json = ["?"] * len(now_parts), None, None
        else:
            runtime_json, records_json = before.runtime_json, before.records_json
        if runtime_json is None or was_parts[_RUNTIME] != now_parts[_RUNTIME]:
            loaded_runtime = runtime.load(schedule_id)
            if loaded_runtime.problem is not None:
                continue
            runtime_json = json.dumps(loaded_runtime.record)
        if records_json is None or any(was_parts[p] != now_parts[p] for p in _OTHERS):
            records_json = _definitions_json(definitions, schedule_id, files, now)
            if records_json is None:
                continue
        if not settled(now, examined_ns):
            continue
        entries[schedule_id] = CachedSchedule(
            now_text, records_json, runtime_json, json.dumps(exported)
        )
    return entries


def _definitions_json(
    definitions: DefinitionStore, schedule_id: str, files: ScheduleFiles, now: Identities
) -> str | None:
    """The lifecycle records as the recovery reads them, if they are clean and
    their files did not change while they were read."""
    try:
        records, loaded = definitions.read_for_recovery(schedule_id)
    except SchedulingError:
        return None
    if loaded is None or not _clean_definition_read(loaded):
        return None
    after = file_identities(files, disk=definitions.disk)
    if any(after[p] != now[p] for p in _OTHERS):
        return None
    return json.dumps(list(records))
