"""The scheduler service: runs `decide` against the stores and the run API.

Theory of operation
-------------------
`start()` takes ownership of the store (`<store_root>/scheduler.lock` on the
file backend, an advisory lock on PostgreSQL), recovers every schedule from
its stores (lifecycle log, runtime record, history) into events (see
`shell/recovery.py`), and starts the loop. The stores are its backend's
(`shell.store_ports`), reached through the schedules API: files or a
database, the loop is the same. Each round of the loop:

1. collects events: lifecycle records the API appended (the API wakes the
   loop; the log is the truth, so a change is consumed exactly once, in
   order, with its own `at`), run status changes reported by the host, and the
   answers to last round's admissions;
2. calls `decide(state, now, events)`;
3. carries the commands out with one group commit: history rows and runtime
   records are staged in command order, preflight runs before an admission
   row is staged, run ids for all admissions are reserved with one counter
   write, then everything is flushed together; only after that are runs
   created and launched (admitted row -> run record -> executing mark)
   (`shell/service_commands.py`);
4. when nothing is pending and nothing is due for a while, does the
   housekeeping kept off a start's path: the first time after a start it
   sweeps temp files of interrupted writes, and it rewrites the startup
   checkpoint if `checkpoint_interval_s` has passed since the last
   (`shell/startup_checkpoint.py`: what a start after a crash need not read)
   (`shell/service_housekeeping.py`);
5. sleeps until `next_wakeup(state)`, never longer than `poll_interval_s`
   (`quiet_poll_interval_s` when the clock tells of its steps and the store
   is this process's alone: `_look_interval_s`), or until the API, the
   host or a step of the clock wakes it.

Prepared rounds
---------------
When the stores are this process's alone (`ScheduleBackend.prepares_ahead`)
and the host says when its deployments change (`PreparingRunHost`), the
loop wakes `prepare_ahead_s` before the next due instant, decides that
instant's round with no events, `decide(state, instant, [])`, and stages
it (`CommandExecutor.stage(ahead=True)`): every write in one open batch,
nothing written. At the instant the round at the top of the loop commits
it instead of deciding (`CommandExecutor.finish`). It commits only a round
that is still the one a scheduler woken exactly at the instant decides:
nothing heard since (no event, no changed schedule), the state it was
decided from unchanged, the host's deployments unchanged, the clock at most
`PREPARED_STALE_AFTER` past the instant and within the allowance of every
occurrence it admits (`core.prepared`). Otherwise the round is dropped (its batch aborted
before writing: the stores keep what they knew, and its run ids go to the
next admissions) and decided as usual; an instant is prepared once at most.
A wake-up before the instant with nothing new keeps the prepared round. The
commit, the launches and everything after are the usual round's.

`stop()` stops admitting first (no more rounds), then drains executing runs
for up to `drain_grace_s`; whatever still runs keeps its executing mark, noted
(when the host can) with the drain that ran out, and the next start's
recovery fails it truthfully: the server stopped it, not a dead process.

This module keeps the loop: start, stop and drain, the wake-ups and rounds,
the fencing checks, and the events each round feeds to decide. Carrying out
the commands and the quiet-moment work are collaborators the service owns,
each in the module named above; they log as `shell.service` too.

No scheduling rule lives here: every decision is `decide`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Final, TypeVar

from core.commands import AdmitOccurrence, Command, PersistRuntime, RecordOccurrence
from core.decide import decide, next_wakeup
from core.errors import (
    InvalidDefinition,
    SchedulerUnavailable,
    SchedulingError,
    StoreFenced,
    StoreUnavailable,
)
from core.events import (
    CapacityChanged,
    Event,
    RecordsContradicted,
    RunStatusChanged,
)
from core.occurrences import RUN_STATUSES
from core.prepared import commits_as_decided
from core.state import SchedulerState, check_capacity, initial_state, schedule_view
from shell.clock import Clock, SystemClock
from shell.config import SchedulerServiceConfig
from shell.observer import NullObserver, SchedulerObserver
from shell.ports import (
    ClaimListingHost,
    HostApi,
    PreparingRunHost,
    StopNotingHost,
    SweepingHost,
)
from shell.recovery import (
    Recovered,
    RuntimeMark,
    StartupRecovery,
    lifecycle_event,
    with_history,
)
from shell.schedules_api import LiveScheduleView, SchedulesApi
from shell.service_commands import CommandExecutor, CommittedRound, StagedRound
from shell.service_housekeeping import Housekeeping
from shell.store_format import StoreDamaged, StoreProblem, format_instant, parse_instant

__all__ = ["SchedulerService", "build_scheduler_service"]

_log = logging.getLogger(__name__)

_AFTER_A_FAILED_ROUND = "after a failed round"
_T = TypeVar("_T")

# Run ids reserved per host call (the host accepts 1 to 1000); the command
# executor reserves a round's ids in chunks of this size.
_RESERVE_CHUNK = 1000


class _CollectorPause:
    """No cyclic garbage collection while anything holds the pause: a round
    from its decide to its launches, a start's recovery, and a round
    prepared ahead of its instant from its preparation to its commit; and
    after the last release, none until the service loop's next quiet moment
    (`collect_deferred`), where the pass deferred runs.

    A herd allocates a few million short-lived objects; with the collector on,
    young and middle-generation passes fired dozens of times inside a round
    (about a third of a 10,000-schedule herd's time until its rows were
    durable, `bench/herd.py`). Paused, the same objects are collected once,
    after the round. Reference counting frees almost all of them anyway; the
    pause only delays reclaiming cycles. A prepared round holds it through
    its wait too: re-enabled in between, the collector promoted the staged
    round's objects towards the old generation and cost a quarter more CPU
    per occurrence (`bench/spread.py` at 1,000 schedules). The holds are
    counted because a prepared round's does not nest in a round's.

    Re-enabled at the release, the collector's young pass fired at the next
    allocation: just after the round's launches, while its thousand runs
    were executing, so it scanned their tasks, coroutines and records (60,000
    objects and 19 ms at 1,000 every-minute schedules). At the quiet moment
    they are gone and the pass scans what lives on (9,000 objects, under
    2 ms). A loop that never goes quiet still collects: a hold taken with
    `_DEFERRED_MOST` young objects pending runs the pass first."""

    __slots__ = ("_deferred", "_holds", "_was_enabled")

    def __init__(self) -> None:
        self._holds = 0
        self._was_enabled = False
        self._deferred = False

    def hold(self) -> None:
        if self._holds == 0:
            if self._deferred:
                if gc.get_count()[0] >= _DEFERRED_MOST:
                    _collect_due()
            else:
                self._was_enabled = gc.isenabled()
                gc.disable()
        self._holds += 1

    def release(self) -> None:
        self._holds -= 1
        if self._holds == 0 and self._was_enabled:
            self._deferred = True

    def collect_deferred(self) -> None:
        """The pass deferred since the last release, then the collector on
        again; nothing while a hold stands or nothing was deferred."""
        if self._holds or not self._deferred:
            return
        self._deferred = False
        gc.enable()
        # A few young objects are left to the collector's own trigger: every
        # explicit pass counts towards a middle and an old one.
        if gc.get_count()[0] >= max(_QUIET_MIN, gc.get_threshold()[0] // 10):
            _collect_due()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self.hold()
        try:
            yield
        finally:
            self.release()


def _collect_due() -> None:
    """The pass CPython's own trigger would run now: a middle one every
    `threshold[1]` young ones, an old one every `threshold[2]` middle ones.
    An explicit young pass only counts towards them; their trigger, an
    allocation past the young threshold, no longer comes while the
    collector waits for the quiet moment."""
    _, middle, old = gc.get_count()
    _, middle_threshold, old_threshold = gc.get_threshold()
    gc.collect(2 if old > old_threshold else 1 if middle > middle_threshold else 0)


# One per process: the collector is.
_COLLECTOR = _CollectorPause()
# Young objects below which the quiet moment's pass is not run (at least;
# a tenth of the young threshold if more), and above which a hold runs the
# deferred pass first.
_QUIET_MIN: Final = 1_000
_DEFERRED_MOST: Final = 500_000


# Turns of the event loop a round with more to do waits before it starts: a
# run just launched that is done in one step needs three (its task's step,
# the host's group flush of its stop, its wake-up that reports it), one more
# spare. Its `executing` and terminal history rows are then decided in one
# round and written in one batch (one append and one index write per
# schedule instead of two): about a tenth of the CPU of a scheduled run.
_TURNS_BEFORE_NEXT_ROUND = 4


async def _let_ready_runs_report() -> None:
    """Yield to the runs that are ready before the next round (see
    `_TURNS_BEFORE_NEXT_ROUND`). Each turn only runs what is already ready:
    it never waits on time or on a run that is not."""
    for _ in range(_TURNS_BEFORE_NEXT_ROUND):
        await asyncio.sleep(0)


# The commands a round staged ahead of its instant may hold: admissions, the
# rows of occurrences not admitted, runtime records. Anything else (a block,
# a run to create or start after a recovery) comes from an event, and a
# round with events is never staged ahead.
_PREPARABLE = (AdmitOccurrence, RecordOccurrence, PersistRuntime)


@dataclass(slots=True)
class _Prepared:
    """A round decided and staged ahead of its instant (see `_prepare`)."""

    instant: datetime
    # The state it was decided from, and the state and commands decided.
    base: SchedulerState
    state: SchedulerState
    commands: tuple[Command, ...]
    staged: StagedRound
    # The host's admissions generation when its admissions were checked.
    generation: int


def _reraise_swallowed_cancel() -> None:
    """Stop the loop if it was cancelled and an await swallowed it: Python
    3.11's `asyncio.wait_for` (which a database driver's pool uses) returns a
    result that raced its cancellation instead of raising, and the loop would
    then sleep on, cancelled, never to end."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class SchedulerService:
    """The one scheduler of a store. See the module docstring."""

    def __init__(
        self,
        *,
        host: HostApi,
        schedules: SchedulesApi,
        config: SchedulerServiceConfig,
        clock: Clock,
        observer: SchedulerObserver | None = None,
    ) -> None:
        self._host = host
        # What the host can do, asked once: a runtime-checkable protocol's
        # `isinstance` walks its members, and the loop asked every second.
        self._preparing_host = host if isinstance(host, PreparingRunHost) else None
        self._sweeping_host = host if isinstance(host, SweepingHost) else None
        # Checked once: a protocol's `isinstance` walks its members every time.
        self._claim_listing_host = host if isinstance(host, ClaimListingHost) else None
        self._api = schedules
        # Told of recoveries, commits, decisions and rounds (metrics).
        self._observer: SchedulerObserver = observer or NullObserver()
        # The stores, their batches and the store's ownership.
        self._backend = schedules.backend
        self._config = config
        self._clock = clock
        self._state: SchedulerState = initial_state(max_concurrent_runs=config.max_concurrent_runs)
        # The bound `set_capacity` last set: a state rebuilt from the stores
        # starts from it, since a round that failed may have taken its event.
        self._capacity = config.max_concurrent_runs
        self._events: list[Event] = []
        self._dirty: set[str] = set()
        # Per schedule, the seq of the last lifecycle record fed to decide.
        self._consumed: dict[str, int] = {}
        # The lifecycle seq each schedule's `_state` has applied: `_consumed`
        # runs ahead of it while a round reads the logs, and the API folds the
        # records after it (`backfill_in_force`).
        self._applied_seq: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._running = False
        self._fenced = False
        # Whether the loop's clock wakes it when set (`Clock.watch_steps`).
        self._clock_watched = False
        # Whether this service leads (admits). A standby, or a leader whose
        # lease was lost, does not: it campaigns at every poll to take over.
        self._leading = False
        # Who leads the store, as this service last knew it (health).
        self.leadership: dict[str, Any] = {}
        # Stops hearing what other servers of the store change.
        self._unwatch: Callable[[], None] | None = None
        # Why the next resynchronization rebuilds the state (its log line).
        self._resync_why = _AFTER_A_FAILED_ROUND
        # Schedules whose lifecycle records this round feeds to decide: their
        # runtime record is rewritten so the consumed seq is durable.
        self._consumed_now: set[str] = set()
        # Per schedule, the held/waiting/lifecycle_seq of its last durable
        # runtime record (see `shell.service_commands`: a record that would
        # repeat it is not written).
        self._runtime_marks: dict[str, RuntimeMark] = {}
        self._idle = asyncio.Event()
        # Set by a round that failed part-way: decide's state may be ahead of
        # the stores, so the next round first rebuilds it from them.
        self._resync = False
        # Schedules about to reach decide for the first time: (id, creation
        # instant), to get a first runtime record before any of their rows.
        self._unseeded: list[tuple[str, str]] = []
        # The stages of a round and of its quiet moments, each in its own
        # module so that this one keeps to the loop.
        self._commands = CommandExecutor(
            host=host,
            schedules=schedules,
            clock=clock,
            reserve_chunk=_RESERVE_CHUNK,
            emit=self._emit,
            refused=self._refused,
            observer=self._observer,
        )
        self._housekeeping = Housekeeping(clock=clock, config=config)
        # The next instant's round, decided and staged ahead of it (`_prepare`),
        # and the last instant whose round was (tried to be) prepared: one
        # dropped or given up is decided at its instant, not prepared again.
        self._prepared: _Prepared | None = None
        self._tried_instant: datetime | None = None

    # --- public ---------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._running

    @property
    def prepare_ahead_s(self) -> float:
        """How long before an instant its round may be prepared (`_prepare`)."""
        return self._config.prepare_ahead_s

    @property
    def state(self) -> SchedulerState:
        """The core state after the last round (read-only; for inspection and tests)."""
        return self._state

    async def start(self) -> None:
        """Take ownership of the store, recover, and start the loop.

        Raises SchedulerUnavailable naming the holder when another process owns
        the store. With `standby` (a backend whose ownership can stand by, a
        database), a store someone else leads is no refusal: the service
        starts standing by and takes over when the leader is gone.
        """
        if self._running:
            return
        ownership = self._backend.ownership
        # Hear other servers' changes from before the recovery reads the
        # stores, so that nothing between the two goes unheard.
        self._unwatch = await self._backend.watch(self)
        if self._config.standby:
            if not ownership.stands_by:
                self._stop_watching()
                raise SchedulerUnavailable(
                    f"a standby scheduler needs a store several servers share (a PostgreSQL"
                    f" store); {ownership.path} is owned by one process",
                    data={"store": str(ownership.path)},
                )
            self._leading = await self._guarded(ownership.campaign())
        else:
            await self._guarded(ownership.acquire())
            self._leading = True
        self._housekeeping.started()
        if self._leading:
            try:
                # Recovery builds every schedule's events and state at once: no
                # collection inside it either (see `_CollectorPause`).
                with _COLLECTOR.paused():
                    recovery = await self._recover()
            except BaseException:
                self._stop_watching()
                try:
                    await self._backend.close_owned(owned=False, consistent=False)
                finally:
                    await ownership.release()
                raise
            self._events = recovery + self._events
        await self._know_leadership()
        self._host.add_run_listener(self._on_run_status)
        self._api.attach_service(self)
        self._running = True
        self._task = asyncio.create_task(self._loop(), name="wf-scheduler-loop")
        _log.info(
            "scheduler started on %s (%s)",
            ownership.path,
            "leading" if self._leading else "standing by",
        )

    async def _guarded(self, taking: Awaitable[_T]) -> _T:
        """`taking` (the ownership's), watching no more if it raises."""
        try:
            return await taking
        except BaseException:
            self._stop_watching()
            raise

    def _stop_watching(self) -> None:
        unwatch, self._unwatch = self._unwatch, None
        if unwatch is not None:
            unwatch()

    # --- what other servers of the store change (`StoreWatcher`) ------------------------

    def leadership_released(self) -> None:
        if self._running and not self._leading:
            self._wake.set()

    def changes_lost(self) -> None:
        if self._running and self._leading:
            self._resync = True
            self._resync_why = "after the store's change notices were lost"
            self._wake.set()

    @property
    def role(self) -> str:
        """ "leader" (it admits), "standby" (it waits to), or "off" (stopped).
        A leader whose lease is no longer assured says `standby` at once,
        not at its next round: a successor may lead already, and that round
        would step this one down before deciding anything."""
        if not self._running:
            return "off"
        leads = self._leading and not self._fenced and self._backend.ownership.assured
        return "leader" if leads else "standby"

    async def _know_leadership(self) -> None:
        """Note who leads the store (for health): this service, or the one
        the store names."""
        with contextlib.suppress(StoreUnavailable):
            self.leadership = dict(await self._backend.ownership.leader() or {})

    async def stop(self) -> list[str]:
        """Stop admitting, drain executing runs for up to `drain_grace_s`, release
        the lock. Returns the ids of runs still executing (they keep their
        executing marks)."""
        if not self._running:
            return []
        self._running = False
        self._wake.set()
        if self._task is not None:
            try:
                await self._task
            finally:
                self._task = None
        self._api.detach_service(self)
        self._stop_watching()
        still = await self._host.drain(self._config.drain_grace_s)
        ownership = self._backend.ownership
        if not self._leading:
            # A standby owns nothing: nothing to close or give up.
            await ownership.release()
            _log.info("scheduler stopped (standing by)")
            return still
        owned = await ownership.verify()
        if still and owned and isinstance(self._host, StopNotingHost):
            # While this process still owns the store: no other start can be
            # recovering these runs yet. A fenced one writes no note (the
            # store's writers refuse it anyway): recovery says the process died.
            await self._host.note_stopped("drain-expired", self._config.drain_grace_s)
        if still and not owned:
            _log.warning(
                "%d run(s) still executing after %.1fs of drain on a fenced store: their"
                " records are not written any more; the next start fails them as abandoned: %s",
                len(still),
                self._config.drain_grace_s,
                ", ".join(still),
            )
        elif still:
            _log.warning(
                "%d run(s) still executing after %.1fs of drain; they keep their executing"
                " marks and the next start fails them as abandoned (the drain ran out): %s",
                len(still),
                self._config.drain_grace_s,
                ", ".join(still),
            )
        if not owned:
            # Fenced: the store may be another's now, so closing writes
            # nothing; the next owner recovers as after a crash.
            _log.error("%s: it stops without writing the store", ownership.loss())
        consistent = owned and not (self._resync or self._fenced)
        if consistent:
            self._note_runs_checked()
        try:
            await self._backend.close_owned(owned=owned, consistent=consistent)
        finally:
            await ownership.release()
        if owned:
            _log.info("scheduler stopped")
        return still

    async def __aenter__(self) -> SchedulerService:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def settle(self, *, max_rounds: int = 1000) -> None:
        """Run rounds until nothing is left to do at the current instant (for tests
        on a manual clock): events answered, launched runs given a chance to report."""
        quiet = 0
        activity: int | None = None
        for _ in range(max_rounds):
            if not self._running:
                return
            self._idle.clear()
            self._wake.set()
            await self._idle.wait()
            for _ in range(10):
                await asyncio.sleep(0)
            # A store that answers over a network: what launched runs write is
            # in flight, and their reports come after it. Quiet means nothing
            # began since the last look either.
            seen, activity = activity, await self._backend.quiesce()
            began = seen is not None and activity != seen
            busy = self._events or self._dirty or self._resync or began
            quiet = 0 if busy else quiet + 1
            if quiet >= 2:
                return
        raise RuntimeError(f"the scheduler did not settle in {max_rounds} rounds")

    def set_capacity(self, max_concurrent_runs: int) -> None:
        """Change the execution-slot bound while running (lowering cancels
        nothing). InvalidInput unless it is an integer >= 1."""
        self._capacity = check_capacity(max_concurrent_runs)
        self._events.append(CapacityChanged(max_concurrent_runs=max_concurrent_runs))
        self._wake.set()

    # --- called by the API and the host ----------------------------------------------

    def schedule_changed(self, schedule_id: str) -> None:
        if self._running and not self._leading:
            # A standby decides nothing: it reads every schedule when it takes over.
            return
        self._dirty.add(schedule_id)
        self._wake.set()

    async def ensure_owner(self) -> None:
        """Raise SchedulerUnavailable unless this service still owns its store:
        the schedules API asks before every change."""
        ownership = self._backend.ownership
        if ownership.stands_by:
            # Every server of a shared store takes changes; each transaction
            # is its own, and a leader's is fenced inside it.
            return
        if not await ownership.verify():
            raise SchedulerUnavailable(
                f"{ownership.loss()} (or released): it no longer owns the store, so"
                " changes are refused; restart the scheduler",
                data={"lock": str(ownership.path)},
            )

    def live_view(self, schedule_id: str) -> LiveScheduleView | None:
        if not self._leading or schedule_id not in self._state.schedules:
            return None
        view = schedule_view(self._state, schedule_id)
        pending = tuple(sorted({*view.waiting, *((view.held,) if view.held else ())}))
        return LiveScheduleView(
            pending=pending,
            held=view.held,
            blocked=view.blocked,
            watermark=view.watermark,
            active=tuple(view.active),
            backfill=view.backfill,
            last_trigger=view.last_trigger,
            lifecycle_seq=self._applied_seq.get(schedule_id, 0),
        )

    async def records_damaged(self, problem: StoreProblem) -> None:
        """A read found damaged records (a history page): block the schedule."""
        known = self._state.schedules.get(problem.schedule_id)
        if known is not None and known.blocked is not None:
            return
        self._events.extend(await self._damaged(problem.schedule_id, problem))
        self._wake.set()

    def _on_run_status(
        self, run_id: str, status: str, origin: Mapping[str, Any] | None, message: str | None
    ) -> None:
        if not self._running or origin is None or origin.get("kind") != "schedule":
            return
        if not self._leading:
            # A standby decides nothing; taking over reads every run anew.
            return
        if status not in RUN_STATUSES or status == "admitted":
            return
        self._events.append(
            RunStatusChanged(
                schedule_id=origin["schedule_id"],
                instant=parse_instant(origin["instant"]),
                run_id=run_id,
                status=status,  # type: ignore[arg-type]
                message=message,
            )
        )
        self._wake.set()

    # --- the loop ---------------------------------------------------------------------

    async def _loop(self) -> None:
        # A clock that tells of its steps wakes the loop when it is set, so
        # an idle loop need not look at it every `poll_interval_s`.
        watch = getattr(self._clock, "watch_steps", None)
        stop_watching_clock = watch(self._wake.set) if watch is not None else None
        self._clock_watched = stop_watching_clock is not None
        try:
            await self._loop_rounds()
        finally:
            self._clock_watched = False
            if stop_watching_clock is not None:
                stop_watching_clock()
            self._drop_prepared()
            _COLLECTOR.collect_deferred()

    async def _loop_rounds(self) -> None:
        while self._running:
            self._wake.clear()
            began = time.perf_counter()
            try:
                if not self._leading:
                    await self._campaign()
                if self._leading and self._resync and not self._fenced:
                    await self._resynchronize()
                if self._leading:
                    await self._round()
                if self._leading:
                    await self._sweep()
                if not (self._events or self._dirty):
                    self._housekeeping_if_quiet()
            except StoreFenced:
                # Another process owns the store now: deciding again from the
                # stores would only be refused again.
                await self._lose_leadership()
            except Exception as exc:
                self._round_failed(exc)
                self._resync = True
            else:
                self._api.store_health.succeeded("scheduler")
            self._observer.round_finished(time.perf_counter() - began)
            _reraise_swallowed_cancel()
            if self._events or self._dirty:
                await _let_ready_runs_report()
                continue
            # A fenced service decides nothing, so what is due stays due: waking
            # for it would spin. It only looks at its lock again now and then;
            # a standby, at the lease, as often.
            due = None if self._fenced or not self._leading else next_wakeup(self._state)
            if due is not None and self._may_prepare(due, self._clock.now()):
                await self._prepare(due)
                if self._events or self._dirty:
                    continue
            _COLLECTOR.collect_deferred()
            self._idle.set()
            now = self._clock.now()
            deadline = now + timedelta(seconds=self._look_interval_s())
            if due is not None:
                wake = due
                if self._prepares(due):
                    # Wake `prepare_ahead_s` before the instant to prepare it.
                    wake = max(now, due - timedelta(seconds=self._config.prepare_ahead_s))
                if wake < deadline:
                    deadline = wake
            if self._running:
                await self._clock.sleep_until(deadline, self._wake)
        self._idle.set()

    def _look_interval_s(self) -> float:
        """The longest the loop sleeps before it looks again with nothing due
        sooner: `poll_interval_s`, or `quiet_poll_interval_s` when nothing
        but the next instant is waited for (a clock that tells of its steps,
        a store this process alone owns and leads, healthy rounds)."""
        poll = self._config.poll_interval_s
        if (
            self._clock_watched
            and self._leading
            and not (self._fenced or self._resync)
            and not self._backend.ownership.stands_by
        ):
            return max(poll, self._config.quiet_poll_interval_s)
        return poll

    def _housekeeping_if_quiet(self) -> None:
        """The quiet-moment work (`shell/service_housekeeping.py`), for a
        running scheduler whose state matches the stores."""
        upkeep = self._backend.upkeep
        if not self._running or upkeep is None or self._resync or self._fenced:
            return
        self._note_runs_checked()
        self._housekeeping.if_quiet(upkeep, self._state)

    def _note_runs_checked(self) -> None:
        """Tell the upkeep where the run records stand, for the next startup
        checkpoint: every run written before was checked by this start or
        admitted by this scheduler with its row (`core.recovery_checks.
        claims_since`). Only while the state matches the stores (the callers
        check)."""
        upkeep, host = self._backend.upkeep, self._claim_listing_host
        if upkeep is not None and host is not None:
            upkeep.note_runs_checked(host.run_records_position())

    def _round_failed(self, exc: Exception) -> None:
        """Log a failed round; one the store refused makes the store health
        degraded until a round completes (`shell.store_health`)."""
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, OSError | StoreUnavailable):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            _log.exception(
                "scheduler round failed; its state is rebuilt from the stores before"
                " the next round, after the poll interval"
            )
            return
        health = self._api.store_health
        error = (
            cause
            if isinstance(cause, StoreUnavailable)
            else StoreUnavailable.from_os_error(cause, operation="scheduler round")
        )
        # A full disk fails every round: the traceback once, then one line each.
        first = not health.is_failing("scheduler")
        health.failed("scheduler", error)
        _log.error(
            "scheduler round failed: %s; retried after the poll interval, from the stores",
            error.message,
            exc_info=exc if first else None,
        )

    def _fence(self) -> None:
        """This process no longer owns the store: stop deciding, for good."""
        if not self._fenced:
            _log.error(
                "%s: admissions are stopped; restart the scheduler",
                self._backend.ownership.loss(),
            )
        self._fenced = True
        self._resync = False
        self._drop_prepared()
        # Dropped, not kept: nothing is decided any more, and a change left
        # pending would make the loop go round without ever sleeping.
        self._events.clear()
        self._dirty.clear()

    async def _lose_leadership(self) -> None:
        """Leadership lost (a lease not renewed in time, a takeover): a
        backend whose ownership stands by steps down and campaigns again;
        the others are fenced for good."""
        ownership = self._backend.ownership
        if not ownership.stands_by:
            self._fence()
            return
        self._drop_prepared()
        _log.error("%s: admissions are stopped; standing by to lead again", ownership.loss())
        await ownership.step_down()
        self._leading = False
        # What it knew is the old leadership's: the next leader, this one
        # again or another, rebuilds from the store.
        self._state = initial_state(max_concurrent_runs=self._capacity)
        self._drop_what_the_store_tells_again()
        self._consumed, self._consumed_now, self._unseeded = {}, set(), []
        self._applied_seq = {}
        self._resync = False
        await self._know_leadership()

    def _drop_what_the_store_tells_again(self) -> None:
        """Not leading: forget the changes and run reports heard (taking over
        reads the store whole); capacity changes are this server's own."""
        self._events = [e for e in self._events if isinstance(e, CapacityChanged)]
        self._dirty.clear()

    async def _campaign(self) -> None:
        """Standing by: take over if no one leads; then rebuild from the
        store, as a start does (instants missed meanwhile are decided by each
        schedule's misfire policy)."""
        if not await self._backend.ownership.campaign():
            # Heard while starting: the store is read whole on taking over.
            self._drop_what_the_store_tells_again()
            await self._know_leadership()
            return
        await self._know_leadership()
        self._leading = True
        self._resync = True
        self._resync_why = "on taking over the leadership"
        _log.warning(
            "took over the leadership of %s at epoch %s",
            self._backend.ownership.path,
            self.leadership.get("epoch"),
        )

    async def _sweep(self) -> None:
        """Leading a store several servers share: fail the runs of servers
        found dead (the host tells the service of each, as of its own runs).
        The database away is logged: the next loop sweeps again."""
        host = self._sweeping_host
        if host is None:
            return
        try:
            await host.sweep_abandoned(asyncio.get_running_loop().time())
        except StoreUnavailable as exc:
            _log.warning("could not sweep the runs of dead servers: %s", exc.message)

    async def _round(self) -> None:
        if self._fenced:
            return
        if not await self._backend.ownership.verify():
            await self._lose_leadership()
            return
        with _COLLECTOR.paused():
            after = await self._decide_and_commit()
            await self._commands.launch(after)

    async def _decide_and_commit(self) -> CommittedRound:
        """Decide, stage every write and make them durable: the part of a
        round that decides how late a herd is admitted."""
        prepared, self._prepared = self._prepared, None
        if prepared is not None:
            if self._prepared_holds(prepared):
                now = self._clock.now()
                if now < prepared.instant:
                    # Woken before the instant with nothing new: nothing is due
                    # before it (it is the next wake-up), and the round stays.
                    self._prepared = prepared
                    return CommittedRound()
                if commits_as_decided(prepared.base, prepared.commands, prepared.instant, now):
                    self._state = prepared.state
                    self._housekeeping.touch((), prepared.commands)
                    self._observer.prepared("committed")
                    try:
                        return await self._commands.finish(prepared.staged)
                    finally:
                        # The round's own pause goes on until its launches.
                        _COLLECTOR.release()
            self._prepared = prepared
            self._drop_prepared()
        events = await self._take_events()
        contradicted = [e for e in events if isinstance(e, RecordsContradicted)]
        now = self._clock.now()
        self._state, commands = decide(self._state, now, events)
        self._housekeeping.touch(events, commands)
        persisted = {c.schedule_id for c in commands if isinstance(c, PersistRuntime)}
        consumed, self._consumed_now = self._consumed_now, set()
        if events or consumed:
            self._applied_seq = dict(self._consumed)
        extra: list[Command] = []
        for schedule_id in sorted(consumed - persisted):
            if schedule_id in self._state.schedules:
                view = schedule_view(self._state, schedule_id)
                if view.blocked is not None:
                    # Its files stay as found, as decide leaves them (no
                    # PersistRuntime for a blocked schedule).
                    continue
                extra.append(
                    PersistRuntime(
                        schedule_id=schedule_id,
                        watermark=view.watermark,
                        held=view.held,
                        waiting=view.waiting,
                        backfill=view.backfill,
                    )
                )
        return await self._commands.commit(
            (*commands, *extra),
            now,
            consumed=self._consumed,
            runtime_marks=self._runtime_marks,
            contradicted=contradicted,
        )

    # --- rounds prepared ahead of their instant --------------------------------------

    def _may_prepare(self, due: datetime, now: datetime) -> bool:
        """Whether to decide and stage the round of `due` at `now`, ahead of
        it (`_prepares`, and `due` is within `prepare_ahead_s`)."""
        ahead = timedelta(seconds=self._config.prepare_ahead_s)
        return now < due <= now + ahead and self._prepares(due)

    def _prepares(self, due: datetime) -> bool:
        """Whether the round of `due` is to be prepared ahead of it: nothing
        is pending, the stores are this process's alone (nothing else changes
        what the round read), and `due` was not tried before (a round
        dropped once is decided at its instant: in a store whose runs report
        all the time, each instant costs one wasted preparation at most)."""
        if self._config.prepare_ahead_s <= 0 or self._prepared is not None:
            return False
        if due == self._tried_instant or not self._backend.prepares_ahead:
            return False
        return self._preparing_host is not None and self._undisturbed()

    def _undisturbed(self) -> bool:
        """Nothing heard or pending that a round would feed to decide."""
        return (
            self._running
            and self._leading
            and not self._fenced
            and not self._resync
            and not self._events
            and not self._dirty
            and not self._consumed_now
            and not self._unseeded
        )

    async def _prepare(self, instant: datetime) -> None:
        """Decide the round of `instant` now, with no events, and stage its
        writes (rows, runtime records, run records, run ids reserved); at the
        instant only its commit is left (`_decide_and_commit`). It is the
        round a scheduler woken exactly at the instant would decide, and it
        is committed only if it still is: nothing heard meanwhile, the
        state and the host's deployments unchanged, and every occurrence it
        admits still on time (`core.prepared`); else it is dropped,
        nothing of it written, and the round is decided anew."""
        host = self._preparing_host
        assert host is not None
        self._tried_instant = instant
        base = self._state
        generation = host.admissions_generation()
        # Held until the prepared round is committed or dropped.
        _COLLECTOR.hold()
        staged = None
        try:
            state, decided = decide(base, instant, [])
            commands = tuple(decided)
            if commands and all(isinstance(c, _PREPARABLE) for c in commands):
                staged = await self._commands.stage(
                    commands,
                    instant,
                    consumed=self._consumed,
                    runtime_marks=self._runtime_marks,
                    contradicted=(),
                    ahead=True,
                )
        except Exception as exc:
            # The round at the instant meets the same and handles it.
            _log.debug("round of %s not prepared: %s", format_instant(instant), exc)
        finally:
            if staged is None:
                _COLLECTOR.release()
        if staged is None:
            return
        prepared = _Prepared(
            instant=instant,
            base=base,
            state=state,
            commands=commands,
            staged=staged,
            generation=generation,
        )
        self._prepared = prepared
        if not self._prepared_holds(prepared):
            self._drop_prepared()

    def _prepared_holds(self, prepared: _Prepared) -> bool:
        """Nothing happened since `prepared` was decided that decide or the
        host's checks would have seen."""
        host = self._preparing_host
        assert host is not None
        return (
            self._undisturbed()
            and self._state is prepared.base
            and host.admissions_generation() == prepared.generation
        )

    def _drop_prepared(self) -> None:
        prepared, self._prepared = self._prepared, None
        if prepared is not None:
            self._observer.prepared("dropped")
            try:
                self._commands.drop(prepared.staged)
            finally:
                _COLLECTOR.release()

    async def _resynchronize(self) -> None:
        """Rebuild the state from the stores and the run API, as a start does.

        A round that failed part-way (a write that raised, a run that could not
        be created or launched) leaves decide's state ahead of the stores:
        admissions in flight that no row records, a watermark past instants
        that have no row, events taken and lost. The stores are the truth, and
        part of the failed batch may be durable all the same. Runs executing
        in this process are tracked as they are now; capacity changes not yet
        applied are kept.
        """
        self._drop_prepared()
        pending = [e for e in self._events if isinstance(e, CapacityChanged)]
        self._events, self._dirty = [], set()
        self._consumed, self._consumed_now = {}, set()
        self._applied_seq = {}
        self._state = initial_state(max_concurrent_runs=self._capacity)
        recovery = await self._recover()
        # Run reports that arrived during the recovery are newer than it.
        self._events = [*recovery, *pending, *self._events]
        self._resync = False
        _log.warning("scheduler state rebuilt from the stores %s", self._resync_why)
        self._resync_why = _AFTER_A_FAILED_ROUND

    async def _take_events(self) -> list[Event]:
        events, self._events = self._events, []
        dirty, self._dirty = self._dirty, set()
        for schedule_id in sorted(dirty):
            events.extend(await self._lifecycle_events(schedule_id))
        await self._seed_runtimes()
        return events

    async def _lifecycle_events(self, schedule_id: str) -> list[Event]:
        after = self._consumed.get(schedule_id, 0)
        try:
            records = await self._backend.definitions.records_after(schedule_id, after)
        except StoreDamaged as exc:
            return await self._damaged(schedule_id, exc.problem)
        events: list[Event] = []
        for record in records:
            try:
                event = lifecycle_event(schedule_id, record)
                if schedule_id in self._state.schedules:
                    event = await with_history(event, self._backend.history)
                events.append(event)
            except (InvalidDefinition, ValueError, KeyError) as exc:
                return [*events, *await self._damaged_record(schedule_id, record, str(exc))]
            except StoreDamaged as exc:
                return [*events, *await self._damaged(schedule_id, exc.problem)]
            self._consumed[schedule_id] = record["seq"]
            self._consumed_now.add(schedule_id)
        if schedule_id not in self._state.schedules and events:
            await self._backend.history.recover(schedule_id)
            if records[0]["seq"] == 1:
                self._unseeded.append((schedule_id, records[0]["at"]))
        return events

    async def _damaged(self, schedule_id: str, problem: StoreProblem) -> list[Event]:
        if schedule_id not in self._state.schedules:
            await self._block_unknown(schedule_id, problem)
            return []
        return [
            RecordsContradicted(
                schedule_id=schedule_id,
                file=problem.file,
                record=problem.record,
                reason=problem.reason,
            )
        ]

    async def _damaged_record(
        self, schedule_id: str, record: Mapping[str, Any], reason: str
    ) -> list[Event]:
        problem = StoreProblem(
            schedule_id=schedule_id,
            file=self._backend.locate(schedule_id, "lifecycle"),
            record=f"seq {record.get('seq')}",
            reason=reason,
        )
        return await self._damaged(schedule_id, problem)

    async def _block_unknown(self, schedule_id: str, problem: StoreProblem) -> None:
        """A schedule decide cannot know (no definition can be rebuilt): persist
        the diagnostic so `get_schedule` shows it; nothing else can happen."""
        _log.error("schedule %s is blocked: %s", schedule_id, problem.describe())
        try:
            await self._backend.definitions.set_blocked(
                schedule_id, problem.as_dict(), at=self._clock.now()
            )
        except SchedulingError as exc:
            _log.error("could not persist the diagnostic of %s: %s", schedule_id, exc)

    # --- recovery ---------------------------------------------------------------------

    async def _recover(self) -> list[Event]:
        # Marks are found afresh; the other ledgers carry over.
        self._runtime_marks = {}
        # Whatever a crash (or a failed round) left half-applied reaches the
        # stores before the recovery below reads them again.
        await self._backend.open_owned()
        recovery = StartupRecovery(
            host=self._host,
            schedules=self._api,
            block_unknown=self._block_unknown,
            damaged_record=self._damaged_record,
            at_start=not self._running,
        )
        try:
            found = await recovery.recover()
        except BaseException:
            # What it found before failing is kept, as the ledgers kept it
            # when recovery filled them in place.
            self._keep_recovered(recovery.found)
            raise
        self._keep_recovered(found)
        self._observer.recovered(found.events)
        await self._seed_runtimes()
        self._backend.after_recovery()
        return list(found.events)

    def _keep_recovered(self, found: Recovered) -> None:
        self._consumed.update(found.consumed)
        self._consumed_now.update(found.consumed_now)
        self._unseeded.extend(found.unseeded)
        self._runtime_marks.update(found.runtime_marks)

    async def _seed_runtimes(self) -> None:
        """Make a first runtime record durable (creation consumed, nothing
        decided) for each schedule decide is about to see for the first time.

        A schedule's rows and runtime record share a group commit, where the
        runtime record is a late write: without an earlier record, a crash
        between the two would leave rows and no runtime record at all, which a
        start must take for damage (the record was lost) and block."""
        unseeded, self._unseeded = self._unseeded, []
        if not unseeded:
            return
        backend = self._backend
        batch = backend.new_batch()
        now = self._clock.now()
        try:
            for schedule_id, created_at in unseeded:
                backend.runtime.stage(
                    batch,
                    schedule_id,
                    watermark=created_at,
                    held=None,
                    lifecycle_seq=1,
                    written_at=now,
                )
            await backend.commit(batch)
        except BaseException:
            if batch.state == "open":
                batch.abort()
            raise
        for schedule_id, _ in unseeded:
            self._runtime_marks[schedule_id] = (None, (), 1, None)

    # --- called by the executor ----------------------------------------------------

    def _emit(self, event: Event) -> None:
        """Queue an event the executor produced for the next round."""
        self._events.append(event)

    async def _refused(self, schedule_id: str, exc: SchedulingError) -> None:
        """The store refused a write of `schedule_id` in a group commit: block it
        (unless it is blocked already)."""
        sched = self._state.schedules.get(schedule_id)
        if sched is not None and sched.blocked is not None:
            # The run store keeps what the history could not take; the next
            # start after a repair reconciles the two.
            _log.warning(
                "schedule %s is blocked and its store refused a write: %s", schedule_id, exc
            )
            return
        if isinstance(exc, StoreDamaged):
            problem = exc.problem
        else:
            problem = StoreProblem(
                schedule_id=schedule_id,
                file=self._backend.locate(schedule_id, "history"),
                record="next row",
                reason=f"the store refused a write: {exc.message}",
            )
        self._events.extend(await self._damaged(schedule_id, problem))
        self._wake.set()


def build_scheduler_service(
    server: Any,
    config: SchedulerServiceConfig | None = None,
    *,
    clock: Clock | None = None,
    observer: SchedulerObserver | None = None,
) -> SchedulerService:
    """The scheduler service for a server built with `schedules=True`, on the
    stores of its schedules API (`SchedulesApi.backend`).

    `clock` (default: the system clock) is shared with the server's schedules
    API so lifecycle instants and decisions read the same time. Raises
    SchedulerUnavailable when the server has no schedules API. `observer`
    (`shell.observer`) is told of recoveries, decisions, commits and rounds.
    """
    schedules = getattr(server.api, "schedules", None)
    if not isinstance(schedules, SchedulesApi):
        raise SchedulerUnavailable(
            "this server was built without schedules: use"
            " build_local_static_workflow_server(root, schedules=True)"
        )
    chosen = clock or schedules.clock or SystemClock()
    schedules.clock = chosen
    return SchedulerService(
        host=server.api,
        schedules=schedules,
        config=config or SchedulerServiceConfig(enabled=True),
        clock=chosen,
        observer=observer,
    )
