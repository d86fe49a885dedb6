"""Simulation output: one row per occurrence, a summary per schedule, and the
four formats (`table`, `json`, `jsonl`, `csv`).

Each row names its occurrence's `origin`: "schedule" for the calendar's,
"trigger" or "backfill" for an operator's (rules P and Q). A backfilled
instant may have two rows, the calendar's decision (skipped, superseded...)
and the backfill's run.

A row is written once, when its occurrence is settled: at its decision when
that is final (skipped, coalesced, superseded, preflight-rejected), at its
run's final status when it was admitted, or at the end of the horizon for
whatever is still open (a held `pending` candidate, a run still `running` or
`interrupted`). `jsonl` and `csv` write each row as it is settled and keep
nothing; `json` and `table` collect the rows and sort them by instant.

Every value is derived from the scenario alone (no wall clock, no process
ids), numbers are rounded to milliseconds and JSON keys are sorted, so one
scenario always gives byte-identical `json`, `jsonl` and `csv`.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Protocol, TextIO

from core.occurrences import OCCURRENCE_STATUSES, ORIGINS

__all__ = [
    "ROW_FIELDS",
    "CollectingSink",
    "CsvSink",
    "JsonlSink",
    "Row",
    "RowSink",
    "SummaryBuilder",
    "TeeSink",
    "iso",
    "render_json",
    "render_table",
    "sorted_rows",
]

ROW_FIELDS: Final[tuple[str, ...]] = (
    "schedule_id",
    "instant",
    "local_instant",
    "status",
    "run_id",
    "run_start",
    "run_end",
    "lateness_s",
    "count",
    "first_instant",
    "last_instant",
    "dst",
    "reason",
    "origin",
)
# The order statuses are listed in summaries: the seed's vocabulary order.
_STATUS_ORDER: Final[tuple[str, ...]] = (
    "pending",
    "coalesced",
    "superseded",
    "skipped-overlap",
    "skipped-misfire",
    "preflight-rejected",
    "admitted",
    "running",
    "interrupted",
    "completed",
    "failed",
    "exhausted",
)
assert frozenset(_STATUS_ORDER) == OCCURRENCE_STATUSES
# The order origins are listed in: the calendar's first.
_ORIGIN_ORDER: Final[tuple[str, ...]] = ("schedule", "trigger", "backfill")
assert frozenset(_ORIGIN_ORDER) == ORIGINS
_ORIGIN_RANK: Final = {origin: rank for rank, origin in enumerate(_ORIGIN_ORDER)}


def iso(instant: datetime | None) -> str | None:
    """An aware instant as ISO-8601 in UTC with `Z`; None stays None."""
    if instant is None:
        return None
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _seconds(value: float) -> float:
    # Whole seconds print as `60.0`; drawn durations keep their milliseconds.
    return round(value, 3)


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """The final state of one occurrence (or of several missed instants when
    `count > 1`, then `instant` is the last of them). `origin` says who
    opened it: the calendar ("schedule"), a trigger or a backfill."""

    schedule_id: str
    instant: datetime
    local_instant: str
    status: str
    run_id: str | None = None
    run_start: datetime | None = None
    run_end: datetime | None = None
    count: int = 1
    first_instant: datetime | None = None
    last_instant: datetime | None = None
    dst: str | None = None
    reason: str | None = None
    origin: str = "schedule"

    @property
    def lateness_s(self) -> float | None:
        """How long after its instant the run was admitted (admitted rows only)."""
        if self.run_start is None:
            return None
        return _seconds((self.run_start - self.instant).total_seconds())

    def as_dict(self) -> dict[str, Any]:
        return {
            "schedule_id": self.schedule_id,
            "instant": iso(self.instant),
            "local_instant": self.local_instant,
            "status": self.status,
            "run_id": self.run_id,
            "run_start": iso(self.run_start),
            "run_end": iso(self.run_end),
            "lateness_s": self.lateness_s,
            "count": self.count,
            "first_instant": iso(self.first_instant),
            "last_instant": iso(self.last_instant),
            "dst": self.dst,
            "reason": self.reason,
            "origin": self.origin,
        }


def sorted_rows(rows: Iterable[Row]) -> list[Row]:
    """Rows by instant, then schedule id, then origin (the calendar's row of a
    backfilled instant before the backfill's)."""
    return sorted(rows, key=lambda row: (row.instant, row.schedule_id, _ORIGIN_RANK[row.origin]))


@dataclass(slots=True)
class _ScheduleTally:
    counts: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    runs: int = 0
    runs_by_origin: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_ORIGIN_ORDER, 0))
    max_active: int = 0
    # Lateness of the calendar's runs only: a backfill's runs are late by
    # design (days, for an old range) and a trigger's are not late at all.
    lateness_total: float = 0.0
    lateness_max: float | None = None
    backfill: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        calendar_runs = self.runs_by_origin["schedule"]
        mean = None if calendar_runs == 0 else _seconds(self.lateness_total / calendar_runs)
        tally = {
            "counts": {s: self.counts[s] for s in _STATUS_ORDER if s in self.counts},
            "instants": sum(self.counts.values()),
            "rows": self.rows,
            "runs": self.runs,
            "runs_by_origin": dict(self.runs_by_origin),
            "max_active": self.max_active,
            "lateness_s": {"mean": mean, "max": self.lateness_max},
        }
        if self.backfill is not None:
            tally["backfill"] = dict(self.backfill)
        return tally


