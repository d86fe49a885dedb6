"""Benchmark: restart. N schedules (default 10,000) and R history rows in all
(default 1,000,000: 100 per schedule) on disk; how long from the start of a
fresh process to the scheduler's first decision?

Set-up writes the store through the real APIs and stores (fsyncs deferred to
one `sync()`, see harness.fast_setup): N hourly cron schedules created 40
hours ago, and per schedule 33 admitted occurrences (admitted, running,
completed rows) and one skipped-misfire row, the runtime record and a cleanly
closed history index. The run store is left empty (history rows name runs
that are not on disk; recovery reads run records only for open occurrences,
and none is open): `--runs K` adds K completed run records, to show what
the host's own start costs per run record.

The measured process is a child: `python bench/restart.py --child STORE`
imports everything, builds the host server (loads run records), builds the
scheduler service, starts it (lock, recovery of every schedule) and reports
when its first `decide` call returns; then it stops cleanly (timed too). The
parent times from just before it spawns the child. The files were just
written, so the page cache is warm for all of them.

Each child runs with Python's bytecode cache, as an installed server does
from its second start on (`uv sync --compile-bytecode`, or the cache Python
writes at the first import): the bench points `PYTHONPYCACHEPREFIX` at a
directory of its own and fills it with one child that only imports, before
the measured ones. Machines that set `PYTHONDONTWRITEBYTECODE` (this one
does, for every process) compile every module at every start, about 0.35 s
more here; `--no-bytecode-cache` measures that.

The first measured child finds no startup checkpoint (`shell/startup_checkpoint.py`):
its start reads every schedule's files, as a start after a crash that came
before any checkpoint does. Each child's clean stop writes a checkpoint, so
the `--repeat` children after it measure a restart after a clean stop.
`--crash`: each child instead waits for the checkpoint the running
scheduler writes at its first quiet moment (timed: "until the checkpoint")
and exits without stopping, so the children after the first measure a
start after a crash with nothing changed since the checkpoint (a schedule
changed since costs what the first child pays per schedule).
`--changed` moves the times of every schedule's runtime record and history
index before each child, as if every schedule had fired since the checkpoint
(a start then reads those files and the history, and takes only the
lifecycle records from the checkpoint). `--no-checkpoint` deletes the checkpoint before each child
(every start reads everything).

    uv run --frozen --group bench python bench/restart.py
    uv run --frozen --group bench python bench/restart.py --schedules 1000 --rows 100000

Not a test: it prints figures and asserts nothing. Target: <= 2 s.
"""

from __future__ import annotations

import time

_T_PROCESS = time.time()

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402


def _instants(now: datetime, count: int) -> tuple[int, list[datetime]]:
    """A minute of the hour whose last instant is a few minutes ago (the next
    is most of an hour away, so the restart's first decision has nothing
    due), and the `count` hourly instants ending there."""
    last = (now - timedelta(minutes=3)).replace(second=0, microsecond=0)
    return last.minute, [last - timedelta(hours=count - 1 - i) for i in range(count)]


