"""Replay one simulation: `python -m shell.sim SEED [--schedules N]
[--minutes M] [--fault-rate R]`. Prints the report (or the failure)."""

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
    args = parser.parse_args(argv)
    try:
        report = asyncio.run(
            simulate_service(
                args.seed,
                schedules=args.schedules,
                minutes=args.minutes,
                fault_rate=args.fault_rate,
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
