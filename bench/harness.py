"""Shared pieces of the benchmarks: a real server and scheduler on real stores,
fast set-up of many schedules, and the admission-lateness probe.

Not a test and not part of the package: `bench/*.py` scripts import it with
`bench/` on `sys.path`.
"""

from __future__ import annotations

import contextlib
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from adapters import build_local_static_workflow_server  # noqa: E402
from adapters.host import LocalStaticWorkflowServer  # noqa: E402
from shell.durable import GroupCommit  # noqa: E402

__all__ = [
    "DEPLOYMENT",
    "STORES",
    "TRIVIAL_PLAN",
    "AdmissionProbe",
    "ApsJobs",
    "Timers",
    "add_store_option",
    "apscheduler_with_jobs",
    "build_server",
    "cpu_seconds",
    "create_cron_schedules",
    "current_rss_mib",
    "deploy_trivial",
    "fast_setup",
    "fsync_latency_ms",
    "loadavg",
    "machine",
    "peak_rss_mib",
    "percentile",
    "write_history",
]

DEPLOYMENT = "bench.default"
# Where a bench's server keeps its records: `--store` (see bench/pgstore.py).
STORES = ("file", "postgres")

# One step that returns a constant: the cheapest run the host can execute.
TRIVIAL_PLAN: dict[str, Any] = {
    "name": "bench",
    "input_schema": {"type": "object", "properties": {"when": {"type": "string"}}},
    "start": "emit",
    "nodes": [
        {"id": "emit", "kind": "call", "capability": "wf.std.constant", "params": {"value": 1}}
    ],
    "edges": {"emit": {"ok": "__end__"}},
    "output": {"result": "state.emit"},
}


def add_store_option(parser: Any) -> None:
    """`--store {file,postgres}` on an argparse parser."""
    parser.add_argument(
        "--store",
        choices=STORES,
        default="file",
        help="files under a temp store root (default), or a fresh database of a"
        " PostgreSQL server the bench starts (durable settings; bench/pgstore.py)",
    )


def build_server(
    root: Path, *, clock: Callable[[], datetime] | None = None
) -> LocalStaticWorkflowServer:
    return build_local_static_workflow_server(root, schedules=True, clock=clock)


async def deploy_trivial(server: LocalStaticWorkflowServer) -> None:
    artifact_id = DEPLOYMENT.split(".")[0]
    await server.api.create_artifact_from_plan(artifact_id, 1, TRIVIAL_PLAN)
    await server.api.save_deployment(
        {"deployment_id": DEPLOYMENT, "artifact_id": artifact_id, "artifact_version": 1}
    )


async def create_cron_schedules(
    server: LocalStaticWorkflowServer,
    count: int,
    expression: Callable[[int], str],
    *,
    prefix: str = "s",
    **options: Any,
) -> None:
    """Deploy the trivial plan and create `count` cron schedules
    (`<prefix>-00000`, ...) through the real API, fsyncs deferred to one sync
    (`fast_setup`); schedule i gets `expression(i)` and `options`."""
    with fast_setup():
        await deploy_trivial(server)
        for index in range(count):
            await server.api.schedules.create_schedule(
                schedule_id=f"{prefix}-{index:05d}",
                deployment_id=DEPLOYMENT,
                trigger={"kind": "cron", "expression": expression(index)},
                **options,
            )


@contextlib.contextmanager
def fast_setup() -> Iterator[None]:
    """Set-up only: skip per-write fsyncs while bulk-creating fixtures through the
    real store APIs, then make everything durable with one `sync()`.

    The stores write exactly the files and formats they always write; only the
    flushes are deferred. Never used around anything that is measured.
    """
    import shell.durable as durable

    real_fsync = os.fsync
    real_syncfs = durable._syncfs_directory

    def no_fsync(fd: int) -> None:
        del fd

    def no_syncfs(directory: str) -> None:
        del directory

    os.fsync = no_fsync
    durable._syncfs_directory = no_syncfs
    try:
        yield
    finally:
        os.fsync = real_fsync
        durable._syncfs_directory = real_syncfs
        os.sync()