class SummaryBuilder:
    """Accumulates the per-schedule summary as rows and active-run counts come
    in; its size depends on the number of schedules, never on the horizon."""

    __slots__ = ("_max_active_total", "_tallies")

    def __init__(self, schedule_ids: Iterable[str]) -> None:
        self._tallies = {sid: _ScheduleTally() for sid in schedule_ids}
        self._max_active_total = 0

    def add_row(self, row: Row) -> None:
        tally = self._tallies[row.schedule_id]
        tally.rows += 1
        tally.counts[row.status] = tally.counts.get(row.status, 0) + row.count
        lateness = row.lateness_s
        if lateness is not None:
            tally.runs += 1
            tally.runs_by_origin[row.origin] += 1
            if row.origin == "schedule":
                tally.lateness_total += lateness
                if tally.lateness_max is None or lateness > tally.lateness_max:
                    tally.lateness_max = lateness

    def note_backfill(self, schedule_id: str, backfill: Mapping[str, Any]) -> None:
        """The schedule's backfill as the horizon ended (its summary's `backfill`)."""
        self._tallies[schedule_id].backfill = dict(backfill)

    def note_active(self, schedule_id: str, active: int, active_total: int) -> None:
        """Record that `schedule_id` has `active` runs (admitted, running or
        interrupted) and all schedules together `active_total`."""
        tally = self._tallies[schedule_id]
        if active > tally.max_active:
            tally.max_active = active
        if active_total > self._max_active_total:
            self._max_active_total = active_total

    def as_dict(self) -> dict[str, Any]:
        schedules = {sid: t.as_dict() for sid, t in sorted(self._tallies.items())}
        counts: dict[str, int] = {}
        by_origin = dict.fromkeys(_ORIGIN_ORDER, 0)
        for tally in self._tallies.values():
            for status, n in tally.counts.items():
                counts[status] = counts.get(status, 0) + n
            for origin, n in tally.runs_by_origin.items():
                by_origin[origin] += n
        return {
            "schedules": schedules,
            "totals": {
                "counts": {s: counts[s] for s in _STATUS_ORDER if s in counts},
                "instants": sum(counts.values()),
                "rows": sum(t.rows for t in self._tallies.values()),
                "runs": sum(t.runs for t in self._tallies.values()),
                "runs_by_origin": by_origin,
                "max_active": self._max_active_total,
            },
        }


class RowSink(Protocol):
    """Where settled rows go, one at a time, and the summary at the end."""

    def row(self, row: Row) -> None: ...

    def finish(self, summary: Mapping[str, Any]) -> None: ...


class CollectingSink:
    """Keeps every row (for `json`, `table` and plots)."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.summary: Mapping[str, Any] = {}

    def row(self, row: Row) -> None:
        self.rows.append(row)

    def finish(self, summary: Mapping[str, Any]) -> None:
        self.summary = summary


class JsonlSink:
    """One JSON object per line per row as it settles; the last line is
    `{"summary": {...}}`."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def row(self, row: Row) -> None:
        self._stream.write(_dumps(row.as_dict()) + "\n")

    def finish(self, summary: Mapping[str, Any]) -> None:
        self._stream.write(_dumps({"summary": summary}) + "\n")


class CsvSink:
    """A header, then one CSV line per row as it settles (empty cell for null).
    The summary is not part of CSV; use `json` or `jsonl` for it."""

    def __init__(self, stream: TextIO) -> None:
        self._writer = csv.writer(stream, lineterminator="\n")
        self._writer.writerow(ROW_FIELDS)

    def row(self, row: Row) -> None:
        values = row.as_dict()
        self._writer.writerow(["" if values[k] is None else values[k] for k in ROW_FIELDS])

    def finish(self, summary: Mapping[str, Any]) -> None:
        del summary


class TeeSink:
    """Hands every row to several sinks (a streamed format plus a plot)."""

    def __init__(self, *sinks: RowSink) -> None:
        self._sinks = sinks

    def row(self, row: Row) -> None:
        for sink in self._sinks:
            sink.row(row)

    def finish(self, summary: Mapping[str, Any]) -> None:
        for sink in self._sinks:
            sink.finish(summary)


