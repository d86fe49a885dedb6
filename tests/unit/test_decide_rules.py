"""Rules of decide that the decision tables do not spell out row by row."""

from __future__ import annotations

from datetime import timedelta

from core.commands import AdmitOccurrence, LogWarning, PersistRuntime, RecordOccurrence
from core.decide import decide, next_due, next_wakeup
from core.events import (
    OccurrenceAdmitted,
    RecordsContradicted,
    RunStatusChanged,
    ScheduleCreated,
    ScheduleDeleted,
    SchedulePaused,
    ScheduleResumed,
    ScheduleUpdated,
)
from core.state import initial_state, schedule_view
from tests.property.builders import at, cron, kinds, oneshot, persisted, rows, run, started_state


def test_admission_carries_revision_deployment_inputs_and_budget() -> None:
    definition = cron(
        "r",
        "0 * * * *",
        "Europe/Berlin",
        inputs={
            "when": {"$bind": "occurrence.instant"},
            "local": {"$bind": "occurrence.local_instant"},
            "rev": {"$bind": "schedule.revision"},
            "fixed": [1, "two"],
        },
        max_steps=7,
    )
    state = started_state(definition)
    _, commands = run(state, at(10))
    admit = commands[0]
    assert admit == AdmitOccurrence(
        schedule_id="r",
        instant=at(10),
        revision=1,
        deployment_id="report.default",
        inputs={
            "when": "2024-01-15T10:00:00Z",
            "local": "2024-01-15T11:00:00+01:00",
            "rev": 1,
            "fixed": [1, "two"],
        },
        max_steps=7,
    )


def test_an_update_applies_to_later_admissions_only() -> None:
    state = started_state(cron("r", overlap="parallel", max_active_runs=5))
    state, first = run(state, at(10))
    updated = cron("r", "30 * * * *", overlap="parallel", max_active_runs=5, max_steps=3)
    state, commands = run(
        state, at(10, 10), ScheduleUpdated(definition=updated, revision=2, at=at(10, 10))
    )
    assert commands == (PersistRuntime(schedule_id="r", watermark=at(10, 10), held=None),)
    state, commands = run(state, at(10, 30))
    admit = commands[0]
    assert isinstance(admit, AdmitOccurrence)
    assert (admit.instant, admit.revision, admit.max_steps) == (at(10, 30), 2, 3)
    assert schedule_view(state, "r").active.keys() == {at(10), at(10, 30)}
    assert isinstance(first[0], AdmitOccurrence) and first[0].revision == 1


def test_a_held_candidate_waiting_from_before_a_downtime_is_superseded() -> None:
    state = started_state(cron("r", misfire="latest"))
    state, _ = run(state, at(10))
    state, _ = run(state, at(11))
    assert schedule_view(state, "r").held == at(11)
    state, commands = run(state, at(15, 30))
    recorded = [c for c in commands if isinstance(c, RecordOccurrence)]
    assert [(c.instant, c.status, c.count, c.first_instant) for c in recorded] == [
        (at(11), "superseded", 1, None),
        (at(14), "coalesced", 3, at(12)),
    ]
    assert schedule_view(state, "r").held == at(15)


def test_a_held_candidate_missed_earlier_in_the_same_catch_up_is_coalesced() -> None:
    # The downtime is split by an update replayed at 13:30.
    definition = cron("r", misfire="latest", lateness_allowance_s=30)
    state = started_state(definition, created=at(10, 30))
    updated = cron("r", misfire="latest", lateness_allowance_s=45)
    state, commands = run(
        state, at(15, 30), ScheduleUpdated(definition=updated, revision=2, at=at(13, 30))
    )
    recorded = [c for c in commands if isinstance(c, RecordOccurrence)]
    assert [(c.instant, c.status, c.count) for c in recorded] == [
        (at(12), "coalesced", 2),
        (at(13), "coalesced", 1),
        (at(14), "coalesced", 1),
    ]
    assert kinds(commands)[-2:] == ["AdmitOccurrence", "PersistRuntime"]
    assert commands[-2] == AdmitOccurrence(
        schedule_id="r",
        instant=at(15),
        revision=2,
        deployment_id="report.default",
        inputs={},
        max_steps=None,
    )


def test_several_on_time_instants_in_one_call_are_each_decided() -> None:
    # A generous allowance and a late call: 10:00, 10:15 and 10:30 are all
    # on time at 10:40 and the schedule runs up to two at once.
    definition = cron(
        "r", "*/15 * * * *", overlap="parallel", max_active_runs=2, lateness_allowance_s=3600
    )
    state = started_state(definition, created=at(9, 50))
    _, commands = run(state, at(10, 40))
    assert [(c.instant) for c in commands if isinstance(c, AdmitOccurrence)] == [at(10), at(10, 15)]
    assert rows(commands) == [("r", at(10, 30), "skipped-overlap")]


