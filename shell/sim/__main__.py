"""Replay one simulation: `python -m shell.sim SEED [--schedules N]
[--minutes M] [--fault-rate R] [--no-operator-actions]`. Prints the report (or the failure)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from shell.sim.driver import SimulationFailure, simulate_service


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shell.sim", description=__doc__)
    parser.add_argument("seed", type=int)
    parser.add_argument("--schedules", type=int, default=8)
    parser.add_argument("--minutes", type=int, default=240)
    parser.add_argument("--fault-rate", type=float, default=0.003)
    parser.add_argument(
        "--no-operator-actions",
        action="store_true",
        help="no triggers, backfills or cancels (the workload before they were simulated)",
    )
    args = parser.parse_args(argv)
    try:
        report = asyncio.run(
            simulate_service(
                args.seed,
                schedules=args.schedules,
                minutes=args.minutes,
                fault_rate=args.fault_rate,
                operator_actions=not args.no_operator_actions,
            )
        )
    except SimulationFailure as failure:
        print(failure, file=sys.stderr)
        return 1
    print(report.summary())
    print(f"disk digest {report.digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
