"""What a start checks between the occurrence history and the run records.

A start reads two witnesses of every scheduled run: the schedule's history
(which occurrence it admitted as which run, and the last status it saw) and
the host's run records (which occurrence each run claims, and its status).
Where they disagree, the schedule is blocked instead of deciding again what
was already decided. These are rules, so they live here, as pure functions
of what was read; the shell reads the files and names them in diagnostics.

A problem names the witness that is wrong (`"history"` or `"run"`), the
record within it and the reason; the shell turns it into a diagnostic with
the file's path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from core.events import RecoveredRun
from core.occurrences import ORIGINS, TERMINAL_RUN_STATUSES, Origin

__all__ = [
    "NO_RUN_RECORD",
    "CheckedClaims",
    "OpenAdmission",
    "RecoveryProblem",
    "RunClaim",
    "RunVerdict",
    "claim_problems",
    "claimed_origin",
    "claims_since",
    "recovered_run",
]

NO_RUN_RECORD = "no run record"


@dataclass(frozen=True, slots=True)
class RunClaim:
    """A run record whose origin names an occurrence of the schedule."""

    run_id: str
    instant: datetime
    status: str
    # Who opened the occurrence it claims (its origin's `action`, rules P, Q).
    origin: Origin = "schedule"


@dataclass(frozen=True, slots=True)
class OpenAdmission:
    """An occurrence the history admitted and has no terminal row for."""

    instant: datetime
    run_id: str | None
    status: str
    seq: int
    origin: Origin = "schedule"


@dataclass(frozen=True, slots=True)
class RecoveryProblem:
    """A disagreement: `witness` is the side found wrong, `run_id` the run it
    is about, `record` the part of that record."""

    witness: Literal["history", "run"]
    run_id: str
    record: str
    reason: str


@dataclass(frozen=True, slots=True)
class RunVerdict:
    """The open occurrence's run as a start takes it. `orphan` is a run id the
    history admitted whose record was never created: it may still be created,
    since no effect can have happened. With a `problem` the run stays active
    as the history has it (overlap is not cleared) and the schedule blocks."""

    run: RecoveredRun
    problem: RecoveryProblem | None = None
    orphan: str | None = None


@dataclass(frozen=True, slots=True)
class CheckedClaims:
    """What a start knows of the runs earlier ones accounted for: `position`,
    where the host's run records stood when the last startup checkpoint was
    written (the host's own token; None: no checkpoint, or one that did not
    say), and whether every schedule is one that checkpoint described, its
    history log still the same file, at most appended to (`histories_kept`)."""

    position: str | None
    histories_kept: bool


def claims_since(checked: CheckedClaims) -> str | None:
    """The point after which a start checks the claim of every run whose
    record was written (None: every run's claim is checked); an unfinished
    run's claim is checked wherever its record stands.

    A checkpoint is written only by a scheduler whose state matches the
    stores, after it made everything durable, and the position it notes is
    where the run records stood then. A run whose record was last written
    before it was either checked by that scheduler's start or admitted by
    that scheduler, its record committed with its admitted row: its claim
    agreed with the history. A history only appended to since cannot come
    to disagree with a finished run's claim: its last decision only moves
    forward, a closed occurrence stays closed, and the instants it opens
    later are ones no finished run claims. Any later write of a run record
    (a new run, a status, a record copied, or one written by hand) lies
    after the position, and is checked. So a start checks the runs written
    since that checkpoint and the unfinished ones, not every run kept (at
    1,000 every-minute schedules that cost a start about 30 s per day of
    runs).

    When a schedule is not one the checkpoint described (created since, or
    left out of it: a blocked schedule always is, so the claim that blocked
    it is checked again at every start until the block is lifted), or its
    history was rewritten, shortened or replaced (a restore, an edit by
    hand: its last decision may have gone back, and finished runs may now
    claim instants it never admitted), every run is checked, as it is when
    no checkpoint says where the records stood."""
    return checked.position if checked.histories_kept else None


def _iso(instant: datetime) -> str:
    # As the stores write instants: UTC, `Z`, microseconds only when non-zero.
    return instant.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"


def _instant_or_none(text: str) -> datetime | None:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.utcoffset() is not None else None


def claim_problems(
    schedule_id: str,
    claims: Sequence[RunClaim],
    open_runs: Mapping[datetime, str | None],
    last_decided: datetime | None,
    last_trigger: datetime | None = None,
) -> list[RecoveryProblem]:
    """Runs that claim an occurrence the history does not give them.

    Two runs claiming one occurrence, a run claiming an open occurrence the
    history admitted as another run, an active run claiming an instant with no
    open occurrence, and any run claiming an instant after the last decision
    all contradict the history. (A finished run claiming an older instant is
    not checked here: that would read the whole history at every start; a
    page or `inspect_run` that serves it checks it.) A trigger's instant is
    judged against the newest trigger the start read (`last_trigger`, None:
    not known) and a backfill's, which lies in the past, is not: neither is
    a calendar decision.
    """
    first: dict[tuple[str, datetime], str] = {}
    problems: list[RecoveryProblem] = []
    for claim in claims:
        where = f"occurrence {_iso(claim.instant)} of {schedule_id}"
        if claim.origin != "schedule":
            where = f"{claim.origin} {where}"
        earlier = first.setdefault((claim.origin, claim.instant), claim.run_id)
        admitted = open_runs.get(claim.instant)
        if earlier != claim.run_id:
            reason = f"claims {where}, also claimed by run {earlier}"
        elif claim.instant in open_runs:
            if admitted is None or admitted == claim.run_id:
                continue
            reason = f"claims {where}, which the history admitted as run {admitted}"
        elif claim.status not in TERMINAL_RUN_STATUSES:
            reason = (
                f"is {claim.status} and claims {where}, which the history never admitted"
                " (no open occurrence at that instant)"
            )
        elif claim.origin == "backfill" or (
            claim.origin == "trigger" and (last_trigger is None or claim.instant <= last_trigger)
        ):
            continue
        elif claim.origin == "trigger":
            reason = (
                f"claims {where}, which the history never admitted (its last trigger is"
                f" {_iso(last_trigger) if last_trigger is not None else 'none'})"
            )
        elif last_decided is None or claim.instant > last_decided:
            last = _iso(last_decided) if last_decided is not None else "none"
            reason = (
                f"claims {where}, which the history never admitted (its last decision is {last})"
            )
        else:
            continue
        problems.append(
            RecoveryProblem("run", claim.run_id, "origin", f"run {claim.run_id} {reason}")
        )
    return problems


def recovered_run(
    schedule_id: str,
    occurrence: OpenAdmission,
    run: Mapping[str, Any] | None,
    *,
    history_name: str,
) -> RunVerdict:
    """Check an open occurrence against its run record (`run`, None when the
    run store has none) and say how a start takes it. `history_name` is how
    diagnostics name the history (its file, for an operator)."""
    instant, run_id = occurrence.instant, occurrence.run_id
    if run_id is None:
        return RunVerdict(
            RecoveredRun(instant=instant, run_id=None, status="admitted", origin=occurrence.origin)
        )
    kept = RecoveredRun(
        instant=instant,
        run_id=run_id,
        status=occurrence.status,  # type: ignore[arg-type]
        origin=occurrence.origin,
    )
    seq = f"seq {occurrence.seq}"
    if run is None:
        if occurrence.status == "admitted":
            # The crash came between the admitted row and the run record.
            return RunVerdict(
                RecoveredRun(
                    instant=instant, run_id=None, status="admitted", origin=occurrence.origin
                ),
                orphan=run_id,
            )
        return RunVerdict(
            kept,
            RecoveryProblem(
                "history",
                run_id,
                seq,
                f"the occurrence's run {run_id} was {occurrence.status} but has {NO_RUN_RECORD}",
            ),
        )
    origin = run.get("origin")
    origin = origin if isinstance(origin, Mapping) else {}
    claimed = origin.get("instant")
    if (
        origin.get("kind") != "schedule"
        or origin.get("schedule_id") != schedule_id
        or not isinstance(claimed, str)
        or _instant_or_none(claimed) != instant
        or origin.get("action", "schedule") != occurrence.origin
    ):
        return RunVerdict(
            kept,
            RecoveryProblem(
                "run",
                run_id,
                "origin",
                f"run {run_id} names origin {dict(origin)!r}, but {seq} of {history_name}"
                f" admitted it for {schedule_id} at {_iso(instant)}",
            ),
        )
    status = run["status"]
    if status == "admitted" and occurrence.status != "admitted":
        return RunVerdict(
            kept,
            RecoveryProblem(
                "run",
                run_id,
                "status",
                f"run {run_id} is admitted, but the history saw it {occurrence.status}"
                " (its status went backwards)",
            ),
        )
    error = run.get("error")
    message = error.get("message") if isinstance(error, Mapping) else None
    return RunVerdict(
        RecoveredRun(
            instant=instant,
            run_id=run_id,
            status=status,
            message=message,
            never_started=status == "admitted",
            origin=occurrence.origin,
        )
    )


def claimed_origin(origin: Mapping[str, Any]) -> Origin | None:
    """Who opened the occurrence a run's origin claims (its `action`, absent
    for the calendar), or None when that is not one of the origins."""
    action = origin.get("action", "schedule")
    return action if isinstance(action, str) and action in ORIGINS else None  # type: ignore[return-value]
