"""Failover between real `wf-rpc-server` processes on one real PostgreSQL
store, with real signals (tests/reliability/cluster.py).

Each test puts one-shot schedules on instants spread over a few seconds,
does something to the servers while they come due, and checks, from the
database and the servers' logs: no (schedule, instant) decided twice and no
server refused by the unique key, none lost, one run each, every run ended,
the runs of a killed server failed with the disclosure, those of live
servers untouched; and that one server leads at the end.

- the leader SIGKILLed right after a herd was admitted: a standby takes over (the leader's
  process is known dead on this machine: before its lease lapses);
- the leader SIGSTOPped past its lease (a frozen process, or one cut off):
  a standby takes over once the lease lapsed; SIGCONT: the old leader
  commits nothing, stops admitting and stands by;
- the servers' database sessions terminated (pg_terminate_backend);
- PostgreSQL restarted under them;
- a bounded chaos of the three on three servers (`WF_CHAOS_S` seconds,
  default 12; longer runs behind the variable).

The lease is 2 s here (renewed every 0.5 s, polls every 0.2 s) so that a
test sees it lapse; what each takeover took is printed, never asserted on.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.pgserver import PostgresServer

from .cluster import Cluster, Node, Verdict

pytestmark = pytest.mark.expected_errors


@pytest.fixture
async def cluster(tmp_path: Path, pg_server: PostgresServer, pg_url: str) -> AsyncIterator[Cluster]:
    nodes = Cluster(pg_server, pg_url, tmp_path)
    try:
        yield nodes
    finally:
        nodes.stop_all()
        print(f"server logs under {tmp_path}")


def _check(cluster: Cluster) -> Verdict:
    verdict = cluster.verdict()
    print(
        f"{verdict.schedules} schedules: {verdict.decided} decided, {verdict.admitted}"
        f" admitted, runs {verdict.statuses}, {verdict.abandoned} abandoned"
    )
    assert verdict.failures == {}, verdict.failures
    assert verdict.decided == verdict.schedules == verdict.admitted
    return verdict


async def _one_leader(cluster: Cluster) -> Node:
    leader = await cluster.leader()
    others = [n for n in cluster.nodes if n is not leader and n.alive]
    for node in others:
        assert await node.role() == "standby"
    return leader


async def _until_past(moment: float) -> None:
    await asyncio.sleep(max(0.0, moment - time.time()))


async def test_the_leader_killed_during_a_herd_is_replaced_and_nothing_is_doubled_or_lost(
    cluster: Cluster,
) -> None:
    a, b = await cluster.start(2)
    # A herd: 150 schedules at one instant, then 30 more spread after it.
    await cluster.workload(b, schedules=150, start_in_s=1.5, spread_s=0.0)
    await cluster.workload(b, schedules=30, start_in_s=2.0, spread_s=3.0)
    # Killed as soon as the herd's admission committed: its runs executing.
    while not cluster.sql("SELECT 1 FROM wf_occurrences LIMIT 1"):
        await asyncio.sleep(0.005)
    killed_at = time.time()
    a.kill()
    on_a = cluster.executing_on(a)
    leader = await cluster.leader(besides=a)
    assert leader is b
    took = cluster.took_over_at(b)
    print(f"takeover {took[-1] - killed_at:.2f} s after the SIGKILL; {len(on_a)} runs were on a")
    await cluster.settled()
    verdict = _check(cluster)
    # Only the killed server's runs were failed.
    assert verdict.abandoned_runs <= on_a
    report = await b.health()
    assert report is not None and report["epoch"] == 2
    assert report["leader"]["server_id"] == report["server_id"]
    # The killed server started again as a standby: nothing runs twice.
    a.standby = True
    a.start()
    assert (await a.wait_serving())["role"] == "standby"
    _check(cluster)


async def test_a_frozen_leader_is_deposed_at_its_lease_and_commits_nothing_after(
    cluster: Cluster,
) -> None:
    a, b = await cluster.start(2)
    end = await cluster.workload(b, schedules=40, start_in_s=1.0, spread_s=5.0)
    await _until_past(end.timestamp() - 4.0)
    a.signal(signal.SIGSTOP)
    frozen_at = time.time()
    leader = await cluster.leader(besides=a)
    assert leader is b
    print(f"takeover {cluster.took_over_at(b)[-1] - frozen_at:.2f} s after the SIGSTOP")
    # Frozen well past the lease, then thawed with everything it had due.
    await asyncio.sleep(1.0)
    a.signal(signal.SIGCONT)
    assert await _role_within(a, "standby", 15.0)
    await cluster.settled()
    # Frozen for less than the silence that makes a server gone: its runs,
    # those of a live server, were left alone.
    assert _check(cluster).abandoned == 0
    events = {event.get("event") for event in a.events()}
    assert "fencing.leadership_lost" in events
    assert await b.role() == "leader"


async def _role_within(node: Node, role: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await node.role() == role:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_terminated_sessions_and_a_database_restart_neither_double_nor_lose(
    cluster: Cluster,
) -> None:
    _, b = await cluster.start(2)
    end = await cluster.workload(b, schedules=40, start_in_s=1.0, spread_s=6.0)
    await _until_past(end.timestamp() - 5.0)
    cluster.pg.terminate_backends(dbname=cluster.dbname)
    await asyncio.sleep(1.0)
    cluster.pg.stop()
    await asyncio.sleep(0.5)
    cluster.pg.start()
    await cluster.settled(timeout_s=90)
    _check(cluster)
    await _one_leader(cluster)


def _supervise(nodes: list[Node], done: list[str]) -> None:
    """What a supervisor (systemd's Restart=always) does: start again, as a
    standby, a server that exited (one whose sessions were terminated while
    it started exits 1, as at any start without its database)."""
    for node in nodes:
        if not node.alive:
            node.standby = True
            node.start()
            done.append(f"restart {node.name}")


async def test_a_bounded_chaos_on_three_servers(cluster: Cluster) -> None:
    """Kills (and restarts as standbys), freezes past the lease, terminated
    sessions, picked at random (seeded: the seed is printed) for
    `WF_CHAOS_S` seconds while schedules keep coming due."""
    seconds = float(os.environ.get("WF_CHAOS_S", "12"))
    seed = int(os.environ.get("WF_CHAOS_SEED", str(random.randrange(1 << 30))))
    print(f"chaos for {seconds:g} s, seed {seed}")
    chance = random.Random(seed)
    nodes = await cluster.start(3)
    await cluster.workload(
        nodes[1], schedules=max(30, int(seconds * 8)), start_in_s=1.0, spread_s=seconds
    )
    deadline = time.monotonic() + seconds
    done: list[str] = []
    while time.monotonic() < deadline:
        await asyncio.sleep(chance.uniform(0.3, 1.5))
        _supervise(nodes, done)
        action = chance.choice(["kill", "freeze", "terminate"])
        victim = chance.choice(nodes)
        if action == "kill" and victim.alive:
            victim.kill()
            victim.standby = True
            victim.start()
        elif action == "freeze" and victim.alive:
            victim.signal(signal.SIGSTOP)
            await asyncio.sleep(cluster.lease_s + chance.uniform(0.0, 1.0))
            victim.signal(signal.SIGCONT)
        elif action == "terminate":
            cluster.pg.terminate_backends(dbname=cluster.dbname)
        done.append(f"{action} {victim.name}")
    _supervise(nodes, done)
    print("chaos:", ", ".join(done))
    for node in nodes:
        try:
            await node.wait_serving()
        except AssertionError:
            # Its sessions were terminated while it started: it exited 1, as
            # a server that cannot reach its database at start does.
            _supervise(nodes, done)
            await node.wait_serving()
    await cluster.settled(timeout_s=90)
    _check(cluster)
    await _one_leader(cluster)
