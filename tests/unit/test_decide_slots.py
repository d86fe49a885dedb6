"""Execution slots: who holds one, when it frees, who gets it next."""

from __future__ import annotations

from core.commands import AdmitOccurrence
from core.events import (
    CapacityChanged,
    OccurrenceAdmitted,
    PreflightFailed,
    RunStatusChanged,
    ScheduleCreated,
)
from core.state import schedule_view, slots_in_use
from tests.property.builders import at, cron, rows, run, started_state


def admitted(commands: tuple[object, ...]) -> list[tuple[str, object]]:
    return [(c.schedule_id, c.instant) for c in commands if isinstance(c, AdmitOccurrence)]


def status(sid: str, hour: int, run_id: str, value: str, minute: int = 0) -> RunStatusChanged:
    return RunStatusChanged(
        schedule_id=sid,
        instant=at(hour, minute),
        run_id=run_id,
        status=value,  # type: ignore[arg-type]
    )


def test_a_slot_is_held_from_admission_until_the_first_stop() -> None:
    state = started_state(cron("r"), capacity=2)
    state, _ = run(state, at(10))
    assert slots_in_use(state) == 1  # in flight, before the shell answers
    state, _ = run(state, at(10), OccurrenceAdmitted(schedule_id="r", instant=at(10), run_id="a"))
    state, _ = run(state, at(10, 1), status("r", 10, "a", "running"))
    assert slots_in_use(state) == 1
    state, _ = run(state, at(10, 2), status("r", 10, "a", "interrupted"))
    assert slots_in_use(state) == 0
    assert schedule_view(state, "r").active == {at(10): ("a", "interrupted")}
    state, _ = run(state, at(10, 3), status("r", 10, "a", "running"))
    assert slots_in_use(state) == 0  # a resume never takes a slot
    state, _ = run(state, at(10, 4), status("r", 10, "a", "interrupted"))
    state, _ = run(state, at(10, 5), status("r", 10, "a", "exhausted"))
    assert slots_in_use(state) == 0
    assert schedule_view(state, "r").active == {}


def test_a_preflight_failure_frees_the_slot_for_the_next_in_line() -> None:
    state = started_state(cron("a"), cron("b"), capacity=1)
    state, commands = run(state, at(10))
    assert admitted(commands) == [("a", at(10))]
    assert schedule_view(state, "b").waiting == (at(10),)
    state, commands = run(
        state, at(10), PreflightFailed(schedule_id="a", instant=at(10), reason="gone")
    )
    # The shell writes the preflight-rejected row itself, in command order.
    assert rows(commands) == []
    assert admitted(commands) == [("b", at(10))]
    assert slots_in_use(state) == 1


def test_late_waiting_instants_are_skipped_when_next_looked_at() -> None:
    # a holds the only slot; b waits from 10:00, c from 10:30. By 10:30 b is
    # long past its allowance: skipped. When a finishes, c (on time) runs.
    state = started_state(cron("a"), cron("b"), cron("c", "30 * * * *"), capacity=1)
    state, commands = run(state, at(10))
    assert admitted(commands) == [("a", at(10))]
    state, _ = run(state, at(10), OccurrenceAdmitted(schedule_id="a", instant=at(10), run_id="1"))
    state, commands = run(state, at(10, 30))
    assert rows(commands) == [("b", at(10), "skipped-misfire")]
    assert schedule_view(state, "c").waiting == (at(10, 30),)
    state, commands = run(state, at(10, 30, 30), status("a", 10, "1", "completed"))
    assert admitted(commands) == [("c", at(10, 30))]


