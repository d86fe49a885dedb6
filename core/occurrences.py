"""The occurrence vocabulary: the statuses an occurrence row can carry.

An occurrence is `(schedule_id, instant)`. Its history row starts with a
*decision* status and, when it was admitted, follows its run to a terminal
status. Every decided instant ends in exactly one terminal status.

Which run-row status may follow which is `RUN_ROW_TABLE`, and
`run_row_refusal` / `decision_row_refusal` / `span_refusal` are the row rules
the history stores (the file one and the simulator's) both judge rows by.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Final, Literal, get_args

__all__ = [
    "DECISION_STATUSES",
    "OCCURRENCE_STATUSES",
    "OPEN_RUN_STATUSES",
    "OPERATOR_DECISION_STATUSES",
    "ORIGINS",
    "RUN_ROW_TABLE",
    "RUN_STATUSES",
    "TERMINAL_RUN_STATUSES",
    "TERMINAL_STATUSES",
    "OccurrenceStatus",
    "Origin",
    "RunRowOutcome",
    "RunStatus",
    "decision_row_refusal",
    "origin_row_refusal",
    "request_refusal",
    "run_row_refusal",
    "span_refusal",
]

OccurrenceStatus = Literal[
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
]

RunStatus = Literal["admitted", "running", "interrupted", "completed", "failed", "exhausted"]

OCCURRENCE_STATUSES: Final[frozenset[str]] = frozenset(get_args(OccurrenceStatus))
RUN_STATUSES: Final[frozenset[str]] = frozenset(get_args(RunStatus))
TERMINAL_RUN_STATUSES: Final[frozenset[str]] = frozenset({"completed", "failed", "exhausted"})
# Statuses that end an occurrence for good: no later row may follow them.
TERMINAL_STATUSES: Final[frozenset[str]] = frozenset(
    {"coalesced", "superseded", "skipped-overlap", "skipped-misfire", "preflight-rejected"}
    | TERMINAL_RUN_STATUSES
)
# Statuses a first (decision) row may carry; `pending` is never stored.
DECISION_STATUSES: Final[frozenset[str]] = frozenset(
    {
        "coalesced",
        "superseded",
        "skipped-overlap",
        "skipped-misfire",
        "preflight-rejected",
        "admitted",
    }
)

# Who opened an occurrence: the calendar ("schedule"), an operator's trigger
# ("trigger", keyed by the moment it was made) or a backfill ("backfill",
# keyed by the calendar instant it makes up for). Calendar rows carry no
# origin field; the others name theirs.
Origin = Literal["schedule", "trigger", "backfill"]
ORIGINS: Final[frozenset[str]] = frozenset(get_args(Origin))

# The decisions a trigger's or a backfill's row may carry: admitted, or why
# it was not (a trigger read too late, or one whose overlap place was taken
# between the request and its decision; a failed preflight for both). Never
# a span: each stands for one request's one occurrence.
OPERATOR_DECISION_STATUSES: Final[frozenset[str]] = frozenset(
    {"admitted", "preflight-rejected", "skipped-overlap", "skipped-misfire"}
)

# Statuses of an occurrence still open (admitted, not yet terminal): the only
# ones a transition row may start from.
OPEN_RUN_STATUSES: Final[frozenset[str]] = RUN_STATUSES - TERMINAL_RUN_STATUSES

# What a transition row to a status means for an open occurrence in a status:
# `advance` moves it on, `repeat` is the status it already has (a row only to
# attach the run id), `backwards` is refused (a run never returns to admitted).
RunRowOutcome = Literal["advance", "repeat", "backwards"]

# (the open occurrence's status, the transition row's status) -> outcome.
RUN_ROW_TABLE: Final[Mapping[tuple[str, str], RunRowOutcome]] = {
    ("admitted", "admitted"): "repeat",
    ("admitted", "running"): "advance",
    ("admitted", "interrupted"): "advance",
    ("admitted", "completed"): "advance",
    ("admitted", "failed"): "advance",
    ("admitted", "exhausted"): "advance",
    ("running", "admitted"): "backwards",
    ("running", "running"): "repeat",
    ("running", "interrupted"): "advance",
    ("running", "completed"): "advance",
    ("running", "failed"): "advance",
    ("running", "exhausted"): "advance",
    ("interrupted", "admitted"): "backwards",
    ("interrupted", "running"): "advance",
    ("interrupted", "interrupted"): "repeat",
    ("interrupted", "completed"): "advance",
    ("interrupted", "failed"): "advance",
    ("interrupted", "exhausted"): "advance",
}


def run_row_refusal(
    current: str, current_run_id: str | None, status: str, run_id: str | None, seq: int
) -> str | None:
    """Why a transition row to `status` (naming `run_id`) cannot follow the
    open occurrence `seq` in `current` with `current_run_id`, or None.

    `status` must be a run status and `current` an open one (the stores check
    the row's shape first)."""
    outcome = RUN_ROW_TABLE[(current, status)]
    if outcome == "repeat" and not (current_run_id is None and run_id is not None):
        return f"duplicate {status} row for seq {seq}"
    if outcome == "backwards":
        return f"status went backwards from {current} to {status} for seq {seq}"
    if current_run_id is not None and run_id is not None and run_id != current_run_id:
        return f"run id changed from {current_run_id} to {run_id} for seq {seq}"
    return None


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def decision_row_refusal(*, revision: object, count: object, has_span: bool) -> str | None:
    """Why a decision row's `revision` (None: absent), `count` (1 when absent)
    or span (`has_span`: it names a first or last instant) breaks the row
    rules, or None. Only a row standing for several instants has a span; a
    row with `count > 1` must then pass `span_refusal`."""
    if revision is not None and not _positive_int(revision):
        return f"revision must be a positive integer, got {revision!r}"
    if not _positive_int(count):
        return f"count must be a positive integer, got {count!r}"
    if count == 1 and has_span:
        return "first_instant/last_instant only belong to a row with count > 1"
    return None


def span_refusal(first: datetime, last: datetime, instant: datetime) -> str | None:
    """Why the span of a row standing for several instants is wrong, or None:
    it runs from its first instant to its last, which is the row's instant."""
    if not first < last or last != instant:
        return "a coalesced row needs first_instant < last_instant == instant"
    return None


def origin_row_refusal(origin: object, status: str, count: object) -> str | None:
    """Why a decision row naming `origin` (None: a calendar row, which names
    none) cannot carry `status` and `count`, or None."""
    if origin is None:
        return None
    if origin not in ORIGINS or origin == "schedule":
        return f"origin must be trigger or backfill when given, got {origin!r}"
    if status not in OPERATOR_DECISION_STATUSES:
        return f"a {origin} row cannot be {status}"
    if count != 1:
        return f"a {origin} row stands for one occurrence, not {count!r}"
    return None


def request_refusal(origin: object, request: object) -> str | None:
    """Why a decision row cannot name `request` (the lifecycle seq of the
    trigger request it decided; None: names none), or None."""
    if request is None:
        return None
    if origin != "trigger":
        return "only a trigger's row names its request"
    if not _positive_int(request):
        return f"request must be a positive integer, got {request!r}"
    return None
