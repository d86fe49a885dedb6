"""The timeline plot, judged by what it draws: the figure's artists."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from typer.testing import CliRunner

from adapters.schedule_cli import app as APP
from adapters.simulation.engine import simulate
from adapters.simulation.output import CollectingSink
from adapters.simulation.plot import (
    PLOT_DETAIL_SCHEDULES,
    PLOT_MAX_SCHEDULES,
    RunTrace,
    build_figure,
)
from adapters.simulation.scenario import Scenario, parse_scenario
from tests.simulation.regenerate_examples import EXAMPLES

pytest.importorskip("matplotlib")
from matplotlib import dates
from matplotlib.collections import PathCollection, PolyCollection, QuadMesh


def _schedule(schedule_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "schedule_id": schedule_id,
        "deployment_id": "report.default",
        "trigger": {"kind": "cron", "expression": "0 * * * *"},
        **fields,
    }


def _scenario(*schedules: dict[str, Any], hours: int = 6) -> Scenario:
    return parse_scenario(
        {
            "start": "2026-03-02T00:00:00Z",
            "end": f"2026-03-02T{hours:02d}:00:00Z",
            "schedules": list(schedules),
        }
    )


def _figure(scenario: Scenario) -> Any:
    sink = CollectingSink()
    trace = RunTrace()
    simulate(scenario, sink, on_run_change=trace)
    return build_figure(scenario, sink.rows, trace)


def _collection(figure: Any, label: str) -> Any:
    found = [c for c in figure.axes[0].collections if c.get_label() == label]
    assert len(found) == 1, [c.get_label() for c in figure.axes[0].collections]
    return found[0]


def _bars(collection: PolyCollection) -> list[tuple[float, float, float]]:
    """(x0, x1, y centre) of each rectangle."""
    bars = []
    for path in collection.get_paths():
        xs, ys = path.vertices[:, 0], path.vertices[:, 1]
        bars.append((float(xs.min()), float(xs.max()), float(ys.mean())))
    return sorted(bars)


def _at(hour: int, minute: int = 0) -> float:
    return float(dates.date2num(datetime(2026, 3, 2, hour, minute, tzinfo=UTC)))


def test_parallel_runs_are_drawn_in_separate_lanes() -> None:
    # 90-minute runs every hour, two at once: each run overlaps the next.
    figure = _figure(
        _scenario(
            _schedule("two-at-once", overlap="parallel", max_active_runs=2, run={"duration": 5400}),
            _schedule("one-at-a-time", run={"duration": 600}),
        )
    )
    bars = _bars(_collection(figure, "run completed"))
    lanes = sorted({y for _, _, y in bars})
    assert len(lanes) == 3  # two for the parallel schedule, one for the other
    for lane in lanes:
        in_lane = sorted((x0, x1) for x0, x1, y in bars if y == lane)
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(in_lane))
    labels = [t.get_text() for t in figure.axes[0].get_yticklabels()]
    assert labels == ["two-at-once", "one-at-a-time"]


def test_interrupted_spans_are_drawn_on_their_run() -> None:
    outcome = {"kind": "interrupted", "after_s": 600, "for_s": 1800, "then": "completed"}
    figure = _figure(_scenario(_schedule("asks", run={"duration": 1200, "outcome": outcome})))
    spans = _bars(_collection(figure, "interrupted span (waiting for input)"))
    # The 01:00 run stops at 01:10 and is resumed at 01:40.
    assert spans[0][:2] == pytest.approx((_at(1, 10), _at(1, 40)))
    runs = _bars(_collection(figure, "run completed"))
    assert runs[0][:2] == pytest.approx((_at(1), _at(1, 50)))
    assert spans[0][2] == runs[0][2]  # on the run's own lane


def test_runs_an_operator_started_are_outlined_on_their_bars() -> None:
    scenario = parse_scenario(
        json.loads((EXAMPLES / "backfill-after-pause.json").read_text("utf-8"))
    )
    figure = _figure(scenario)
    completed = _bars(_collection(figure, "run completed"))
    triggered = _bars(_collection(figure, "run started by a trigger"))
    backfilled = _bars(_collection(figure, "run started by a backfill"))
    # The 16:20 trigger's run, and the backfills' six plus four runs.
    (trigger_bar,) = triggered
    assert trigger_bar[:2] == pytest.approx((_at(16, 20), _at(16, 45)))
    assert len(backfilled) == 10
    assert set(triggered + backfilled) <= set(completed)  # outlines on the runs' own bars
    legend = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    assert {"run started by a trigger", "run started by a backfill"} <= set(legend)


@pytest.mark.parametrize(
    ("example", "kind", "instants"),
    [
        ("dst-spring-berlin", "gap", ["2026-03-29T01:00:00Z"]),
        ("dst-autumn-berlin", "fold", ["2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"]),
    ],
)
def test_dst_gap_and_fold_instants_are_marked(example: str, kind: str, instants: list[str]) -> None:
    scenario = parse_scenario(json.loads((EXAMPLES / f"{example}.json").read_text("utf-8")))
    figure = _figure(scenario)
    marks = [c for c in figure.axes[0].collections if c.get_gid() == f"dst-{kind}"]
    assert len(marks) == 1 and isinstance(marks[0], PathCollection)
    xs = {round(float(x), 6) for x, _ in marks[0].get_offsets()}
    for text in instants:
        assert round(float(dates.date2num(datetime.fromisoformat(text))), 6) in xs
    legend = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    assert any(label.startswith(f"DST {kind}") for label in legend)


def test_many_schedules_are_aggregated_one_lane_each_with_counts() -> None:
    count = PLOT_DETAIL_SCHEDULES + 1
    figure = _figure(
        _scenario(*(_schedule(f"job-{n:02d}", run={"duration": 5400}) for n in range(count)))
    )
    axes = figure.axes[0]
    assert any(isinstance(c, QuadMesh) for c in axes.collections)
    assert not any(
        isinstance(c, PolyCollection) and c.get_label().startswith("run ") for c in axes.collections
    )
    labels = [t.get_text() for t in axes.get_yticklabels()]
    assert len(labels) == count
    # Hourly 90-minute runs, overlap skip: 01:00, 03:00 and 05:00 run, the
    # hours between are skipped.
    assert labels[0].startswith("job-00 · 3 runs · 2 skipped-overlap")
    assert "aggregated" in axes.get_title()


def test_a_scenario_too_large_to_plot_is_refused_before_it_runs(tmp_path: Any) -> None:
    scenario = {
        "start": "2026-03-02T00:00:00Z",
        "end": "2026-03-03T00:00:00Z",
        "schedules": [_schedule(f"job-{n}") for n in range(PLOT_MAX_SCHEDULES + 1)],
    }
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(scenario), encoding="utf-8")
    target = tmp_path / "huge.svg"
    result = CliRunner().invoke(APP, ["simulate", str(path), "--plot", str(target)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert f"--plot draws at most {PLOT_MAX_SCHEDULES} schedules" in result.stderr
    assert f"has {PLOT_MAX_SCHEDULES + 1}" in result.stderr
    assert not target.exists()