@dataclass
class ApsJobs:
    """APScheduler 3.x as the benches run it (`apscheduler_with_jobs`), and
    what its jobs noted: per job id, when each run started and the planned
    times of each submission; `ran` counts the runs."""

    scheduler: Any
    started: dict[str, list[float]] = field(default_factory=dict)
    scheduled: dict[str, list[float]] = field(default_factory=dict)
    ran: int = 0


def apscheduler_with_jobs(triggers: Sequence[Any]) -> ApsJobs:
    """An AsyncIOScheduler with a MemoryJobStore (UTC, no misfire grace, no
    coalescing, ten instances of a job at once) and one job per trigger
    (`s-00000`, ...): a trivial async job that notes when it started, and a
    listener that notes each submission's planned times. Not started.
    APScheduler is imported here: only the benches that compare with it
    need the bench group."""
    from apscheduler.events import EVENT_JOB_SUBMITTED, JobSubmissionEvent
    from apscheduler.jobstores.memory import MemoryJobStore
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    jobs = ApsJobs(
        AsyncIOScheduler(
            jobstores={"default": MemoryJobStore()},
            timezone=UTC,
            job_defaults={"misfire_grace_time": None, "coalesce": False, "max_instances": 10},
        )
    )

    async def job(job_id: str) -> None:
        jobs.started.setdefault(job_id, []).append(time.time())
        jobs.ran += 1

    def on_submitted(event: JobSubmissionEvent) -> None:
        jobs.scheduled.setdefault(event.job_id, []).extend(
            t.timestamp() for t in event.scheduled_run_times
        )

    jobs.scheduler.add_listener(on_submitted, EVENT_JOB_SUBMITTED)
    for index, trigger in enumerate(triggers):
        job_id = f"s-{index:05d}"
        jobs.scheduler.add_job(job, trigger, args=[job_id], id=job_id)
    return jobs


class _ProbedBatch:
    """The rows one open batch staged: its admissions' occurrence instants,
    and how many other decisions it holds."""

    __slots__ = ("instants", "others")

    def __init__(self) -> None:
        self.instants: list[datetime] = []
        self.others = 0


