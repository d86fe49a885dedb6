"""Regenerate the checked-in outputs of docs/examples/ (after a deliberate
change of the rules; read the diff before committing it).

    uv run python -m tests.simulation.regenerate_examples
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from adapters.simulate_cli import OutputFormat, run_simulation
from adapters.simulation.scenario import parse_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
# The simulation examples (docs/examples/ holds other examples too).
NAMES = (
    "backfill-after-pause",
    "downtime-catch-up",
    "dst-autumn-berlin",
    "dst-spring-berlin",
    "illustrative-week",
)


def scenarios() -> list[Path]:
    """Every example scenario (its output sits beside it as NAME.out.json)."""
    return [EXAMPLES / f"{name}.json" for name in NAMES]


def output_path(scenario: Path) -> Path:
    return scenario.with_name(scenario.name.removesuffix(".json") + ".out.json")


def render(scenario: Path) -> str:
    """The `json` output of one example scenario, as `simulate -f json` writes it."""
    parsed = parse_scenario(json.loads(scenario.read_text(encoding="utf-8")))
    stream = io.StringIO()
    run_simulation(parsed, OutputFormat.json, stream)
    return stream.getvalue()


def main() -> None:
    for scenario in scenarios():
        target = output_path(scenario)
        target.write_text(render(scenario), encoding="utf-8")
        print(f"wrote {target}")


if __name__ == "__main__":
    main()
