"""decide's protocol: what the caller may send, and the errors for everything else."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import pytest

from core.commands import LogWarning, PersistRuntime, RecordOccurrence
from core.decide import decide, next_wakeup
from core.errors import CoreMisuse, InvalidInput
from core.events import (
    CapacityChanged,
    Event,
    OccurrenceAdmitted,
    PreflightFailed,
    RecordsContradicted,
    RunStatusChanged,
    ScheduleCreated,
    ScheduleDeleted,
    SchedulePaused,
    ScheduleRecovered,
    ScheduleResumed,
    ScheduleUpdated,
)
from core.state import SchedulerState, initial_state, schedule_view, slots_in_use
from tests.property.builders import at, cron, run, started_state

# Events that name schedule "ghost", which no state below knows.
UNKNOWN_SCHEDULE: list[tuple[str, Event]] = [
    ("updated", ScheduleUpdated(definition=cron("ghost"), revision=2, at=at(10))),
    ("paused", SchedulePaused(schedule_id="ghost", at=at(10))),
    ("resumed", ScheduleResumed(schedule_id="ghost", at=at(10))),
    ("deleted", ScheduleDeleted(schedule_id="ghost", at=at(10))),
    ("admitted", OccurrenceAdmitted(schedule_id="ghost", instant=at(10), run_id="run-1")),
    ("preflight", PreflightFailed(schedule_id="ghost", instant=at(10), reason="x")),
    (
        "contradicted",
        RecordsContradicted(schedule_id="ghost", file="f", record="r", reason="why"),
    ),
]


@pytest.mark.parametrize(("name", "event"), UNKNOWN_SCHEDULE, ids=[n for n, _ in UNKNOWN_SCHEDULE])
def test_an_event_about_an_unknown_schedule_is_core_misuse(name: str, event: Event) -> None:
    state = started_state(cron("r"))
    with pytest.raises(CoreMisuse) as caught:
        decide(state, at(10), [event])
    message = str(caught.value)
    assert "'ghost'" in message
    assert type(event).__name__ in message
    assert caught.value.data == {"schedule_id": "ghost", "event": type(event).__name__}


def _admitted_state() -> tuple[SchedulerState, datetime]:
    state = started_state(cron("r"))
    state, _ = run(state, at(10))
    state, _ = run(
        state, at(10), OccurrenceAdmitted(schedule_id="r", instant=at(10), run_id="run-1")
    )
    return state, at(10)


# Events the state knows the schedule of, but which break the protocol.
MISUSE: list[tuple[str, Callable[[], Event], str]] = [
    (
        "duplicate create",
        lambda: ScheduleCreated(definition=cron("r"), at=at(10)),
        "already exists",
    ),
    (
        "stale revision",
        lambda: ScheduleUpdated(definition=cron("r"), revision=1, at=at(10)),
        "does not follow revision 1",
    ),
    (
        "status admitted",
        lambda: RunStatusChanged(
            schedule_id="r", instant=at(10), run_id="run-1", status="admitted"
        ),
        "OccurrenceAdmitted",
    ),
    (
        "admitted twice with another id",
        lambda: OccurrenceAdmitted(schedule_id="r", instant=at(10), run_id="run-2"),
        "admitted as run 'run-1'",
    ),
    (
        "admitted without admission",
        lambda: OccurrenceAdmitted(schedule_id="r", instant=at(12), run_id="run-2"),
        "no admission",
    ),
    (
        "preflight after admission",
        lambda: PreflightFailed(schedule_id="r", instant=at(10), reason="x"),
        "no admission",
    ),
]


@pytest.mark.parametrize(("name", "make", "detail"), MISUSE, ids=[m[0] for m in MISUSE])
def test_protocol_breaches_name_the_state_and_the_event(
    name: str, make: Callable[[], Event], detail: str
) -> None:
    state, now = _admitted_state()
    event = make()
    with pytest.raises(CoreMisuse) as caught:
        decide(state, now, [event])
    message = str(caught.value)
    assert detail in message
    assert type(event).__name__ in message
    assert "revision 1" in message  # the schedule's state is described


# Run reports the state cannot place: stale news from the world, not misuse.
UNPLACED_REPORTS: list[tuple[str, RunStatusChanged, str]] = [
    (
        "unknown schedule",
        RunStatusChanged(schedule_id="ghost", instant=at(10), run_id="run-1", status="failed"),
        "schedule 'ghost' is unknown",
    ),
    (
        "no active run at the instant",
        RunStatusChanged(schedule_id="r", instant=at(11), run_id="run-1", status="running"),
        "no active run is known for 2024-01-15T11:00:00Z",
    ),
    (
        "another run id",
        RunStatusChanged(schedule_id="r", instant=at(10), run_id="run-9", status="completed"),
        "is 'run-1', not 'run-9'",
    ),
]


@pytest.mark.parametrize(
    ("name", "event", "detail"), UNPLACED_REPORTS, ids=[u[0] for u in UNPLACED_REPORTS]
)
def test_a_run_report_the_state_cannot_place_is_logged_and_ignored(
    name: str, event: RunStatusChanged, detail: str
) -> None:
    """The other events of the call still apply: a stale report must not cost
    every other schedule its round (the shell used to bisect the call)."""
    state, now = _admitted_state()
    good = RunStatusChanged(schedule_id="r", instant=at(10), run_id="run-1", status="running")
    after, commands = decide(state, now, [event, good])
    warnings = [c for c in commands if isinstance(c, LogWarning)]
    assert len(warnings) == 1 and detail in warnings[0].message, warnings
    assert "RunStatusChanged" in warnings[0].message
    alone, alone_commands = decide(state, now, [good])
    assert schedule_view(after, "r") == schedule_view(alone, "r")
    assert [c for c in commands if not isinstance(c, LogWarning)] == list(alone_commands)


def _report(status: str, run_id: str = "run-1") -> RunStatusChanged:
    return RunStatusChanged(schedule_id="r", instant=at(10), run_id=run_id, status=status)  # type: ignore[arg-type]


def _recorded(commands: tuple[object, ...]) -> list[tuple[str, str | None]]:
    return [(c.status, c.run_id) for c in commands if isinstance(c, RecordOccurrence)]


@pytest.mark.parametrize("later", ["completed", "failed", "interrupted", "running"])
def test_a_running_report_followed_by_another_on_its_run_is_not_recorded(later: str) -> None:
    """Rule N: a run that started and stopped between two calls costs one
    history row, the one that says where it is; the state is the one both
    reports in two calls would have left."""
    state, now = _admitted_state()
    together, commands = decide(state, now, [_report("running"), _report(later)])
    assert _recorded(commands) == [(later, "run-1")]
    one_by_one, _ = run(state, now, _report("running"))
    one_by_one, _ = run(one_by_one, now, _report(later))
    assert schedule_view(together, "r") == schedule_view(one_by_one, "r")
    assert slots_in_use(together) == slots_in_use(one_by_one)


def test_a_running_report_is_recorded_when_nothing_about_its_run_follows() -> None:
    """Alone, or followed by reports on other runs or other instants."""
    state, now = _admitted_state()
    _, commands = decide(state, now, [_report("running")])
    assert _recorded(commands) == [("running", "run-1")]
    stale = RunStatusChanged(schedule_id="r", instant=at(11), run_id="run-1", status="completed")
    _, commands = decide(state, now, [_report("running"), stale, _report("running", "run-9")])
    assert _recorded(commands) == [("running", "run-1")]


def test_a_blocked_schedule_gets_no_runtime_record() -> None:
    """Its files stay as they were found, whatever its watermark does: decide
    emits no PersistRuntime for it (the shell used to drop them)."""
    state = started_state(cron("r"))
    state, _ = run(
        state, at(10), RecordsContradicted(schedule_id="r", file="f", record="r", reason="why")
    )
    assert schedule_view(state, "r").blocked is not None
    later, commands = decide(state, at(13), [SchedulePaused(schedule_id="r", at=at(12))])
    assert schedule_view(later, "r").paused
    assert not [c for c in commands if isinstance(c, PersistRuntime)], commands


@pytest.mark.parametrize("event_type", [SchedulePaused, ScheduleResumed])
def test_pausing_or_resuming_a_deleted_schedule_is_misuse(event_type: type[Event]) -> None:
    state = started_state(cron("r"))
    state, _ = run(state, at(9, 40), ScheduleDeleted(schedule_id="r", at=at(9, 40)))
    with pytest.raises(CoreMisuse, match="deleted"):
        run(state, at(9, 50), event_type(schedule_id="r", at=at(9, 50)))  # type: ignore[call-arg]


def test_updating_a_deleted_schedule_is_misuse() -> None:
    state = started_state(cron("r"))
    state, _ = run(state, at(9, 40), ScheduleDeleted(schedule_id="r", at=at(9, 40)))
    with pytest.raises(CoreMisuse, match="deleted"):
        run(state, at(9, 50), ScheduleUpdated(definition=cron("r"), revision=2, at=at(9, 50)))


def test_a_deleted_id_is_never_reused() -> None:
    state = started_state(cron("r"))
    state, _ = run(state, at(9, 40), ScheduleDeleted(schedule_id="r", at=at(9, 40)))
    with pytest.raises(CoreMisuse, match="never reused"):
        run(state, at(9, 50), ScheduleCreated(definition=cron("r"), at=at(9, 50)))


def test_recovering_a_known_schedule_is_misuse() -> None:
    state = started_state(cron("r"))
    event = ScheduleRecovered(
        definition=cron("r"),
        revision=1,
        created_at=at(9),
        watermark=None,
        last_decided_instant=None,
        held=None,
        paused=False,
        deleted=False,
    )
    with pytest.raises(CoreMisuse, match="already recovered"):
        run(state, at(10), event)


def test_a_naive_now_is_misuse() -> None:
    with pytest.raises(CoreMisuse, match="now must be a timezone-aware"):
        decide(initial_state(max_concurrent_runs=1), datetime(2024, 1, 15, 10), [])


def test_something_that_is_not_an_event_is_misuse() -> None:
    with pytest.raises(CoreMisuse, match="not a known event type"):
        decide(initial_state(max_concurrent_runs=1), at(10), ["created"])  # type: ignore[list-item]


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "4"])
def test_capacity_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        initial_state(max_concurrent_runs=bad)  # type: ignore[arg-type]
    assert [p.field for p in caught.value.problems] == ["max_concurrent_runs"]
    with pytest.raises(InvalidInput):
        decide(
            initial_state(max_concurrent_runs=1),
            at(10),
            [CapacityChanged(max_concurrent_runs=bad)],  # type: ignore[arg-type]
        )


def test_a_failed_call_leaves_the_old_state_usable() -> None:
    state = started_state(cron("r"))
    with pytest.raises(CoreMisuse):
        decide(
            state,
            at(10),
            [
                SchedulePaused(schedule_id="r", at=at(10)),
                SchedulePaused(schedule_id="ghost", at=at(10)),
            ],
        )
    assert not schedule_view(state, "r").paused
    state, commands = run(state, at(10))
    assert slots_in_use(state) == 1
    assert next_wakeup(state) == at(11)
    assert commands


def test_schedule_view_of_an_unknown_schedule_is_misuse() -> None:
    with pytest.raises(CoreMisuse, match="'nope'"):
        schedule_view(initial_state(max_concurrent_runs=1), "nope")


def test_initial_state_has_nothing_to_do() -> None:
    state = initial_state(max_concurrent_runs=3)
    assert next_wakeup(state) is None
    assert slots_in_use(state) == 0
    new, commands = decide(state, at(10), [])
    assert commands == ()
    assert next_wakeup(new) is None
