"""The `wf-schedule simulate` dry-run: scenarios, run models, the virtual-clock
engine around the real `decide`, output formats and plots.

Imperative (it drives a clock) but without disk or server: the command-line
adapter (`adapters.simulate_cli`) does the reading and writing.

    scenario = parse_scenario(json.loads(text))      # InvalidInput with field paths
    sink = CollectingSink()                          # or JsonlSink(stream) / CsvSink(stream)
    result = simulate(scenario, sink)                # rows to the sink, then the summary
"""

from adapters.simulation.engine import SimulationResult, simulate
from adapters.simulation.output import CollectingSink, CsvSink, JsonlSink, Row, RowSink
from adapters.simulation.scenario import Scenario, parse_scenario

__all__ = [
    "CollectingSink",
    "CsvSink",
    "JsonlSink",
    "Row",
    "RowSink",
    "Scenario",
    "SimulationResult",
    "parse_scenario",
    "simulate",
]