# One encoder for every line: json.dumps would build a new one per row.
_LINE_ENCODER: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _dumps(value: Any) -> str:
    return _LINE_ENCODER.encode(value)


def render_json(header: Mapping[str, Any], rows: Iterable[Row], summary: Mapping[str, Any]) -> str:
    """The `json` document: `{"scenario": header, "rows": [...], "summary": {...}}`,
    rows sorted by instant, keys sorted, two-space indent, final newline."""
    document = {
        "scenario": dict(header),
        "rows": [row.as_dict() for row in sorted_rows(rows)],
        "summary": dict(summary),
    }
    return json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def _short(instant: datetime | None) -> str:
    # The table is for people: a space instead of `T`, no `Z`, no trailing zeros.
    if instant is None:
        return ""
    text = instant.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    if instant.microsecond:
        text += f"{instant.microsecond / 1e6:.3f}".rstrip("0").removeprefix("0")
    return text


def render_table(
    stream: TextIO,
    header: Mapping[str, Any],
    rows: Iterable[Row],
    summary: Mapping[str, Any],
    *,
    terminal: bool,
    width: int | None = None,
) -> None:
    """The human `table` format (rich): occurrences, then the summary."""
    from rich.console import Console
    from rich.table import Table

    # Off a terminal nothing wraps a long line, so do not squeeze the columns.
    if width is None and not terminal:
        width = 200
    console = Console(file=stream, force_terminal=terminal, width=width, highlight=False)
    title = header.get("title") or "simulation"
    occurrences = Table(title=f"{title}\n{header['start']} → {header['end']}")
    for name in ("schedule", "instant (UTC)", "local", "status", "origin", "run"):
        occurrences.add_column(name, no_wrap=name != "schedule")
    occurrences.add_column("late s", justify="right")
    occurrences.add_column("end (UTC)", no_wrap=True)
    occurrences.add_column("note")
    for row in sorted_rows(rows):
        notes = []
        if row.count > 1:
            first, last = _short(row.first_instant), _short(row.last_instant)
            notes.append(f"{row.count} instants {first} .. {last}")
        if row.dst:
            notes.append(f"dst {row.dst}")
        if row.reason:
            notes.append(row.reason)
        lateness = row.lateness_s
        end = _short(row.run_end)
        if row.run_end is not None and row.run_end.date() == row.instant.date():
            end = end[len("2026-03-02 ") :]  # same day as the instant: time only
        occurrences.add_row(
            row.schedule_id,
            _short(row.instant),
            row.local_instant.replace("T", " "),
            row.status,
            row.origin,
            row.run_id or "",
            "" if lateness is None else f"{lateness:g}",
            end,
            "; ".join(notes),
        )
    console.print(occurrences)

    per_schedule = Table(title="summary")
    for name in ("schedule", "instants", "runs", "max active", "late mean s", "late max s"):
        per_schedule.add_column(name, justify="left" if name == "schedule" else "right")
    per_schedule.add_column("statuses")
    schedules: Mapping[str, Any] = summary.get("schedules", {})
    for schedule_id, tally in schedules.items():
        lateness = tally["lateness_s"]
        per_schedule.add_row(
            schedule_id,
            str(tally["instants"]),
            f"{tally['runs']}{_operator_runs(tally.get('runs_by_origin', {}))}",
            str(tally["max_active"]),
            "" if lateness["mean"] is None else f"{lateness['mean']:g}",
            "" if lateness["max"] is None else f"{lateness['max']:g}",
            ", ".join(f"{status} {n}" for status, n in tally["counts"].items()),
        )
    console.print(per_schedule)
    totals = summary.get("totals")
    if totals:
        console.print(
            f"{totals['instants']} instants, "
            f"{totals['runs']} runs{_operator_runs(totals.get('runs_by_origin', {}))}, "
            f"at most {totals['max_active']} active at once"
        )
    for schedule_id, tally in schedules.items():
        backfill = tally.get("backfill")
        if backfill is not None:
            console.print(
                f"{schedule_id}: backfill of [{backfill['start']}, {backfill['end']})"
                f" {backfill['state']}, {backfill['admitted']} of {backfill['planned']} admitted"
                f" ({backfill['already_admitted']} admitted before,"
                f" {backfill['left_to_calendar']} left to the calendar)",
                markup=False,
            )


def _operator_runs(by_origin: Mapping[str, int]) -> str:
    """` (1 trigger, 2 backfill)` when operators started runs, else nothing."""
    operators = [f"{by_origin[o]} {o}" for o in _ORIGIN_ORDER[1:] if by_origin.get(o)]
    return f" ({', '.join(operators)})" if operators else ""
