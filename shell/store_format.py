"""How schedule data rests on disk: paths, ids, instants, JSON lines, problems.

Everything the scheduler owns lives under `<store_root>/schedules/`, one
directory per schedule. Other processes' data (runs, artifacts) lives
elsewhere under the same root and is never touched here.

```
<store_root>/scheduler.lock              the service's OS lock (shell.lock)
<store_root>/schedules/<schedule_id>/
    lifecycle.jsonl                      append-only lifecycle log (the truth)
    definition.json                      snapshot of the lifecycle log
    runtime.jsonl                        watermark, held candidate (last line wins)
    history.jsonl                        append-only occurrence history
    history.idx                          derived fixed-width index of history
```

Instants at rest are UTC ISO-8601 strings ending in `Z`; JSON lines are
canonical (`sort_keys`, compact separators, ASCII) and end in `\\n`.
"""

from __future__ import annotations

import functools
import json
import json.encoder
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

from core.errors import InvalidInput, InvalidState, Problem
from shell.disk import OS_DISK, Disk

__all__ = [
    "DEFINITION_FILE",
    "HISTORY_FILE",
    "HISTORY_INDEX_FILE",
    "LIFECYCLE_FILE",
    "LOCK_FILE",
    "RUNTIME_FILE",
    "SCHEDULES_DIR",
    "Instant",
    "ScheduleFiles",
    "StoreDamaged",
    "StoreProblem",
    "canonical_instant",
    "canonical_json",
    "check_schedule_id",
    "encode_json_line",
    "format_instant",
    "parse_instant",
    "read_file",
]

# The C encoder `json.dumps` itself runs (None where CPython's accelerator
# is missing: then `json.dumps`).
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
_encode_ascii: Any = json.encoder.encode_basestring_ascii

SCHEDULES_DIR: Final = "schedules"
LOCK_FILE: Final = "scheduler.lock"
DEFINITION_FILE: Final = "definition.json"
LIFECYCLE_FILE: Final = "lifecycle.jsonl"
RUNTIME_FILE: Final = "runtime.jsonl"
HISTORY_FILE: Final = "history.jsonl"
HISTORY_INDEX_FILE: Final = "history.idx"

# An instant as callers may pass it: an aware datetime or its ISO-8601 text.
Instant = datetime | str

_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_schedule_id(schedule_id: object) -> str:
    """Return `schedule_id` if it is safe to use as a directory name.

    Ids are validated upstream (1-128 chars of `[A-Za-z0-9._-]`, first char
    alphanumeric); this is the last line of defence before a path is built, so
    it also refuses path separators, NUL and `..` explicitly.

    Raises `InvalidInput` naming `schedule_id`.
    """
    if not isinstance(schedule_id, str):
        raise InvalidInput.from_problems(
            "schedule id", [Problem(field="schedule_id", reason="must be a string")]
        )
    reason: str | None = None
    if "/" in schedule_id or "\\" in schedule_id or "\x00" in schedule_id:
        reason = "must not contain path separators or NUL"
    elif ".." in schedule_id:
        reason = "must not contain '..'"
    elif _ID_RE.fullmatch(schedule_id) is None:
        reason = "must be 1-128 characters of [A-Za-z0-9._-] starting with a letter or digit"
    if reason is not None:
        raise InvalidInput.from_problems(
            "schedule id", [Problem(field="schedule_id", reason=reason)]
        )
    return schedule_id


class ScheduleFiles(NamedTuple):
    """The paths of one schedule's files under a store root.

    Plain strings, built once: the stores touch thousands of schedules at
    startup, and `pathlib` objects cost more than the system calls they name
    (and a frozen dataclass's fields cost a call each to set: a start builds
    one per schedule).
    """

    store_root: str
    schedule_id: str
    directory: str
    definition: str
    lifecycle: str
    runtime: str
    history: str
    history_index: str

    @classmethod
    def of(cls, store_root: str | os.PathLike[str], schedule_id: str) -> ScheduleFiles:
        """Raises `InvalidInput` for an unsafe `schedule_id` (see `check_schedule_id`)."""
        return _schedule_files(os.fspath(store_root), schedule_id)

    @classmethod
    def build(cls, root: str, schedule_id: str) -> ScheduleFiles:
        directory = os.path.join(root, SCHEDULES_DIR, check_schedule_id(schedule_id))
        prefix = directory + os.sep
        return cls(
            root,
            schedule_id,
            directory,
            prefix + DEFINITION_FILE,
            prefix + LIFECYCLE_FILE,
            prefix + RUNTIME_FILE,
            prefix + HISTORY_FILE,
            prefix + HISTORY_INDEX_FILE,
        )

    def relative(self, path: str) -> str:
        """`path` relative to the store root, as diagnostics name files."""
        root = self.store_root.rstrip(os.sep) + os.sep
        if path.startswith(root):
            return path[len(root) :].replace(os.sep, "/")
        return path