class AdmissionProbe:
    """Records when admitted history rows become durable.

    Wraps the history store's `append_decision` and `stage_admitted` on one
    instance: the first row a group commit stages registers an `on_durable`
    callback, which runs right after the batch's flush returns (the commit
    journal's fsync, or the flush of the files without a journal), i.e. at
    the instant the row is durable. Lateness = that wall-clock instant - the
    occurrence instant. Rows of any other status are counted as decided too
    (the herd measure).

    The probe is measurement, not the scheduler: a row staged into the batch
    of the row before it costs one identity check and one append, and the
    instants are turned into lateness only when asked (`lateness`), after
    the measured window.

    On PostgreSQL (`shell.pg.history.PgHistory`) the batch is a `PgBatch`,
    whose `commit` runs its `on_commit` callbacks right after the COMMIT of
    the round's transaction returned (synchronous commit: the WAL is
    flushed); the probe registers there, in the batch's first staged row, so
    it runs after one history callback at most. Both stores'
    `stage_admitted` stage their row without `append_decision`, so both
    methods are wrapped on both.
    """

    def __init__(self, history: Any, on_durable: Callable[[], None] | None = None) -> None:
        self.on_durable = on_durable
        self.decided = 0
        self.admitted = 0
        self.last_durable: float | None = None
        self.commits = 0
        self._history = history
        self._original = history.append_decision
        self._original_admitted = history.stage_admitted
        # The open batches by identity, and the last one a row was staged in.
        self._open: dict[int, _ProbedBatch] = {}
        self._batch: Any = None
        self._rows = _ProbedBatch()
        # (wall-clock instant durable, the admissions' occurrence instants) per commit.
        self._durable_batches: list[tuple[float, list[datetime]]] = []
        # (occurrence instant as a POSIX timestamp, lateness in seconds) per
        # admission of the commits turned into figures so far.
        self._figures: list[tuple[float, float]] = []
        self._figured = 0
        history.append_decision = self._append_decision
        history.stage_admitted = self._stage_admitted

    def _stage_admitted(self, schedule_id: str, **kwargs: Any) -> Any:
        result = self._original_admitted(schedule_id, **kwargs)
        batch = kwargs["batch"]
        rows = self._rows if batch is self._batch else self._rows_of(batch)
        rows.instants.append(kwargs["instant"])
        return result

    def _append_decision(self, schedule_id: str, **kwargs: Any) -> Any:
        result = self._original(schedule_id, **kwargs)
        batch = kwargs.get("batch")
        rows = _ProbedBatch() if batch is None else self._rows_of(batch)
        if kwargs.get("status") == "admitted":
            rows.instants.append(kwargs["instant"])
        else:
            rows.others += int(kwargs.get("count") or 1)
        if batch is None:
            self._durable(rows)
        return result

    def _rows_of(self, batch: Any) -> _ProbedBatch:
        key = id(batch)
        rows = self._open.get(key)
        if rows is None:
            rows = self._open[key] = _ProbedBatch()
            # Every row of this batch is durable at once. A file group commit
            # says so by `on_durable`, a PgBatch by `on_commit`.
            durable = getattr(batch, "on_durable", None) or batch.on_commit
            durable(lambda: self._commit(key))
            batch.on_abort(lambda: self._close(key))
        self._batch, self._rows = batch, rows
        return rows

    def _close(self, key: int) -> _ProbedBatch | None:
        if self._batch is not None and id(self._batch) == key:
            self._batch, self._rows = None, _ProbedBatch()
        return self._open.pop(key, None)

    def _commit(self, key: int) -> None:
        self.commits += 1
        rows = self._close(key)
        if rows is not None:
            self._durable(rows)

    def _durable(self, rows: _ProbedBatch) -> None:
        now = time.time()
        self.last_durable = now
        self.decided += len(rows.instants) + rows.others
        self.admitted += len(rows.instants)
        if rows.instants:
            self._durable_batches.append((now, rows.instants))
        if self.on_durable is not None:
            self.on_durable()

    @property
    def admissions(self) -> list[tuple[float, float]]:
        """(occurrence instant as a POSIX timestamp, lateness in seconds) per
        durable admission, in the order they became durable."""
        for now, instants in self._durable_batches[self._figured :]:
            for instant in instants:
                at = instant.timestamp()
                self._figures.append((at, now - at))
        self._figured = len(self._durable_batches)
        return self._figures

    def lateness(self, begin: float = float("-inf"), end: float = float("inf")) -> list[float]:
        """Lateness of the admissions whose instant lies in [begin, end)."""
        return [late for instant, late in self.admissions if begin <= instant < end]

    def restore(self) -> None:
        self._history.append_decision = self._original
        self._history.stage_admitted = self._original_admitted


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def cpu_seconds() -> float:
    """CPU time (user + system) of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    with open("/proc/self/statm", encoding="ascii") as handle:
        pages = int(handle.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def fsync_latency_ms(directory: Path, rounds: int = 200) -> tuple[float, float]:
    """(p50, p99) of fsync after a small append in `directory`."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    samples: list[float] = []
    try:
        for _ in range(rounds):
            os.write(fd, b"x" * 128)
            began = time.perf_counter()
            os.fsync(fd)
            samples.append((time.perf_counter() - began) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(samples), percentile(samples, 99)


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages (other work on the machine skews
    every figure; the benches print this so a reader can tell)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine() -> dict[str, str]:
    model = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": str(os.cpu_count()),
        "cpu_model": model,
        "python": sys.version.split()[0],
    }


