"""The run store: one record per run, cached in memory.

The records (frames of the run log under `<root>/run-log/`, run_log.py, or
rows of `wf_runs`: persistence.py) are the truth; the cache (run_cache.py:
finished runs as their status, read again from the log when asked, or as
their JSON) is what this process last wrote or read, and
answers every read, except on a store several servers share, where the
API's reads go to the store (`fetch`, `fetch_page`, `refresh`) and the runs
of a server found dead are failed by the leader (`abandoned_by`). Every
change goes through `put` (or `put_many`/`commit`, which group-commit many
records with one flush or transaction), which writes the whole record
durably before the cache is updated. `load` is startup recovery: it reads
every record (a finished run of the log by its status alone), reports what
it cannot use, and fails dead attempts closed (recovery.py). Per-run asyncio
locks serialize the read-check-write transitions of one run across
concurrent API calls and its execution task.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import bisect
import collections
import contextlib
import itertools
import json
import logging
from array import array
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Final

from pydantic import ValidationError

from core.errors import InvalidInput, InvalidState, NotFound, Problem, StoreUnavailable
from core.occurrences import RUN_STATUSES
from shell.durable import fault_point, faults_injected
from shell.store_ports import BatchPort

from .identifiers import format_run_id, parse_run_id
from .persistence import (
    RunChanged,
    RunPersistence,
    SharedRunPersistence,
    Stored,
    answer_from_cache,
)
from .records import STOP_STATUSES, RunRecord, check_consistency, schedule_id_of
from .recovery import recover_record
from .run_cache import RunCache
from .run_claims import UNKNOWN_ORIGIN

__all__ = ["MAX_PAGE", "NEWEST_SCAN", "RunStore", "check_run_id"]

MAX_PAGE: Final = 100
# The most records a newest-first page filtered by status examines (see
# `RunStore._page_newest`): about 6 ms at any size of the store.
NEWEST_SCAN: Final = 10_000
_log = logging.getLogger("adapters.host.runs")


def check_run_id(run_id: Any) -> int:
    """The number of `run_id`. InvalidInput if it is not a run id at all."""
    number = parse_run_id(run_id)
    if number is None:
        raise InvalidInput.from_problems(
            "run id",
            [Problem(field="run_id", reason=f"{run_id!r} is not a run id like 'run-000001'")],
        )
    return number


def _encode_cursor(after: int, key: str = "after") -> str:
    raw = json.dumps({key: after}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: Any, key: str = "after") -> int:
    bad = InvalidInput.from_problems(
        "cursor", [Problem(field="cursor", reason="is not a cursor returned by list_runs")]
    )
    if not isinstance(cursor, str) or not cursor:
        raise bad
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
    except (binascii.Error, ValueError):
        raise bad from None
    # A newest-first page's cursor says "before", an oldest-first one "after":
    # neither is taken for the other.
    after = data.get(key) if isinstance(data, dict) else None
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise bad
    return after


class RunStore:
    def __init__(self, persistence: RunPersistence) -> None:
        self._persistence = persistence
        self._shared = persistence if isinstance(persistence, SharedRunPersistence) else None
        self._records = RunCache(self._read_finished)
        # The numbers of `_records`, ascending: a page is a bisect and `limit`
        # reads, not a sort of every run (the scheduler pages them all at
        # start). An array: 8 bytes a run, not a list's pointer and integer.
        self._order = array("Q")
        # Records that exist in the store but cannot be used: number -> finding.
        self._broken: dict[int, dict[str, Any]] = {}
        # Numbers of new records a scheduler batch holds, not yet durable: taken
        # (`exists`), so that no other admission writes the same run meanwhile.
        self._staged: set[int] = set()
        # The locks of the runs someone holds or awaits (see `_RunLock`).
        self._locks: dict[str, _RunLock] = {}
        # Records waiting for this turn's group commit (see `commit`).
        self._pending: list[tuple[RunRecord, asyncio.Future[None]]] = []
        self._flush_loop: asyncio.AbstractEventLoop | None = None
        # The flushes under way (the loop keeps only weak references to tasks).
        self._flushes: set[asyncio.Task[None]] = set()

    async def load(
        self,
        now: Callable[[], str],
        *,
        recover: bool = True,
        dead_servers: AbstractSet[str] | None = None,
        silent_servers: AbstractSet[str] = frozenset(),
    ) -> list[dict[str, Any]]:
        """Startup recovery of every record (see recovery.py). Returns the findings.
        Without `recover`, records are read and checked only: nothing is
        written, and an attempt that was executing stays as it is (moving a
        store copies what it holds; the server that opens the copy recovers).
        `dead_servers` (a store several servers share): an attempt whose mark
        names a server is recovered only if that server is among them; the
        others are executing elsewhere. `silent_servers`: those of them
        declared gone for their silence, not known dead (what the failure
        says)."""
        findings: list[dict[str, Any]] = []
        async for stored in self._persistence.load():
            if stored.key is None:
                findings.append(
                    {
                        "run_id": None,
                        "file": stored.location,
                        "finding": stored.finding,
                        "reason": stored.error,
                    }
                )
                continue
            findings.extend(
                await self._load_one(
                    stored.key,
                    stored,
                    now,
                    recover=recover,
                    dead_servers=dead_servers,
                    silent_servers=silent_servers,
                )
            )
        self._adopt_finished(self._persistence.finished_codes())
        for finding in findings:
            _log.warning("run store recovery: %s", finding)
        return findings

    def _adopt_finished(self, codes: bytes) -> None:
        """Cache the finished runs a load handed over at once (`codes`: by run
        number, a finished status's code or 0): their records are parsed and
        checked when read (`_read_finished`), not by every start."""
        if not codes.strip(b"\x00"):
            return
        # The runs the load cached already (read whole, or failed as
        # abandoned and so finished now) keep their entries and place.
        handed = bytearray(codes)
        for number in self._order:
            if number < len(handed):
                handed[number] = 0
        self._records.adopt_finished(bytes(handed))
        finished = itertools.compress(range(len(handed)), handed)
        # Two sorted runs of distinct numbers, merged.
        self._order = array("Q", sorted(itertools.chain(self._order, finished)))

    def _check(self, number: int, stored: Stored[int | None]) -> RunRecord | dict[str, Any]:
        """The stored record, checked; or the finding that says why it
        cannot be used (then kept among the broken ones)."""
        run_id = format_run_id(number)

        def broken(finding: str, reason: str) -> dict[str, Any]:
            entry = {
                "run_id": run_id,
                "file": stored.location,
                "finding": finding,
                "reason": reason,
            }
            self._broken[number] = entry
            return entry

        if stored.error is not None:
            return broken("unreadable", stored.error)
        try:
            record = _parse(stored)
        except ValueError as exc:
            # pydantic's ValidationError is a ValueError; keep its first lines only.
            reason = str(exc) if not isinstance(exc, ValidationError) else _summary(exc)
            return broken("unreadable", reason)
        if record.run_id != run_id:
            return broken(
                "unreadable",
                f"record names run {record.run_id!r}, {self._persistence.key_name} is {run_id}",
            )
        contradiction = check_consistency(record)
        if contradiction is None and stored.columns is not None:
            contradiction = _columns_contradiction(record, stored.columns)
        if contradiction is not None:
            return broken("contradictory", contradiction)
        return record

    async def _load_one(
        self,
        number: int,
        stored: Stored[int | None],
        now: Callable[[], str],
        *,
        recover: bool,
        dead_servers: AbstractSet[str] | None,
        silent_servers: AbstractSet[str],
    ) -> list[dict[str, Any]]:
        record = self._check(number, stored)
        if isinstance(record, dict):
            return [record]
        server = record.executing.server if record.executing is not None else None
        elsewhere = dead_servers is not None and server is not None and server not in dead_servers
        if record.status != "running" or not recover or elsewhere:
            self._remember(number, record, stored.raw)
            return []
        recovered = recover_record(record, now(), server_gone=server in silent_servers)
        if recovered is None:
            self._remember(number, record)
            return []
        failed, finding = recovered
        # Cached first: recovery rewrites a record it read, never creates one.
        self._remember(number, record)
        await self.put(failed)
        return [{**finding, "file": stored.location}]

    # --- a store several servers share ------------------------------------------------

    @property
    def shared(self) -> bool:
        """Whether other servers write this store too (see persistence.py)."""
        return self._shared is not None

    @property
    def server_id(self) -> str | None:
        """The id executing marks name on a shared store; None otherwise."""
        return self._shared.server_id if self._shared is not None else None

    def cached(self, number: int) -> RunRecord | None:
        """What the cache holds of run `number` (no read, no check)."""
        return self._records.get(number)

    def _take(self, stored: Stored[int | None]) -> RunRecord | None:
        """Cache a record read from a shared store (or note it broken)."""
        number = stored.key
        if number is None:
            return None
        if stored.columns and stored.columns.get("stale"):
            # Read before this server's own newer write landed: keep the newer.
            return self._records.get(number)
        record = self._check(number, stored)
        if isinstance(record, dict):
            self._forget(number)
            return None
        self._broken.pop(number, None)
        self._remember(number, record)
        return record

    async def refresh(self, number: int) -> RunRecord | None:
        """Read run `number` from a shared store into the cache (what another
        server wrote); the record, or None (none, or broken). On a store no
        one else writes, the cache is the store: nothing is read."""
        if self._shared is None:
            return self._records.get(number)
        try:
            stored = await self._shared.read(number)
        except StoreUnavailable as exc:
            answer_from_cache(exc)
            return self._records.get(number)
        if stored is None:
            return None
        return self._take(stored)

    async def fetch(self, run_id: Any) -> RunRecord:
        """`get`, as the store has it now (read through on a shared store)."""
        number = check_run_id(run_id)
        await self.refresh(number)
        return self.get(run_id)

    async def fetch_page(
        self, status: Any, cursor: Any, limit: Any, newest_first: Any = False
    ) -> tuple[list[RunRecord], str | None]:
        """`page`, read from a shared store (and cached); the cache otherwise."""
        if self._shared is None:
            return self.page(status, cursor, limit, newest_first)
        self._check_page(status, limit, newest_first)
        try:
            if newest_first:
                before = None if cursor is None else _decode_cursor(cursor, "before")
                rows = await self._shared.read_page(
                    status=status, after=None, before=before, limit=limit + 1
                )
            else:
                after = 0 if cursor is None else _decode_cursor(cursor)
                rows = await self._shared.read_page(
                    status=status, after=after, before=None, limit=limit + 1
                )
        except StoreUnavailable as exc:
            answer_from_cache(exc)
            return self.page(status, cursor, limit, newest_first)
        chosen = [record for record in map(self._take, rows[:limit]) if record is not None]
        last = rows[limit - 1].key if len(rows) > limit else None
        if last is None:
            return chosen, None
        return chosen, _encode_cursor(last, "before" if newest_first else "after")

    async def fetch_claims(
        self, cursor: Any, limit: Any
    ) -> tuple[list[tuple[str, str, Any]], str | None]:
        """The page `fetch_page(None, cursor, limit)` gives, each run as its id,
        status and origin. A finished run the persistence reads again
        (`rereads`) is taken by its origin alone (`reread_origins`: the one
        the run log keeps, else its frame's), not parsed and checked whole:
        a start without a checkpoint to go by lists every run kept, and its
        record is checked when it is read. An origin not at hand so (a
        record unreadable now) is read whole."""
        if self._shared is not None:
            records, next_cursor = await self.fetch_page(None, cursor, limit, False)
            return [(r.run_id, r.status, r.origin) for r in records], next_cursor
        self._check_page(None, limit, False)
        after = 0 if cursor is None else _decode_cursor(cursor)
        order = self._order
        start = bisect.bisect_right(order, after)
        chosen = order[start : start + limit]
        reread_status = self._records.reread_status
        finished = {number: status for number in chosen if (status := reread_status(number))}
        taken: dict[int, tuple[str, str, Any]] = {}
        origins = self._persistence.reread_origins(list(finished))
        for (number, status), origin in zip(finished.items(), origins, strict=True):
            if origin is not UNKNOWN_ORIGIN:
                taken[number] = (format_run_id(number), status, origin)
        claims: list[tuple[str, str, Any]] = []
        for number in chosen:
            claim = taken.get(number)
            if claim is not None:
                claims.append(claim)
                continue
            record = self._records.get(number)  # None: found unreadable now
            if record is not None:
                claims.append((record.run_id, record.status, record.origin))
        more = start + limit < len(order)
        return claims, _encode_cursor(chosen[-1]) if more else None

    def close(self) -> None:
        """Close the persistence's files (`RunPersistence.close`)."""
        self._persistence.close()

    def position(self) -> str | None:
        """Where the records stand now (`RunPersistence.position`)."""
        return self._persistence.position()

    async def changed_since(self, position: str) -> list[RunRecord] | None:
        """Every run not finished and every run whose record was written after
        `position`, oldest first, less those found unreadable; None when the
        persistence cannot tell."""
        written = self._persistence.written_since(position)
        if written is None:
            return None
        numbers = {n for n in written if n in self._records}
        numbers.update(self._records.live())
        return self._readable(sorted(numbers))

    async def abandoned_by(
        self, dead_servers: AbstractSet[str], silent: AbstractSet[str], now: Callable[[], str]
    ) -> tuple[list[RunRecord], list[dict[str, Any]]]:
        """Fail the attempts executing on `dead_servers` (never this one's) as
        recovery fails a dead attempt; `silent`: those declared gone for
        their silence (see `load`). The failed records and their findings; a
        run another server changed meanwhile is left to it."""
        failed: list[RunRecord] = []
        findings: list[dict[str, Any]] = []
        if self._shared is None:
            return failed, findings
        for stored in await self._shared.read_executing():
            record = self._take(stored)
            mark = record.executing if record is not None else None
            if record is None or mark is None or mark.server is None:
                continue
            if mark.server not in dead_servers or mark.server == self.server_id:
                continue
            recovered = recover_record(record, now(), server_gone=mark.server in silent)
            if recovered is None:
                continue
            async with self.lock(record.run_id):
                try:
                    await self.put(recovered[0])
                except RunChanged:
                    await self.refresh(stored.key or 0)
                    continue
            failed.append(recovered[0])
            findings.append({**recovered[1], "file": stored.location})
            _log.warning("run %s failed: %s", record.run_id, recovered[1]["reason"])
        return failed, findings

    def _forget(self, number: int) -> None:
        if self._records.pop(number):
            index = bisect.bisect_left(self._order, number)
            if index < len(self._order) and self._order[index] == number:
                del self._order[index]

    def records(self) -> list[RunRecord]:
        """Every readable record, by run number."""
        return self._readable(list(self._order))

    def highest_number(self) -> int:
        """The highest run number with a record in the store (readable or not), or 0."""
        return max(self._order[-1] if self._order else 0, *self._broken, 0)

    def unstorable(self, field: str, value: Any) -> list[Problem]:
        """What in `value` (JSON at `field`) the persistence cannot store: an
        admission or resume checks it with its arguments, before any write."""
        return self._persistence.unstorable(field, value)

    def exists(self, number: int) -> bool:
        return (
            number in self._records
            or number in self._broken
            or number in self._staged
            or self._persistence.exists(format_run_id(number))
        )

    def get(self, run_id: Any) -> RunRecord:
        """The record. InvalidInput (malformed id), NotFound, or InvalidState (broken)."""
        number = check_run_id(run_id)
        record = self._records.get(number)
        if record is not None:
            return record
        broken = self._broken.get(number)
        if broken is not None:
            raise InvalidState(
                f"run {run_id} has a {broken['finding']} record ({broken['file']}): "
                f"{broken['reason']}",
                data={"run_id": run_id, "file": broken["file"]},
            )
        raise NotFound(f"run {run_id!r} not found", data={"run_id": run_id})

    async def put(self, record: RunRecord) -> None:
        """Write the record durably, then cache it.

        The write passes `fault_point("before:run:<what>")` and
        `"after:run:<what>"`, `<what>` naming the transition (see `_write_kind`)
        so that crash tests can tell an executing mark from a checkpoint.
        """
        number = parse_run_id(record.run_id)
        assert number is not None  # `parse_run_id` matched `RUN_ID_PATTERN`
        old = self._records.get(number)
        what = _write_kind(old, record)
        fault_point(f"before:run:{what}")
        stored = await self._persistence.write(record, created=old is None)
        self._remember(number, record, stored)
        fault_point(f"after:run:{what}")

    async def put_many(self, records: Sequence[RunRecord]) -> None:
        """`put` for several runs with one flush (or transaction) for all of
        them (group commit).

        Each record passes its `before:run:<what>` point before anything is
        written and its `after:run:<what>` point once all are durable and
        cached. A crash in between leaves each file wholly old or wholly new
        (a transaction: all of them or none). One record per run; a single
        record is a plain `put`.
        """
        if len(records) == 1:
            await self.put(records[0])
            return
        injecting = faults_injected()
        staged: list[tuple[int, RunRecord, str]] = []
        created: set[str] = set()
        seen: set[int] = set()
        for record in records:
            number = parse_run_id(record.run_id)
            assert number is not None  # `parse_run_id` matched `RUN_ID_PATTERN`
            if number in seen:
                raise ValueError(f"run {record.run_id} appears twice in one batch")
            seen.add(number)
            old = self._records.get(number)
            if old is None:
                created.add(record.run_id)
            # The transition's kind names only fault points.
            staged.append((number, record, _write_kind(old, record) if injecting else ""))
        if injecting:
            for _, _, what in staged:
                fault_point(f"before:run:{what}")
        stored = await self._persistence.write_many([r for _, r, _ in staged], created=created)
        for index, (number, record, _) in enumerate(staged):
            self._remember(number, record, stored[index] if stored is not None else None)
        if injecting:
            for _, _, what in staged:
                fault_point(f"after:run:{what}")

    def stages_into(self, batch: BatchPort) -> bool:
        """Whether new records can be staged into a scheduler round's `batch`
        (`stage_created`): on a store whose rows and runs commit together."""
        return self._persistence.stages_into(batch)

    def stage_created(self, batch: BatchPort, records: Sequence[RunRecord]) -> None:
        """Stage new `records` into a scheduler round's `batch` (`stages_into`
        said it can): its rows and these records commit together, and they
        are cached once they are durable and written (on files before the
        round's other files are: see `GroupCommit.make_durable`). Each record
        passes `before:run:admitted` when staged and `after:run:admitted`
        once written and cached."""
        numbers: list[int] = []
        seen: set[int] = set()
        for record in records:
            number = parse_run_id(record.run_id)
            assert number is not None  # `parse_run_id` matched `RUN_ID_PATTERN`
            if number in seen or number in self._records or number in self._staged:
                raise ValueError(f"run {record.run_id} is not new, or appears twice")
            numbers.append(number)
            seen.add(number)
        if faults_injected():
            for _ in records:
                fault_point("before:run:admitted")

        def written() -> None:
            self._staged.difference_update(numbers)
            for number, record in zip(numbers, records, strict=True):
                self._remember(number, record)
            if faults_injected():
                for _ in records:
                    fault_point("after:run:admitted")

        def dropped() -> None:
            self._staged.difference_update(numbers)

        self._persistence.stage_created(batch, records, written)
        self._staged.update(numbers)
        batch.on_abort(dropped)

    async def commit(self, record: RunRecord) -> None:
        """`put`, group-committed with every other record committed in the same
        turn of the event loop: many executing runs share one flush (or one
        transaction) instead of paying two fsyncs (or a transaction) each.
        Returns once the record is durable and cached.

        A caller cancelled before the flush writes nothing (as if cancelled
        before `put`). If the flush fails, every caller of that batch gets the
        error and none of its records is cached.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        if self._flush_loop is not loop:
            # Nothing pending on this loop (what a closed loop left is dead).
            # The flush task's first step runs at the next turn of the loop,
            # as a `call_soon` callback would: every record committed in this
            # turn joins it. On files it never suspends.
            self._pending = []
            self._flush_loop = loop
            flush = loop.create_task(self._flush_pending(), name="wf-run-store-flush")
            self._flushes.add(flush)
            flush.add_done_callback(self._flushes.discard)
        self._pending.append((record, future))
        await future

    async def _flush_pending(self) -> None:
        pending, self._pending = self._pending, []
        self._flush_loop = None
        live = [(record, future) for record, future in pending if not future.cancelled()]
        if not live:
            return
        try:
            await self.put_many([record for record, _ in live])
        except BaseException as exc:
            # Including a simulated crash: each writer's task ends with it, as a
            # direct `put` would have, and the loop itself goes on.
            for _, future in live:
                if future.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for _, future in live:
            if not future.done():
                future.set_result(None)

    def lock(self, run_id: str) -> _RunLock:
        """The run's lock, to hold with `async with`."""
        lock = self._locks.get(run_id)
        if lock is None:
            lock = self._locks[run_id] = _RunLock(self._locks, run_id)
        return lock

    @contextlib.asynccontextmanager
    async def locked(self, run_ids: Iterable[str]) -> AsyncIterator[None]:
        """Hold the locks of several runs. If all are free they are taken at
        once (`_take_all_free`); else in one order for every caller (by run
        number), waiting, so that two batches cannot deadlock. Taking a lock
        no one holds does not suspend."""
        ids = list(run_ids)
        # Empty only when some lock was not free (or no run was named).
        held = self._take_all_free(ids) or []
        try:
            if not held:
                for run_id in sorted(set(ids), key=_lock_order):
                    lock = self.lock(run_id)
                    if not lock.take_now():
                        await lock.__aenter__()
                    held.append(lock)
            yield
        finally:
            for lock in reversed(held):
                lock.release()

    def _take_all_free(self, run_ids: Sequence[str]) -> list[_RunLock] | None:
        """Every lock of `run_ids` taken at once if all are free (the usual
        case: a launch or a batch of stops of runs no one else touches), in
        any order, since nothing waits; else none of them, and None (then
        `locked` takes them in order, waiting). A run named twice is not free
        the second time."""
        held: list[_RunLock] = []
        for run_id in run_ids:
            lock = self.lock(run_id)
            if not lock.take_now():
                # Held or awaited by someone: its entry was there before.
                for taken in reversed(held):
                    taken.release()
                return None
            held.append(lock)
        return held

    def page(
        self, status: Any, cursor: Any, limit: Any, newest_first: Any = False
    ) -> tuple[list[RunRecord], str | None]:
        """Records oldest first (by id), optionally of one status, after `cursor`;
        with `newest_first`, newest first, before `cursor`."""
        self._check_page(status, limit, newest_first)
        if newest_first:
            return self._page_newest(status, cursor, limit)
        after = 0 if cursor is None else _decode_cursor(cursor)
        chosen: list[int] = []
        more = False
        order = self._order
        # By index from the cursor's place: `islice` would step through every
        # run before it (7 ms a page at a million runs).
        for index in range(bisect.bisect_right(order, after), len(order)):
            n = order[index]
            if status is not None and self._records.status(n) != status:
                continue
            if len(chosen) == limit:
                more = True
                break
            chosen.append(n)
        return self._readable(chosen), _encode_cursor(chosen[-1]) if more else None

    @staticmethod
    def _check_page(status: Any, limit: Any, newest_first: Any) -> None:
        problems: list[Problem] = []
        if status is not None and status not in RUN_STATUSES:
            problems.append(
                Problem(
                    field="status",
                    reason=f"must be one of {sorted(RUN_STATUSES)}, got {status!r}",
                )
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            problems.append(
                Problem(field="limit", reason=f"must be an integer from 1 to {MAX_PAGE}")
            )
        if not isinstance(newest_first, bool):
            problems.append(Problem(field="newest_first", reason="must be a boolean"))
        if problems:
            raise InvalidInput.from_problems("list_runs arguments", problems)

    def _page_newest(
        self, status: str | None, cursor: Any, limit: int
    ) -> tuple[list[RunRecord], str | None]:
        before = None if cursor is None else _decode_cursor(cursor, "before")
        end = len(self._order) if before is None else bisect.bisect_left(self._order, before)
        chosen: list[int] = []
        more = False
        # A status filter examines at most NEWEST_SCAN records a page, so that
        # a status that is rare (or absent) among a million runs still costs a
        # bounded page: it may then hold fewer than `limit` runs, none even,
        # and a cursor that goes on before the last record examined.
        budget = NEWEST_SCAN if status is not None else None
        examined = 0
        for index in range(end - 1, -1, -1):
            if budget is not None and examined == budget:
                records = self._readable(chosen)
                return records, _encode_cursor(self._order[index + 1], "before")
            examined += 1
            n = self._order[index]
            if status is not None and self._records.status(n) != status:
                continue
            if len(chosen) == limit:
                more = True
                break
            chosen.append(n)
        records = self._readable(chosen)
        return records, _encode_cursor(chosen[-1], "before") if more else None

    def _readable(self, numbers: Iterable[int]) -> list[RunRecord]:
        """The records of `numbers`, less those that turned out unreadable
        when read again (`_read_finished`: now among the broken ones)."""
        return [record for record in map(self._records.get, numbers) if record is not None]

    def _remember(self, number: int, record: RunRecord, raw: bytes | None = None) -> None:
        self._ordered(number)
        self._records.put(number, record, raw, rereads=self._persistence.rereads(number))

    def _ordered(self, number: int) -> None:
        order = self._order
        if not order or number > order[-1]:
            # Past every cached run (a new run, a start reading them in order).
            order.append(number)
        elif number not in self._records:
            bisect.insort(order, number)

    def _read_finished(self, number: int) -> RunRecord | None:
        """A finished run's record, read again from the store (the cache
        keeps its status only); None once it turned out unreadable: it is
        then among the broken ones, as a start would have found it."""
        record = self._check(number, self._persistence.reread(number))
        if isinstance(record, dict):
            self._forget(number)
            _log.warning(
                "run %s: its finished record, read again, is unusable: %s",
                record["run_id"],
                record["reason"],
            )
            return None
        return record

    def broken(self) -> list[dict[str, Any]]:
        return [dict(self._broken[n]) for n in sorted(self._broken)]


def _parse(stored: Stored[int | None]) -> RunRecord:
    """The record a load found; ValueError if it holds none. From JSON bytes
    (a log's frame) pydantic parses and validates in one pass, twice as fast
    as through `json.loads`; text that is no JSON at all is read by `json`
    for the reason, as a file's always was."""
    if stored.raw is None:
        return RunRecord.from_json(stored.document)
    try:
        return RunRecord.model_validate_json(stored.raw)
    except ValidationError as exc:
        if exc.errors()[0]["type"] != "json_invalid":
            raise
    return RunRecord.from_json(json.loads(stored.raw.decode("utf-8")))


def _lock_order(run_id: str) -> tuple[int, str]:
    # By run number: `run-1000000` after `run-999999`.
    return len(run_id), run_id


class _RunLock:
    """One run's lock, in its store's table only while someone holds or
    awaits it: a store that kept a lock for every run it ever changed grew
    by a few hundred bytes a run, for as long as the server ran.

    A lock of its own rather than an `asyncio.Lock`: a launch or a batch of
    stops takes a thousand of them, free almost always, and `take_now` takes
    a free one without a coroutine. Fair: a release hands the lock to the
    longest waiter, which holds it from then on (no one takes it between)."""

    __slots__ = ("_held", "_run_id", "_table", "_users", "_waiters")

    def __init__(self, table: dict[str, _RunLock], run_id: str) -> None:
        self._held = False
        self._waiters: collections.deque[asyncio.Future[None]] | None = None
        self._table = table
        self._run_id = run_id
        self._users = 0

    def locked(self) -> bool:
        return self._held

    def take_now(self) -> bool:
        """Take the lock if it is free (no holder, no one waiting); whether it
        was taken. Then `release` gives it back."""
        if self._held or self._waiters:
            return False
        self._held = True
        self._users += 1
        return True

    async def __aenter__(self) -> None:
        # Counted before the first suspension: `lock()` and this run in one
        # step, so no one drops the table's entry in between.
        self._users += 1
        if not self._held and not self._waiters:
            self._held = True
            return
        if self._waiters is None:
            self._waiters = collections.deque()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                # Handed the lock, then cancelled before taking it: pass it on.
                self._hand_over()
            elif waiter in self._waiters:
                # (A release may have dropped it already, cancelled.)
                self._waiters.remove(waiter)
            self._leave()
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()

    def release(self) -> None:
        self._hand_over()
        self._leave()

    def _hand_over(self) -> None:
        """The holder is done: the next waiter holds the lock, else no one."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._held = False

    def _leave(self) -> None:
        self._users -= 1
        if self._users == 0 and self._table.get(self._run_id) is self:
            del self._table[self._run_id]


def _columns_contradiction(record: RunRecord, columns: dict[str, Any]) -> str | None:
    """What the values a table keeps beside the record (`wf_runs.status`,
    `schedule_id`) say against it, or None."""
    if columns.get("status") != record.status:
        return f"column status says {columns.get('status')!r}, the record says {record.status!r}"
    expected = schedule_id_of(record)
    if columns.get("schedule_id") != expected:
        return (
            f"column schedule_id says {columns.get('schedule_id')!r}, the record's origin"
            f" says {expected!r}"
        )
    return None


def _write_kind(old: RunRecord | None, new: RunRecord) -> str:
    """Which durable transition writing `new` over `old` is: `admitted` (the new
    record), `executing-mark` (a start), `attempt-mark` (a resume), `progress`
    (a step), `stop-note` (a stopping server noting an unfinished attempt),
    `checkpoint` (a stop), `recovery` (startup recovery failing a dead attempt),
    or `record` for anything else."""
    if new.status == "running":
        if old is not None and old.status == "running":
            noted = new.executing is not None and new.executing.stopped is not None
            if noted and (old.executing is None or old.executing.stopped is None):
                return "stop-note"
            return "progress"
        if new.executing is not None:
            return "executing-mark" if new.executing.kind == "start" else "attempt-mark"
        return "record"
    if new.status in STOP_STATUSES:
        if new.checkpoint is not None and new.checkpoint.by == "recovery":
            return "recovery"
        return "checkpoint"
    if old is None and new.status == "admitted":
        return "admitted"
    return "record"


def _summary(exc: ValidationError) -> str:
    parts = [
        f"{'.'.join(map(str, error['loc'])) or 'record'}: {error['msg']}"
        for error in exc.errors()[:5]
    ]
    more = exc.error_count() - len(parts)
    return "invalid run record: " + "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")
