"""The occurrence vocabulary: the statuses an occurrence row can carry.

An occurrence is `(schedule_id, instant)`. Its history row starts with a
*decision* status and, when it was admitted, follows its run to a terminal
status. Every decided instant ends in exactly one terminal status.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

__all__ = [
    "DECISION_STATUSES",
    "OCCURRENCE_STATUSES",
    "RUN_STATUSES",
    "TERMINAL_RUN_STATUSES",
    "TERMINAL_STATUSES",
    "OccurrenceStatus",
    "RunStatus",
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