def test_oldest_first_among_on_time_candidates() -> None:
    allowance = {"lateness_allowance_s": 3600}
    state = started_state(
        cron("a", **allowance),
        cron("b", "15 * * * *", **allowance),
        cron("c", "5 * * * *", **allowance),
        capacity=1,
    )
    state, commands = run(state, at(10))
    assert admitted(commands) == [("a", at(10))]
    state, _ = run(state, at(10), OccurrenceAdmitted(schedule_id="a", instant=at(10), run_id="1"))
    state, _ = run(state, at(10, 5))
    state, _ = run(state, at(10, 15))
    state, commands = run(state, at(10, 20), status("a", 10, "1", "completed"))
    assert admitted(commands) == [("c", at(10, 5))]
    state, _ = run(
        state, at(10, 20), OccurrenceAdmitted(schedule_id="c", instant=at(10, 5), run_id="2")
    )
    state, commands = run(state, at(10, 25), status("c", 10, "2", "failed", minute=5))
    assert admitted(commands) == [("b", at(10, 15))]


def test_an_instant_due_now_queues_behind_an_older_waiting_one() -> None:
    # b waits since 10:00. At 10:01 a slot frees just as c's 10:01 comes due:
    # b (older) gets the slot, c waits.
    allowance = {"lateness_allowance_s": 120}
    state = started_state(
        cron("a", **allowance),
        cron("b", **allowance),
        cron("c", "1 * * * *", **allowance),
        capacity=1,
    )
    state, commands = run(state, at(10))
    assert admitted(commands) == [("a", at(10))]
    state, _ = run(state, at(10), OccurrenceAdmitted(schedule_id="a", instant=at(10), run_id="1"))
    state, commands = run(state, at(10, 1), status("a", 10, "1", "completed"))
    assert admitted(commands) == [("b", at(10))]
    assert schedule_view(state, "c").waiting == (at(10, 1),)


def test_lowering_capacity_cancels_nothing_and_blocks_admission() -> None:
    state = started_state(cron("a"), cron("b"), capacity=2)
    state, commands = run(state, at(10))
    assert len(admitted(commands)) == 2
    state, commands = run(state, at(10, 30), CapacityChanged(max_concurrent_runs=1))
    assert commands == ()
    assert slots_in_use(state) == 2
    state, commands = run(state, at(11))
    assert admitted(commands) == []  # both still active (overlap) anyway
    assert rows(commands) == [("a", at(11), "skipped-overlap"), ("b", at(11), "skipped-overlap")]


def test_raising_capacity_admits_waiting_instants_at_once() -> None:
    state = started_state(cron("a"), cron("b"), cron("c"), capacity=1)
    state, commands = run(state, at(10))
    assert admitted(commands) == [("a", at(10))]
    state, commands = run(state, at(10, 0, 20), CapacityChanged(max_concurrent_runs=3))
    assert admitted(commands) == [("b", at(10)), ("c", at(10))]
    assert slots_in_use(state) == 3


def test_an_admission_that_takes_the_last_overlap_place_skips_the_instants_behind_it() -> None:
    # a holds the only slot. m fires every minute with a 2-minute allowance:
    # 10:01 and 10:02 wait for the slot (in order: no row may precede 10:01's).
    state = started_state(cron("a"), capacity=1)
    state, _ = run(state, at(10))
    minutely = cron("m", "* * * * *", lateness_allowance_s=120)
    state, _ = run(state, at(10, 0, 30), ScheduleCreated(definition=minutely, at=at(10, 0, 30)))
    state, commands = run(state, at(10, 1))
    assert schedule_view(state, "m").waiting == (at(10, 1),)
    state, commands = run(state, at(10, 2))
    assert rows(commands) == []
    assert schedule_view(state, "m").waiting == (at(10, 1), at(10, 2))
    state, commands = run(
        state,
        at(10, 2, 30),
        OccurrenceAdmitted(schedule_id="a", instant=at(10), run_id="1"),
        status("a", 10, "1", "completed"),
    )
    # 10:01 takes the slot and m's one place, so 10:02 finds the place taken.
    assert admitted(commands) == [("m", at(10, 1))]
    assert rows(commands) == [("a", at(10), "completed"), ("m", at(10, 2), "skipped-overlap")]
    assert schedule_view(state, "m").waiting == ()
