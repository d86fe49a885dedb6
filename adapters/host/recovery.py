"""Startup recovery of run records: what a restart concludes about each run.

| record found at startup                                | recovery                 |
| ------------------------------------------------------ | ------------------------ |
| admitted (never executed)                              | unchanged, may launch    |
| running, executing mark of a start, no checkpoint of it| failed: abandoned        |
| running, attempt mark of a resume, no checkpoint of it | failed closed: ambiguous |
| interrupted / completed / failed / exhausted           | unchanged                |
| unparseable, or breaking the record invariants         | reported, left in place  |

Neither failure is retried: the dead attempt may already have had external
effects, and only a human can know whether running it again is safe.
"""

from __future__ import annotations

from typing import Any, Final

from .records import Checkpoint, RunError, RunRecord

__all__ = ["ABANDONED", "AMBIGUOUS_RESUME", "recover_record"]

ABANDONED: Final = (
    "abandoned: the process died while this run was executing; "
    "external effects may already have occurred"
)
AMBIGUOUS_RESUME: Final = "ambiguous resume: attempt {attempt} was marked but left no result"


def recover_record(record: RunRecord, now: str) -> tuple[RunRecord, dict[str, Any]] | None:
    """The failed record and its finding for a dead attempt, or None if nothing to do.

    `record` must already satisfy `check_consistency`.
    """
    if record.status != "running" or record.executing is None or record.progress is None:
        return None
    attempt = record.executing.attempt
    progress = record.progress
    where = f"last recorded position: node {progress.node!r} after {progress.steps} step(s)"
    if record.executing.kind == "start":
        finding = "abandoned"
        message = f"{ABANDONED} (attempt {attempt}; {where}); not retried"
    else:
        finding = "ambiguous-resume"
        message = (
            f"{AMBIGUOUS_RESUME.format(attempt=attempt)}; failed closed, not retried; "
            f"external effects may already have occurred ({where})"
        )
    failed = record.model_copy(
        update={
            "status": "failed",
            "executing": None,
            "updated_at": now,
            "checkpoint": Checkpoint(
                attempt=attempt,
                status="failed",
                node=progress.node,
                state=progress.state,
                steps=progress.steps,
                at=now,
                by="recovery",
            ),
            "error": RunError(kind=finding, message=message, node=progress.node),
        }
    )
    return failed, {"run_id": record.run_id, "finding": finding, "reason": message}
