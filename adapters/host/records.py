"""The run record: one JSON file per run, replaced whole on every change.

Fields that carry the durability protocol:

- `status`: admitted, running, interrupted, completed, failed, exhausted.
- `attempt`: 0 until the run first executes; 1 for the first execution;
  every resume adds one.
- `executing`: the executing mark `{attempt, kind: start|resume, since}`,
  written before an attempt executes its first step and cleared by the
  checkpoint that ends the attempt. For a resume it is the attempt mark. On
  a store several servers share it names the server executing the attempt
  (`server`), so that only the death of that server abandons it.
  A server stopping before the attempt finished (its drain ran out of time,
  or was cut short) adds `stopped: {at, cause, grace_s}` to the mark before it
  exits, so the next start can tell that stop from a process that died.
- `checkpoint`: written at every stop, `{attempt, status, node, state, steps,
  at}`; its `attempt` says which attempt produced it.
- `progress`: the position after the last recorded step (what a resume or a
  post-mortem starts from), `trace`: one entry per step.

`check_consistency` states the invariants; startup recovery relies on them to
tell an abandoned attempt (a mark with no checkpoint of that attempt) from a
stopped run.
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
)

from core.occurrences import TERMINAL_RUN_STATUSES, RunStatus

__all__ = [
    "FINISHED_CODE",
    "FINISHED_CODES",
    "RECORD_FORMAT",
    "STOP_CAUSES",
    "STOP_STATUSES",
    "Checkpoint",
    "ExecutingMark",
    "Progress",
    "RunError",
    "RunRecord",
    "Snapshot",
    "StopCause",
    "StopNote",
    "assembled",
    "check_consistency",
    "finished_status",
    "record_json",
    "revised",
    "schedule_id_of",
]

RECORD_FORMAT: Final = 1
STOP_STATUSES = frozenset({"interrupted", "completed", "failed", "exhausted"})

_STRICT = ConfigDict(frozen=True, extra="forbid", strict=True)

_Model = TypeVar("_Model", bound=BaseModel)
# The setters of a pydantic model's own slots, found once: `revised` and
# `assembled` fill a model without its `__setattr__` (frozen) or its
# validation, several times per run.
_SET_DICT = vars(BaseModel)["__dict__"].__set__
_SET_EXTRA = vars(BaseModel)["__pydantic_extra__"].__set__
_SET_FIELDS_SET = vars(BaseModel)["__pydantic_fields_set__"].__set__
_SET_PRIVATE = vars(BaseModel)["__pydantic_private__"].__set__


class Snapshot(BaseModel):
    """What the run pinned at admission; later edits of the deployment do not matter."""

    model_config = _STRICT

    deployment_id: str
    artifact_id: str
    artifact_version: int = Field(ge=1)
    inputs: dict[str, JsonValue]
    max_steps: int | None = Field(default=None, ge=1)


# Why a stopping server left an attempt unfinished: its drain grace ran out
# ("drain-expired"), or the operator cut the drain short with a second SIGINT
# ("drain-cut").
StopCause = Literal["drain-expired", "drain-cut"]
STOP_CAUSES: Final[frozenset[str]] = frozenset({"drain-expired", "drain-cut"})


class StopNote(BaseModel):
    """Written onto the executing mark of an attempt still running when the
    server stopped: the next start's recovery says the server stopped it, not
    that the process died. The attempt's effects are as unknown either way."""

    model_config = _STRICT

    at: str
    cause: StopCause
    # The drain grace the stopping server had (seconds).
    grace_s: float = Field(ge=0)


def _is_none(value: object) -> bool:
    return value is None


class ExecutingMark(BaseModel):
    model_config = _STRICT

    attempt: int = Field(ge=1)
    kind: Literal["start", "resume"]
    since: str
    # No `stopped` or `server` key while unset: every other record stays byte
    # for byte what it was before they existed.
    stopped: StopNote | None = Field(default=None, exclude_if=_is_none)
    # The id of the server executing the attempt (`shell.pg.servers`); None
    # on a store one server owns (files).
    server: str | None = Field(default=None, exclude_if=_is_none)


class Progress(BaseModel):
    model_config = _STRICT

    node: str
    state: dict[str, JsonValue]
    steps: int = Field(ge=0)


class Checkpoint(BaseModel):
    model_config = _STRICT

    attempt: int = Field(ge=1)
    status: Literal["interrupted", "completed", "failed", "exhausted"]
    node: str
    state: dict[str, JsonValue]
    steps: int = Field(ge=0)
    at: str
    # "engine" for a stop the run reached itself, "recovery" for startup recovery.
    by: Literal["engine", "recovery"] = "engine"


class RunError(BaseModel):
    model_config = _STRICT

    kind: str
    message: str
    node: str | None = None


class RunRecord(BaseModel):
    model_config = _STRICT

    format: Literal[1] = 1
    run_id: str
    status: RunStatus
    origin: dict[str, JsonValue] | None
    snapshot: Snapshot
    created_at: str
    updated_at: str
    attempt: int = Field(ge=0)
    executing: ExecutingMark | None = None
    progress: Progress | None = None
    trace: list[dict[str, JsonValue]] = Field(default_factory=list)
    checkpoint: Checkpoint | None = None
    output: JsonValue = None
    error: RunError | None = None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls, data: Any) -> RunRecord:
        """Parse a stored record. Raises pydantic.ValidationError."""
        return cls.model_validate(data)


