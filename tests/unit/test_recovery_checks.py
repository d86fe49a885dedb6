"""What a start checks between the history and the run records, from tables:
no files, no server (`core/recovery_checks.py`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from core.events import RecoveredRun
from core.recovery_checks import (
    CheckedClaims,
    OpenAdmission,
    RecoveryProblem,
    RunClaim,
    RunVerdict,
    claim_problems,
    claims_since,
    recovered_run,
)

T10 = datetime(2026, 3, 2, 10, tzinfo=UTC)
T11 = datetime(2026, 3, 2, 11, tzinfo=UTC)
T12 = datetime(2026, 3, 2, 12, tzinfo=UTC)

# (name, claims, open occurrences {instant: run id}, last decided, expected (run id, reason part))
CLAIMS: list[
    tuple[str, list[RunClaim], dict[datetime, str | None], datetime | None, list[tuple[str, str]]]
] = [
    (
        "the admitted run claims its occurrence",
        [RunClaim("run-1", T10, "running")],
        {T10: "run-1"},
        T10,
        [],
    ),
    (
        "an open occurrence not yet given a run id",
        [RunClaim("run-1", T10, "running")],
        {T10: None},
        T10,
        [],
    ),
    (
        "a finished run of an older decided instant",
        [RunClaim("run-1", T10, "completed")],
        {},
        T11,
        [],
    ),
    (
        "two runs claim one occurrence",
        [RunClaim("run-1", T10, "running"), RunClaim("run-2", T10, "running")],
        {T10: "run-1"},
        T10,
        [("run-2", "also claimed by run run-1")],
    ),
    (
        "the history admitted another run",
        [RunClaim("run-2", T10, "running")],
        {T10: "run-1"},
        T10,
        [("run-2", "which the history admitted as run run-1")],
    ),
    (
        "an active run with no open occurrence",
        [RunClaim("run-1", T10, "running")],
        {},
        T11,
        [("run-1", "is running and claims occurrence 2026-03-02T10:00:00Z of s")],
    ),
    (
        "a finished run after the last decision",
        [RunClaim("run-1", T12, "completed")],
        {},
        T11,
        [("run-1", "its last decision is 2026-03-02T11:00:00Z")],
    ),
    (
        "a finished run of a schedule that decided nothing",
        [RunClaim("run-1", T10, "failed")],
        {},
        None,
        [("run-1", "its last decision is none")],
    ),
]


@pytest.mark.parametrize(
    ("name", "claims", "open_runs", "last", "expected"), CLAIMS, ids=[c[0] for c in CLAIMS]
)
def test_claims_against_the_history(
    name: str,
    claims: list[RunClaim],
    open_runs: dict[datetime, str | None],
    last: datetime | None,
    expected: list[tuple[str, str]],
) -> None:
    problems = claim_problems("s", claims, open_runs, last)
    assert [(p.run_id, p.witness, p.record) for p in problems] == [
        (run_id, "run", "origin") for run_id, _ in expected
    ]
    for problem, (run_id, part) in zip(problems, expected, strict=True):
        assert problem.reason.startswith(f"run {run_id} ") and part in problem.reason, problem


def _origin(schedule_id: str = "s", instant: str = "2026-03-02T10:00:00Z") -> dict[str, Any]:
    return {"kind": "schedule", "schedule_id": schedule_id, "instant": instant}


def _record(status: str, **extra: Any) -> dict[str, Any]:
    return {"run_id": "run-1", "status": status, "origin": _origin(), **extra}


RUNNING_ROW = OpenAdmission(instant=T10, run_id="run-1", status="running", seq=3)
ADMITTED_ROW = OpenAdmission(instant=T10, run_id="run-1", status="admitted", seq=2)
KEPT_RUNNING = RecoveredRun(instant=T10, run_id="run-1", status="running")

# (name, history's open occurrence, the run record or None, expected verdict)
RUNS: list[tuple[str, OpenAdmission, dict[str, Any] | None, RunVerdict]] = [
    (
        "admitted before a run id was given",
        OpenAdmission(instant=T10, run_id=None, status="admitted", seq=2),
        None,
        RunVerdict(RecoveredRun(instant=T10, run_id=None, status="admitted")),
    ),
    (
        "admitted, the crash came before the run record",
        ADMITTED_ROW,
        None,
        RunVerdict(RecoveredRun(instant=T10, run_id=None, status="admitted"), orphan="run-1"),
    ),
    (
        "running in history, the run record is missing",
        RUNNING_ROW,
        None,
        RunVerdict(
            KEPT_RUNNING,
            RecoveryProblem(
                "history",
                "run-1",
                "seq 3",
                "the occurrence's run run-1 was running but has no run record",
            ),
        ),
    ),
    (
        "the run names another schedule",
        RUNNING_ROW,
        {**_record("running"), "origin": _origin("other")},
        RunVerdict(
            KEPT_RUNNING,
            RecoveryProblem(
                "run",
                "run-1",
                "origin",
                "run run-1 names origin {'kind': 'schedule', 'schedule_id': 'other', 'instant':"
                " '2026-03-02T10:00:00Z'}, but seq 3 of h.jsonl admitted it for s at"
                " 2026-03-02T10:00:00Z",
            ),
        ),
    ),
    (
        "the run names an instant that is not one",
        RUNNING_ROW,
        {**_record("running"), "origin": _origin(instant="10 o'clock")},
        RunVerdict(
            KEPT_RUNNING,
            RecoveryProblem(
                "run",
                "run-1",
                "origin",
                "run run-1 names origin {'kind': 'schedule', 'schedule_id': 's', 'instant':"
                ' "10 o\'clock"}, but seq 3 of h.jsonl admitted it for s at 2026-03-02T10:00:00Z',
            ),
        ),
    ),
    (
        "a manual run",
        RUNNING_ROW,
        {**_record("running"), "origin": {"kind": "manual"}},
        RunVerdict(
            KEPT_RUNNING,
            RecoveryProblem(
                "run",
                "run-1",
                "origin",
                "run run-1 names origin {'kind': 'manual'}, but seq 3 of h.jsonl admitted it"
                " for s at 2026-03-02T10:00:00Z",
            ),
        ),
    ),
    (
        "the run's status went backwards",
        RUNNING_ROW,
        _record("admitted"),
        RunVerdict(
            KEPT_RUNNING,
            RecoveryProblem(
                "run",
                "run-1",
                "status",
                "run run-1 is admitted, but the history saw it running (its status went backwards)",
            ),
        ),
    ),
    (
        "admitted and never started",
        ADMITTED_ROW,
        _record("admitted"),
        RunVerdict(
            RecoveredRun(instant=T10, run_id="run-1", status="admitted", never_started=True)
        ),
    ),
    (
        "failed while the history last saw it running, with its message",
        RUNNING_ROW,
        _record("failed", error={"message": "abandoned: the process died"}),
        RunVerdict(
            RecoveredRun(
                instant=T10, run_id="run-1", status="failed", message="abandoned: the process died"
            )
        ),
    ),
    (
        "the origin's instant written with an offset",
        RUNNING_ROW,
        {**_record("completed"), "origin": _origin(instant="2026-03-02T11:00:00+01:00")},
        RunVerdict(RecoveredRun(instant=T10, run_id="run-1", status="completed")),
    ),
]


@pytest.mark.parametrize(
    ("name", "occurrence", "record", "expected"), RUNS, ids=[r[0] for r in RUNS]
)
def test_an_open_occurrence_against_its_run_record(
    name: str, occurrence: OpenAdmission, record: dict[str, Any] | None, expected: RunVerdict
) -> None:
    assert recovered_run("s", occurrence, record, history_name="h.jsonl") == expected


@pytest.mark.parametrize(
    ("checked", "since"),
    [
        # A checkpoint said where the records stood, every history as it saw
        # it or appended to: only the runs written since (and the unfinished).
        (CheckedClaims("run-log@3:4096", histories_kept=True), "run-log@3:4096"),
        # A history rewritten, shortened, replaced, or a schedule it did not
        # describe: every run.
        (CheckedClaims("run-log@3:4096", histories_kept=False), None),
        # No checkpoint, or one that did not say: every run.
        (CheckedClaims(None, histories_kept=True), None),
        (CheckedClaims(None, histories_kept=False), None),
    ],
)
def test_a_start_checks_the_runs_since_the_checkpoint_only_when_every_history_is_kept(
    checked: CheckedClaims, since: str | None
) -> None:
    assert claims_since(checked) == since
