"""The engine drives the real `decide` on a virtual clock: scenario tests.

Each test builds a small scenario, simulates it, and asserts on the settled
rows (every field that matters for the rule under test) and the summary.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adapters.simulation import engine
from adapters.simulation.engine import SimulationResult, simulate
from adapters.simulation.output import CollectingSink, Row, sorted_rows
from adapters.simulation.scenario import parse_scenario
from core.decide import decide as core_decide

DAY = datetime(2026, 3, 2, tzinfo=UTC)  # a Monday


def at(hours: float, day: datetime = DAY) -> datetime:
    return day + timedelta(hours=hours)


def z(hours: float) -> str:
    return at(hours).isoformat().replace("+00:00", "Z")


def schedule(schedule_id: str = "s", **fields: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "schedule_id": schedule_id,
        "deployment_id": "dep.default",
        "trigger": {"kind": "cron", "expression": "0 * * * *"},
    }
    payload.update(fields)
    return payload


def run(
    *schedules: dict[str, Any], hours: float = 6, **extra: Any
) -> tuple[list[Row], SimulationResult]:
    data: dict[str, Any] = {
        "start": z(0),
        "end": z(hours),
        "schedules": list(schedules),
        **extra,
    }
    sink = CollectingSink()
    result = simulate(parse_scenario(copy.deepcopy(data)), sink)
    assert sink.summary is result.summary
    return sorted_rows(sink.rows), result


def table(rows: Sequence[Row]) -> list[tuple[Any, ...]]:
    """(schedule, instant hour, status, run start hour, run end hour) per row."""

    def hour(value: datetime | None) -> float | None:
        return None if value is None else (value - DAY).total_seconds() / 3600

    return [
        (r.schedule_id, hour(r.instant), r.status, hour(r.run_start), hour(r.run_end)) for r in rows
    ]


def test_on_time_runs_complete_with_zero_lateness() -> None:
    rows, result = run(schedule(run={"duration": 1800}), hours=3)
    assert table(rows) == [
        ("s", 1.0, "completed", 1.0, 1.5),
        ("s", 2.0, "completed", 2.0, 2.5),
    ]
    assert [r.run_id for r in rows] == ["run-000001", "run-000002"]
    assert [r.lateness_s for r in rows] == [0.0, 0.0]
    assert rows[0].local_instant == "2026-03-02T01:00:00+00:00"
    assert result.summary["schedules"]["s"] == {
        "counts": {"completed": 2},
        "instants": 2,
        "rows": 2,
        "runs": 2,
        "runs_by_origin": {"schedule": 2, "trigger": 0, "backfill": 0},
        "max_active": 1,
        "lateness_s": {"mean": 0.0, "max": 0.0},
    }


def test_the_clock_jumps_instead_of_ticking() -> None:
    _, result = run(schedule(run={"duration": 1800}), hours=24 * 7)
    # Per hour: the instant, the admission report, the run's end; never per second.
    assert result.decide_calls <= 4 * 24 * 7 + 5


def test_overlap_skip_skips_while_a_run_is_active() -> None:
    rows, result = run(schedule(run={"duration": 5400}), hours=5)
    assert table(rows) == [
        ("s", 1.0, "completed", 1.0, 2.5),
        ("s", 2.0, "skipped-overlap", None, None),
        ("s", 3.0, "completed", 3.0, 4.5),
        ("s", 4.0, "skipped-overlap", None, None),
    ]
    assert result.summary["schedules"]["s"]["max_active"] == 1


def test_overlap_parallel_admits_up_to_the_limit() -> None:
    rows, result = run(
        schedule(overlap="parallel", max_active_runs=2, run={"duration": 9000}), hours=5
    )
    assert table(rows) == [
        ("s", 1.0, "completed", 1.0, 3.5),
        ("s", 2.0, "completed", 2.0, 4.5),
        ("s", 3.0, "skipped-overlap", None, None),
        ("s", 4.0, "running", 4.0, None),
    ]
    assert result.summary["schedules"]["s"]["max_active"] == 2


def test_latest_holds_a_blocked_instant_and_runs_it_when_overlap_frees() -> None:
    rows, _ = run(schedule(misfire="latest", run={"duration": 5400}), hours=5)
    assert table(rows) == [
        ("s", 1.0, "completed", 1.0, 2.5),
        ("s", 2.0, "completed", 2.5, 4.0),
        ("s", 3.0, "superseded", None, None),
        ("s", 4.0, "running", 4.0, None),
    ]
    assert rows[1].lateness_s == 1800.0


def test_pause_consumes_the_span_and_active_runs_go_on() -> None:
    rows, _ = run(
        schedule(run={"duration": 3600}),
        hours=8,
        events=[
            {"at": z(1.5), "action": "pause", "schedule_id": "s"},
            {"at": z(4.25), "action": "resume", "schedule_id": "s"},
        ],
    )
    assert table(rows) == [
        ("s", 1.0, "completed", 1.0, 2.0),  # started before the pause, ends during it
        ("s", 5.0, "completed", 5.0, 6.0),  # 2:00-4:00 are never replayed
        ("s", 6.0, "completed", 6.0, 7.0),
        ("s", 7.0, "running", 7.0, None),
    ]


def test_pause_supersedes_the_held_candidate() -> None:
    rows, _ = run(
        schedule(misfire="latest", run={"duration": 7000}),
        hours=4,
        events=[{"at": z(2.5), "action": "pause", "schedule_id": "s"}],
    )
    assert table(rows) == [
        ("s", 1.0, "completed", 1.0, 1 + 7000 / 3600),
        ("s", 2.0, "superseded", None, None),
    ]


def test_delete_stops_admission_but_not_the_active_run() -> None:
    rows, result = run(
        schedule(run={"duration": 7200}),
        hours=6,
        events=[{"at": z(1.5), "action": "delete", "schedule_id": "s"}],
    )
    assert table(rows) == [("s", 1.0, "completed", 1.0, 3.0)]
    assert result.summary["totals"]["instants"] == 1


def test_update_applies_to_later_instants_only() -> None:
    rows, _ = run(
        schedule(run={"duration": 60}),
        hours=6,
        events=[
            {
                "at": z(2.5),
                "action": "update",
                "schedule_id": "s",
                "changes": {
                    "trigger": {
                        "kind": "cron",
                        "expression": "30 */2 * * *",
                        "timezone": "Europe/Berlin",
                    }
                },
            }
        ],
    )
    assert [(r.instant, r.local_instant) for r in rows] == [
        (at(1), "2026-03-02T01:00:00+00:00"),
        (at(2), "2026-03-02T02:00:00+00:00"),
        # 04:30 Berlin time is 03:30 UTC, shown in the new zone.
        (at(3.5), "2026-03-02T04:30:00+01:00"),
        (at(5.5), "2026-03-02T06:30:00+01:00"),
    ]


def test_downtime_skip_is_one_counted_row() -> None:
    rows, _ = run(
        schedule(run={"duration": 60}),
        hours=8,
        downtime=[{"from": z(1.5), "to": z(5.25)}],
    )
    assert table(rows) == [
        ("s", 1.0, "completed", 1.0, 1 + 1 / 60),
        ("s", 5.0, "skipped-misfire", None, None),
        ("s", 6.0, "completed", 6.0, 6 + 1 / 60),
        ("s", 7.0, "completed", 7.0, 7 + 1 / 60),
    ]
    missed = rows[1]
    assert (missed.count, missed.first_instant, missed.last_instant) == (4, at(2), at(5))


def test_downtime_latest_coalesces_and_runs_the_newest_at_once() -> None:
    rows, _ = run(
        schedule(misfire="latest", run={"duration": 60}),
        hours=7,
        downtime=[{"from": z(1.5), "to": z(5.25)}],
    )
    assert table(rows)[1:3] == [
        ("s", 4.0, "coalesced", None, None),
        ("s", 5.0, "completed", 5.25, 5.25 + 1 / 60),
    ]
    coalesced = rows[1]
    assert (coalesced.count, coalesced.first_instant, coalesced.last_instant) == (
        3,
        at(2),
        at(4),
    )
    assert rows[2].lateness_s == 900.0


def test_no_decide_call_falls_inside_a_downtime_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[datetime] = []
    real = core_decide

    def spy(state: Any, now: datetime, events: Any) -> Any:
        seen.append(now)
        return real(state, now, events)

    monkeypatch.setattr(engine, "decide", spy)
    run(
        schedule(run={"duration": 1800}),
        hours=8,
        downtime=[{"from": z(1.5), "to": z(5.25)}],
        events=[{"at": z(3), "action": "pause", "schedule_id": "s"}],
    )
    assert not [now for now in seen if at(1.5) <= now < at(5.25)]
    assert at(5.25) in seen


def test_run_changes_during_downtime_are_reported_when_it_ends() -> None:
    # The 01:00 run ends at 02:00, inside the outage; its row keeps the true end.
    rows, _ = run(
        schedule(run={"duration": 3600}),
        hours=4,
        downtime=[{"from": z(1.5), "to": z(3.5)}],
    )
    assert table(rows) == [
        ("s", 1.0, "completed", 1.0, 2.0),
        ("s", 3.0, "skipped-misfire", None, None),
    ]
    assert rows[1].count == 2


def test_missing_deployment_is_rejected_at_preflight() -> None:
    rows, result = run(
        schedule(run={"duration": 60}),
        hours=5,
        missing_deployments=[{"deployment_id": "dep.default", "from": z(1.5), "to": z(3.5)}],
    )
    assert [(r.status, r.reason) for r in rows] == [
        ("completed", None),
        ("preflight-rejected", "deployment 'dep.default' not found"),
        ("preflight-rejected", "deployment 'dep.default' not found"),
        ("completed", None),
    ]
    assert result.summary["schedules"]["s"]["runs"] == 2


def test_an_interrupted_run_keeps_overlap_but_frees_its_slot() -> None:
    interrupted = {"kind": "interrupted", "after_s": 600, "for_s": 9000}
    rows, _ = run(
        schedule("a", run={"duration": 1200, "outcome": interrupted}),
        schedule("b", run={"duration": 3000}),
        hours=4,
        max_concurrent_runs=1,
    )
    assert table(rows) == [
        ("a", 1.0, "completed", 1.0, 1 + (1200 + 9000) / 3600),
        ("b", 1.0, "skipped-misfire", None, None),  # a held the only slot
        ("a", 2.0, "skipped-overlap", None, None),  # a is interrupted: overlap held
        ("b", 2.0, "completed", 2.0, 2 + 3000 / 3600),  # but the slot is free
        ("a", 3.0, "skipped-overlap", None, None),
        ("b", 3.0, "completed", 3.0, 3 + 3000 / 3600),
    ]


def test_waiting_for_a_slot_is_admitted_while_on_time() -> None:
    rows, result = run(
        schedule("a", run={"duration": 30}),
        schedule("b", run={"duration": 30}),
        hours=2,
        max_concurrent_runs=1,
    )
    assert [(r.schedule_id, r.status, r.lateness_s) for r in rows] == [
        ("a", "completed", 0.0),
        ("b", "completed", 30.0),
    ]
    assert result.summary["totals"]["max_active"] == 1


@pytest.mark.parametrize(("outcome", "status"), [("failed", "failed"), ("exhausted", "exhausted")])
def test_final_outcomes_reach_the_row(outcome: str, status: str) -> None:
    rows, result = run(schedule(run={"duration": 60, "outcome": outcome}), hours=2)
    assert [r.status for r in rows] == [status]
    assert result.summary["schedules"]["s"]["counts"] == {status: 1}


def test_open_occurrences_are_settled_as_they_are_at_the_end() -> None:
    rows, result = run(
        schedule(
            misfire="latest",
            run={"duration": 60, "outcome": {"kind": "interrupted", "after_s": 5, "for_s": None}},
        ),
        hours=3,
    )
    assert table(rows) == [
        ("s", 1.0, "interrupted", 1.0, None),
        ("s", 2.0, "pending", None, None),
    ]
    assert result.summary["schedules"]["s"]["counts"] == {"pending": 1, "interrupted": 1}


def test_one_shot() -> None:
    rows, _ = run(schedule(trigger={"kind": "oneshot", "at": z(2)}, run={"duration": 60}), hours=4)
    assert table(rows) == [("s", 2.0, "completed", 2.0, 2 + 1 / 60)]
    assert rows[0].local_instant == "2026-03-02T02:00:00Z"


def test_creation_never_backfills() -> None:
    rows, _ = run(schedule(created_at=z(2.5), run={"duration": 60}), hours=5)
    assert [r.instant for r in rows] == [at(3), at(4)]
