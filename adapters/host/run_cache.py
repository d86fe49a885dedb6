"""The run store's cache of records: live records as objects, finished ones
as their status alone, or their JSON bytes.

A parsed `RunRecord` takes about 5.5 KB of memory, its JSON about 0.8 KB. A
finished run (completed, failed, exhausted) never changes again, and is read
rarely (an `inspect_run`, a page of `list_runs`). Where the store can read
its record again at once (`RunPersistence.rereads`: the run log on local
files, one `pread`) the cache keeps only its status, and a read takes the
record from the store and parses it (about 30 us): a server that runs for
weeks does not grow by the runs it finished, and a start does not parse
them. Elsewhere (a database, an older store's file) it keeps the JSON and
parses it on each read (about 20 us): a million runs then take about a
gigabyte, not six. Runs that can still change stay objects. Paging filters
by status without reading or parsing anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

from core.occurrences import TERMINAL_RUN_STATUSES

from .number_table import NumberTable
from .records import FINISHED_CODE, FINISHED_CODES, RunRecord, record_json

__all__ = ["RunCache"]


# A code byte to a presence byte: 1 for a finished status, 0 for none.
_PRESENT: Final = bytes([0] + [1] * 255)


def _nothing_to_read(number: int) -> RunRecord | None:
    raise KeyError(number)


class RunCache:
    """Records by run number (see the module docstring). `reread(number)`
    reads a finished run kept as its status alone; None when its record
    turned out unreadable (the caller then forgets it here)."""

    __slots__ = ("_finished", "_live", "_reread", "_reread_status")

    def __init__(self, reread: Callable[[int], RunRecord | None] = _nothing_to_read) -> None:
        self._live: dict[int, RunRecord] = {}
        # Finished runs kept with their JSON (a store that cannot read them again).
        self._finished: dict[int, tuple[str, bytes]] = {}
        # Finished runs the store reads again: their status's code, a byte each.
        self._reread_status = NumberTable("B")
        self._reread = reread

    def __contains__(self, number: object) -> bool:
        return number in self._live or number in self._finished or number in self._reread_status

    def __iter__(self) -> Iterator[int]:
        yield from self._live
        yield from self._finished
        for number, _ in self._reread_status.items():
            yield number

    def __len__(self) -> int:
        return len(self._live) + len(self._finished) + len(self._reread_status)

    def live(self) -> Iterator[int]:
        """The numbers of the runs not finished, in no order."""
        return iter(self._live)

    def get(self, number: int) -> RunRecord | None:
        record = self._live.get(number)
        if record is not None:
            return record
        finished = self._finished.get(number)
        if finished is not None:
            return RunRecord.model_validate_json(finished[1])
        if number in self._reread_status:
            return self._reread(number)
        return None

    def __getitem__(self, number: int) -> RunRecord:
        record = self.get(number)
        if record is None:
            raise KeyError(number)
        return record

    def reread_status(self, number: int) -> str | None:
        """The status of a finished run kept as its status alone (its record
        is read again when asked); None for any other run."""
        code = self._reread_status.first(number)
        return FINISHED_CODES[code] if code else None

    def status(self, number: int) -> str:
        code = self._reread_status.first(number)
        if code:
            return FINISHED_CODES[code]
        record = self._live.get(number)
        if record is not None:
            return record.status
        return self._finished[number][0]

    def put(
        self, number: int, record: RunRecord, raw: bytes | None = None, *, rereads: bool = False
    ) -> None:
        """Cache `record` as the run's. Once it is finished: as its status
        alone when the store `rereads` it, else as bytes (`raw`, its JSON as
        stored, when the caller has it)."""
        if record.status in TERMINAL_RUN_STATUSES:
            self.put_finished(
                number,
                record.status,
                None if rereads else raw if raw is not None else record_json(record),
            )
        else:
            self._finished.pop(number, None)
            self._reread_status.pop(number)
            self._live[number] = record

    def put_finished(self, number: int, status: str, raw: bytes | None) -> None:
        """Cache a finished run by its `status` and JSON (`raw`), or by its
        status alone (None: `reread` reads it)."""
        self._live.pop(number, None)
        if raw is None:
            self._finished.pop(number, None)
            self._reread_status.set(number, FINISHED_CODE[status])
        else:
            self._reread_status.pop(number)
            self._finished[number] = (status, raw)

    def adopt_finished(self, codes: bytes) -> None:
        """Cache every run whose byte in `codes` (by run number) is a finished
        status's code as that status alone (the store reads it again): a
        load's finished runs at once. `codes` names no run cached already;
        those cached as their status (the load failed them) stay."""
        cached = list(self._reread_status.items())
        present = bytearray(codes.translate(_PRESENT))
        self._reread_status = NumberTable.from_columns("B", present, (codes,))
        for number, row in cached:
            self._reread_status.set(number, *row)

    def pop(self, number: int) -> bool:
        """Forget the run; whether it was cached."""
        found = self._live.pop(number, None) is not None
        found = self._finished.pop(number, None) is not None or found
        return self._reread_status.pop(number) or found
