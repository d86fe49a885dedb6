"""The same scenario gives byte-identical output, whatever the wall clock says."""

from __future__ import annotations

import io
import json
import sys
from typing import Any

import pytest
from freezegun import freeze_time

from adapters import simulate_cli
from adapters.simulate_cli import OutputFormat, run_simulation
from adapters.simulation.scenario import parse_scenario

SCENARIO: dict[str, Any] = {
    "start": "2026-03-02T00:00:00Z",
    "end": "2026-03-04T00:00:00Z",
    "max_concurrent_runs": 2,
    "schedules": [
        {
            "schedule_id": f"s{index}",
            "deployment_id": "dep.default",
            "trigger": {"kind": "cron", "expression": f"{index * 7} * * * *"},
            "misfire": "latest" if index % 2 else "skip",
            "run": {"duration": duration, "outcome": ["completed", "failed", "exhausted"]},
        }
        for index, duration in enumerate(
            [
                {"kind": "uniform", "low_s": 60, "high_s": 5400, "seed": 11},
                {"kind": "normal", "mean_s": 2400, "stddev_s": 1800, "seed": 12},
                {"kind": "exponential", "mean_s": 1800, "seed": 13},
            ]
        )
    ],
    "events": [{"at": "2026-03-02T12:00:00Z", "action": "pause", "schedule_id": "s1"}],
    "downtime": [{"from": "2026-03-03T03:10:00Z", "to": "2026-03-03T07:50:00Z"}],
}


def _render(chosen: OutputFormat) -> str:
    stream = io.StringIO()
    run_simulation(parse_scenario(json.loads(json.dumps(SCENARIO))), chosen, stream)
    return stream.getvalue()


@pytest.mark.parametrize("chosen", [OutputFormat.json, OutputFormat.jsonl, OutputFormat.csv])
def test_byte_identical_across_runs_and_wall_clocks(chosen: OutputFormat) -> None:
    first = _render(chosen)
    with freeze_time("1999-12-31T23:59:59Z"):
        second = _render(chosen)
    with freeze_time("2041-06-01T00:00:00Z"):
        third = _render(chosen)
    assert first == second == third
    assert "run-000001" in first


def test_the_scenario_exercises_randomness_and_every_path() -> None:
    document = json.loads(_render(OutputFormat.json))
    statuses = {row["status"] for row in document["rows"]}
    assert {"completed", "failed", "exhausted"} <= statuses
    assert {"skipped-misfire", "coalesced"} & statuses
    ends = {row["run_end"] for row in document["rows"] if row["run_end"]}
    assert any("." in end for end in ends)  # drawn durations have milliseconds


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal_and_for_long_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    short = parse_scenario(SCENARIO)
    long = parse_scenario({**SCENARIO, "end": "2027-03-02T00:00:00Z"})
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with simulate_cli._progress(long) as update:
        assert update is None
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with simulate_cli._progress(short) as update:
        assert update is None
    with simulate_cli._progress(long) as update:
        assert update is not None
        update(0.5)
        update(1.0)
    assert "of the horizon" in terminal.getvalue()


def test_streamed_rows_are_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    import tracemalloc

    from adapters.simulation import engine
    from adapters.simulation.output import JsonlSink, Row

    # The bounded describe cache fills up early on; leave it out of the measure.
    monkeypatch.setattr(engine, "_describe", engine._describe.__wrapped__)
    # Only memory allocated by the simulator's own code counts (the core keeps
    # bounded calendar caches of its own).
    mine = [tracemalloc.Filter(True, "*/adapters/simulation/*")]

    class Probe(JsonlSink):
        def __init__(self) -> None:
            super().__init__(io.StringIO())
            self.rows = 0
            self.memory: dict[int, int] = {}

        def row(self, row: Row) -> None:
            # Drop the text at once: only the engine's own memory is measured.
            super().row(row)
            self._stream.seek(0)
            self._stream.truncate()
            self.rows += 1
            if self.rows in (300, 900):
                snapshot = tracemalloc.take_snapshot().filter_traces(mine)
                self.memory[self.rows] = sum(s.size for s in snapshot.statistics("filename"))

    scenario = parse_scenario(
        {
            "start": "2026-01-01T00:00:00Z",
            "end": "2026-01-08T00:00:00Z",
            "schedules": [
                {
                    "schedule_id": "every-10-minutes",
                    "deployment_id": "dep.default",
                    "trigger": {"kind": "cron", "expression": "*/10 * * * *"},
                    "run": {"duration": 0},
                }
            ],
        }
    )
    probe = Probe()
    tracemalloc.start()
    try:
        engine.simulate(scenario, probe)
    finally:
        tracemalloc.stop()
    assert probe.rows > 900
    # 600 more rows settled and written; kept, they would take about 200 kB.
    assert probe.memory[900] - probe.memory[300] < 20_000
