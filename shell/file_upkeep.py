"""The file backend's upkeep: the startup checkpoint and the sweep of temp files.

Both are about files (what a start may `stat` instead of read, what an
interrupted atomic write left behind), so they belong to the file stores,
not to the scheduler service: the service asks its backend's upkeep
(`shell.store_ports.StoreUpkeepPort`) when it is quiet, and knows nothing
of checkpoints.

`FileStoreUpkeep` keeps the checkpoint's ledger between rounds: the entries
this process's start took from the last checkpoint (as they were, for the
schedules whose files had not changed), or those of the last checkpoint it
wrote. The next checkpoint keeps what is unchanged and reads the rest. It
also knows what it wrote to the file last, so that a running checkpoint
appends only the entries that changed since (at 10,000 schedules the file
is about 8 MB, and an hour's schedules change a tenth of it every five
minutes); its first after a start, and the one at a clean stop, rewrite the
file whole.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping

from core.errors import SchedulingError
from shell.definition_store import DefinitionStore
from shell.durable import remove_stale_temp_files
from shell.history_store import HistoryStore
from shell.journal import CommitJournal
from shell.runtime_store import RuntimeStore
from shell.startup_checkpoint import (
    CachedSchedule,
    CheckpointFile,
    StartupCheckpoint,
    checkpoint_entries,
    current_identities_text,
    take_startup_checkpoint,
    write_startup_checkpoint,
)
from shell.store_format import ScheduleFiles

__all__ = ["FileStoreUpkeep"]

# The service's logger: the sweep and the checkpoint were part of the
# service, and operators' filters and the JSON log's logger field name it.
_log = logging.getLogger("shell.service")


class FileStoreUpkeep:
    """`StoreUpkeepPort` for the definition, runtime and history files of one root."""

    def __init__(
        self,
        definitions: DefinitionStore,
        runtime: RuntimeStore,
        history: HistoryStore,
        journal: CommitJournal | None = None,
    ) -> None:
        self._definitions = definitions
        self._runtime = runtime
        self._history = history
        self._journal = journal
        # The checkpoint entries this process holds (see the module docstring).
        self._captured: dict[str, CachedSchedule] = {}
        # What this process last wrote to the checkpoint file; None when the
        # next checkpoint rewrites it whole.
        self._file: CheckpointFile | None = None
        # Where the run records stood, for the next checkpoint (`note_runs_checked`).
        self._runs_checked_at: str | None = None
        # As text: a start asks for every schedule's files by it.
        self._root = os.fspath(definitions.store_root)

    def take_startup_checkpoint(self) -> StartupCheckpoint:
        """The last checkpoint (a start calls it once); the ledger
        starts afresh, vouching for no run until told."""
        self._captured = {}
        self._file = None
        self._runs_checked_at = None
        return take_startup_checkpoint(self._definitions.store_root, disk=self._definitions.disk)

    def note_runs_checked(self, position: str | None) -> None:
        self._runs_checked_at = position

    def keep(self, reused: Mapping[str, CachedSchedule]) -> None:
        """Keep checkpoint entries a recovery took as they were."""
        self._captured.update(reused)
        # The ledger is no longer what the file holds.
        self._file = None

    def current_identities(self, schedule_id: str) -> str:
        """What a checkpoint entry of this schedule is compared with: its
        files' identities now."""
        files = ScheduleFiles.of(self._root, schedule_id)
        return current_identities_text(files, disk=self._definitions.disk)

    def publish(self) -> None:
        # The history indexes' checkpoints, then the journal emptied: a start
        # then replays nothing, and a checkpoint describes durable files.
        self._history.publish()
        if self._journal is not None:
            self._journal.checkpoint()

    def flush_if_aged(self) -> None:
        if self._journal is None:
            return
        try:
            self._journal.checkpoint_if_aged()
        except OSError as exc:
            # The journal keeps its records; a later commit or quiet moment
            # tries again.
            _log.warning("could not checkpoint the commit journal (%s); tried again later", exc)

    def write_startup_checkpoint(self, *, examine: Collection[str] | None = None) -> bool:
        try:
            entries = checkpoint_entries(
                self._captured,
                definitions=self._definitions,
                runtime=self._runtime,
                history=self._history,
                examine=examine,
            )
            written = write_startup_checkpoint(
                self._definitions.store_root,
                entries,
                disk=self._definitions.disk,
                runs_checked_at=self._runs_checked_at,
                # A stop's (every schedule examined) compacts the file for
                # the next start.
                written=self._file if examine is not None else None,
            )
        except (OSError, SchedulingError) as exc:
            _log.warning("could not write the startup checkpoint: %s", exc)
            # An append may have reached the file in part.
            self._file = None
            return False
        self._captured = entries
        self._file = written
        return True

    def sweep_temp_files(self, *, older_than_ns: int) -> None:
        """A start does not look for them (a temp file is never read as the
        truth, and listing 10,000 directories costs about 0.4 s before the
        first decision). Failing costs disk space, nothing else."""
        definitions = self._definitions
        try:
            # The store root's own files written so (the startup checkpoint,
            # the host's run log index) leave theirs there.
            directories = [self._root]
            for schedule_id in definitions.list_ids():
                directories.append(ScheduleFiles.of(definitions.store_root, schedule_id).directory)
            for directory in directories:
                removed = remove_stale_temp_files(
                    directory, older_than_ns=older_than_ns, disk=definitions.disk
                )
                if removed:
                    _log.info(
                        "removed temp files of interrupted writes in %s: %s", directory, removed
                    )
        except OSError as exc:
            _log.warning("could not sweep temp files of interrupted writes: %s", exc)