_TO_JSON: Final[Callable[[RunRecord], bytes]] = RunRecord.__pydantic_serializer__.to_json


def revised(record: _Model, changes: Mapping[str, Any]) -> _Model:
    """`record.model_copy(update=changes)` for these models (frozen, no extra
    or private attributes), in a third of its time: every change of a run's
    record is such a copy, two per run on the scheduler's hot path. Like
    `model_copy`, nothing in `changes` is validated: the caller passes values
    of the fields' types."""
    model = type(record)
    copy = model.__new__(model)
    _SET_DICT(copy, {**record.__dict__, **changes})
    _SET_EXTRA(copy, None)
    _SET_FIELDS_SET(copy, record.__pydantic_fields_set__ | changes.keys())
    _SET_PRIVATE(copy, None)
    return copy


def assembled(model: type[_Model], **fields: Any) -> _Model:
    """A `model` of trusted `fields`, every one of them given (defaults
    included), unvalidated: what `model_construct` builds, in a third of its
    time (it looks up each field's default in Python)."""
    declared = _DECLARED.get(model)
    if declared is None:
        declared = _DECLARED[model] = frozenset(model.__pydantic_fields__)
    if fields.keys() != declared:
        raise TypeError(f"{model.__name__} takes exactly the fields {sorted(declared)}")
    built = model.__new__(model)
    _SET_DICT(built, fields)
    _SET_EXTRA(built, None)
    # A set of its own per record (pydantic may add to it), copied from the
    # model's names without hashing them again.
    _SET_FIELDS_SET(built, set(declared))
    _SET_PRIVATE(built, None)
    return built


# Each model's field names (`assembled`: five models built per scheduled run).
_DECLARED: Final[dict[type[BaseModel], frozenset[str]]] = {}


def record_json(record: RunRecord) -> bytes:
    """`record.model_dump_json().encode()`: pydantic's serializer called
    without `model_dump_json`'s wrapper (its keyword arguments, and text
    decoded from the serializer's bytes only to be encoded again), in two
    thirds of its time. Three per scheduled run."""
    return _TO_JSON(record)


# How `record_json` begins a record: its first three fields, in the model's
# order.
_FINISHED_START: Final = re.compile(
    rb'\{"format":1,"run_id":"(run-[0-9]+)","status":"('
    + b"|".join(status.encode() for status in sorted(TERMINAL_RUN_STATUSES))
    + rb')"'
)


def finished_status(data: bytes | mmap.mmap, start: int, number: int) -> str | None:
    """The status of a finished run whose record is the JSON at `start` of
    `data`, read from how `record_json` begins it (format, run id, status),
    when it names run `number`; None otherwise (a live run's, or JSON written
    another way: parse it). A start takes a finished run so, without parsing
    it: its record is parsed and checked when it is read."""
    match = _FINISHED_START.match(data, start)
    if match is None or match.group(1) != b"run-%06d" % number:
        return None
    return _FINISHED_STATUS[match.group(2)]


_FINISHED_STATUS: Final = {status.encode(): status for status in TERMINAL_RUN_STATUSES}

# A finished status as one byte, 0 for a run not finished: how the run
# cache and the run log keep it (the order is part of the run log's index
# format, `run_log.RunLogIndex`).
FINISHED_CODES: Final[tuple[str, ...]] = ("", "completed", "exhausted", "failed")
FINISHED_CODE: Final[dict[str, int]] = {s: code for code, s in enumerate(FINISHED_CODES) if s}
assert FINISHED_CODE.keys() == TERMINAL_RUN_STATUSES


def schedule_id_of(record: RunRecord) -> str | None:
    """The schedule whose occurrence admitted the run (its origin's
    `schedule_id`), or None for a run no schedule started."""
    origin = record.origin
    if origin is None or origin.get("kind") != "schedule":
        return None
    schedule_id = origin.get("schedule_id")
    return schedule_id if isinstance(schedule_id, str) else None


def check_consistency(record: RunRecord) -> str | None:
    """The first invariant `record` breaks, or None. See the module docstring."""
    status = record.status
    checkpoint = record.checkpoint
    executing = record.executing
    if status == "admitted":
        if record.attempt != 0 or executing or checkpoint or record.progress or record.trace:
            return "status admitted, but the record shows execution (attempt, mark, trace)"
        return None
    if record.attempt < 1:
        return f"status {status} with attempt 0 (never executed)"
    if record.progress is None:
        return f"status {status} without a recorded position"
    if status == "running":
        if executing is None:
            return "status running without an executing mark"
        if (executing.kind == "start") != (executing.attempt == 1):
            return f"a {executing.kind} mark on attempt {executing.attempt}"
        if executing.attempt != record.attempt:
            return (
                f"executing mark of attempt {executing.attempt} on a record at attempt "
                f"{record.attempt}"
            )
        if checkpoint is not None and checkpoint.attempt >= record.attempt:
            return f"status running, but attempt {checkpoint.attempt} already checkpointed"
        return None
    if executing is not None:
        return f"status {status} with an executing mark still set"
    if checkpoint is None:
        return f"status {status} without a checkpoint"
    if checkpoint.attempt != record.attempt:
        return (
            f"status {status}, but its checkpoint is from attempt {checkpoint.attempt} "
            f"and the record is at attempt {record.attempt}"
        )
    if checkpoint.status != status:
        return f"status {status} contradicts its checkpoint status {checkpoint.status}"
    if status in {"failed", "exhausted"} and record.error is None:
        return f"status {status} without an error"
    return None
