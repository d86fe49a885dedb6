"""Benchmark scenario for `wf-schedule simulate --plot`: 200 schedules over a month.

Writes the scenario to standard output; time the command on it:

    uv run --frozen python bench/plot_month.py > big200.json
    /usr/bin/time -f "%e s, %M KiB max RSS" \\
        uv run --frozen wf-schedule simulate big200.json -f jsonl -o rows.jsonl --plot big.svg

Each schedule is hourly in Europe/Berlin at its own minute, `parallel` with
`max_active_runs` 2 and misfire `latest`, with runs of 10 to 90 minutes, and
there is one downtime window. Figures are in docs/simulate.md (Plots).
"""

from __future__ import annotations

import argparse
import json
import sys


def scenario(schedules: int) -> dict[str, object]:
    return {
        "title": f"{schedules} schedules, a month",
        "start": "2026-03-01T00:00:00Z",
        "end": "2026-03-31T00:00:00Z",
        "max_concurrent_runs": 50,
        "schedules": [
            {
                "schedule_id": f"job-{n:03d}",
                "deployment_id": "report.default",
                "trigger": {
                    "kind": "cron",
                    "expression": f"{n % 60} * * * *",
                    "timezone": "Europe/Berlin",
                },
                "overlap": "parallel",
                "max_active_runs": 2,
                "misfire": "latest",
                "run": {"duration": {"kind": "uniform", "low_s": 600, "high_s": 5400, "seed": n}},
            }
            for n in range(schedules)
        ],
        "downtime": [{"from": "2026-03-10T09:30:00Z", "to": "2026-03-10T15:10:00Z"}],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=200)
    args = parser.parse_args()
    json.dump(scenario(args.schedules), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