class Timers:
    """Wall time spent inside chosen functions, wrapped in place (sync or async).

    For a breakdown of where a measured phase goes; the wrappers cost about a
    microsecond per call.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        # Start times of calls still running (a report taken inside one counts it).
        self._open: dict[str, list[float]] = {}
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, name: str, label: str | None = None) -> None:
        import inspect

        original = getattr(owner, name)
        key = label or name
        self.seconds.setdefault(key, 0.0)
        self.calls.setdefault(key, 0)
        running = self._open.setdefault(key, [])
        clock = time.perf_counter

        if inspect.iscoroutinefunction(original):

            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                began = clock()
                running.append(began)
                try:
                    return await original(*args, **kwargs)
                finally:
                    running.remove(began)
                    self.seconds[key] += clock() - began
                    self.calls[key] += 1

            setattr(owner, name, timed_async)
        else:

            def timed(*args: Any, **kwargs: Any) -> Any:
                began = clock()
                running.append(began)
                try:
                    return original(*args, **kwargs)
                finally:
                    running.remove(began)
                    self.seconds[key] += clock() - began
                    self.calls[key] += 1

            setattr(owner, name, timed)
        had_own = name in getattr(owner, "__dict__", {})
        self._undo.append(
            lambda: setattr(owner, name, original) if had_own else delattr(owner, name)
        )

    def reset(self) -> None:
        for key in self.seconds:
            self.seconds[key] = 0.0
            self.calls[key] = 0

    def restore(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def report(self) -> dict[str, tuple[float, int]]:
        """Per label: (seconds, calls), counting calls still running up to now."""
        now = time.perf_counter()
        return {
            key: (
                self.seconds[key] + sum(now - began for began in self._open[key]),
                self.calls[key] + len(self._open[key]),
            )
            for key in self.seconds
        }


def write_history(
    schedules: Any,
    schedule_id: str,
    instants: Sequence[datetime],
    first_run: int,
    *,
    batch_rows: int = 30_000,
    extra_skipped: datetime | None = None,
) -> int:
    """Append, through the real history and runtime stores, the rows a
    scheduler would have written for `instants`: per instant an `admitted`
    decision (run `run-<n>` from `first_run` on, with its snapshot), a `running`
    and a `completed` transition; then, if given, one `skipped-misfire`
    decision at `extra_skipped`; and the runtime record with the watermark.
    Rows go in group commits of about `batch_rows`. Returns the next run number.

    Set-up only (wrap it in `fast_setup()`): the rows are what the stores
    themselves produce, so recovery and paging read exactly their format.
    """
    history = schedules.backend.history_store
    history.recover(schedule_id)
    snapshot = {"deployment_id": DEPLOYMENT, "inputs": {}, "max_steps": None, "revision": 1}
    run = first_run
    batch = GroupCommit()
    staged = 0
    for instant in instants:
        run_id = f"run-{run:06d}"
        run += 1
        history.append_decision(
            schedule_id,
            instant=instant,
            status="admitted",
            run_id=run_id,
            revision=1,
            snapshot=snapshot,
            recorded_at=instant,
            batch=batch,
        )
        for status in ("running", "completed"):
            history.append_transition(
                schedule_id, instant=instant, status=status, run_id=run_id,
                recorded_at=instant, batch=batch,
            )  # fmt: skip
        staged += 3
        if staged >= batch_rows:
            batch.commit()
            batch = GroupCommit()
            staged = 0
    last = instants[-1] if instants else None
    if extra_skipped is not None:
        history.append_decision(
            schedule_id,
            instant=extra_skipped,
            status="skipped-misfire",
            reason="missed by more than the lateness allowance",
            recorded_at=extra_skipped,
            batch=batch,
        )
        last = extra_skipped
    if last is not None:
        schedules.backend.runtime_store.stage(
            batch, schedule_id, watermark=last, held=None, lifecycle_seq=1, written_at=last
        )
    batch.commit()
    return run
