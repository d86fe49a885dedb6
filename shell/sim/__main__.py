"""Replay one simulation, or run a range of seeds one after another:
`python -m shell.sim SEED|FIRST-LAST [--schedules N] [--minutes M]
[--fault-rate R] [--no-operator-actions] [--no-clock-steps] [--keep-going]`. Prints each
seed's report (or its failure) and, for a range, a last line with the
count of seeds that passed; exits 1 when any failed."""

from __future__ import annotations

import argparse
import asyncio
import sys

from shell.sim.driver import SimulationFailure, simulate_service


def _seeds(text: str) -> range:
    first, dash, last = text.partition("-")
    try:
        seeds = range(int(first), int(last if dash else first) + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a seed or a range FIRST-LAST") from None
    if not seeds:
        raise argparse.ArgumentTypeError(f"the range {text!r} holds no seed (LAST before FIRST)")
    return seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shell.sim", description=__doc__)
    parser.add_argument("seeds", type=_seeds, metavar="SEED|FIRST-LAST")
    parser.add_argument("--schedules", type=int, default=8)
    parser.add_argument("--minutes", type=int, default=240)
    parser.add_argument("--fault-rate", type=float, default=0.003)
    parser.add_argument(
        "--no-operator-actions",
        action="store_true",
        help="no triggers, backfills or cancels (the workload before they were simulated)",
    )
    parser.add_argument(
        "--no-clock-steps",
        action="store_true",
        help="never set the clock (the workload before clock steps were simulated)",
    )
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="run the rest of the range after a seed fails",
    )
    args = parser.parse_args(argv)
    failed: list[int] = []
    ran = 0
    for seed in args.seeds:
        ran += 1
        try:
            report = asyncio.run(
                simulate_service(
                    seed,
                    schedules=args.schedules,
                    minutes=args.minutes,
                    fault_rate=args.fault_rate,
                    operator_actions=not args.no_operator_actions,
                    clock_steps=not args.no_clock_steps,
                )
            )
        except SimulationFailure as failure:
            print(failure, file=sys.stderr)
            failed.append(seed)
            if not args.keep_going:
                break
            continue
        print(report.summary())
        print(f"disk digest {report.digest}")
    if len(args.seeds) > 1:
        listed = f": failed {', '.join(map(str, failed))}" if failed else ""
        print(f"{ran - len(failed)} of {ran} seeds passed{listed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
