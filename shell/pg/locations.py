"""How diagnostics name records on PostgreSQL: a table and a row.

A block diagnostic on the file backend names a file relative to the store
root and a line in it; on PostgreSQL it names the table (`file`, as
`StoreProblem` calls it) and the row's key (`record`), so an operator can
look at the row with `psql`.
"""

from __future__ import annotations

from typing import Final

from shell.store_ports import RecordPart

__all__ = [
    "HISTORY",
    "LIFECYCLE",
    "RUNS",
    "RUNTIME",
    "SCHEDULES",
    "row",
    "table",
]

SCHEDULES: Final = "wf_schedules"
LIFECYCLE: Final = "wf_schedule_lifecycle"
RUNTIME: Final = "wf_schedule_runtime"
HISTORY: Final = "wf_occurrences"
RUNS: Final = "wf_runs"

_TABLES: Final[dict[RecordPart, str]] = {
    "lifecycle": LIFECYCLE,
    "definition": SCHEDULES,
    "runtime": RUNTIME,
    "history": HISTORY,
    # The history has no index of its own on PostgreSQL: its table's keys are it.
    "history_index": HISTORY,
}


def table(part: RecordPart) -> str:
    """What `StoreProblem.file` says for a schedule's `part`: "table <name>"."""
    return f"table {_TABLES[part]}"


def row(schedule_id: str, seq: int | None = None) -> str:
    """What `StoreProblem.record` says for a schedule's row (and seq)."""
    key = f"schedule_id {schedule_id!r}"
    return key if seq is None else f"{key}, seq {seq}"
