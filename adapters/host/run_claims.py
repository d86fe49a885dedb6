"""Runs' claims by run number: each run's origin, kept as integers.

A scheduler's start with no checkpoint to go by checks every run's claim on
an occurrence (`shell.recovery`): which schedule, which instant, which
revision, opened by whom. A finished run's record is not in memory (the
run log reads it again when asked, `run_log.py`), so that listing read and
checked every record kept again, about 4.5 us a run: 0.9 s of a start with
200,000 runs. A run's origin never changes after its first record, so the
log learns it once (from the record it writes, or from a record it reads
again for a listing) and keeps it here, a row of four integers per run:

- the schedule's code: 0 for a manual origin, k >= 1 for the k-th
  schedule id this table holds (a store has far fewer schedules than runs);
- the instant, as microseconds since the epoch;
- the revision (one past 2**32 - 1 is not kept);
- the action: 0 for a calendar instant, 1 for `trigger`, 2 for `backfill`.

Only an origin this table gives back exactly as the record holds it is
kept: `{"kind": "manual"}`, or a schedule origin of exactly its keys whose
instant is the text `shell.store_format.format_instant` writes for it (what
the scheduler writes). Any other (an older record's null origin, an instant
written with `+00:00`) is not kept, and a listing reads that run's record
as before. The run log's index carries the table across a clean close
(`run_log_index.py`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from shell.store_format import format_instant, parse_instant

from .number_table import NumberTable

__all__ = [
    "CLAIM_COLUMNS",
    "UNKNOWN_ORIGIN",
    "ClaimTable",
    "origin_in_json",
]

# Schedule code, instant (microseconds since the epoch), revision, action code.
CLAIM_COLUMNS: Final = "IqIB"
# An origin this table does not hold, or `origin_in_json` could not take.
UNKNOWN_ORIGIN: Final = object()

_ACTIONS: Final = (None, "trigger", "backfill")
_ACTION_CODES: Final = {"trigger": 1, "backfill": 2}
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)
_DECODE: Final = json.JSONDecoder().raw_decode


# Cached by text and by value: a herd's runs share one instant, a spread
# minute's a few dozen.
@functools.lru_cache(maxsize=1 << 12)
def _micros(text: str) -> int | None:
    """The instant `text` names, when it is the text `format_instant` writes
    for it (else None: the table could not give the text back)."""
    try:
        instant = parse_instant(text)
    except ValueError:
        return None
    if format_instant(instant) != text:
        return None
    return (instant - _EPOCH) // _MICROSECOND


@functools.lru_cache(maxsize=1 << 12)
def _text(micros: int) -> str:
    return format_instant(_EPOCH + micros * _MICROSECOND)


class ClaimTable:
    """Origins by run number (see the module docstring)."""

    __slots__ = ("_codes", "_ids", "_rows")

    def __init__(self, rows: NumberTable | None = None, schedule_ids: Sequence[str] = ()) -> None:
        self._rows = NumberTable(CLAIM_COLUMNS) if rows is None else rows
        self._ids = list(schedule_ids)
        self._codes = {schedule_id: code for code, schedule_id in enumerate(self._ids, 1)}

    def __contains__(self, number: object) -> bool:
        return number in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def reserve(self, size: int) -> None:
        """Room for run numbers below `size` in the arrays (the log's places
        reach that far): a table begun empty under a store of many runs
        keeps every number in them, and can be exported."""
        self._rows.reserve(size)

    def learn(self, number: int, origin: Any) -> bool:
        """Keep run `number`'s origin, when the table can give it back as it
        is; whether it did. (One body, no helper: a start's listing may
        take in a million.)"""
        if type(origin) is not dict:
            return False
        size = len(origin)
        kind = origin.get("kind")
        if kind == "manual" and size == 1:
            self._rows.set(number, 0, 0, 0, 0)
            return True
        if kind != "schedule":
            return False
        action = 0
        if size == 5:
            named = origin.get("action")
            action = _ACTION_CODES.get(named, 0) if type(named) is str else 0
            if not action:
                return False
        elif size != 4:
            return False
        schedule_id = origin.get("schedule_id")
        instant = origin.get("instant")
        revision = origin.get("revision")
        if type(schedule_id) is not str or type(instant) is not str or type(revision) is not int:
            return False
        micros = _micros(instant)
        if micros is None or not 0 <= revision < 1 << 32:
            return False
        code = self._codes.get(schedule_id)
        if code is None:
            self._ids.append(schedule_id)
            code = self._codes[schedule_id] = len(self._ids)
        self._rows.set(number, code, micros, revision, action)
        return True

    def origin(self, number: int) -> Any:
        """Run `number`'s origin as its record holds it (a new dict), or
        `UNKNOWN_ORIGIN` when the table does not hold it, or holds a row it
        cannot give back (an index's row out of range: checked here, per
        run listed, rather than over every row at each start)."""
        row = self._rows.get(number)
        if row is None:
            return UNKNOWN_ORIGIN
        code, micros, revision, action = row
        if not code:
            return {"kind": "manual"} if not (micros or revision or action) else UNKNOWN_ORIGIN
        try:
            origin: dict[str, Any] = {
                "instant": _text(micros),
                "kind": "schedule",
                "revision": revision,
                "schedule_id": self._ids[code - 1],
            }
            if action:
                origin["action"] = _ACTIONS[action]
        except (IndexError, OverflowError):
            return UNKNOWN_ORIGIN
        return origin

    def export(self) -> tuple[bytes, tuple[bytes, ...], list[str]] | None:
        """The presence bytes, each column's bytes and the schedule ids, for
        `from_columns`; None while a number is kept apart from the arrays."""
        exported = self._rows.export()
        if exported is None:
            return None
        return exported[0], exported[1], list(self._ids)

    @classmethod
    def from_columns(
        cls, present: bytearray, columns: Sequence[bytes | memoryview], schedule_ids: Any
    ) -> ClaimTable:
        """A table from `export`'s parts. Raises ValueError when they are not
        one (a row is checked when it is asked for: `origin`)."""
        if not isinstance(schedule_ids, list) or not all(type(s) is str for s in schedule_ids):
            raise ValueError("the claims' schedule ids are not a list of text")
        if len(set(schedule_ids)) != len(schedule_ids):
            raise ValueError("a claims' schedule id is there twice")
        return cls(NumberTable.from_columns(CLAIM_COLUMNS, present, columns), schedule_ids)


def origin_in_json(raw: bytes) -> Any:
    """The origin a run record's JSON holds, taken from where `record_json`
    puts it (after the format, id and status, before the snapshot), or
    `UNKNOWN_ORIGIN`. The text between `"origin":` and the first
    `,"snapshot":` after it is the origin only when it parses as one JSON
    value: a key of that name inside the origin leaves an object unclosed
    there."""
    start = raw.find(b',"origin":')
    end = raw.find(b',"snapshot":', start)
    if start < 0 or end < 0:
        return UNKNOWN_ORIGIN
    try:
        text = raw[start + len(b',"origin":') : end].decode()
        # The decoder itself: `json.loads` would guess the bytes' encoding
        # and look for whitespace around the value, which `record_json`
        # never writes (any there leaves the text unread).
        origin, used = _DECODE(text)
    except ValueError:
        return UNKNOWN_ORIGIN
    if used != len(text):
        return UNKNOWN_ORIGIN
    return origin if origin is None or isinstance(origin, dict) else UNKNOWN_ORIGIN
