"""The file backend: schedules kept in files under a store root.

`FileBackend` is `shell.store_ports.ScheduleBackend` over the definition,
runtime and history stores of one root (`shell/definition_store.py`,
`shell/runtime_store.py`, `shell/history_store.py`), the commit journal
(`shell/journal.py`), the scheduler lock (`shell/lock.py`) and the startup
checkpoint (`shell/startup_checkpoint.py`, kept by `shell.file_upkeep`). The
layout, formats and write order are in `docs/storage.md`.

The file stores are synchronous (a file system answers without the event
loop's help); the ports' coroutines here call them directly, so a round
never yields to the loop between reading a store and acting on it, as
before there were ports.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, cast

from core.errors import NotFound, SchedulerUnavailable
from core.recovery_checks import CheckedClaims
from shell.definition_store import ChangeKind, DefinitionStore, LifecycleResult
from shell.disk import OS_DISK, Disk
from shell.durable import GroupCommit, SimulatedCrash
from shell.file_upkeep import FileStoreUpkeep
from shell.history_store import HistoryRecovery, HistoryStore
from shell.journal import CommitJournal, journal_supported
from shell.lock import SchedulerLock
from shell.runtime_store import RuntimeLoad, RuntimeStore
from shell.startup_checkpoint import CachedSchedule, StartupCheckpoint, UnchangedParts
from shell.store_format import Instant, ScheduleFiles, StoreDamaged, StoreProblem
from shell.store_ports import (
    BatchPort,
    OwnershipPort,
    RecordPart,
    ScheduleInputs,
    StoreWatcher,
)
from shell.write_back import WriteBackDisk, drop_deferred

__all__ = ["FileBackend", "FileOwnership"]

# The service's logger: recovery was part of the service, and operators'
# filters and the JSON log's logger field name it.
_log = logging.getLogger("shell.service")


class _Definitions:
    """`DefinitionsPort` over a `DefinitionStore`."""

    def __init__(self, store: DefinitionStore) -> None:
        self.store = store

    async def exists(self, schedule_id: str) -> bool:
        return self.store.exists(schedule_id)

    async def list_ids(self) -> list[str]:
        return self.store.list_ids()

    async def get(self, schedule_id: str) -> dict[str, Any]:
        return self.store.get(schedule_id)

    async def records_after(self, schedule_id: str, seq: int) -> tuple[dict[str, Any], ...]:
        return self.store.records_after(schedule_id, seq)

    async def create(
        self, schedule_id: str, definition: Mapping[str, Any], *, at: Instant
    ) -> LifecycleResult:
        return self.store.create(schedule_id, definition, at=at)

    async def apply_change(
        self,
        schedule_id: str,
        kind: ChangeKind,
        *,
        at: Instant,
        definition: Mapping[str, Any] | None = None,
        expected_revision: int | None = None,
        action: Mapping[str, Any] | None = None,
    ) -> LifecycleResult:
        return self.store.apply_change(
            schedule_id,
            kind,
            at=at,
            definition=definition,
            expected_revision=expected_revision,
            action=action,
        )

    async def set_blocked(
        self, schedule_id: str, blocked: Mapping[str, Any] | None, *, at: Instant | None = None
    ) -> dict[str, Any]:
        return self.store.set_blocked(schedule_id, blocked, at=at)


class _Runtime:
    """`RuntimePort` over a `RuntimeStore`."""

    def __init__(self, store: RuntimeStore) -> None:
        self.store = store

    async def load(self, schedule_id: str) -> RuntimeLoad:
        return self.store.load(schedule_id)

    def stage(
        self,
        batch: Any,
        schedule_id: str,
        *,
        watermark: Instant,
        held: Instant | None,
        lifecycle_seq: int,
        written_at: Instant,
        waiting: Sequence[Instant] = (),
        backfill: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        return self.store.stage(
            batch,
            schedule_id,
            watermark=watermark,
            held=held,
            lifecycle_seq=lifecycle_seq,
            written_at=written_at,
            waiting=waiting,
            backfill=backfill,
        )


class _History:
    """`HistoryPort` over a `HistoryStore`."""

    def __init__(self, store: HistoryStore) -> None:
        self.store = store
        # The staging methods are the store's own: a herd stages thousands.
        self.append_decision = store.append_decision
        self.stage_admitted = store.stage_admitted
        self.append_transition = store.append_transition
        self.open_occurrence = store.open_occurrence
        self.locate = store.locate

    async def recover(self, schedule_id: str) -> HistoryRecovery:
        return self.store.recover(schedule_id)

    async def page(
        self, schedule_id: str, *, limit: int, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        return self.store.page(schedule_id, limit=limit, cursor=cursor)

    async def occurrence_at(
        self, schedule_id: str, instant: Instant, origin: str = "schedule"
    ) -> dict[str, Any] | None:
        return self.store.occurrence_at(schedule_id, instant, origin)

    async def backfill_decided(
        self, schedule_id: str, start: datetime, end: datetime
    ) -> frozenset[datetime]:
        return self.store.backfill_decided(schedule_id, start, end)

    async def length(self, schedule_id: str) -> int:
        return self.store.length(schedule_id)


class FileOwnership:
    """`OwnershipPort` over the OS lock of `<store_root>/scheduler.lock`.

    `lent`: the lock is the host server's, held from its build to its close
    (`adapters.host.server`), so that no other process takes the store while
    the server serves it, with or without a scheduler. The service's start
    then claims it (one service at a time) and its stop gives it back; the
    server keeps it. A lock that is not held when the service starts (its
    server closed, or none lent) is taken, and released at the stop."""

    def __init__(self, lock: SchedulerLock, *, lent: bool = False) -> None:
        self.lock = lock
        self._lent = lent
        self._claimed = False

    @property
    def path(self) -> str:
        return str(self.lock.path)

    def loss(self) -> str:
        return f"scheduler lock {self.lock.path} was removed or replaced under this process"

    async def acquire(self) -> dict[str, Any]:
        lock = self.lock
        if not (self._lent and lock.held):
            return lock.acquire()
        if self._claimed:
            holder = lock.holder
            raise SchedulerUnavailable(
                f"store {lock.store_root} is owned by pid {os.getpid()} (this process),"
                " whose scheduler service already runs on it; stop that service first",
                data={"holder": holder},
            )
        # A lent lock lost while no service ran (its file removed) is not
        # the store's any more: the start is refused, as the service's
        # first admission would be.
        lock.ensure_held()
        self._claimed = True
        assert lock.holder is not None
        return dict(lock.holder)

    async def verify(self) -> bool:
        return self.lock.verify()

    @property
    def assured(self) -> bool:
        return self.lock.held

    async def release(self) -> None:
        if self._claimed:
            self._claimed = False
            return
        self.lock.release()

    # One process owns a store root: losing the lock fences it for good.
    stands_by = False

    async def campaign(self) -> bool:
        return False

    async def step_down(self) -> None:
        return None

    async def leader(self) -> dict[str, Any] | None:
        return self.lock.read_holder()


class _Failed:
    """A read that raised: `_RecoveryReader.read` of its schedule raises it again."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class _Pending:
    """One schedule's inputs while `_RecoveryReader` reads them."""

    __slots__ = (
        "cached",
        "entry",
        "full_scan",
        "load_problems",
        "outcome",
        "records",
        "recovered",
        "runtime",
        "schedule_id",
        "stored",
        "unchanged",
    )

    def __init__(self, schedule_id: str, entry: CachedSchedule | None) -> None:
        self.schedule_id = schedule_id
        self.entry = entry
        self.unchanged: UnchangedParts | None = None
        # Whether the inputs come from the checkpoint entry (in part).
        self.cached = False
        self.full_scan = False
        self.records: tuple[dict[str, Any], ...] = ()
        self.runtime: RuntimeLoad | None = None
        self.recovered: HistoryRecovery | None = None
        self.load_problems: tuple[StoreProblem, ...] = ()
        self.stored: Mapping[str, Any] | None = None
        # Set when the reading ended early: a problem, or nothing to recover.
        self.outcome: StoreProblem | _Unset | None = _UNSET