def test_switching_misfire_to_latest_keeps_the_newest_waiting_instant() -> None:
    allowance = {"lateness_allowance_s": 600}
    state = started_state(
        cron("a"),
        cron("r", "*/5 * * * *", overlap="parallel", max_active_runs=3, **allowance),
        capacity=1,
    )
    state, _ = run(state, at(9, 35))  # r 09:35 takes the slot
    state, _ = run(state, at(9, 40))
    state, _ = run(state, at(9, 45))
    assert schedule_view(state, "r").waiting == (at(9, 40), at(9, 45))
    latest = cron(
        "r", "*/5 * * * *", overlap="parallel", max_active_runs=3, misfire="latest", **allowance
    )
    state, commands = run(
        state, at(9, 46), ScheduleUpdated(definition=latest, revision=2, at=at(9, 46))
    )
    assert rows(commands) == [("r", at(9, 40), "superseded")]
    view = schedule_view(state, "r")
    assert (view.held, view.waiting) == (at(9, 45), ())


def test_lowering_the_limit_keeps_waiting_instants_while_a_place_is_free() -> None:
    allowance = {"lateness_allowance_s": 600}
    state = started_state(
        cron("r", "*/5 * * * *", overlap="parallel", max_active_runs=3, **allowance), capacity=1
    )
    state, _ = run(state, at(9, 35))
    state, _ = run(state, at(9, 40))
    state, _ = run(state, at(9, 45))
    assert schedule_view(state, "r").waiting == (at(9, 40), at(9, 45))
    lowered = cron("r", "*/5 * * * *", overlap="parallel", max_active_runs=2, **allowance)
    state, commands = run(
        state, at(9, 46), ScheduleUpdated(definition=lowered, revision=2, at=at(9, 46))
    )
    # One place is free, so 09:40 may still run: 09:45 stays behind it (a row
    # for 09:45 now would come before 09:40's, which the history refuses).
    assert rows(commands) == []
    assert schedule_view(state, "r").waiting == (at(9, 40), at(9, 45))
    single = cron("r", "*/5 * * * *", overlap="parallel", max_active_runs=1, **allowance)
    state, commands = run(
        state, at(9, 47), ScheduleUpdated(definition=single, revision=3, at=at(9, 47))
    )
    assert rows(commands) == [("r", at(9, 40), "superseded"), ("r", at(9, 45), "superseded")]
    assert schedule_view(state, "r").waiting == ()


def test_creation_replayed_late_catches_up_from_the_creation_time() -> None:
    state = initial_state(max_concurrent_runs=2)
    state, commands = run(state, at(13, 30), ScheduleCreated(definition=cron("r"), at=at(10, 30)))
    recorded = [c for c in commands if isinstance(c, RecordOccurrence)]
    assert [(c.instant, c.status, c.count, c.first_instant) for c in recorded] == [
        (at(13), "skipped-misfire", 3, at(11))
    ]


def test_a_lifecycle_change_stamped_in_the_future_decides_nothing_beyond_now() -> None:
    state = started_state(cron("r", "*/10 * * * *"))
    state, commands = run(state, at(9, 55), SchedulePaused(schedule_id="r", at=at(10, 15)))
    assert persisted(commands) == [PersistRuntime(schedule_id="r", watermark=at(10, 15), held=None)]
    state, commands = run(state, at(10, 20), ScheduleResumed(schedule_id="r", at=at(10, 20)))
    assert rows(commands) == []
    assert next_wakeup(state) == at(10, 30)


def test_pause_resume_and_delete_are_idempotent() -> None:
    state = started_state(cron("r"))
    state, _ = run(state, at(9, 40), SchedulePaused(schedule_id="r", at=at(9, 40)))
    for event in (
        SchedulePaused(schedule_id="r", at=at(9, 41)),
        ScheduleResumed(schedule_id="r", at=at(9, 42)),
        ScheduleResumed(schedule_id="r", at=at(9, 43)),
    ):
        state, commands = run(state, event.at, event)
    assert [type(c).__name__ for c in commands] == []
    state, _ = run(state, at(9, 50), ScheduleDeleted(schedule_id="r", at=at(9, 50)))
    state, commands = run(state, at(9, 51), ScheduleDeleted(schedule_id="r", at=at(9, 51)))
    assert commands == ()


