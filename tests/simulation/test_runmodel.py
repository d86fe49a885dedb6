"""Run models: durations and outcomes, drawn deterministically per schedule."""

from __future__ import annotations

import random
from typing import Any

import pytest

from adapters.simulation.runmodel import RunModel, RunModelSpec, RunPlan


def _model(**spec: Any) -> RunModel:
    return RunModel(RunModelSpec.model_validate(spec))


def _plans(model: RunModel, n: int) -> list[RunPlan]:
    return [model.next_plan() for _ in range(n)]


def _durations(model: RunModel, n: int) -> list[float]:
    return [plan.changes[-1][0] for plan in _plans(model, n)]


def test_default_is_one_minute_completed() -> None:
    assert _plans(_model(), 2) == [RunPlan(((0.0, "running"), (60.0, "completed")))] * 2


def test_fixed_shorthand_and_object() -> None:
    assert _durations(_model(duration=90), 2) == [90.0, 90.0]
    assert _durations(_model(duration={"kind": "fixed", "seconds": 5}), 1) == [5.0]


@pytest.mark.parametrize(
    ("after", "expected"),
    [("cycle", [10.0, 20.0, 30.0, 10.0, 20.0]), ("last", [10.0, 20.0, 30.0, 30.0, 30.0])],
)
def test_list_per_occurrence(after: str, expected: list[float]) -> None:
    model = _model(duration={"kind": "list", "seconds": [10, 20, 30], "after": after})
    assert _durations(model, 5) == expected


def test_uniform_is_seeded_and_in_range() -> None:
    spec = {"kind": "uniform", "low_s": 10, "high_s": 20, "seed": 7}
    first = _durations(_model(duration=spec), 50)
    again = _durations(_model(duration=spec), 50)
    assert first == again
    assert all(10 <= d <= 20 for d in first)
    reference = random.Random(7)
    assert first[:3] == [round(reference.uniform(10, 20), 3) for _ in range(3)]
    other = _durations(_model(duration={**spec, "seed": 8}), 50)
    assert other != first


def test_normal_is_clamped_at_its_minimum() -> None:
    spec = {"kind": "normal", "mean_s": 5, "stddev_s": 50, "min_s": 1, "seed": 3}
    durations = _durations(_model(duration=spec), 200)
    assert min(durations) == 1.0
    assert max(durations) > 5
    assert durations == _durations(_model(duration=spec), 200)


def test_exponential_has_its_mean() -> None:
    durations = _durations(_model(duration={"kind": "exponential", "mean_s": 100, "seed": 1}), 4000)
    assert 90 < sum(durations) / len(durations) < 110
    assert all(d >= 0 for d in durations)


@pytest.mark.parametrize("status", ["completed", "failed", "exhausted"])
def test_final_outcomes(status: str) -> None:
    (plan,) = _plans(_model(duration=30, outcome=status), 1)
    assert plan.changes == ((0.0, "running"), (30.0, status))
    assert plan.final_status == status


def test_interrupted_then_resumed() -> None:
    model = _model(
        duration=100,
        outcome={"kind": "interrupted", "after_s": 40, "for_s": 3600, "then": "failed"},
    )
    (plan,) = _plans(model, 1)
    assert plan.changes == (
        (0.0, "running"),
        (40.0, "interrupted"),
        (3640.0, "running"),
        (3700.0, "failed"),
    )


def test_interruption_is_capped_at_the_duration() -> None:
    model = _model(duration=10, outcome={"kind": "interrupted", "after_s": 99, "for_s": 5})
    assert _plans(model, 1)[0].changes[-2:] == ((15.0, "running"), (15.0, "completed"))


def test_interrupted_forever() -> None:
    model = _model(duration=10, outcome={"kind": "interrupted", "after_s": 2, "for_s": None})
    (plan,) = _plans(model, 1)
    assert plan.changes == ((0.0, "running"), (2.0, "interrupted"))
    assert plan.final_status == "interrupted"


def test_outcome_list_applies_in_turn() -> None:
    model = _model(duration=1, outcome=["completed", "failed", "exhausted"])
    assert [p.final_status for p in _plans(model, 4)] == [
        "completed",
        "failed",
        "exhausted",
        "completed",
    ]