class _Unset:
    """No outcome yet."""


_UNSET: Final = _Unset()
_Outcome = ScheduleInputs | StoreProblem | None


class _RecoveryReader:
    """One recovery's reads of the files, taking from the startup checkpoint
    what files unchanged since it hold (`shell/startup_checkpoint.py`).

    Every schedule is read when the ids are listed, one kind of read at a
    time over all of them (the files' identities, the checkpoint entries,
    the lifecycle logs, the histories, the runtime records), and `read`
    hands each schedule's inputs over: at 10,000 schedules the same reads
    made schedule by schedule, five kinds in turn and the recovery's own
    work between them, took about a fifth longer (the interpreter's and
    the processor's caches kept losing the code of each). The work done is
    the same; only its order across schedules differs, and each schedule's
    repairs (a torn tail dropped, an index brought up to date) concern its
    own files alone. A read that raises stops that kind of read, and the
    kinds after it, at its schedule: `read` of that schedule raises it,
    after the schedules before it were handed over, so the recovery fails
    where it failed when each schedule was read in its turn."""

    def __init__(self, backend: FileBackend, checkpoint: StartupCheckpoint) -> None:
        self._backend = backend
        self._checkpoint = dict(checkpoint.entries)
        self._runs_checked_at = checkpoint.runs_checked_at
        # Whether every schedule read had an entry whose history log is
        # still the same file, at most appended to (`checked_claims`).
        self._histories_kept = True
        self._read: dict[str, _Outcome | _Failed] = {}

    def checked_claims(self) -> CheckedClaims:
        return CheckedClaims(self._runs_checked_at, self._histories_kept)

    async def schedule_ids(self) -> list[str]:
        # A checkpointed schedule's files are checked one by one next.
        ids = self._backend.definition_store.list_ids(present=self._checkpoint.keys())
        self._read_all(ids)
        return ids

    async def read(self, schedule_id: str) -> _Outcome:
        if schedule_id not in self._read:
            self._read_all([schedule_id])
        found = self._read.pop(schedule_id)
        if isinstance(found, _Failed):
            raise found.error
        return found

    def _read_all(self, ids: Sequence[str]) -> None:
        pending = [_Pending(i, self._checkpoint.pop(i, None)) for i in ids]
        for step in (
            self._compare,
            self._take_entry,
            self._read_definitions,
            self._read_history,
            self._read_runtime,
        ):
            pending = self._each(pending, step)
        kept: dict[str, CachedSchedule] = {}
        for item in pending:
            if not isinstance(item.outcome, _Unset):
                self._read[item.schedule_id] = item.outcome
                continue
            assert item.runtime is not None and item.recovered is not None
            self._read[item.schedule_id] = ScheduleInputs(
                item.records, item.runtime, item.recovered, item.load_problems, item.stored
            )
            if item.cached:
                kept[item.schedule_id] = cast(CachedSchedule, item.entry)
        # The next checkpoint reuses the parts whose files are unchanged.
        self._backend.upkeep.keep(kept)

    def _each(self, pending: list[_Pending], step: Callable[[_Pending], None]) -> list[_Pending]:
        """`step` on each schedule still being read, in order; those after
        one that raises are read no further (see the class docstring)."""
        for position, item in enumerate(pending):
            if not isinstance(item.outcome, _Unset):
                continue
            try:
                step(item)
            except Exception as exc:
                self._read[item.schedule_id] = _Failed(exc)
                return pending[:position]
        return pending

    def _compare(self, item: _Pending) -> None:
        """Which files of a checkpointed schedule still have the identities
        its entry was read with."""
        entry = item.entry
        if entry is None:
            # A schedule the checkpoint does not describe: its history may
            # be anything (`core.recovery_checks.claims_since`).
            self._histories_kept = False
            return
        current = self._backend.upkeep.current_identities(item.schedule_id)
        item.unchanged, item.full_scan = entry.compare(current)
        if not item.unchanged or not item.unchanged.history:
            self._histories_kept = self._histories_kept and entry.history_kept(current)

    def _take_entry(self, item: _Pending) -> None:
        """What the checkpoint entry gives, part by part: the lifecycle
        records if neither the lifecycle log nor the snapshot changed since
        (else the schedule is read whole), and the runtime record and the
        history state each if its files did not change (else that part is
        read from the files: a schedule that fired since the checkpoint)."""
        entry, unchanged = item.entry, item.unchanged
        if entry is None or unchanged is None or not unchanged.lifecycle:
            return
        schedule_id = item.schedule_id
        try:
            records, cached_runtime, history = entry.parts()
            if not records:
                return
            if unchanged.history:
                item.recovered = self._backend.history_store.adopt_state(schedule_id, history)
        except (ValueError, TypeError) as exc:
            _log.warning(
                "schedule %s: its startup checkpoint entry is unusable (%s); reading its files",
                schedule_id,
                exc,
            )
            return
        item.cached = True
        item.records = records
        if unchanged.runtime:
            item.runtime = RuntimeLoad(schedule_id=schedule_id, record=cached_runtime)

    def _read_definitions(self, item: _Pending) -> None:
        if not item.cached:
            self._read_whole(item)

    def _read_whole(self, item: _Pending) -> None:
        """The lifecycle records of a schedule the checkpoint does not give,
        read from its files (and then its runtime record and history). (Temp
        files of atomic writes a crash interrupted are never read as the
        truth; the service sweeps them once the start is over.) The snapshot
        is a cache of the log, but damage to it blocks all the same; loading
        as the owner drops a torn final lifecycle line, with a warning."""
        try:
            records, loaded = self._backend.definition_store.read_for_recovery(
                item.schedule_id, repair=True
            )
        except StoreDamaged as exc:
            item.outcome = exc.problem
            return
        except NotFound:
            item.outcome = None
            return
        if not records or loaded is None:
            item.outcome = None
            return
        item.records = records
        item.load_problems = loaded.problems
        item.stored = loaded.snapshot.get("blocked") if loaded.snapshot is not None else None

    def _read_history(self, item: _Pending) -> None:
        """The history recovered; with `full_scan` (its log was written other
        than by appending since the last checkpoint described it) every row is
        read, not only those after the index checkpoint: damage written into
        it since is found now, not when a page reads it."""
        if item.recovered is not None:
            return
        history = self._backend.history_store
        if item.full_scan:
            _log.warning(
                "schedule %s: its history log was rewritten since the last checkpoint"
                " (not only appended to); reading it whole",
                item.schedule_id,
            )
            item.recovered = history.recover(item.schedule_id, full_scan=True)
        else:
            item.recovered = history.recover(item.schedule_id)

    def _read_runtime(self, item: _Pending) -> None:
        if item.runtime is None:
            item.runtime = self._backend.runtime_store.load(item.schedule_id)