async def generate(root: Path, schedules: int, rows: int, runs: int) -> dict[str, Any]:
    import harness

    from shell import ManualClock

    per_schedule = max(rows // schedules, 1)
    triplets = (per_schedule - 1) // 3
    now = datetime.now(UTC)
    minute, instants = _instants(now, triplets + 1)
    skipped, instants = instants[-1], instants[:-1]
    created = instants[0] - timedelta(minutes=30) if instants else skipped - timedelta(hours=1)
    clock = ManualClock(created)
    server = harness.build_server(root, clock=clock.now)
    api = server.api
    api.schedules.clock = clock
    began = time.perf_counter()
    with harness.fast_setup():
        await harness.deploy_trivial(server)
        ids = [f"s-{index:05d}" for index in range(schedules)]
        for schedule_id in ids:
            await api.schedules.create_schedule(
                schedule_id=schedule_id,
                deployment_id=harness.DEPLOYMENT,
                trigger={"kind": "cron", "expression": f"{minute} * * * *"},
            )
        total_runs = schedules * len(instants)
        issued = 0
        while issued < total_runs:
            issued += len(await api.reserve_run_ids(min(1000, total_runs - issued)))
        next_run = 1
        for schedule_id in ids:
            next_run = harness.write_history(
                api.schedules, schedule_id, instants, next_run, extra_skipped=skipped
            )
        api.schedules.backend.history_store.close()
        if runs:
            await _completed_runs(api, runs)
    return {
        "schedules": schedules,
        "rows": schedules * (3 * len(instants) + 1),
        "runs_on_disk": runs,
        "setup_s": time.perf_counter() - began,
    }


async def _completed_runs(api: Any, count: int) -> None:
    """`count` run records that ran to completion (manual runs, no schedule)."""
    while count > 0:
        ids = await api.reserve_run_ids(min(1000, count))
        await api.admit_runs(
            [{"deployment_id": "bench.default", "inputs": {}, "run_id": run_id} for run_id in ids]
        )
        await api.launch_runs(ids)
        await api.drain(600)
        count -= len(ids)


async def child(root: Path, *, crash: bool = False) -> dict[str, float]:
    """Start the scheduler on `root` and time its phases (POSIX timestamps).
    With `crash`, wait for the checkpoint the running scheduler writes at its
    first quiet moment, then die without stopping (the caller exits at once)."""
    stamps: dict[str, float] = {"process": _T_PROCESS}
    import harness

    import shell.service
    from shell import SchedulerServiceConfig, SystemClock, build_scheduler_service

    stamps["imported"] = time.time()
    first: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    real_decide = shell.service.decide

    def decide(*args: Any, **kwargs: Any) -> Any:
        result = real_decide(*args, **kwargs)
        if not first.done():
            first.set_result(time.time())
        return result

    shell.service.decide = decide  # type: ignore[assignment]
    server = harness.build_server(root)
    stamps["host_built"] = time.time()
    service = build_scheduler_service(
        server, SchedulerServiceConfig(enabled=True, max_concurrent_runs=100), clock=SystemClock()
    )
    await service.start()
    stamps["started"] = time.time()
    stamps["first_decision"] = await first
    stamps["schedules"] = float(len(service.state.schedules))
    if crash:
        checkpoint = root / "startup.checkpoint"
        while not checkpoint.exists():
            await asyncio.sleep(0.01)
        stamps["stopped"] = time.time()  # the checkpoint is on disk: die here
        return stamps
    await service.stop()
    stamps["stopped"] = time.time()
    return stamps


def _touch_fired_files(root: Path) -> None:
    """Change the identity (times) of the files a firing writes, in every
    schedule, without changing their bytes: the next start reads them. The
    history log is left alone: a firing appends to it, and one of the same
    size with other times was written in place by someone else, which a
    start reads whole (`CachedSchedule.history_rewritten`); its index, which
    every firing writes, stands for it (the start then reads the history from
    its files, as for a schedule that fired)."""
    for directory in (root / "schedules").iterdir():
        for name in ("runtime.jsonl", "history.idx"):
            os.utime(directory / name)


def _child_environment(pycache: Path | None) -> dict[str, str]:
    """The children's environment: with `pycache`, Python reads and writes
    bytecode there; without, as this process was started."""
    environment = dict(os.environ)
    if pycache is not None:
        environment.pop("PYTHONDONTWRITEBYTECODE", None)
        environment["PYTHONPYCACHEPREFIX"] = str(pycache)
    return environment


def _warm_bytecode_cache(environment: dict[str, str]) -> None:
    """Compile every module a child imports into the cache, unmeasured."""
    command = [sys.executable, str(Path(__file__)), "--warm-up"]
    subprocess.run(command, check=True, capture_output=True, env=environment)


def _spawn(root: Path, environment: dict[str, str], *, crash: bool = False) -> dict[str, float]:
    began = time.time()
    command = [sys.executable, str(Path(__file__)), "--child", str(root)]
    if crash:
        command.append("--crash")
    done = subprocess.run(command, check=True, capture_output=True, text=True, env=environment)
    stamps = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    stamps["spawned"] = began
    return stamps


def _phases(stamps: dict[str, float]) -> dict[str, float]:
    return {
        "total_s": stamps["first_decision"] - stamps["spawned"],
        "interpreter_s": stamps["process"] - stamps["spawned"],
        "imports_s": stamps["imported"] - stamps["process"],
        "host_s": stamps["host_built"] - stamps["imported"],
        "recovery_s": stamps["started"] - stamps["host_built"],
        "first_round_s": stamps["first_decision"] - stamps["started"],
        "stop_s": stamps["stopped"] - stamps["first_decision"],
        "schedules": stamps["schedules"],
    }


def main(argv: list[str] | None = None) -> None:
    from adapters.collector import tune_collector

    tune_collector()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=1_000_000, help="history rows in all")
    parser.add_argument("--runs", type=int, default=0, help="completed run records on disk")
    parser.add_argument("--repeat", type=int, default=3, help="restarts after a clean stop")
    parser.add_argument(
        "--no-checkpoint",
        action="store_true",
        help="delete the startup checkpoint before each restart",
    )
    parser.add_argument(
        "--crash",
        action="store_true",
        help="children die without stopping, once the running scheduler's checkpoint is written",
    )
    parser.add_argument(
        "--changed",
        action="store_true",
        help="before each restart, move the times of every schedule's runtime record and"
        " history index, as if each had fired since the checkpoint",
    )
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="children compile every module at start, as under PYTHONDONTWRITEBYTECODE",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", metavar="STORE", help=argparse.SUPPRESS)
    parser.add_argument("--warm-up", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if args.warm_up:
        import harness

        import shell.service  # noqa: F401

        return
    if args.child is not None:
        print(json.dumps(asyncio.run(child(Path(args.child), crash=args.crash))), flush=True)
        if args.crash:
            os._exit(0)  # no clean stop, no cleanup: as a killed process leaves the store
        return
    with tempfile.TemporaryDirectory(prefix="wf-bench-restart-") as tmp:
        root = Path(tmp) / "store"
        setup = asyncio.run(generate(root, args.schedules, args.rows, args.runs))
        environment = _child_environment(None if args.no_bytecode_cache else Path(tmp) / "pyc")
        if not args.no_bytecode_cache:
            _warm_bytecode_cache(environment)
        first = _phases(_spawn(root, environment, crash=args.crash))
        runs = []
        for _ in range(max(args.repeat, 1)):
            if args.no_checkpoint:
                (root / "startup.checkpoint").unlink(missing_ok=True)
            if args.changed:
                _touch_fired_files(root)
            runs.append(_phases(_spawn(root, environment, crash=args.crash)))
    result = {
        **setup,
        "bytecode_cache": not args.no_bytecode_cache,
        "first_start": first,
        "restarts": runs,
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"restart with {setup['schedules']:,} schedules, {setup['rows']:,} history rows,"
        f" {setup['runs_on_disk']:,} run records (set-up {setup['setup_s']:.0f} s)"
    )
    import harness

    print(f"  load average at the end: {harness.loadavg()}")
    cache = "compiled at every start" if args.no_bytecode_cache else "from the bytecode cache"
    print(f"  modules {cache}")
    after = "no checkpoint" if args.no_checkpoint else "crash" if args.crash else "clean stop"
    labelled = [("no checkpoint", first)] + [(f"#{i + 1}, {after}", r) for i, r in enumerate(runs)]
    for label, phases in labelled:
        print(
            f"  {label:18} process start -> first decision {phases['total_s']:6.3f} s"
            f"  (target <= 2 s): interpreter {phases['interpreter_s']:.3f},"
            f" imports {phases['imports_s']:.3f}, host {phases['host_s']:.3f},"
            f" recovery {phases['recovery_s']:.3f}, first round {phases['first_round_s']:.3f};"
            f" {phases['schedules']:,.0f} schedules live;"
            f" {'until the checkpoint' if args.crash else 'clean stop'} {phases['stop_s']:.3f} s"
        )


if __name__ == "__main__":
    main()
