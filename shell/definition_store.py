"""Schedule definitions: an append-only lifecycle log plus a snapshot.

Per schedule, `lifecycle.jsonl` holds one record per lifecycle change and is
the truth; `definition.json` is a snapshot of it that makes reads cheap.

Lifecycle record (one JSON line, `seq` dense from 1):
    {"seq": 1, "kind": "created"|"updated"|"paused"|"resumed"|"deleted",
     "at": "<instant>", "revision": <int>, "definition": {...}}
    ("definition" only in created and updated records)

Snapshot (`definition.json`):
    {"format": 1, "schedule_id", "revision", "definition", "created_at",
     "updated_at", "paused", "paused_at", "resumed_at", "deleted", "deleted_at",
     "blocked": null | {"file", "record", "reason", "at"}, "lifecycle_seq"}

`updated_at` is the instant of the last accepted update (null until the first
one); `lifecycle_seq` is the seq of the last lifecycle record the snapshot
reflects.

Write order for every change: append the lifecycle record (fsynced), then
rewrite the snapshot atomically. A crash between the two leaves the log one
record ahead of the snapshot; loading replays the missing records onto the
snapshot (and, for the owner, rewrites it).

An id is taken by a schedule that exists, and then never again (not even
after delete): by a directory whose lifecycle log holds a record. A create
makes the directory (fsyncing its parent), appends the created record and
writes the snapshot. If one of those writes fails (a full disk, say), the
create removes what it made before it raises, so the id stays free. A
directory left without a complete lifecycle record (a crash in the middle of
a create, or a failed create's clean-up that failed too) is an *incomplete*
create: not listed, not found, and the next create of that id takes it over.

Damage is reported, never repaired silently: an unparseable or contradictory
lifecycle record, an unparseable snapshot, or a snapshot ahead of its log is
a `StoreProblem`; the damaged file is left as found. When the snapshot is the
damaged file, the load still rebuilds one in memory from the log so the
schedule can be shown, blocked.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Container, Mapping
from pathlib import Path
from typing import Any

from core.errors import AlreadyExists, InvalidInput, NotFound, Problem
from core.lifecycle import LifecycleKind
from shell.definition_rules import (
    CHANGE_KINDS,
    DEFINITION_FORMAT,
    ChangeKind,
    DefinitionLoad,
    LifecycleResult,
    RecordRefused,
    apply_checked,
    blocked_value,
    change,
    check_record,
    check_snapshot,
    creation,
    same_block,
    snapshot_after,
)
from shell.disk import OS_DISK, Disk, exists, is_directory
from shell.durable import append_records, atomic_write_json, fault_point, fsync_directory
from shell.fence import check_fence
from shell.jsonlog import read_lines, repair_torn_tail
from shell.store_format import (
    DEFINITION_FILE,
    LIFECYCLE_FILE,
    SCHEDULES_DIR,
    Instant,
    ScheduleFiles,
    StoreDamaged,
    StoreProblem,
    read_file,
)

__all__ = [
    "CHANGE_KINDS",
    "DEFINITION_FORMAT",
    "ChangeKind",
    "DefinitionLoad",
    "DefinitionStore",
    "LifecycleKind",
    "LifecycleResult",
    "snapshot_after",
]

_log = logging.getLogger(__name__)


def _parse_record(line: bytes, expected_seq: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError:
        raise RecordRefused(f"line {expected_seq}", "unparseable record") from None
    return check_record(record, expected_seq)


class DefinitionStore:
    """Definitions and lifecycle of every schedule under `<store_root>/schedules`.

    Values in and out are plain JSON-safe dicts; instants are ISO-8601 `Z`
    strings at rest (datetimes are accepted as arguments). Not thread-safe:
    one writer (the event loop thread) at a time.
    """

    def __init__(self, store_root: str | os.PathLike[str], *, disk: Disk = OS_DISK) -> None:
        self.store_root = Path(store_root)
        self.disk = disk
        self._paths: dict[str, ScheduleFiles] = {}

    def _files(self, schedule_id: str) -> ScheduleFiles:
        files = self._paths.get(schedule_id)
        if files is None:
            files = self._paths[schedule_id] = ScheduleFiles.of(self.store_root, schedule_id)
        return files

    # --- queries ------------------------------------------------------------------

    def exists(self, schedule_id: str) -> bool:
        """True when the id's directory exists (an incomplete create's included)."""
        return is_directory(self.disk, self._files(schedule_id).directory)

    def list_ids(self, *, present: Container[str] = ()) -> list[str]:
        """Sorted ids of every schedule ever created (deleted ones included).

        Directories holding neither a lifecycle log nor a snapshot (a create
        interrupted right after making the directory) are left out; those
        named in `present` are taken without that check (a caller about to
        check their files itself).
        """
        root = os.path.join(self.store_root, SCHEDULES_DIR)
        try:
            names = self.disk.list(root)
        except FileNotFoundError:
            return []
        ids: list[str] = []
        for name in names:
            try:
                files = self._files(name)
            except InvalidInput:
                _log.warning("ignoring %s: not a schedule id", os.path.join(root, name))
                continue
            if (
                name in present
                or exists(self.disk, files.lifecycle)
                or exists(self.disk, files.definition)
            ):
                ids.append(name)
        return sorted(ids)

    def load(self, schedule_id: str, *, repair: bool = False) -> DefinitionLoad:
        """Load and reconcile one schedule's snapshot with its lifecycle log.

        Never raises for damaged records: they come back as `problems`. With
        `repair` (only the store's owner, or a writer about to append), a torn
        final lifecycle line is dropped and a snapshot behind its log or
        missing is rewritten. Raises `NotFound` if the directory does not
        exist.
        """
        files = self._files(schedule_id)
        if not is_directory(self.disk, files.directory):
            raise NotFound(
                f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
            )
        return self._load(
            files, read_lines(files.lifecycle, disk=self.disk), repair=repair, parsed=None
        )

    def read_for_recovery(
        self, schedule_id: str, *, repair: bool = False
    ) -> tuple[tuple[dict[str, Any], ...], DefinitionLoad | None]:
        """`records_after(schedule_id, 0)` and then `load(schedule_id,
        repair=repair)`, reading and parsing the lifecycle log once: what a
        scheduler's start reads of every schedule. The load is None when the
        log holds no record (nothing to recover). Raises as `records_after`
        does, before anything is repaired."""
        files = self._files(schedule_id)
        read = read_lines(files.lifecycle, disk=self.disk)
        if read is None:
            if not is_directory(self.disk, files.directory):
                raise NotFound(
                    f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
                )
            return (), None
        records = self._checked_records(files, read[0])
        if not records:
            return (), None
        return tuple(records), self._load(files, read, repair=repair, parsed=records)

    def _load(
        self,
        files: ScheduleFiles,
        read: tuple[list[bytes], bytes] | None,
        *,
        repair: bool,
        parsed: list[dict[str, Any]] | None,
    ) -> DefinitionLoad:
        """`load` of the lifecycle lines already `read`; `parsed` holds every
        line's record when the caller has checked them all already."""
        schedule_id = files.schedule_id
        repairs: list[str] = []
        problems: list[StoreProblem] = []

        def problem(path: str, record: str, reason: str) -> None:
            problems.append(
                StoreProblem(
                    schedule_id=schedule_id, file=files.relative(path), record=record, reason=reason
                )
            )

        def record_at(seq: int) -> dict[str, Any]:
            return parsed[seq - 1] if parsed is not None else _parse_record(lines[seq - 1], seq)

        lines, torn = read if read is not None else ([], b"")
        if torn:
            if repair:
                repair_torn_tail(files.lifecycle, disk=self.disk)
                repairs.append(f"dropped a torn final line of {files.relative(files.lifecycle)}")
            else:
                _log.debug("ignoring a torn final line of %s", files.lifecycle)

        snapshot: dict[str, Any] | None = None
        snapshot_file_ok = True
        raw = read_file(files.definition, disk=self.disk)
        try:
            if raw is not None:
                snapshot = check_snapshot(json.loads(raw), schedule_id)
        except ValueError as exc:
            snapshot_file_ok = False
            problem(files.definition, "whole file", f"unreadable snapshot: {exc}")

        last_seq = len(lines)
        if last_seq == 0:
            if snapshot is not None:
                problem(
                    files.lifecycle,
                    "whole file",
                    "lifecycle log is missing or empty but a snapshot exists",
                )
                return DefinitionLoad(
                    schedule_id=schedule_id,
                    snapshot=snapshot,
                    lifecycle_seq=snapshot["lifecycle_seq"],
                    problems=tuple(problems),
                    repairs=tuple(repairs),
                )
            if not problems and not self._has_other_files(files):
                return DefinitionLoad(
                    schedule_id=schedule_id, snapshot=None, lifecycle_seq=0, incomplete=True
                )
            problem(files.lifecycle, "whole file", "lifecycle log is missing or empty")
            return DefinitionLoad(
                schedule_id=schedule_id,
                snapshot=None,
                lifecycle_seq=0,
                problems=tuple(problems),
                repairs=tuple(repairs),
                snapshot_file_ok=snapshot_file_ok,
            )

        base = snapshot
        if base is not None and base["lifecycle_seq"] > last_seq:
            problem(
                files.definition,
                f"lifecycle_seq {base['lifecycle_seq']}",
                f"snapshot is ahead of the lifecycle log, which ends at seq {last_seq}",
            )
            return DefinitionLoad(
                schedule_id=schedule_id,
                snapshot=base,
                lifecycle_seq=last_seq,
                problems=tuple(problems),
                repairs=tuple(repairs),
                snapshot_file_ok=snapshot_file_ok,
            )
        start = base["lifecycle_seq"] if base is not None else 0
        try:
            if base is not None:
                # The record the snapshot claims to reflect must agree with it.
                anchor = record_at(start)
                if anchor["revision"] != base["revision"]:
                    raise RecordRefused(
                        f"line {start} (seq {start})",
                        f"revision {anchor['revision']} but definition.json"
                        f" says {base['revision']}",
                    )
            current = base
            for seq in range(start + 1, last_seq + 1):
                current = apply_checked(current, record_at(seq), schedule_id)
        except RecordRefused as bad:
            problem(files.lifecycle, bad.record, bad.reason)
            return DefinitionLoad(
                schedule_id=schedule_id,
                snapshot=base,
                lifecycle_seq=start,
                problems=tuple(problems),
                repairs=tuple(repairs),
                snapshot_file_ok=snapshot_file_ok,
            )
        assert current is not None
        if current is not base:
            if base is not None and base.get("blocked") is not None:
                current = dict(current, blocked=base["blocked"])
            if repair and snapshot_file_ok:
                atomic_write_json(files.definition, current, disk=self.disk)
                repairs.append(f"rewrote {files.relative(files.definition)} from the lifecycle log")
                _log.warning(
                    "%s was behind %s (seq %d < %d); rebuilt it from the log",
                    files.definition,
                    files.lifecycle,
                    start,
                    last_seq,
                )
        return DefinitionLoad(
            schedule_id=schedule_id,
            snapshot=current,
            lifecycle_seq=last_seq,
            problems=tuple(problems),
            repairs=tuple(repairs),
            snapshot_file_ok=snapshot_file_ok,
        )

    def _has_other_files(self, files: ScheduleFiles) -> bool:
        return any(
            not name.startswith(".")
            for name in self.disk.list(files.directory)
            if name not in (LIFECYCLE_FILE, DEFINITION_FILE)
        )

    def get(self, schedule_id: str) -> dict[str, Any]:
        """The current snapshot of one schedule.

        When its records are damaged but a snapshot could still be rebuilt,
        the snapshot's `blocked` carries the first problem (with `at` null).
        Raises `NotFound` if it does not exist and `StoreDamaged` if no
        snapshot can be reconstructed.
        """
        loaded = self.load(schedule_id)
        if loaded.incomplete:
            raise NotFound(
                f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
            )
        if loaded.snapshot is None:
            raise StoreDamaged(loaded.problems[0])
        if loaded.problems and loaded.snapshot.get("blocked") is None:
            first = loaded.problems[0]
            return dict(loaded.snapshot, blocked={**first.as_dict(), "at": None})
        return loaded.snapshot

    def records_after(self, schedule_id: str, seq: int) -> tuple[dict[str, Any], ...]:
        """Lifecycle records with seq greater than `seq`, oldest first.

        The scheduler passes the last seq it consumed (the runtime record's
        `lifecycle_seq`) to find the changes it has not applied yet. Every
        record is checked, so this raises `StoreDamaged` for any unparseable
        or contradictory record, and `NotFound` if the schedule does not
        exist. A torn final line is ignored.
        """
        files = self._files(schedule_id)
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise InvalidInput.from_problems(
                "lifecycle query", [Problem(field="seq", reason="must be >= 0")]
            )
        read = read_lines(files.lifecycle, disk=self.disk)
        if read is None:
            if not is_directory(self.disk, files.directory):
                raise NotFound(
                    f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
                )
            return ()
        return tuple(self._checked_records(files, read[0])[seq:])

    @staticmethod
    def _checked_records(files: ScheduleFiles, lines: list[bytes]) -> list[dict[str, Any]]:
        """Every record of the log, each checked against the ones before it;
        raises `StoreDamaged` at the first that does not parse or contradicts."""
        records: list[dict[str, Any]] = []
        snapshot: dict[str, Any] | None = None
        try:
            # Replayed from the first record so that a contradiction (not just
            # a parse error) in the returned records is caught; the log holds
            # one record per edit, so this stays cheap.
            for index, line in enumerate(lines):
                record = _parse_record(line, index + 1)
                snapshot = apply_checked(snapshot, record, files.schedule_id)
                records.append(record)
        except RecordRefused as bad:
            raise StoreDamaged(
                StoreProblem(
                    schedule_id=files.schedule_id,
                    file=files.relative(files.lifecycle),
                    record=bad.record,
                    reason=bad.reason,
                )
            ) from None
        return records

    # --- changes ------------------------------------------------------------------

    def create(
        self, schedule_id: str, definition: Mapping[str, Any], *, at: Instant
    ) -> LifecycleResult:
        """Create a schedule at revision 1.

        Raises `AlreadyExists` if the schedule exists (ids are never reused,
        even after delete), `InvalidInput` for an unsafe id, a definition that
        is not JSON-safe or a naive `at`. Everything is validated before the
        first write. An `OSError` of a write leaves no directory behind (see
        the module docstring); an incomplete create's directory is taken over.
        """
        files = self._files(schedule_id)
        record, snapshot = creation(schedule_id, definition, at)

        parent = os.path.dirname(files.directory)
        check_fence(files.directory)
        if not is_directory(self.disk, parent):
            self.disk.make_directory(parent, parents=True)
            # The first create makes `schedules/`: its entry in the store root
            # must be durable too, or a power cut loses every schedule in it.
            fsync_directory(os.path.dirname(parent), disk=self.disk)
        fault_point("before:mkdir:schedule")
        try:
            self.disk.make_directory(files.directory)
        except FileExistsError:
            if not self._take_over_incomplete(files):
                raise AlreadyExists(
                    f"schedule {schedule_id!r} already exists (ids are never reused)",
                    data={"schedule_id": schedule_id},
                ) from None
            self.disk.make_directory(files.directory)
        try:
            fsync_directory(parent, disk=self.disk)
            fault_point("after:mkdir:schedule")
            append_records(files.lifecycle, [record], disk=self.disk)
            atomic_write_json(files.definition, snapshot, disk=self.disk)
        except Exception:
            # Not BaseException: a SimulatedCrash leaves what a crash would.
            self._remove_unfinished(files)
            raise
        return LifecycleResult(snapshot=snapshot, record=record)

    def _take_over_incomplete(self, files: ScheduleFiles) -> bool:
        """Remove the directory of an incomplete create of `files`' id (see
        the module docstring) so a create can take the id; False when the
        directory holds a schedule, or anything else."""
        try:
            loaded = self.load(files.schedule_id)
        except NotFound:
            return True
        if not loaded.incomplete:
            return False
        _log.warning(
            "%s holds an incomplete create (no lifecycle record): removing it to create %r",
            files.directory,
            files.schedule_id,
        )
        return self._remove_unfinished(files, strict=True)

    def _remove_unfinished(self, files: ScheduleFiles, *, strict: bool = False) -> bool:
        """Remove a create's directory with its lifecycle log, snapshot and
        temp files (and nothing else: another file means it is not a create's).
        Best effort unless `strict`; True when the directory is gone."""
        check_fence(files.directory)
        try:
            for name in self.disk.list(files.directory):
                if name in (LIFECYCLE_FILE, DEFINITION_FILE) or name.startswith("."):
                    self.disk.remove(os.path.join(files.directory, name))
            self.disk.remove_directory(files.directory)
            fsync_directory(os.path.dirname(files.directory), disk=self.disk)
        except FileNotFoundError:
            return True
        except OSError as exc:
            if strict:
                raise
            # The id may stay taken by an incomplete create; the next create
            # of it takes it over.
            _log.error("could not remove %s after a failed create: %s", files.directory, exc)
            return False
        return True

    def apply_change(
        self,
        schedule_id: str,
        kind: ChangeKind,
        *,
        at: Instant,
        definition: Mapping[str, Any] | None = None,
        expected_revision: int | None = None,
        action: Mapping[str, Any] | None = None,
    ) -> LifecycleResult:
        """Record one lifecycle change and return the new snapshot.

        `updated` needs `definition` (the full new payload) and bumps the
        revision; `paused`, `resumed` and `deleted` keep it and are idempotent
        (a no-op returns `record=None` and writes nothing). Raises `NotFound`,
        `RevisionConflict` when `expected_revision` is stale, `InvalidState`
        for a change to a deleted schedule, `StoreDamaged` when the schedule's
        definition records are damaged, `InvalidInput` for bad arguments.
        """
        files = self._files(schedule_id)
        loaded = self.load(schedule_id, repair=True)
        if loaded.incomplete:
            raise NotFound(
                f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
            )
        if loaded.problems or loaded.snapshot is None:
            raise StoreDamaged(loaded.problems[0])
        result = change(
            loaded.snapshot,
            loaded.lifecycle_seq,
            schedule_id,
            kind,
            at=at,
            definition=definition,
            expected_revision=expected_revision,
            action=action,
        )
        if result.record is None:
            return result
        append_records(files.lifecycle, [result.record], disk=self.disk)
        atomic_write_json(files.definition, result.snapshot, disk=self.disk)
        return result

    def set_blocked(
        self, schedule_id: str, blocked: Mapping[str, Any] | None, *, at: Instant | None = None
    ) -> dict[str, Any]:
        """Persist (or, with None, clear) the diagnostic that blocks a schedule.

        `blocked` names `file`, `record` and `reason` (strings); `at` is when
        it was found. Not a lifecycle change: only the snapshot is rewritten,
        and nothing is written when the diagnostic is unchanged. Raises
        `StoreDamaged` when the snapshot file itself is the damaged record
        (the caller keeps the block in memory then; the next start finds the
        same damage again).
        """
        value = blocked_value(blocked, at)
        files = self._files(schedule_id)
        loaded = self.load(schedule_id, repair=True)
        if loaded.incomplete:
            raise NotFound(
                f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
            )
        if loaded.snapshot is None or not loaded.snapshot_file_ok:
            raise StoreDamaged(loaded.problems[0])
        current = loaded.snapshot
        if same_block(current.get("blocked"), value):
            return current
        snapshot = dict(current, blocked=value)
        atomic_write_json(files.definition, snapshot, disk=self.disk)
        return snapshot
