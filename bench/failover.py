"""Benchmark: failover between real `wf-rpc-server` processes on one durable
PostgreSQL store (bench/pgstore.py), with real signals.

Two servers (one leads, one stands by) schedule one-shot schedules spread
over the whole run (`--schedules`, default 400, a `latest` misfire: a
missed instant is admitted late, never skipped). `--kills` times (default
20) the leader is SIGKILLed at a random moment and started again as a
standby; `--freezes` times (default 5) it is SIGSTOPped past its lease
instead and SIGCONTed after (a frozen or cut-off leader: the lease path).
Each failover is timed from the signal to the moment the other server's
health says `leader` (polled every 20 ms) and to its `leadership.took_over`
log line. At the end: every (schedule, instant) decided once and none lost,
one run each, every run ended (tests/reliability/cluster.py's checks), and
the admission lateness (recorded_at - instant) of the instants that came due
during a failover, against the others.

    uv run --frozen --group bench python bench/failover.py
    uv run --frozen --group bench python bench/failover.py --kills 40 --lease 6 --renew 2

Not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

import harness
import pgstore

from tests.reliability.cluster import Cluster, Node


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "n": len(values),
        "p50_s": round(statistics.median(values), 3),
        "p99_s": round(harness.percentile(values, 99), 3),
        "max_s": round(max(values), 3),
    }


async def _wait_leader(cluster: Cluster, besides: Node) -> tuple[Node, float]:
    began = time.monotonic()
    leader = await cluster.leader(timeout_s=120, besides=besides)
    return leader, time.monotonic() - began


async def run(args: argparse.Namespace, pg: pgstore.BenchPostgres, directory: Path) -> None:
    chance = random.Random(args.seed)
    url = pg.database("failover")
    cluster = Cluster(
        pg.server,
        url,
        directory,
        lease_s=args.lease,
        renew_s=args.renew,
        poll_s=args.poll,
    )
    try:
        await cluster.start(2)
        failovers = args.kills + args.freezes
        # Enough time for every failover (a freeze waits out the lease).
        spread = failovers * (args.gap + 1.5) + args.freezes * (args.lease + 1.0) + 5.0
        await cluster.workload(
            cluster.nodes[1],
            schedules=args.schedules,
            start_in_s=2.0,
            spread_s=spread,
            creating_s=0.0,  # measured idle: 400 are created well within the 2 s
        )
        plan = ["kill"] * args.kills + ["freeze"] * args.freezes
        chance.shuffle(plan)
        to_health: dict[str, list[float]] = {"kill": [], "freeze": []}
        to_log: dict[str, list[float]] = {"kill": [], "freeze": []}
        gaps: list[tuple[float, float]] = []  # (signal, takeover) wall times
        await asyncio.sleep(2.0)
        for action in plan:
            await asyncio.sleep(chance.uniform(args.gap * 0.5, args.gap * 1.5))
            leader = await cluster.leader(timeout_s=120)
            signalled = time.time()
            if action == "kill":
                leader.kill()
            else:
                leader.signal(signal.SIGSTOP)
            successor, waited = await _wait_leader(cluster, leader)
            to_health[action].append(waited)
            took = [t for t in cluster.took_over_at(successor) if t >= signalled]
            if took:
                to_log[action].append(took[0] - signalled)
                gaps.append((signalled, took[0]))
            if action == "kill":
                leader.standby = True
                leader.start()
            else:
                leader.signal(signal.SIGCONT)
            await leader.wait_serving(timeout_s=60)
            print(f"  {action:6s} {leader.name}: {successor.name} leads after {waited:.3f} s",
                  flush=True)  # fmt: skip
        await cluster.settled(timeout_s=spread + 120)
        verdict = cluster.verdict()
        lateness_in_gap: list[float] = []
        lateness_else: list[float] = []
        for instant, decided in cluster.sql(
            "SELECT instant, (decision->>'recorded_at')::timestamptz FROM wf_occurrences"
            " WHERE decision->>'status' = 'admitted'"
        ):
            late = (decided - instant).total_seconds()
            moment = instant.timestamp()
            inside = any(start <= moment <= end for start, end in gaps)
            (lateness_in_gap if inside else lateness_else).append(late)
        print(
            json.dumps(
                {
                    "lease_s": args.lease,
                    "renew_s": args.renew,
                    "poll_s": args.poll,
                    "schedules": verdict.schedules,
                    "failover_kill_to_health": _summary(to_health["kill"]),
                    "failover_kill_to_log": _summary(to_log["kill"]),
                    "failover_freeze_to_health": _summary(to_health["freeze"]),
                    "failover_freeze_to_log": _summary(to_log["freeze"]),
                    "decided": verdict.decided,
                    "admitted": verdict.admitted,
                    "doubled": len(verdict.doubled),
                    "lost": len(verdict.lost),
                    "unique_violations": len(verdict.unique_violations),
                    "failures": {k: len(v) for k, v in verdict.failures.items()},
                    "runs": verdict.statuses,
                    "abandoned_with_disclosure": verdict.abandoned,
                    "lateness_during_failover": _summary(lateness_in_gap),
                    "lateness_otherwise": _summary(lateness_else),
                }
            ),
            flush=True,
        )
    finally:
        cluster.stop_all()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=400)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--freezes", type=int, default=5)
    parser.add_argument("--lease", type=float, default=6.0)
    parser.add_argument("--renew", type=float, default=2.0)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--gap", type=float, default=2.0, help="mean seconds between failovers")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print(json.dumps(harness.machine()))
    started = datetime.now()
    with pgstore.BenchPostgres() as pg, tempfile.TemporaryDirectory(prefix="wf-failover-") as d:
        print(json.dumps(pg.settings()))
        asyncio.run(run(args, pg, Path(d)))
    print(f"took {(datetime.now() - started).total_seconds():.0f} s")


if __name__ == "__main__":
    main()
