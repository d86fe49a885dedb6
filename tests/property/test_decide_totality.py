"""Totality: from any reachable state, any sequence of events gives either a
valid state or a domain error (never another exception), and a failed call
leaves the old state intact."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from core.decide import decide
from core.errors import CoreMisuse, InvalidInput, SchedulingError
from core.events import (
    CapacityChanged,
    Event,
    OccurrenceAdmitted,
    PreflightFailed,
    RecordsContradicted,
    RecoveredRun,
    RunStatusChanged,
    ScheduleCreated,
    ScheduleDeleted,
    SchedulePaused,
    ScheduleRecovered,
    ScheduleResumed,
    ScheduleUpdated,
)
from core.state import SchedulerState
from tests.property.invariants import check_state
from tests.property.shell_model import ShellModel
from tests.property.strategies import BASE, clock_steps, definitions

IDS = ("a", "b", "c", "ghost")
STATUSES = ("admitted", "running", "interrupted", "completed", "failed", "exhausted")


def instants() -> st.SearchStrategy[datetime]:
    return st.builds(
        lambda minutes: BASE + timedelta(minutes=minutes),
        st.integers(-120, 24 * 60).map(lambda m: m - m % 5),
    )


@st.composite
def any_event(draw: st.DrawFn) -> Event:
    sid = draw(st.sampled_from(IDS))
    at = draw(instants())
    kind = draw(st.integers(0, 11))
    if kind == 0:
        return ScheduleCreated(definition=draw(definitions(sid, at)), at=at)
    if kind == 1:
        return ScheduleUpdated(
            definition=draw(definitions(sid, at)), revision=draw(st.integers(0, 4)), at=at
        )
    if kind == 2:
        return SchedulePaused(schedule_id=sid, at=at)
    if kind == 3:
        return ScheduleResumed(schedule_id=sid, at=at)
    if kind == 4:
        return ScheduleDeleted(schedule_id=sid, at=at)
    run_id = draw(st.sampled_from(["run-1", "run-2", "run-3", "run-9"]))
    if kind == 5:
        return OccurrenceAdmitted(schedule_id=sid, instant=at, run_id=run_id)
    if kind == 6:
        return PreflightFailed(schedule_id=sid, instant=at, reason="no")
    if kind == 7:
        return RunStatusChanged(
            schedule_id=sid, instant=at, run_id=run_id, status=draw(st.sampled_from(STATUSES))
        )
    if kind == 8:
        return CapacityChanged(max_concurrent_runs=draw(st.integers(-1, 3)))
    if kind == 9:
        return RecordsContradicted(schedule_id=sid, file="f.jsonl", record="3", reason="torn")
    runs = draw(
        st.lists(
            st.builds(
                RecoveredRun,
                instant=instants(),
                run_id=st.sampled_from([None, "run-1", "run-2"]),
                status=st.sampled_from(STATUSES),
                never_started=st.booleans(),
            ),
            max_size=3,
        )
    )
    fields: dict[str, Any] = {
        "definition": draw(definitions(sid, at)),
        "revision": draw(st.integers(0, 3)),
        "created_at": at,
        "watermark": draw(st.none() | instants()),
        "last_decided_instant": draw(st.none() | instants()),
        "held": draw(st.none() | instants()),
        "paused": draw(st.booleans()),
        "deleted": draw(st.booleans()),
        "active_runs": tuple(runs),
        "blocked_reason": draw(st.none() | st.just("bad record")),
        "waiting": tuple(draw(st.lists(instants(), max_size=2))),
    }
    return ScheduleRecovered(**fields)


@st.composite
def reachable_state(draw: st.DrawFn) -> SchedulerState:
    """A state reached through the shell model with a few ordinary steps."""
    model = ShellModel(capacity=draw(st.integers(1, 3)))
    now = BASE
    for sid in draw(st.lists(st.sampled_from(IDS[:3]), unique=True, max_size=3)):
        model.step(now, [ScheduleCreated(definition=draw(definitions(sid, now)), at=now)])
    for _ in range(draw(st.integers(0, 4))):
        now += draw(clock_steps)
        model.step(now, [])
    return model.state


@settings(max_examples=150, deadline=None)
@given(
    state=reachable_state(),
    batches=st.lists(st.lists(any_event(), max_size=4), min_size=1, max_size=4),
    steps=st.lists(clock_steps, min_size=4, max_size=4),
    naive_first=st.integers(0, 20).map(lambda n: n == 0),
)
def test_decide_is_total(
    state: SchedulerState, batches: list[list[Event]], steps: list[timedelta], naive_first: bool
) -> None:
    now = state.last_now or BASE
    for index, (batch, step) in enumerate(zip(batches, steps, strict=False)):
        now += step
        call_now = now.replace(tzinfo=None) if naive_first and index == 0 else now
        snapshot = repr(state)
        try:
            new, commands = decide(state, call_now, batch)
        except (CoreMisuse, InvalidInput) as error:
            assert isinstance(error, SchedulingError)
            assert error.message
            assert repr(state) == snapshot  # a failed call changes nothing
            check_state(state)
            continue
        assert repr(state) == snapshot
        check_state(new)
        assert all(type(c).__module__ == "core.commands" for c in commands)
        state = new