def read_file(path: str, *, disk: Disk = OS_DISK) -> bytes | None:
    """The whole content of a (small) file, or None if it does not exist."""
    try:
        file = disk.open(path)
    except FileNotFoundError:
        return None
    try:
        data = file.read(1 << 16)
        if len(data) < 1 << 16:
            # A short read of a regular file means end of file: skip the
            # extra read() that would only confirm it.
            return data
        chunks = [data]
        while chunk := file.read(1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        file.close()


# The three stores of one root each ask for the same schedules' paths.
@functools.lru_cache(maxsize=1 << 16)
def _schedule_files(root: str, schedule_id: str) -> ScheduleFiles:
    return ScheduleFiles.build(root, schedule_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreProblem:
    """A record that cannot be parsed or contradicts another one.

    `file` is relative to the store root, `record` locates the record (line,
    byte offset, seq) and `reason` says what is wrong. The schedule concerned is
    blocked; nothing is cleared.
    """

    schedule_id: str
    file: str
    record: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"file": self.file, "record": self.record, "reason": self.reason}

    def describe(self) -> str:
        return f"{self.file} ({self.record}): {self.reason}"


class StoreDamaged(InvalidState):
    """A store file needed for the operation is damaged; `problem` says where.

    The data is left as found for an operator to inspect.
    """

    def __init__(self, problem: StoreProblem) -> None:
        super().__init__(
            f"schedule {problem.schedule_id!r} has damaged records: {problem.describe()}",
            data={"schedule_id": problem.schedule_id, **problem.as_dict()},
        )
        self.problem = problem


# Cached by value: a wake-up formats the same few instants (its `now`, the
# herd's due instant) once per schedule, ten thousand times for a herd. Equal
# aware datetimes are the same instant, and the text depends only on it.
@functools.lru_cache(maxsize=1 << 12)
def format_instant(value: datetime) -> str:
    """UTC ISO-8601 text ending in `Z` (microseconds only when non-zero).

    Raises `ValueError` for a naive datetime: an instant must be unambiguous.
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime {value!r} is not an instant")
    # isoformat omits the fraction exactly when microseconds are zero.
    return value.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"


def parse_instant(text: str) -> datetime:
    """Parse ISO-8601 text with an offset (`Z` or `+00:00`) into an aware UTC datetime.

    Raises `ValueError` for anything else, naive text included.
    """
    if not isinstance(text, str):
        raise ValueError(f"instant must be a string, got {type(text).__name__}")
    return _parse_text(text)


# Cached by text for the same reason as `format_instant`: a herd's rows all
# carry the same instant and the same `recorded_at`, parsed back once per row
# when the store checks the row against its history.
@functools.lru_cache(maxsize=1 << 12)
def _parse_text(text: str) -> datetime:
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ValueError(f"instant {text!r} has no UTC offset")
    return parsed.astimezone(UTC)


def canonical_instant(value: Instant) -> str:
    """The at-rest text of an instant given as a datetime or ISO-8601 text."""
    if isinstance(value, datetime):
        return format_instant(value)
    return format_instant(parse_instant(value))


def canonical_json(value: object) -> bytes:
    """`value` as canonical JSON: ASCII, sorted keys, compact, no NaN.

    Raises `TypeError` or `ValueError` for what JSON cannot hold.
    """
    # What `json.dumps(value, sort_keys=True, separators=(",", ":"),
    # allow_nan=False)` runs, without building its encoder objects on every
    # call (a third of its time for a history row; every row is encoded).
    # The fresh `markers` keep its refusal of a circular value.
    if type(value) is str:
        # A run id in every `admitted` row: no encoder to build for it.
        return str(_encode_ascii(value)).encode("ascii")
    if _c_make_encoder is None:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
        return text.encode("ascii")
    encode = _c_make_encoder({}, _not_json, _encode_ascii, None, ":", ",", True, False, False)
    return "".join(encode(value, 0)).encode("ascii")


def _not_json(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def encode_json_line(record: Mapping[str, Any]) -> bytes:
    """One canonical JSON line (`canonical_json`, newline-terminated).

    ASCII output means a line never contains a raw newline or a Unicode line
    separator, so `\\n` is an exact record boundary.
    """
    return canonical_json(record) + b"\n"
