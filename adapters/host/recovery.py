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

The message says what stopped the attempt. A mark that carries a stop note
(`stopped`, written by a server that stopped before the attempt finished: its
drain grace ran out, or a second SIGINT cut the drain) was left by a clean
stop: "the previous server stopped before this run finished (...)". A mark
without one was left by a process that died (killed, crashed, lost power)
with the attempt executing: "the process died while this run was executing".
On a store several servers share, a mark names its server, and only that
server's death abandons the attempt; one declared gone for its silence may
have been frozen or cut off rather than dead, and the message says so.
"""

from __future__ import annotations

from typing import Any, Final

from .records import Checkpoint, RunError, RunRecord, StopNote, revised

__all__ = ["ABANDONED", "AMBIGUOUS_RESUME", "GONE", "STOPPED", "recover_record", "stop_reason"]

ABANDONED: Final = (
    "abandoned: the process died while this run was executing; "
    "external effects may already have occurred"
)
STOPPED: Final = (
    "abandoned: the previous server stopped before this run finished ({why}); "
    "external effects may already have occurred"
)
AMBIGUOUS_RESUME: Final = "ambiguous resume: attempt {attempt} was marked but left no result"
GONE: Final = (
    "abandoned: its server {server} was declared gone from the store (it stopped proving"
    " it is alive) while this run was executing; external effects may already have occurred"
)


def stop_reason(note: StopNote) -> str:
    """What the stop note says happened, for a person: "its drain grace of 30 s
    ran out, at <instant>"."""
    if note.cause == "drain-cut":
        why = "a second SIGINT cut its drain short"
    else:
        why = f"its drain grace of {note.grace_s:g} s ran out"
    return f"{why}, at {note.at}"


def recover_record(
    record: RunRecord, now: str, *, server_gone: bool = False
) -> tuple[RunRecord, dict[str, Any]] | None:
    """The failed record and its finding for a dead attempt, or None if nothing to do.

    `record` must already satisfy `check_consistency`. `server_gone`: the
    mark's server was declared gone (not known to have died or stopped).
    """
    if record.status != "running" or record.executing is None or record.progress is None:
        return None
    attempt = record.executing.attempt
    progress = record.progress
    where = f"last recorded position: node {progress.node!r} after {progress.steps} step(s)"
    note = record.executing.stopped
    if record.executing.kind == "start":
        finding = "abandoned"
        if note is not None:
            disclosure = STOPPED.format(why=stop_reason(note))
        elif server_gone:
            disclosure = GONE.format(server=record.executing.server)
        else:
            disclosure = ABANDONED
        message = f"{disclosure} (attempt {attempt}; {where}); not retried"
    else:
        finding = "ambiguous-resume"
        if note is not None:
            stopped = f" (the previous server stopped: {stop_reason(note)})"
        elif server_gone:
            stopped = f" (its server {record.executing.server} was declared gone)"
        else:
            stopped = ""
        message = (
            f"{AMBIGUOUS_RESUME.format(attempt=attempt)}{stopped}; failed closed, not retried; "
            f"external effects may already have occurred ({where})"
        )
    failed = revised(
        record,
        {
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
        },
    )
    return failed, {"run_id": record.run_id, "finding": finding, "reason": message}
