"""The run store's cache of records: live records as objects, finished ones
as their JSON bytes.

A parsed `RunRecord` takes about 5.5 KB of memory, its JSON about 0.8 KB. A
finished run (completed, failed, exhausted) never changes again, and is read
rarely (an `inspect_run`, a page of `list_runs`), so the cache keeps it as
bytes with its status beside them and parses it again on each read (about
20 us): a store of a million runs then takes about a gigabyte, not six, and a
server that runs for weeks does not grow by 5 KB a run. Runs that can still
change stay objects. Paging filters by status without parsing anything.
"""

from __future__ import annotations

from collections.abc import Iterator

from core.occurrences import TERMINAL_RUN_STATUSES

from .records import RunRecord, record_json

__all__ = ["RunCache"]


class RunCache:
    """Records by run number (see the module docstring)."""

    __slots__ = ("_finished", "_live")

    def __init__(self) -> None:
        self._live: dict[int, RunRecord] = {}
        self._finished: dict[int, tuple[str, bytes]] = {}

    def __contains__(self, number: object) -> bool:
        return number in self._live or number in self._finished

    def __iter__(self) -> Iterator[int]:
        yield from self._live
        yield from self._finished

    def __len__(self) -> int:
        return len(self._live) + len(self._finished)

    def get(self, number: int) -> RunRecord | None:
        record = self._live.get(number)
        if record is not None:
            return record
        finished = self._finished.get(number)
        if finished is None:
            return None
        return RunRecord.model_validate_json(finished[1])

    def __getitem__(self, number: int) -> RunRecord:
        record = self.get(number)
        if record is None:
            raise KeyError(number)
        return record

    def status(self, number: int) -> str:
        record = self._live.get(number)
        return record.status if record is not None else self._finished[number][0]

    def put(self, number: int, record: RunRecord, raw: bytes | None = None) -> None:
        """Cache `record` as the run's: as bytes once it is finished (`raw`,
        its JSON as stored, when the caller has it)."""
        if record.status in TERMINAL_RUN_STATUSES:
            self._live.pop(number, None)
            self._finished[number] = (
                record.status,
                raw if raw is not None else record_json(record),
            )
        else:
            self._finished.pop(number, None)
            self._live[number] = record

    def pop(self, number: int) -> bool:
        """Forget the run; whether it was cached."""
        found = self._live.pop(number, None) is not None
        return self._finished.pop(number, None) is not None or found