class FileBackend:
    """`ScheduleBackend` for the files under `store_root` (see the module docstring).

    `disk` is the operating system's unless a test passes a simulated one
    (`shell.sim.disk`); `ownership` the OS lock unless one is injected (the
    simulation's in-memory lock); `journal`: the commit journal where the
    disk supports one (`shell.journal.journal_supported`), unless given.
    """

    def __init__(
        self,
        store_root: str | os.PathLike[str],
        *,
        disk: Disk = OS_DISK,
        ownership: OwnershipPort | None = None,
        journal: CommitJournal | None = None,
    ) -> None:
        self.store_root = store_root
        if journal is None and journal_supported(disk):
            # A journaled batch's appends reach the files at the journal's
            # checkpoint; every store reads them through this disk meanwhile.
            disk = WriteBackDisk(disk)
            journal = CommitJournal(store_root, disk=disk)
        self.disk = disk
        self.definition_store = DefinitionStore(store_root, disk=disk)
        self.runtime_store = RuntimeStore(store_root, disk=disk)
        self.history_store = HistoryStore(store_root, disk=disk)
        self.journal = journal
        self.definitions = _Definitions(self.definition_store)
        self.runtime = _Runtime(self.runtime_store)
        self.history = _History(self.history_store)
        self.ownership: OwnershipPort = (
            ownership if ownership is not None else FileOwnership(SchedulerLock(store_root))
        )
        self.upkeep = FileStoreUpkeep(
            self.definition_store, self.runtime_store, self.history_store, self.journal
        )
        self._root = os.fspath(store_root)

    # The store is this process's alone (its lock), and a batch writes nothing
    # before its commit.
    prepares_ahead = True

    def new_batch(self) -> GroupCommit:
        return GroupCommit(journal=self.journal, disk=self.disk)

    async def commit(
        self, batch: BatchPort, then: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        group = cast(GroupCommit, batch)
        if then is None:
            group.commit()
            return
        group.make_durable()
        try:
            await then()
        except SimulatedCrash:
            raise  # a crashed process writes nothing more
        except BaseException:
            group.complete()
            raise
        group.complete()

    def locate(self, schedule_id: str, part: RecordPart) -> str:
        files = ScheduleFiles.of(self._root, schedule_id)
        return files.relative(cast(str, getattr(files, part)))

    def run_location(self, run_id: str) -> str:
        # The host appends run records to the segments of <store_root>/run-log
        # (docs/host.md); stores written before kept runs/<run_id>.json.
        return f"run-log ({run_id})"

    def is_run_location(self, location: str) -> bool:
        return location.startswith(("run-log", "runs/"))

    async def open_owned(self) -> None:
        if self.journal is not None:
            # Whatever a crash (or a failed round) left in the journal reaches
            # the files before the recovery reads them.
            self.journal.open()

    async def quiesce(self) -> int:
        # Every file operation completes before the call that made it returns.
        return 0

    async def watch(self, watcher: StoreWatcher) -> Callable[[], None]:
        # One process owns a file store: no one else changes it.
        return lambda: None

    def recovery_reader(self, *, at_start: bool) -> _RecoveryReader:
        # A start (not a rebuild after a failed round) takes the last
        # checkpoint, which reading consumes.
        checkpoint = self.upkeep.take_startup_checkpoint() if at_start else StartupCheckpoint({})
        return _RecoveryReader(self, checkpoint)

    def after_recovery(self) -> None:
        self.history_store.sync_recovered()

    async def close_owned(self, *, owned: bool, consistent: bool) -> None:
        try:
            await self._close_owned(owned=owned, consistent=consistent)
        finally:
            self.disk.release_kept(self._root)

    async def _close_owned(self, *, owned: bool, consistent: bool) -> None:
        if not owned:
            # Fenced: the store may be another's now (or its path names
            # another directory), so closing writes nothing; the next owner
            # replays the journal and the logs as after a crash (its replay
            # writes the appends this process held: none is written here).
            drop_deferred(self.disk)
            if self.journal is not None:
                self.journal.close_file()
            return
        # A clean close publishes the history index checkpoints, so the next
        # start replays nothing. They are derived: a disk that fails here
        # costs the next start the replay of the tails they would have
        # covered (a stop still goes on to release the store).
        try:
            self.history_store.publish()
        except OSError as exc:
            _log.error(
                "could not publish the history index checkpoints at the stop (%s);"
                " the next start replays the rows after them",
                exc,
            )
        if self.journal is not None:
            try:
                # Empties the journal (a checkpoint); if that fails, its
                # records stay for the next owner's replay.
                self.journal.close()
            except OSError as exc:
                _log.error(
                    "could not empty the commit journal at the stop (%s);"
                    " the next start replays it",
                    exc,
                )
        if consistent:
            # Only a scheduler whose state matches the stores writes one (a
            # history whose checkpoint is not published is left out of it).
            self.upkeep.write_startup_checkpoint()
        self.history_store.forget()