def test_deleting_supersedes_waiting_instants() -> None:
    state = started_state(cron("a"), cron("b"), capacity=1)
    state, _ = run(state, at(10))
    state, commands = run(state, at(10, 0, 10), ScheduleDeleted(schedule_id="b", at=at(10, 0, 10)))
    assert [(r[0], r[2]) for r in rows(commands)] == [("b", "superseded")]
    view = schedule_view(state, "b")
    assert (view.deleted, view.waiting) == (True, ())


def test_a_one_shot_is_decided_once_and_may_be_moved_by_an_update() -> None:
    state = started_state(oneshot("o", at(10)))
    state, commands = run(state, at(10))
    assert kinds(commands) == ["AdmitOccurrence", "PersistRuntime"]
    assert next_wakeup(state) is None
    state, _ = run(state, at(10), OccurrenceAdmitted(schedule_id="o", instant=at(10), run_id="1"))
    state, _ = run(
        state,
        at(10, 5),
        RunStatusChanged(schedule_id="o", instant=at(10), run_id="1", status="completed"),
    )
    moved = oneshot("o", at(12))
    state, _ = run(state, at(11), ScheduleUpdated(definition=moved, revision=2, at=at(11)))
    assert next_wakeup(state) == at(12)


def test_each_step_back_of_the_clock_warns_once() -> None:
    state = started_state(cron("r"))
    state, commands = run(state, at(10))
    state, commands = run(state, at(9, 58))
    assert kinds(commands) == ["LogWarning"]
    state, commands = run(state, at(9, 59))
    assert commands == ()
    state, commands = run(state, at(10, 0, 1))
    assert commands == ()
    state, commands = run(state, at(9, 0))
    assert kinds(commands) == ["LogWarning"]
    warning = commands[0]
    assert isinstance(warning, LogWarning)
    assert "2024-01-15T10:00:01Z" in warning.message and "2024-01-15T09:00:00Z" in warning.message


def test_decide_does_not_replay_after_a_step_back() -> None:
    state = started_state(cron("r", "*/10 * * * *"))
    state, first = run(state, at(10))
    state, again = run(state, at(9, 55) - timedelta(seconds=1))
    assert not any(isinstance(c, AdmitOccurrence) for c in again)
    assert len([c for c in first if isinstance(c, AdmitOccurrence)]) == 1


def test_the_same_inputs_give_the_same_outputs() -> None:
    state = started_state(cron("a"), cron("b", misfire="latest"), capacity=1)
    one = decide(state, at(12, 30), [])
    two = decide(state, at(12, 30), [])
    assert one == two


def test_a_lifecycle_change_decides_what_a_block_held_back_as_missed() -> None:
    state = started_state(cron("r", "*/10 * * * *", lateness_allowance_s=3600))
    state, _ = run(
        state,
        at(9, 35),
        RecordsContradicted(schedule_id="r", file="history.jsonl", record="2", reason="torn"),
    )
    state, commands = run(state, at(10, 5))
    assert commands == ()  # blocked: nothing advances
    state, commands = run(state, at(10, 5), SchedulePaused(schedule_id="r", at=at(10, 5)))
    recorded = [c for c in commands if isinstance(c, RecordOccurrence)]
    # On time by the allowance, but the block kept them from running: missed.
    assert [(c.instant, c.status, c.count) for c in recorded] == [(at(10), "skipped-misfire", 3)]
    assert schedule_view(state, "r").watermark == at(10, 5)


def test_a_blocked_latest_schedule_takes_no_new_held_candidate_at_a_change() -> None:
    # A blocked schedule's runtime record is not written, so a candidate it
    # held would be forgotten by the next start; and after an update to
    # another trigger, nothing would say 10:00 was ever an instant.
    state = started_state(cron("r", misfire="latest"))
    state, _ = run(
        state,
        at(9, 35),
        RecordsContradicted(schedule_id="r", file="history.jsonl", record="2", reason="torn"),
    )
    edited = oneshot("r", at(10, 30), misfire="latest")
    state, commands = run(
        state, at(10, 5), ScheduleUpdated(definition=edited, revision=2, at=at(10, 5))
    )
    recorded = [c for c in commands if isinstance(c, RecordOccurrence)]
    assert [(c.instant, c.status, c.count) for c in recorded] == [(at(10), "skipped-misfire", 1)]
    assert schedule_view(state, "r").held is None
    assert not any(isinstance(c, PersistRuntime) for c in commands)


