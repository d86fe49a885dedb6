"""The file backend's upkeep: the startup checkpoint and the sweep of temp files.

Both are about files (what a start may `stat` instead of read, what an
interrupted atomic write left behind), so they belong to the file stores,
not to the scheduler service: the service asks `SchedulesApi.upkeep` (a
`StoreUpkeepPort`) and runs the same on any backend. `file_store_upkeep` is
the one place that recognizes the file stores; another backend passes its
own upkeep, or none.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping

from shell.definition_store import DefinitionStore
from shell.durable import remove_stale_temp_files
from shell.history_store import HistoryStore
from shell.runtime_store import RuntimeStore
from shell.startup_checkpoint import (
    CachedSchedule,
    checkpoint_entries,
    current_identities_text,
    read_startup_checkpoint,
    write_startup_checkpoint,
)
from shell.store_format import ScheduleFiles
from shell.store_ports import DefinitionsPort, HistoryPort, RuntimePort

__all__ = ["FileStoreUpkeep", "file_store_upkeep"]

# The service's logger: the sweep was part of the service, and operators'
# filters and the JSON log's logger field name it.
_log = logging.getLogger("shell.service")


class FileStoreUpkeep:
    """`StoreUpkeepPort` for the definition, runtime and history files of one root."""

    def __init__(
        self, definitions: DefinitionStore, runtime: RuntimeStore, history: HistoryStore
    ) -> None:
        self._definitions = definitions
        self._runtime = runtime
        self._history = history

    def take_startup_checkpoint(self) -> dict[str, CachedSchedule]:
        return read_startup_checkpoint(self._definitions.store_root, disk=self._definitions.disk)

    def current_identities(self, schedule_id: str) -> str:
        files = ScheduleFiles.of(self._definitions.store_root, schedule_id)
        return current_identities_text(files, disk=self._definitions.disk)

    def publish(self) -> None:
        # The history indexes' checkpoints: a start then replays nothing.
        self._history.publish()

    def write_startup_checkpoint(
        self, captured: Mapping[str, CachedSchedule], *, examine: Collection[str] | None = None
    ) -> dict[str, CachedSchedule]:
        entries = checkpoint_entries(
            captured,
            definitions=self._definitions,
            runtime=self._runtime,
            history=self._history,
            examine=examine,
        )
        write_startup_checkpoint(self._definitions.store_root, entries, disk=self._definitions.disk)
        return entries

    def sweep_temp_files(self, *, older_than_ns: int) -> None:
        """A start does not look for them (a temp file is never read as the
        truth, and listing 10,000 directories costs about 0.4 s before the
        first decision). Failing costs disk space, nothing else."""
        definitions = self._definitions
        try:
            for schedule_id in definitions.list_ids():
                directory = ScheduleFiles.of(definitions.store_root, schedule_id).directory
                removed = remove_stale_temp_files(
                    directory, older_than_ns=older_than_ns, disk=definitions.disk
                )
                if removed:
                    _log.info(
                        "removed temp files of interrupted writes in %s: %s", directory, removed
                    )
        except OSError as exc:
            _log.warning("could not sweep temp files of interrupted writes: %s", exc)


def file_store_upkeep(
    definitions: DefinitionsPort, runtime: RuntimePort, history: HistoryPort
) -> FileStoreUpkeep | None:
    """The upkeep of these stores if all three are the file stores, else None
    (mixed or other stores have no checkpoint to keep)."""
    if (
        isinstance(definitions, DefinitionStore)
        and isinstance(runtime, RuntimeStore)
        and isinstance(history, HistoryStore)
    ):
        return FileStoreUpkeep(definitions, runtime, history)
    return None
