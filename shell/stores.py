"""The schedule stores together, and startup recovery of all of them.

`ScheduleStores(store_root)` bundles the definition, runtime and history
stores of one root. `recover_all()` is what the scheduler runs once, after
taking the lock: it loads every schedule, repairs crash artifacts (torn final
lines, snapshots behind their log, stale index tails, temp files of
interrupted atomic writes) and returns, per schedule, everything the service
needs to build its `ScheduleRecovered` event, including the problems that
must block it. It never raises because of one schedule's records: a damaged
schedule comes back with problems and the others are unaffected.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shell.definition_store import DefinitionStore
from shell.disk import OS_DISK, Disk
from shell.durable import GroupCommit, SyncMode, remove_stale_temp_files
from shell.history_store import HistoryRecovery, HistoryStore
from shell.runtime_store import RuntimeStore
from shell.store_format import ScheduleFiles, StoreDamaged, StoreProblem

__all__ = ["RecoveredRecords", "ScheduleStores"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveredRecords:
    """Everything the stores hold about one schedule at startup.

    `definition` is the reconciled snapshot (None if it cannot be rebuilt);
    `runtime` the runtime record (None if never written or damaged);
    `unconsumed_lifecycle` the lifecycle records after `runtime.lifecycle_seq`
    (the changes the scheduler has not applied yet, oldest first); `problems`
    every damaged record found, from all files. A schedule with problems must
    be blocked.
    """

    schedule_id: str
    definition: dict[str, Any] | None
    runtime: dict[str, Any] | None
    history: HistoryRecovery | None
    unconsumed_lifecycle: tuple[dict[str, Any], ...]
    problems: tuple[StoreProblem, ...]


class ScheduleStores:
    """Definition, runtime and history stores under one store root."""

    def __init__(
        self,
        store_root: str | os.PathLike[str],
        *,
        sync: SyncMode = "auto",
        disk: Disk = OS_DISK,
    ) -> None:
        self.store_root = Path(store_root)
        self.sync_mode: SyncMode = sync
        self.disk = disk
        self.definitions = DefinitionStore(self.store_root, disk=disk)
        self.runtime = RuntimeStore(self.store_root, disk=disk)
        self.history = HistoryStore(self.store_root, disk=disk)

    def new_batch(self) -> GroupCommit:
        """A `GroupCommit` for one wake-up, flushing with this store's sync mode."""
        return GroupCommit(sync=self.sync_mode, disk=self.disk)

    def recover_all(self) -> list[RecoveredRecords]:
        """Recover every schedule, sorted by id. Only the lock holder may call it.

        Ends with one flush of every history tail found after a crash, so the
        scheduler never acts on rows that are not durable.
        """
        results = [self.recover(schedule_id) for schedule_id in self.definitions.list_ids()]
        self.history.sync_recovered()
        return results

    def recover(self, schedule_id: str) -> RecoveredRecords:
        """Recover one schedule (see `recover_all`); never raises for damage."""
        files = ScheduleFiles.of(self.store_root, schedule_id)
        problems: list[StoreProblem] = []
        removed = remove_stale_temp_files(files.directory, disk=self.disk)
        if removed:
            _log.info(
                "removed temp files of interrupted writes in %s: %s", files.directory, removed
            )

        definition: dict[str, Any] | None = None
        lifecycle_seq = 0
        try:
            loaded = self.definitions.load(schedule_id, repair=True)
            definition, lifecycle_seq = loaded.snapshot, loaded.lifecycle_seq
            problems.extend(loaded.problems)
        except OSError as exc:
            problems.append(self._io_problem(files, files.definition, exc))

        runtime = self.runtime.load(schedule_id)
        if runtime.problem is not None:
            problems.append(runtime.problem)
        consumed = runtime.record["lifecycle_seq"] if runtime.record is not None else 0
        unconsumed: tuple[dict[str, Any], ...] = ()
        if consumed > lifecycle_seq and not problems:
            problems.append(
                StoreProblem(
                    schedule_id=schedule_id,
                    file=files.relative(files.runtime),
                    record=f"lifecycle_seq {consumed}",
                    reason=(
                        f"runtime consumed lifecycle seq {consumed}"
                        f" but the log ends at {lifecycle_seq}"
                    ),
                )
            )
        elif not problems:
            try:
                unconsumed = self.definitions.records_after(schedule_id, consumed)
            except StoreDamaged as damaged:
                problems.append(damaged.problem)

        history: HistoryRecovery | None = None
        try:
            history = self.history.recover(schedule_id)
            problems.extend(history.problems)
        except OSError as exc:
            problems.append(self._io_problem(files, files.history, exc))

        for problem in problems:
            _log.warning("schedule %s is blocked: %s", schedule_id, problem.describe())
        return RecoveredRecords(
            schedule_id=schedule_id,
            definition=definition,
            runtime=runtime.record,
            history=history,
            unconsumed_lifecycle=unconsumed,
            problems=tuple(problems),
        )

    @staticmethod
    def _io_problem(files: ScheduleFiles, path: str, exc: OSError) -> StoreProblem:
        return StoreProblem(
            schedule_id=files.schedule_id,
            file=files.relative(path),
            record="whole file",
            reason=f"cannot be read: {exc.strerror or exc}",
        )

    def close(self) -> None:
        """Make the history indexes' checkpoints durable (clean shutdown)."""
        self.history.close()
