"""Executes runs in asyncio tasks and makes every transition durable.

Transitions, each written durably (a file replaced atomically and fsynced,
or a committed transaction) before anyone is told:

- launch: admitted -> running. The executing mark (attempt 1) is written
  before the task is created, hence before the first step.
- resume: interrupted -> running. The attempt mark (attempt N+1) and the
  delivered payload are written before the task is created.
- every step: progress and trace entry.
- every stop: checkpoint of the attempt, status, output or error.

Steps and stops are group-committed (`RunStore.commit`): the runs that write
in the same turn of the event loop share one flush (or one transaction), and
each task goes on
only once its record is durable. `launch_many` writes many executing marks
with one flush before any of those runs starts. On a store of one server, the
runs it launches start in one task (`_execute_together`): those that stop
without waiting for anything (instant steps to their end, as most scheduled
runs do) have their stops written together by it, each listener told once
they are durable; a run that waits goes on in a task of its own.

Listeners are called after the write, synchronously, in the event loop; one
that raises is logged and ignored. A task that is cancelled (shutdown) writes
nothing more: its executing mark stays, and the next startup recovery
abandons the run truthfully. A clean stop that gives up on executing runs
first notes on each one's mark why (`note_stopped`), so that recovery says the
server stopped it rather than that the process died.

A fenced store (its scheduler lock removed or replaced: `StoreFenced`) takes
no write: an executing run goes on to its end in memory, but neither its
steps nor its stop are recorded (its listeners are not told), and no stop
note is written. Its record keeps its executing mark, so the next owner's
recovery fails it as abandoned, which is the truth from the store's side.

On a store several servers share, the executing mark names this server
(`RunStore.server_id`). Once this server is declared gone (`StoreFenced`
again) or another server changed the run (`RunChanged`: it was failed as
abandoned, or launched elsewhere), the run is that server's: this one writes
nothing more of it. A resume reads the run from the store first, so any
server resumes a run another one interrupted. While the database is
unavailable, a step or a stop is written again until it answers: the server
is alive, so no one else would ever end the run, and the execution waits
rather than going on ahead of what the store says.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
from collections.abc import (
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    Iterator,
    Mapping,
    Sequence,
)
from types import MappingProxyType
from typing import Any, Concatenate, Final, ParamSpec, TypeVar

from core.errors import (
    InvalidInput,
    InvalidState,
    SchedulingError,
    StoreFenced,
    StoreUnavailable,
)

from .artifacts import ArtifactStore
from .engine import Position, Stop, execute, trace_entry
from .identifiers import parse_run_id
from .jsonvalues import NotJson, as_json, json_problem
from .persistence import RunChanged
from .plans import Plan
from .records import (
    Checkpoint,
    ExecutingMark,
    Progress,
    RunError,
    RunRecord,
    StopCause,
    StopNote,
    assembled,
    revised,
)
from .runs import RunStore
from .schemas import validate_instance

__all__ = ["RunExecutor", "RunListener"]

# The origin is a read-only view of the stored one, shared by every listener
# of a change (copy it to keep a dict).
RunListener = Callable[[str, str, Mapping[str, Any] | None, str | None], None]
_log: Final = logging.getLogger("adapters.host.executor")
# How soon a write the unavailable database refused is tried again, doubling
# up to the most.
_RETRY_FIRST_S: Final = 0.1
_RETRY_MOST_S: Final = 2.0


_P = ParamSpec("_P")
_T = TypeVar("_T")


def _a_run_start(
    method: Callable[Concatenate[RunExecutor, _P], Awaitable[_T]],
) -> Callable[Concatenate[RunExecutor, _P], Coroutine[Any, Any, _T]]:
    """`method` (a launch or a resume) as a run start in progress for `drain`
    until it returns (`RunExecutor.starting`)."""

    @functools.wraps(method)
    async def started(executor: RunExecutor, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        with executor.starting():
            return await method(executor, *args, **kwargs)

    return started


class RunExecutor:
    def __init__(self, store: RunStore, artifacts: ArtifactStore, now: Callable[[], str]) -> None:
        self._store = store
        self._artifacts = artifacts
        self._now = now
        self._listeners: list[RunListener] = []
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # One per run start in progress (`starting`), done when it ends.
        self._starting: set[asyncio.Future[None]] = set()

    def add_listener(self, callback: RunListener) -> None:
        self._listeners.append(callback)

    def task(self, run_id: str) -> asyncio.Task[None] | None:
        return self._tasks.get(run_id)

    def executing(self) -> list[str]:
        return sorted(run_id for run_id, task in self._tasks.items() if not task.done())

    @contextlib.contextmanager
    def starting(self) -> Iterator[None]:
        """Mark a run start in progress (an admission, an executing mark being
        written) until the block ends, by when its task exists: `drain` waits
        for it. Without this, a drain that came while a mark was in flight
        found no task and returned at once, and the run then executed after
        the drain (a stopping server would leave it to the next start's
        recovery, abandoned)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._starting.add(done)
        try:
            yield
        finally:
            self._starting.discard(done)
            done.set_result(None)

    def announce(self, record: RunRecord) -> None:
        """Tell the listeners of a status change this server did not make
        itself (another server's, read from a shared store)."""
        self._notify(record)

    def _notify(self, record: RunRecord) -> None:
        message = record.error.message if record.error is not None else None
        # A read-only view, so that no listener can change the stored origin:
        # an origin is flat, text and integers (`origins.check_origin`), so a
        # view guards it whole, for a tenth of a copy's cost (two per run).
        origin = None if record.origin is None else MappingProxyType(record.origin)
        for listener in list(self._listeners):
            try:
                listener(record.run_id, record.status, origin, message)
            except Exception:
                _log.exception("run listener %r failed for %s", listener, record.run_id)

    def _plan(self, record: RunRecord) -> Plan:
        return self._artifacts.plan(record.snapshot.artifact_id, record.snapshot.artifact_version)

    def _start_mark(self, now: str) -> ExecutingMark:
        """The executing mark of a first attempt begun `now`: constants and
        the clock's text, nothing to validate. Frozen, so runs launched
        together share one (a herd launches thousands)."""
        return assembled(
            ExecutingMark,
            attempt=1,
            kind="start",
            since=now,
            stopped=None,
            server=self._store.server_id,
        )

    def _executing(self, run_id: str, mark: ExecutingMark) -> tuple[RunRecord, Plan]:
        """The run's record with its first attempt's executing `mark` (made
        by `_start_mark`, updated as of the mark's instant), not yet written.
        InvalidState unless the run is admitted."""
        record = self._store.get(run_id)
        if record.status != "admitted":
            raise InvalidState(
                f"run {run_id} is {record.status}; only an admitted run can be launched",
                data={"run_id": run_id, "status": record.status},
            )
        plan = self._plan(record)
        record = revised(
            record,
            {
                "status": "running",
                "attempt": 1,
                "executing": mark,
                "progress": assembled(Progress, node=plan.start, state={}, steps=0),
                "updated_at": mark.since,
            },
        )
        return record, plan

    @_a_run_start
    async def launch(self, run_id: str) -> asyncio.Task[None]:
        """admitted -> running; returns the execution task."""
        async with self._store.lock(run_id):
            record, plan = self._executing(run_id, self._start_mark(self._now()))
            await self._store.put(record)
        self._notify(record)
        return self._spawn(run_id, functools.partial(self._engine, record, plan))

    @_a_run_start
    async def launch_many(self, run_ids: Sequence[str]) -> list[SchedulingError | None]:
        """`launch` for many runs, with one group commit for all executing marks.

        Per run id, in order: None once it executes, or the error `launch`
        would have raised for it (nothing is written for that one). Every mark
        is durable before any task starts.
        """
        unique = list(dict.fromkeys(run_ids))
        outcomes: dict[str, SchedulingError | None] = {}
        started: list[tuple[RunRecord, Plan]] = []
        async with self._store.locked(unique):
            # One instant for the marks of runs launched together, as they
            # are written together (a herd launches thousands).
            mark = self._start_mark(self._now())
            for run_id in unique:
                try:
                    started.append(self._executing(run_id, mark))
                except SchedulingError as exc:
                    outcomes[run_id] = exc
            if started:
                await self._store.put_many([record for record, _ in started])
        for record, _ in started:
            outcomes[record.run_id] = None
            self._notify(record)
        self._start_together(started)
        results: list[SchedulingError | None] = []
        seen: set[str] = set()
        for run_id in run_ids:
            if run_id in seen:
                results.append(
                    InvalidState(
                        f"run {run_id} is named twice; it is launched once",
                        data={"run_id": run_id},
                    )
                )
                continue
            seen.add(run_id)
            results.append(outcomes[run_id])
        return results

    @_a_run_start
    async def resume(self, run_id: str, payload: Any) -> asyncio.Task[None]:
        """interrupted -> running with `payload` delivered; returns the execution task."""
        async with self._store.lock(run_id):
            record = await self._store.fetch(run_id)
            checkpoint = record.checkpoint
            if record.status != "interrupted" or checkpoint is None:
                raise InvalidState(
                    f"run {run_id} is {record.status}; only an interrupted run can be resumed",
                    data={"run_id": run_id, "status": record.status},
                )
            plan = self._plan(record)
            node = plan.nodes[checkpoint.node]
            try:
                payload = as_json(payload, "payload")
            except NotJson as exc:
                raise InvalidInput.from_problems("resume payload", [json_problem(exc)]) from None
            problems = validate_instance("payload", node.resume_schema, payload)
            problems = problems or self._store.unstorable("payload", payload)
            if problems:
                raise InvalidInput.from_problems("resume payload", problems)
            attempt = record.attempt + 1
            now = self._now()
            entry = trace_entry(
                step=checkpoint.steps,
                attempt=attempt,
                node=node.id,
                kind="interrupt",
                outcome="resumed",
                at=now,
            )
            record = revised(
                record,
                {
                    "status": "running",
                    "attempt": attempt,
                    "executing": ExecutingMark(
                        attempt=attempt, kind="resume", since=now, server=self._store.server_id
                    ),
                    "progress": Progress(
                        node=node.edges["ok"],
                        state={**checkpoint.state, node.state_key: payload},
                        steps=checkpoint.steps,
                    ),
                    "trace": [*record.trace, entry],
                    "updated_at": now,
                },
            )
            await self._store.put(record)
        self._notify(record)
        return self._spawn(run_id, functools.partial(self._engine, record, plan))

    def _engine(self, record: RunRecord, plan: Plan) -> Coroutine[Any, Any, Stop]:
        """The engine's execution of the run from its recorded progress."""
        run_id = record.run_id
        assert record.progress is not None
        return execute(
            plan,
            record.snapshot.inputs,
            Position(
                node=record.progress.node,
                state=record.progress.state,
                steps=record.progress.steps,
            ),
            max_steps=record.snapshot.max_steps,
            attempt=record.attempt,
            now=self._now,
            record_step=lambda entry, position: self._record_step(run_id, entry, position),
        )

    def _spawn(
        self,
        run_id: str,
        engine: Callable[[], Awaitable[Stop]],
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[None]:
        task = asyncio.create_task(
            self._execute(run_id, engine), name=f"wf-run:{run_id}", context=context
        )
        self._tasks[run_id] = task
        return task

    def _start_together(self, started: Sequence[tuple[RunRecord, Plan]]) -> None:
        """Start runs whose executing marks are durable: several on a store of
        one server in one task (`_execute_together`), else a task each."""
        if len(started) < 2 or self._store.shared:
            for record, plan in started:
                self._spawn(record.run_id, functools.partial(self._engine, record, plan))
            return
        first = started[0][0].run_id
        task = asyncio.create_task(
            self._execute_together(started), name=f"wf-runs:{first}+{len(started) - 1}"
        )
        for record, _ in started:
            self._tasks[record.run_id] = task

    async def _execute_together(self, started: Sequence[tuple[RunRecord, Plan]]) -> None:
        """Execute runs launched together, starting each one's engine here, as
        its own task's first step would (in a copy of the context). A run that
        stops without waiting for anything, a plan of instant steps to its
        end, as most scheduled runs are, has its stop recorded with the
        others' in one write; a run that waits goes on in a task of its own
        from where it waits. Saves a task, a lock and a future per run
        (`bench/host_runs.py`, batched: 0.13 to 0.11 ms of CPU per run)."""
        stopped: list[tuple[str, Stop]] = []
        failed: list[tuple[str, Exception]] = []
        try:
            for record, plan in started:
                run_id = record.run_id
                engine = self._engine(record, plan)
                context = contextvars.copy_context()
                try:
                    waiting = context.run(engine.send, None)
                except StopIteration as end:
                    stopped.append((run_id, end.value))
                except Exception as exc:
                    _log.exception("run %s: host error while executing", run_id)
                    failed.append((run_id, exc))
                else:
                    self._spawn(run_id, functools.partial(_Waiting, engine, waiting), context)
            if stopped:
                await self._record_stops(stopped, failed)
            for run_id, error in failed:
                await self._record_host_error(run_id, error)
        finally:
            current = asyncio.current_task()
            for record, _ in started:
                if self._tasks.get(record.run_id) is current:
                    del self._tasks[record.run_id]

    async def _record_stops(
        self, stopped: Sequence[tuple[str, Stop]], failed: list[tuple[str, Exception]]
    ) -> None:
        """`_record_stop` for several runs with one write (a store of one
        server: no retries); a run whose stop cannot be recorded joins
        `failed`, as its own task would have recorded a host error."""
        records: list[RunRecord] = []
        try:
            async with self._store.locked(run_id for run_id, _ in stopped):
                # One instant for the stops recorded together, in one write.
                now = self._now()
                for run_id, stop in stopped:
                    try:
                        records.append(self._stopped(self._store.get(run_id), stop, now))
                    except Exception as exc:
                        _log.exception("run %s: host error while executing", run_id)
                        failed.append((run_id, exc))
                if records:
                    await self._store.put_many(records)
        except (StoreFenced, RunChanged) as exc:
            for record in records:
                _stop_not_recorded(record.run_id, exc)
            return
        except Exception as exc:
            for record in records:
                _log.exception("run %s: host error while executing", record.run_id)
                failed.append((record.run_id, exc))
            return
        for record in records:
            self._notify(record)

    async def _execute(self, run_id: str, engine: Callable[[], Awaitable[Stop]]) -> None:
        try:
            # Made here: a task cancelled before its first step leaves no
            # coroutine that was never awaited.
            stop = await engine()
            stopped = await self._again_while_unavailable(
                run_id,
                lambda: self._record_stop(run_id, stop),
                lambda stored: stored.status == stop.status and stored.executing is None,
            )
            if stopped is not None:
                self._notify(stopped)
        except (StoreFenced, RunChanged) as exc:
            # Not a host error to record: nothing may be recorded any more
            # (a step refused as `RunChanged` ends the execution here too).
            _stop_not_recorded(run_id, exc)
        except asyncio.CancelledError:
            # Shutdown: write nothing; the executing mark tells the next startup.
            raise
        except Exception as exc:
            _log.exception("run %s: host error while executing", run_id)
            await self._record_host_error(run_id, exc)
        finally:
            if self._tasks.get(run_id) is asyncio.current_task():
                del self._tasks[run_id]

    async def _again_while_unavailable(
        self,
        run_id: str,
        write: Callable[[], Awaitable[None]],
        landed: Callable[[RunRecord], bool],
    ) -> RunRecord | None:
        """`write`, repeated while a shared store is unavailable (see the
        module docstring); on files an error is the write's. A write whose
        COMMIT went through but whose answer was lost finds the row moved on
        (`RunChanged`): the row is read back, and if it holds what was written
        (`landed`), that is the write, and the record read is returned (its
        listeners were not told of it yet)."""
        delay = _RETRY_FIRST_S
        while True:
            try:
                await write()
                return None
            except StoreUnavailable as exc:
                if not self._store.shared:
                    raise
                if delay == _RETRY_FIRST_S:
                    _log.warning(
                        "run %s: the store is unavailable; writing again until it answers: %s",
                        run_id,
                        exc.message,
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RETRY_MOST_S)
            except RunChanged:
                number = parse_run_id(run_id)
                if delay == _RETRY_FIRST_S or number is None:
                    raise
                stored = await self._store.refresh(number)
                if stored is not None and landed(stored):
                    return stored
                raise

    async def _record_step(self, run_id: str, entry: dict[str, Any], position: Position) -> None:
        try:
            await self._again_while_unavailable(
                run_id,
                lambda: self._write_step(run_id, entry, position),
                lambda stored: (
                    stored.progress is not None and stored.progress.steps >= position.steps
                ),
            )
        except StoreFenced:
            # The run goes on in memory: its steps are not undone by the fence,
            # only no longer recorded (the fence said so once).
            return

    async def _write_step(self, run_id: str, entry: dict[str, Any], position: Position) -> None:
        async with self._store.lock(run_id):
            record = self._store.get(run_id)
            record = revised(
                record,
                {
                    "progress": Progress(
                        node=position.node, state=position.state, steps=position.steps
                    ),
                    "trace": [*record.trace, entry],
                    "updated_at": self._now(),
                },
            )
            await self._store.commit(record)

    async def _record_stop(self, run_id: str, stop: Stop) -> None:
        async with self._store.lock(run_id):
            record = self._stopped(self._store.get(run_id), stop, self._now())
            await self._store.commit(record)
        self._notify(record)

    def _stopped(self, record: RunRecord, stop: Stop, now: str) -> RunRecord:
        """`record` stopped as `stop` says, recorded `now`, not yet written."""
        position = stop.position
        # The engine's state is validated once, by the checkpoint; the
        # position is the checkpoint's.
        checkpoint = Checkpoint(
            attempt=record.attempt,
            status=stop.status,
            node=position.node,
            state=position.state,
            steps=position.steps,
            at=now,
        )
        return revised(
            record,
            {
                "status": stop.status,
                "executing": None,
                "checkpoint": checkpoint,
                "progress": assembled(
                    Progress,
                    node=checkpoint.node,
                    state=checkpoint.state,
                    steps=checkpoint.steps,
                ),
                "trace": [*record.trace, stop.entry] if stop.entry else record.trace,
                "output": stop.output if stop.status == "completed" else None,
                "error": RunError(**stop.error) if stop.error else None,
                "updated_at": now,
            },
        )

    async def _record_host_error(self, run_id: str, exc: Exception) -> None:
        # Best effort: if even this write fails the executing mark stays and
        # the next startup abandons the run, which is still the truth.
        try:
            async with self._store.lock(run_id):
                record = self._store.get(run_id)
                if record.status != "running" or record.progress is None:
                    return
                now = self._now()
                progress = record.progress
                record = revised(
                    record,
                    {
                        "status": "failed",
                        "executing": None,
                        "checkpoint": Checkpoint(
                            attempt=record.attempt,
                            status="failed",
                            node=progress.node,
                            state=progress.state,
                            steps=progress.steps,
                            at=now,
                        ),
                        "error": RunError(
                            kind="host",
                            message=f"host error while executing: {type(exc).__name__}: {exc}",
                            node=progress.node,
                        ),
                        "updated_at": now,
                    },
                )
                await self._store.put(record)
        except Exception:
            _log.exception("run %s: could not record the host error", run_id)
            return
        self._notify(record)

    async def drain(self, timeout_s: float | None) -> list[str]:
        """Wait up to `timeout_s` for executing tasks; the ids still executing."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        # Again while tasks are left: a run started with others may go on in
        # a task of its own, made while the first one was awaited.
        # And while a start is in progress: its task is about to exist.
        while pending := {
            *(task for task in self._tasks.values() if not task.done()),
            *self._starting,
        }:
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                break
            await asyncio.wait(pending, timeout=remaining)
        return self.executing()

    async def note_stopped(self, cause: StopCause, grace_s: float) -> list[str]:
        """Write a stop note (`cause`, `grace_s`, now) onto the executing mark of
        every run executing now; the ids noted, once every note is durable.

        The notes are group-committed (one flush for all). A mark that already
        has a note keeps it: the first give-up is the one that happened. The
        runs go on executing; one that still finishes clears its mark, and the
        note with it."""
        note = StopNote(at=self._now(), cause=cause, grace_s=float(grace_s))
        noted = await asyncio.gather(
            *(self._note_stopped(run_id, note) for run_id in self.executing())
        )
        return [run_id for run_id in noted if run_id is not None]

    async def _note_stopped(self, run_id: str, note: StopNote) -> str | None:
        # Under the run's lock, like a step: the note goes onto the record the
        # run's own next write starts from, so neither write loses the other.
        async with self._store.lock(run_id):
            record = self._store.get(run_id)
            mark = record.executing
            if record.status != "running" or mark is None or mark.stopped is not None:
                return None
            try:
                await self._store.commit(
                    revised(record, {"executing": revised(mark, {"stopped": note})})
                )
            except StoreFenced:
                # A fenced stop writes nothing; the next owner's recovery says
                # the process died (it cannot tell the stop from a crash).
                return None
        return run_id

    async def cancel_executing(self) -> list[str]:
        """Cancel every executing task (no status is written); the ids cancelled."""
        tasks = {run_id: task for run_id, task in self._tasks.items() if not task.done()}
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        return sorted(tasks)


def _stop_not_recorded(run_id: str, exc: StoreFenced | RunChanged) -> None:
    _log.warning("run %s stopped, but its stop is not recorded: %s", run_id, exc.message)


class _Waiting:
    """The rest of a coroutine whose first step ran outside any task and
    handed back `waiting` (a future, or None for a bare yield): awaited by a
    task, it yields that to the task first, then drives the coroutine on as
    the task would have from the start."""

    __slots__ = ("_coroutine", "_waiting")

    def __init__(self, coroutine: Coroutine[Any, Any, Stop], waiting: Any) -> None:
        self._coroutine = coroutine
        self._waiting = waiting

    def __await__(self) -> Generator[Any, Any, Stop]:
        coroutine, waiting = self._coroutine, self._waiting
        while True:
            try:
                sent = yield waiting
            except BaseException as exc:  # a cancellation (or a close) goes on inward
                try:
                    waiting = coroutine.throw(exc)
                except StopIteration as end:
                    return end.value  # type: ignore[no-any-return]
            else:
                try:
                    waiting = coroutine.send(sent)
                except StopIteration as end:
                    return end.value  # type: ignore[no-any-return]