def test_decision_rows_stay_in_instant_order_behind_a_waiting_instant() -> None:
    # a holds the only slot. m (every minute, 5-minute allowance) decides
    # 10:01 and 10:02 in one call: both wait (no row may precede 10:01's).
    state = started_state(cron("a"), capacity=1)
    state, _ = run(state, at(10))
    minutely = cron("m", "* * * * *", lateness_allowance_s=300)
    state, _ = run(state, at(10, 0, 30), ScheduleCreated(definition=minutely, at=at(10, 0, 30)))
    state, commands = run(state, at(10, 2, 10))
    assert commands == (
        PersistRuntime(
            schedule_id="m", watermark=at(10, 2), held=None, waiting=(at(10, 1), at(10, 2))
        ),
    )
    # The slot frees: 10:01 takes it and m's only place, so 10:02 is skipped
    # for overlap, after 10:01's admission.
    run_of_a = schedule_view(state, "a").active[at(10)][0]
    assert run_of_a is None
    state, _ = run(
        state, at(10, 2, 20), OccurrenceAdmitted(schedule_id="a", instant=at(10), run_id="run-a")
    )
    state, commands = run(
        state,
        at(10, 2, 30),
        RunStatusChanged(schedule_id="a", instant=at(10), run_id="run-a", status="completed"),
    )
    assert kinds(commands)[:3] == ["RecordOccurrence", "AdmitOccurrence", "RecordOccurrence"]
    admit = commands[1]
    assert isinstance(admit, AdmitOccurrence) and admit.instant == at(10, 1)
    assert rows(commands) == [("a", at(10), "completed"), ("m", at(10, 2), "skipped-overlap")]
    assert schedule_view(state, "m").waiting == ()


def test_a_pause_applied_after_it_was_made_admits_nothing_from_before_it() -> None:
    state = started_state(cron("r", "*/10 * * * *", lateness_allowance_s=3600))
    state, _ = run(state, at(9, 35))
    # Made at 10:15, the pause reaches decide at 10:30 (replayed at startup).
    # 09:40 to 10:10 are still on time by the allowance, but admitting one now
    # would admit while paused: they are decided as missed.
    state, commands = run(state, at(10, 30), SchedulePaused(schedule_id="r", at=at(10, 15)))
    recorded = [c for c in commands if isinstance(c, RecordOccurrence)]
    assert [(c.instant, c.status, c.count, c.first_instant) for c in recorded] == [
        (at(10, 10), "skipped-misfire", 4, at(9, 40))
    ]
    assert not [c for c in commands if isinstance(c, AdmitOccurrence)]
    assert schedule_view(state, "r").paused


def test_a_delete_applied_after_it_was_made_admits_nothing_from_before_it() -> None:
    state = started_state(cron("r", "*/10 * * * *", misfire="latest", lateness_allowance_s=3600))
    state, _ = run(state, at(9, 35))
    state, commands = run(state, at(10, 30), ScheduleDeleted(schedule_id="r", at=at(10, 15)))
    assert not [c for c in commands if isinstance(c, AdmitOccurrence)]
    assert [(c.instant, c.status) for c in commands if isinstance(c, RecordOccurrence)] == [
        (at(10), "coalesced"),
        (at(10, 10), "superseded"),
    ]


def test_changes_replayed_before_a_late_pause_admit_nothing() -> None:
    state = started_state(cron("r", "*/10 * * * *", lateness_allowance_s=3600))
    state, _ = run(state, at(9, 35))
    # An update and a pause made at 10:15, replayed together at 10:30: settling
    # up to the update would admit 10:10 (on time by the allowance) at 10:30,
    # after the pause.
    updated = cron("r", "*/10 * * * *", lateness_allowance_s=3600, max_steps=3)
    state, commands = run(
        state,
        at(10, 30),
        ScheduleUpdated(definition=updated, revision=2, at=at(10, 15)),
        SchedulePaused(schedule_id="r", at=at(10, 15)),
    )
    assert not [c for c in commands if isinstance(c, AdmitOccurrence)]
    assert rows(commands) == [("r", at(10, 10), "skipped-misfire")]


def test_next_due_names_when_decide_next_acts_on_one_schedule_by_itself() -> None:
    state = started_state(cron("r", "*/10 * * * *"), cron("p"), cron("a"), cron("b"), capacity=1)
    state, _ = run(state, at(9, 55), SchedulePaused(schedule_id="p", at=at(9, 55)))
    assert next_due(state, "r") == at(10)
    assert next_due(state, "p") is None  # paused: only an event wakes it
    assert next_due(state, "unknown") is None
    state, _ = run(state, at(10))
    # One slot, taken by "r" at 10:00: "a" and "b" wait; each wakes decide
    # when its waiting instant turns late, before its next trigger instant.
    waiting = [s for s in ("a", "b") if schedule_view(state, s).waiting]
    assert waiting
    for schedule_id in waiting:
        due = next_due(state, schedule_id)
        assert due is not None and at(10) < due < at(11)
    assert next_wakeup(state) == min(
        d for d in (next_due(state, s) for s in ("r", "p", "a", "b")) if d is not None
    )
