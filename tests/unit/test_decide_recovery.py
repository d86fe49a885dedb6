"""Startup recovery: rebuilding a schedule from what the stores say."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from core.commands import (
    AdmitOccurrence,
    BlockSchedule,
    CreateAdmittedRun,
    PersistRuntime,
    RecordOccurrence,
    StartRun,
)
from core.decide import decide, next_wakeup
from core.errors import CoreMisuse
from core.events import (
    RecordsContradicted,
    RecoveredRun,
    RunStatusChanged,
    SchedulePaused,
    ScheduleRecovered,
    ScheduleUpdated,
)
from core.operator_actions import Backfill
from core.state import initial_state, schedule_view, slots_in_use
from tests.property.builders import at, cron, kinds, rows


def recovered(**overrides: Any) -> ScheduleRecovered:
    fields: dict[str, Any] = {
        "definition": cron("r"),
        "revision": 1,
        "created_at": at(8, 30),
        "watermark": at(10),
        "last_decided_instant": at(10),
        "held": None,
        "paused": False,
        "deleted": False,
    }
    fields.update(overrides)
    return ScheduleRecovered(**fields)


# (name, overrides, now, effective watermark)
WATERMARKS: list[tuple[str, dict[str, Any], datetime, datetime]] = [
    ("persisted watermark", {}, at(10, 30), at(10)),
    (
        "never persisted: creation",
        {"watermark": None, "last_decided_instant": None},
        at(8, 45),
        at(8, 30),
    ),
    (
        "a decision row newer than the runtime record",
        {"watermark": at(9), "last_decided_instant": at(10)},
        at(10, 30),
        at(10),
    ),
    ("an update after the watermark", {"updated_at": at(10, 20)}, at(10, 30), at(10, 20)),
    ("a resume after the watermark", {"resumed_at": at(10, 25)}, at(10, 30), at(10, 25)),
]


@pytest.mark.parametrize(
    ("name", "overrides", "now", "expected"), WATERMARKS, ids=[w[0] for w in WATERMARKS]
)
def test_the_effective_watermark_is_the_newest_mark(
    name: str, overrides: dict[str, Any], now: datetime, expected: datetime
) -> None:
    state, _ = decide(initial_state(max_concurrent_runs=2), now, [recovered(**overrides)])
    assert schedule_view(state, "r").watermark == expected
    assert next_wakeup(state) == (at(9) if now == at(8, 45) else at(11))


def test_a_never_persisted_runtime_is_persisted() -> None:
    _, commands = decide(
        initial_state(max_concurrent_runs=2),
        at(8, 45),
        [recovered(watermark=None, last_decided_instant=None)],
    )
    assert commands == (PersistRuntime(schedule_id="r", watermark=at(8, 30), held=None),)


def test_an_unchanged_runtime_is_not_rewritten() -> None:
    _, commands = decide(initial_state(max_concurrent_runs=2), at(10, 30), [recovered()])
    assert commands == ()


def test_a_held_candidate_already_decided_is_dropped() -> None:
    # Crash after the row that decided 10:00 but before the runtime write.
    definition = cron("r", misfire="latest")
    state, commands = decide(
        initial_state(max_concurrent_runs=2),
        at(10, 30),
        [recovered(definition=definition, watermark=at(10), held=at(10))],
    )
    assert schedule_view(state, "r").held is None
    assert commands == (PersistRuntime(schedule_id="r", watermark=at(10), held=None),)


def test_a_held_candidate_with_a_recovered_run_is_dropped_not_admitted_again() -> None:
    # The stores show the run of 10:00 and no decision row newer than 9:00:
    # the held candidate was admitted, whatever the runtime record says.
    definition = cron("r", misfire="latest")
    state, commands = decide(
        initial_state(max_concurrent_runs=2),
        at(10, 30),
        [
            recovered(
                definition=definition,
                watermark=at(10),
                last_decided_instant=at(9),
                held=at(10),
                active_runs=(RecoveredRun(instant=at(10), run_id="run-000001", status="running"),),
            )
        ],
    )
    view = schedule_view(state, "r")
    assert view.held is None
    assert dict(view.active) == {at(10): ("run-000001", "running")}
    assert "AdmitOccurrence" not in kinds(commands)
    assert commands == (PersistRuntime(schedule_id="r", watermark=at(10), held=None),)


def test_a_held_candidate_newer_than_any_decision_survives_and_is_admitted() -> None:
    definition = cron("r", misfire="latest")
    state, commands = decide(
        initial_state(max_concurrent_runs=2),
        at(11, 30),
        [
            recovered(
                definition=definition,
                watermark=at(11),
                last_decided_instant=at(10),
                held=at(11),
            )
        ],
    )
    assert kinds(commands) == ["AdmitOccurrence", "PersistRuntime"]
    assert isinstance(commands[0], AdmitOccurrence)
    assert commands[0].instant == at(11)
    assert schedule_view(state, "r").held is None


def test_a_held_candidate_under_misfire_skip_is_superseded() -> None:
    # The update to misfire="skip" was durable, its runtime write was not.
    state, commands = decide(
        initial_state(max_concurrent_runs=2),
        at(11, 30),
        [recovered(watermark=at(11), last_decided_instant=at(10), held=at(11))],
    )
    assert rows(commands) == [("r", at(11), "superseded")]
    assert schedule_view(state, "r").held is None


RUNS: list[tuple[str, RecoveredRun, list[type], int, bool]] = [
    (
        "admitted row without run",
        RecoveredRun(instant=at(10), run_id=None, status="admitted"),
        [CreateAdmittedRun],
        1,
        True,
    ),
    (
        "created but never started",
        RecoveredRun(instant=at(10), run_id="run-1", status="admitted", never_started=True),
        [StartRun],
        1,
        True,
    ),
    ("still running", RecoveredRun(instant=at(10), run_id="run-1", status="running"), [], 1, True),
    (
        "interrupted",
        RecoveredRun(instant=at(10), run_id="run-1", status="interrupted"),
        [],
        0,
        True,
    ),
    (
        "abandoned, failed by the host",
        RecoveredRun(
            instant=at(10), run_id="run-1", status="failed", message="abandoned: effects may exist"
        ),
        [RecordOccurrence],
        0,
        False,
    ),
    (
        "completed before the row was written",
        RecoveredRun(instant=at(10), run_id="run-1", status="completed"),
        [RecordOccurrence],
        0,
        False,
    ),
]


@pytest.mark.parametrize(
    ("name", "found", "commands", "slots", "active"), RUNS, ids=[r[0] for r in RUNS]
)
def test_recovered_runs(
    name: str, found: RecoveredRun, commands: list[type], slots: int, active: bool
) -> None:
    state, got = decide(
        initial_state(max_concurrent_runs=2), at(10, 30), [recovered(active_runs=(found,))]
    )
    assert [type(c) for c in got] == commands
    assert slots_in_use(state) == slots
    view = schedule_view(state, "r")
    assert (at(10) in view.active) is active
    if active:
        assert view.active[at(10)] == (found.run_id, found.status)
    if isinstance(got[0] if got else None, RecordOccurrence):
        row = got[0]
        assert isinstance(row, RecordOccurrence)
        assert (row.status, row.run_id, row.reason) == (found.status, found.run_id, found.message)


def test_an_interrupted_run_keeps_its_overlap_place_across_a_restart() -> None:
    found = RecoveredRun(instant=at(10), run_id="run-1", status="interrupted")
    state, _ = decide(
        initial_state(max_concurrent_runs=1), at(10, 30), [recovered(active_runs=(found,))]
    )
    state, commands = decide(state, at(11), [])
    assert rows(commands) == [("r", at(11), "skipped-overlap")]
    # The resumed run takes no slot; its completion frees the schedule.
    state, _ = decide(
        state,
        at(11, 10),
        [RunStatusChanged(schedule_id="r", instant=at(10), run_id="run-1", status="running")],
    )
    assert slots_in_use(state) == 0
    state, _ = decide(
        state,
        at(11, 20),
        [RunStatusChanged(schedule_id="r", instant=at(10), run_id="run-1", status="completed")],
    )
    _, commands = decide(state, at(12), [])
    assert kinds(commands) == ["AdmitOccurrence", "PersistRuntime"]


def test_a_created_run_reports_its_id_with_its_first_status() -> None:
    found = RecoveredRun(instant=at(10), run_id=None, status="admitted")
    state, _ = decide(
        initial_state(max_concurrent_runs=1), at(10, 30), [recovered(active_runs=(found,))]
    )
    state, commands = decide(
        state,
        at(10, 31),
        [RunStatusChanged(schedule_id="r", instant=at(10), run_id="run-7", status="running")],
    )
    assert schedule_view(state, "r").active == {at(10): ("run-7", "running")}
    assert rows(commands) == [("r", at(10), "running")]


def test_waiting_instants_survive_a_restart() -> None:
    _, commands = decide(
        initial_state(max_concurrent_runs=1),
        at(10, 0, 30),
        [
            recovered(
                definition=cron("a"),
                watermark=at(10),
                last_decided_instant=at(9),
                waiting=(at(10),),
            )
        ],
    )
    assert kinds(commands) == ["AdmitOccurrence", "PersistRuntime"]
    assert commands[1] == PersistRuntime(schedule_id="a", watermark=at(10), held=None)


def test_a_waiting_instant_that_is_late_at_restart_is_missed() -> None:
    _, commands = decide(
        initial_state(max_concurrent_runs=1),
        at(10, 5),
        [recovered(watermark=at(10), last_decided_instant=at(9), waiting=(at(10),))],
    )
    assert rows(commands) == [("r", at(10), "skipped-misfire")]


def test_a_blocked_schedule_starts_nothing_and_does_not_advance() -> None:
    found = RecoveredRun(instant=at(10), run_id=None, status="admitted")
    state, commands = decide(
        initial_state(max_concurrent_runs=1),
        at(12, 30),
        [recovered(active_runs=(found,), blocked_reason="history.jsonl: line 3: torn")],
    )
    assert commands == ()
    view = schedule_view(state, "r")
    assert view.blocked == "history.jsonl: line 3: torn"
    assert view.watermark == at(10)
    assert next_wakeup(state) is None
    assert slots_in_use(state) == 0


def test_records_contradicted_blocks_without_clearing_overlap() -> None:
    found = RecoveredRun(instant=at(10), run_id="run-1", status="running")
    state, commands = decide(
        initial_state(max_concurrent_runs=2),
        at(10, 30),
        [
            recovered(active_runs=(found,), waiting=(at(10, 30),), watermark=at(10, 30)),
            RecordsContradicted(
                schedule_id="r",
                file="runs/run-1.json",
                record="status",
                reason="run claims a schedule that never admitted it",
                extra=("seen at startup",),
            ),
        ],
    )
    diagnostic = (
        "runs/run-1.json: status: run claims a schedule that never admitted it; seen at startup"
    )
    assert BlockSchedule(schedule_id="r", diagnostic=diagnostic) in commands
    view = schedule_view(state, "r")
    assert view.blocked == diagnostic
    assert view.active == {at(10): ("run-1", "running")}
    assert view.waiting == ()
    _, later = decide(state, at(13), [])
    assert later == ()


def test_a_blocked_schedule_shows_the_first_contradiction_found() -> None:
    """Later contradictions (runs the damaged history no longer knows) follow
    from the first; the diagnostic shown names the first."""
    found = RecoveredRun(instant=at(10), run_id="run-1", status="running")
    first = "history.jsonl (line 2): duplicate decision for seq 0"
    state, _ = decide(
        initial_state(max_concurrent_runs=2),
        at(10, 30),
        [
            recovered(active_runs=(found,), watermark=at(10, 30), blocked_reason=first),
            RecordsContradicted(
                schedule_id="r", file="history.jsonl", record="line 2", reason="duplicate"
            ),
            RecordsContradicted(
                schedule_id="r", file="runs/run-2.json", record="origin", reason="never admitted"
            ),
        ],
    )
    assert schedule_view(state, "r").blocked == first
    state, commands = decide(
        initial_state(max_concurrent_runs=2),
        at(10, 30),
        [
            recovered(active_runs=(found,), watermark=at(10, 30)),
            RecordsContradicted(
                schedule_id="r", file="history.jsonl", record="line 2", reason="duplicate"
            ),
            RecordsContradicted(
                schedule_id="r", file="runs/run-2.json", record="origin", reason="never admitted"
            ),
        ],
    )
    assert schedule_view(state, "r").blocked == "history.jsonl: line 2: duplicate"
    assert [c.diagnostic for c in commands if isinstance(c, BlockSchedule)] == [
        "history.jsonl: line 2: duplicate",
        "runs/run-2.json: origin: never admitted",
    ]


def test_two_recovered_runs_at_one_instant_are_misuse() -> None:
    found = RecoveredRun(instant=at(10), run_id="run-1", status="running")
    with pytest.raises(CoreMisuse, match="share an instant"):
        decide(
            initial_state(max_concurrent_runs=2), at(11), [recovered(active_runs=(found, found))]
        )


def test_recovered_paused_and_deleted_schedules_admit_nothing() -> None:
    state, commands = decide(
        initial_state(max_concurrent_runs=2),
        at(14),
        [
            recovered(definition=cron("p"), paused=True),
            recovered(definition=cron("d"), deleted=True),
        ],
    )
    assert commands == ()
    assert next_wakeup(state) is None


def test_a_change_replayed_after_one_recovery_counts_the_slots_of_every_recovered_run() -> None:
    # The start recovers "a" (three of its instants due, in parallel), replays
    # an update of "a" made before the crash, then recovers "b", whose running
    # run holds one of the three slots. The update decides "a"'s instants up
    # to it; what it admits must leave "b"'s slot taken.
    parallel = cron(
        "a",
        "* * * * *",
        overlap="parallel",
        max_active_runs=3,
        misfire="latest",
        lateness_allowance_s=300,
    )
    events = [
        recovered(definition=parallel, watermark=at(10, 0), last_decided_instant=at(10, 0)),
        ScheduleUpdated(
            definition=cron("a", "* * * * *", lateness_allowance_s=300),
            revision=2,
            at=at(10, 3, 30),
        ),
        recovered(
            definition=cron("b"),
            watermark=at(10),
            last_decided_instant=at(10),
            active_runs=(RecoveredRun(instant=at(10), run_id="run-000001", status="running"),),
        ),
    ]
    state, commands = decide(initial_state(max_concurrent_runs=3), at(10, 3, 30), events)
    admitted = [c.instant for c in commands if isinstance(c, AdmitOccurrence)]
    assert admitted == [at(10, 1), at(10, 2)]
    assert slots_in_use(state) == 3


def test_a_late_pause_decides_the_waiting_instants_before_the_newer_ones() -> None:
    # Before the crash 10:01 and 10:02 waited for the one execution slot
    # 10:00's run held, and the schedule was paused at 10:04:30. The start
    # replays the pause: every instant up to it is decided missed, the
    # waiting ones first, since a history's decisions only move forward.
    definition = cron(
        "w", "* * * * *", overlap="parallel", max_active_runs=3, lateness_allowance_s=300
    )
    state, commands = decide(
        initial_state(max_concurrent_runs=1),
        at(10, 5),
        [
            recovered(
                definition=definition,
                watermark=at(10, 2),
                last_decided_instant=at(10, 0),
                waiting=(at(10, 1), at(10, 2)),
                active_runs=(RecoveredRun(instant=at(10), run_id="run-000001", status="running"),),
            ),
            SchedulePaused(schedule_id="w", at=at(10, 4, 30)),
        ],
    )
    decided = [(instant, status) for _, instant, status in rows(commands)]
    assert decided == [
        (at(10, 1), "skipped-misfire"),
        (at(10, 2), "skipped-misfire"),
        (at(10, 4), "skipped-misfire"),
    ]
    view = schedule_view(state, "w")
    assert view.paused and view.waiting == () and view.watermark >= at(10, 4)


def test_a_backfill_the_history_shows_finished_ends_when_the_restart_found_it() -> None:
    # Its last instant's admitted row is durable; the runtime record saying
    # so was lost in the crash (rule Q with rule M). It ended at some moment
    # before the restart found it: not at its request, before any admission.
    running = Backfill(
        start=at(7),
        end=at(10),
        overlap=None,
        requested_at=at(10, 5),
        state="running",
        planned=2,
        admitted=1,
        remaining=(at(9),),
    )
    state, commands = decide(
        initial_state(max_concurrent_runs=2),
        at(10, 40),
        [recovered(backfill=running, backfill_decided=frozenset({at(9)}))],
    )
    assert schedule_view(state, "r").backfill == replace(
        running, state="done", admitted=2, remaining=(), ended_at=at(10, 40)
    )
    assert "AdmitOccurrence" not in kinds(commands)
