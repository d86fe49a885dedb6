"""The occurrence history on PostgreSQL: one row per occurrence.

`wf_occurrences` holds, per schedule, one row per decided occurrence (`seq`
dense from 0): its decision row and its latest transition row, the same JSON
rows the file store appends to `history.jsonl` (`shell/history_store.py`),
and the latest status beside them. A decision inserts the row; a transition
updates it. The primary key (schedule_id, seq) keeps seqs unique and makes a
page a keyset scan (`seq >= cursor ORDER BY seq LIMIT n`): O(limit) at any
history size. `origin` repeats who opened the occurrence (the decision
row's "origin": "trigger" or "backfill", absent for the calendar's rows,
'schedule' in the column). The unique key (schedule_id, origin, instant)
makes a second decision of one instant by one origin impossible in the
database (a backfill's row shares its instant with the calendar's row of
that instant), besides the rules on the order of decisions, which the owner
checks before staging (`shell.history_rows.State`: calendar instants
strictly increase, and so do triggers' among themselves). Its index also
finds the newest calendar and trigger decisions a start needs.

The scheduler owns the histories it recovered: it keeps each one's state
(count, last decision, open occurrences: `shell.history_rows.State`) in
memory and stages rows against it by the same rules as the file store
(`shell.history_appends`, `shell.history_rows`); they are written by the
round's transaction (`shell.pg.batch`). Every row read back (a start's
last row and open rows, a page) is checked by the row rules; a row that
breaks them is damage, named by table and row, which blocks its schedule.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, NoReturn

from core.errors import InvalidInput, InvalidState, NotFound, Problem
from core.occurrences import ORIGINS, RUN_STATUSES, TERMINAL_STATUSES
from shell.history_appends import SNAPSHOT_PROBLEM, DecisionAppend, TransitionAppend
from shell.history_cursor import checked_row, encode_cursor, page_entry, page_start
from shell.history_rows import (
    Bad,
    Open,
    OpenOccurrence,
    State,
    apply_row,
    check_decision,
    is_int,
    unknown,
)
from shell.history_store import MAX_PAGE_LIMIT, HistoryRecovery
from shell.pg import locations
from shell.pg.batch import PHASE_HISTORY_DECISIONS, PHASE_HISTORY_TRANSITIONS, PgBatch
from shell.pg.database import Database
from shell.store_format import (
    Instant,
    StoreDamaged,
    StoreProblem,
    canonical_instant,
    check_schedule_id,
    format_instant,
    parse_instant,
)

__all__ = ["COLUMNS", "OccurrenceRow", "PgHistory", "recovered_state", "row_of"]

# New rows are copied in (`shell.pg.batch`); rows go as JSON text the server
# parses: encoded once, when staged (which also proves the row is JSON before
# anything is staged).
_INSERT: Final = (
    "COPY wf_occurrences (schedule_id, seq, instant, status, decision, origin) FROM STDIN"
)
_UPDATE: Final = (
    "UPDATE wf_occurrences SET status = %s, latest = %s::jsonb WHERE schedule_id = %s AND seq = %s"
)


# The columns an `OccurrenceRow` is read from, in its order.
COLUMNS: Final = "seq, status, decision, latest, origin"
# The newest decision of one origin (the key's index, backwards): calendar
# and trigger instants strictly increase with seq.
_NEWEST_OF_ORIGIN: Final = (
    f"SELECT {COLUMNS} FROM wf_occurrences WHERE schedule_id = %s AND origin = %s"
    " ORDER BY instant DESC LIMIT 1"
)


def _json(row: Mapping[str, Any]) -> str:
    return json.dumps(row, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True, slots=True)
class OccurrenceRow:
    """A row of `wf_occurrences` as read."""

    seq: int
    status: str
    decision: Any
    latest: Any
    # The origin column ('schedule', 'trigger' or 'backfill').
    origin: Any = "schedule"


def row_of(values: Sequence[Any]) -> OccurrenceRow:
    """An `OccurrenceRow` from `SELECT {COLUMNS}` (see `COLUMNS`)."""
    return OccurrenceRow(int(values[0]), values[1], values[2], values[3], values[4])


def _problem(schedule_id: str, seq: int | None, reason: str) -> StoreProblem:
    return StoreProblem(
        schedule_id=schedule_id,
        file=locations.table("history"),
        record=locations.row(schedule_id, seq),
        reason=reason,
    )


def _origin_refusal(row: OccurrenceRow, origin: str) -> Bad | None:
    """Why `row`'s origin column contradicts its decision row's `origin`."""
    if row.origin != origin:
        return Bad(
            f"its origin column says {row.origin!r} but its decision row says {origin!r}", row.seq
        )
    return None


def _paged(
    schedule_id: str, row: OccurrenceRow, previous: datetime | None
) -> tuple[dict[str, Any], datetime | None]:
    """The page entry of `row`, checked by the row rules and against its
    origin column, with the newest calendar decision instant so far (see
    `page_entry`); `Bad` if it breaks them."""
    decision = checked_row(row.decision, row.seq, decision=True)
    latest = checked_row(row.latest, row.seq, decision=False) if row.latest is not None else None
    entry, newest = page_entry(row.seq, row.status, decision, latest, previous)
    refusal = _origin_refusal(row, entry["origin"])
    if refusal is not None:
        raise refusal
    return entry, newest


def _entry(schedule_id: str, row: OccurrenceRow, previous: datetime | None) -> dict[str, Any]:
    """The page entry of `row`, checked by the row rules; `Bad` if it breaks them."""
    return _paged(schedule_id, row, previous)[0]


def _decided_at(row: OccurrenceRow) -> datetime:
    """The instant of `row`'s decision, the row checked by the decision rules
    and against its origin column; `Bad` if it breaks them."""
    decision = check_decision(checked_row(row.decision, row.seq, decision=True), row.seq)
    refusal = _origin_refusal(row, decision.origin or "schedule")
    if refusal is not None:
        raise refusal
    instant: datetime = decision.instant
    return instant


def recovered_state(
    schedule_id: str,
    last: OccurrenceRow | None,
    open_rows: Sequence[OccurrenceRow],
    *,
    calendar: OccurrenceRow | None = None,
    trigger: OccurrenceRow | None = None,
) -> tuple[State, tuple[StoreProblem, ...]]:
    """A history's state from the rows a start reads, each checked by the
    row rules: its last row, its open rows, its newest calendar decision
    (`calendar`: needed only when the last row is an operator's) and its
    newest trigger (`trigger`: needed only when the last row is not it).
    A row that breaks the rules is the problem that blocks the schedule."""
    state = State()
    if last is None:
        return state, ()
    try:
        entry = _entry(schedule_id, last, None)
        newest: dict[str, dict[str, Any]] = {entry["origin"]: entry}
        for origin, row in (("schedule", calendar), ("trigger", trigger)):
            if row is None or origin in newest:
                continue
            found = _entry(schedule_id, row, None)
            if found["origin"] != origin or row.seq > last.seq:
                raise Bad(f"the newest {origin} decision is not one", row.seq)
            newest[origin] = found
        for row in open_rows:
            opened = _entry(schedule_id, row, None) if row.seq != last.seq else entry
            if opened["status"] in TERMINAL_STATUSES:
                raise Bad(f"an open row whose status is {opened['status']}", row.seq)
            decision = checked_row(row.decision, row.seq, decision=True)
            state.open[row.seq] = Open(
                seq=row.seq,
                instant=opened["instant"],
                status=opened["status"],
                run_id=opened["run_id"],
                reason=opened["reason"],
                # Offsets mean nothing here: every row staged later is after these.
                decision_off=0,
                decision_len=0,
                latest_off=0,
                latest_len=0,
                snapshot=decision.get("snapshot"),
                revision=opened["revision"],
                decided_at=opened["decided_at"],
                updated_at=opened["updated_at"],
                origin=opened["origin"],
            )
            state.by_instant[opened["instant"]] = row.seq
    except Bad as bad:
        seq = bad.seq if bad.seq is not None else last.seq
        return State(), (_problem(schedule_id, seq, bad.reason),)
    state.count = last.seq + 1
    # The order each kind of row keeps (`State`): calendar decisions, and
    # triggers among themselves.
    if "schedule" in newest:
        state.last_decided = parse_instant(newest["schedule"]["instant"])
        state.last_decided_text = newest["schedule"]["instant"]
    if "trigger" in newest:
        state.last_trigger = parse_instant(newest["trigger"]["instant"])
        request = newest["trigger"].get("request")
        state.last_trigger_request = request if is_int(request) else None
    # Staged rows take "offsets" from here on (see `_stage`).
    state.size = 1
    return state, ()


@dataclass(slots=True)
class _Owned:
    state: State
    problems: tuple[StoreProblem, ...]
    pending: State | None = None
    pending_batch: PgBatch | None = None


class PgHistory:
    """`shell.store_ports.HistoryPort` on PostgreSQL (see the module docstring)."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self._owned: dict[str, _Owned] = {}

    # --- owning ------------------------------------------------------------------------

    def adopt(
        self,
        schedule_id: str,
        last: OccurrenceRow | None,
        open_rows: Sequence[OccurrenceRow],
        *,
        calendar: OccurrenceRow | None = None,
        trigger: OccurrenceRow | None = None,
    ) -> HistoryRecovery:
        """Own a history from the rows a recovery read (see `recovered_state`)."""
        state, problems = recovered_state(
            schedule_id, last, open_rows, calendar=calendar, trigger=trigger
        )
        self._owned[schedule_id] = _Owned(state=state, problems=problems)
        return HistoryRecovery(
            schedule_id=schedule_id,
            occurrences=state.count,
            last_decided_instant=state.last_decided_text,
            open_occurrences=tuple(state.open[s].public() for s in sorted(state.open)),
            problems=problems,
            last_trigger_instant=None
            if state.last_trigger is None
            else format_instant(state.last_trigger),
            last_trigger_request=state.last_trigger_request,
        )

    async def recover(self, schedule_id: str) -> HistoryRecovery:
        """Own one schedule's history, read now."""
        check_schedule_id(schedule_id)
        newest: dict[str, OccurrenceRow | None] = {}
        async with self._db.transaction("read a schedule's history") as conn:
            cursor = await conn.execute(
                f"SELECT {COLUMNS} FROM wf_occurrences"
                " WHERE schedule_id = %s ORDER BY seq DESC LIMIT 1",
                (schedule_id,),
            )
            found = await cursor.fetchone()
            last = row_of(found) if found is not None else None
            for origin in ("schedule", "trigger"):
                if last is not None and last.origin != origin:
                    cursor = await conn.execute(_NEWEST_OF_ORIGIN, (schedule_id, origin))
                    row = await cursor.fetchone()
                    newest[origin] = row_of(row) if row is not None else None
            cursor = await conn.execute(
                f"SELECT {COLUMNS} FROM wf_occurrences WHERE schedule_id = %s"
                " AND status IN ('admitted', 'running', 'interrupted') ORDER BY seq",
                (schedule_id,),
            )
            open_rows = [row_of(r) for r in await cursor.fetchall()]
        return self.adopt(
            schedule_id,
            last,
            open_rows,
            calendar=newest.get("schedule"),
            trigger=newest.get("trigger"),
        )

    def forget(self, schedule_ids: Iterable[str] | None = None) -> None:
        """Stop owning these histories (all of them by default)."""
        if schedule_ids is None:
            self._owned.clear()
            return
        for schedule_id in schedule_ids:
            self._owned.pop(schedule_id, None)

    def _get(self, schedule_id: str) -> _Owned:
        owned = self._owned.get(schedule_id)
        if owned is None:
            raise InvalidState(
                f"history of {schedule_id!r} was not recovered by this scheduler",
                data={"schedule_id": schedule_id},
            )
        return owned

    # --- staging -----------------------------------------------------------------------

    def _shadow(self, owned: _Owned, batch: PgBatch, schedule_id: str) -> State:
        """The pending state of `owned` in `batch`, opened on first use."""
        if owned.problems:
            raise StoreDamaged(owned.problems[0])
        if owned.pending_batch is not None and owned.pending_batch is not batch:
            if owned.pending_batch.state == "open":
                raise RuntimeError(f"history of {schedule_id!r} has writes staged in another batch")
            # A batch that ended without its callbacks: read it again.
            self._owned.pop(schedule_id, None)
            raise InvalidState(
                f"history of {schedule_id!r} must be recovered again",
                data={"schedule_id": schedule_id},
            )
        if owned.pending is None:
            owned.pending = owned.state.copy()
            owned.pending_batch = batch

            def committed() -> None:
                assert owned.pending is not None
                owned.state, owned.pending, owned.pending_batch = owned.pending, None, None
                owned.state.touched = {}

            def dropped() -> None:
                # The transaction may have committed all the same: read it again.
                owned.pending, owned.pending_batch = None, None
                self._owned.pop(schedule_id, None)

            batch.on_commit(committed)
            batch.on_abort(dropped)
        return owned.pending

    @staticmethod
    def _enter(schedule_id: str, enter: Any) -> None:
        try:
            enter()
        except Bad as bad:
            raise InvalidState(
                f"history of {schedule_id!r} refuses the row: {bad.reason}",
                data={"schedule_id": schedule_id},
            ) from None

    def append_decision(
        self,
        schedule_id: str,
        *,
        instant: Instant,
        status: str,
        recorded_at: Instant,
        batch: Any,
        run_id: str | None = None,
        reason: str | None = None,
        count: int = 1,
        first_instant: Instant | None = None,
        last_instant: Instant | None = None,
        revision: int | None = None,
        snapshot: Mapping[str, Any] | None = None,
        origin: str | None = None,
        request: int | None = None,
    ) -> int:
        """Stage the decision row that opens the occurrence at `instant` in
        `batch`; returns its seq (see `HistoryStore.append_decision`; an
        operator's row names its `origin`)."""
        append = DecisionAppend.of(
            instant=instant,
            status=status,
            recorded_at=recorded_at,
            run_id=run_id,
            reason=reason,
            count=count,
            first_instant=first_instant,
            last_instant=last_instant,
            revision=revision,
            snapshot=snapshot,
            origin=origin,
            request=request,
        )
        return self._stage_decision(schedule_id, batch, append)

    def _stage_decision(self, schedule_id: str, batch: Any, append: DecisionAppend) -> int:
        pg_batch: PgBatch = batch
        owned = self._get(schedule_id)
        shadow = self._shadow(owned, pg_batch, schedule_id)
        row = append.build(shadow)
        try:
            document = _json(row)
        except (TypeError, ValueError):
            # Every other field is a string, an integer or an instant; only a
            # snapshot's inputs can hold what JSON cannot.
            raise InvalidInput.from_problems("history row", [SNAPSHOT_PROBLEM]) from None
        offset = shadow.size
        self._enter(schedule_id, lambda: append.enter(shadow, row, offset, 1))
        shadow.size += 1
        pg_batch.add(
            PHASE_HISTORY_DECISIONS,
            _INSERT,
            (
                schedule_id,
                row["seq"],
                parse_instant(row["instant"]),
                row["status"],
                document,
                row.get("origin", "schedule"),
            ),
        )
        return int(row["seq"])

    def stage_admitted(
        self,
        schedule_id: str,
        *,
        instant: datetime,
        run_id: str,
        snapshot: Mapping[str, Any],
        recorded_at: datetime,
        batch: Any,
        origin: str | None = None,
        request: int | None = None,
    ) -> int:
        """`append_decision` of an `admitted` row (the file store's fast path
        writes the same row)."""
        append = DecisionAppend.admitted(
            instant=instant,
            run_id=run_id,
            snapshot=snapshot,
            recorded_at=recorded_at,
            origin=origin,
            request=request,
        )
        return self._stage_decision(schedule_id, batch, append)

    def append_transition(
        self,
        schedule_id: str,
        *,
        status: str,
        recorded_at: Instant,
        batch: Any,
        seq: int | None = None,
        instant: Instant | None = None,
        run_id: str | None = None,
        reason: str | None = None,
    ) -> int:
        """Stage a move of an open occurrence to `status` (see
        `HistoryStore.append_transition`)."""
        append = TransitionAppend.of(
            status=status,
            recorded_at=recorded_at,
            seq=seq,
            instant=instant,
            run_id=run_id,
            reason=reason,
        )
        pg_batch: PgBatch = batch
        owned = self._get(schedule_id)
        current = append.target(
            schedule_id, owned.pending if owned.pending is not None else owned.state
        )
        if append.says_nothing_new(current):
            return current.seq
        shadow = self._shadow(owned, pg_batch, schedule_id)
        row = append.build(current)
        offset = shadow.size
        self._enter(schedule_id, lambda: apply_row(shadow, row, offset, 1, unknown))
        shadow.size += 1
        pg_batch.add(
            PHASE_HISTORY_TRANSITIONS,
            _UPDATE,
            (row["status"], _json(row), schedule_id, current.seq),
        )
        return current.seq

    # --- queries -----------------------------------------------------------------------

    def open_occurrence(self, schedule_id: str, instant: Instant) -> OpenOccurrence | None:
        """The committed open occurrence at `instant`, if any."""
        state = self._get(schedule_id).state
        seq = state.by_instant.get(canonical_instant(instant))
        return state.open[seq].public() if seq is not None else None

    def locate(self, schedule_id: str, seq: int) -> str:
        return locations.row(schedule_id, seq)

    async def page(
        self, schedule_id: str, *, limit: int, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of occurrences, oldest first (see `HistoryStore.page`):
        a keyset scan of at most `limit + 1` rows and the decision before
        them, and when that one is an operator's, the newest calendar
        decision before it (the one the page's first calendar decision must
        follow: an index scan back over the operators' rows)."""
        check_schedule_id(schedule_id)
        start = page_start(schedule_id, limit, cursor, max_limit=MAX_PAGE_LIMIT)
        calendar_before: OccurrenceRow | None = None
        async with self._db.transaction("read a schedule's history") as conn:
            found = await conn.execute(
                "SELECT 1 FROM wf_schedules WHERE schedule_id = %s", (schedule_id,)
            )
            if await found.fetchone() is None:
                raise NotFound(
                    f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
                )
            rows_cursor = await conn.execute(
                f"SELECT {COLUMNS} FROM wf_occurrences"
                " WHERE schedule_id = %s AND seq >= %s ORDER BY seq LIMIT %s",
                (schedule_id, max(start - 1, 0), limit + 1 + (1 if start > 0 else 0)),
            )
            fetched = [row_of(r) for r in await rows_cursor.fetchall()]
            # The row before the page is an operator's: find the calendar's.
            first = fetched[0] if fetched else None
            if first is not None and first.seq == start - 1 and first.origin != "schedule":
                before_cursor = await conn.execute(
                    f"SELECT {COLUMNS} FROM wf_occurrences WHERE schedule_id = %s"
                    " AND seq < %s AND origin = 'schedule' ORDER BY seq DESC LIMIT 1",
                    (schedule_id, start - 1),
                )
                found_before = await before_cursor.fetchone()
                if found_before is not None:
                    calendar_before = row_of(found_before)
        previous: datetime | None = None
        if start > 0:
            if not fetched or fetched[0].seq != start - 1:
                raise InvalidInput.from_problems(
                    "history page",
                    [Problem(field="cursor", reason="is past the end of this history")],
                )
            before = fetched.pop(0)
            if before.origin == "schedule":
                previous = self._decided_at(schedule_id, before)
            else:
                # Checked all the same: its column may not be saying the truth.
                self._decided_at(schedule_id, before)
                if calendar_before is not None:
                    previous = self._decided_at(schedule_id, calendar_before)
        more = len(fetched) > limit
        rows: list[dict[str, Any]] = []
        for expected, row in enumerate(fetched[:limit], start=start):
            if row.seq != expected:
                self._damaged(
                    _problem(
                        schedule_id, expected, f"seq {expected} is missing (next is {row.seq})"
                    )
                )
            try:
                entry, previous = _paged(schedule_id, row, previous)
            except Bad as bad:
                self._damaged(_problem(schedule_id, row.seq, bad.reason))
            rows.append(entry)
        next_cursor = encode_cursor(schedule_id, start + limit) if more else None
        return rows, next_cursor

    def _decided_at(self, schedule_id: str, row: OccurrenceRow) -> datetime:
        """`_decided_at` of a row a read found; damage if it breaks the rules."""
        try:
            return _decided_at(row)
        except Bad as bad:
            self._damaged(_problem(schedule_id, row.seq, bad.reason))

    def _damaged(self, problem: StoreProblem) -> NoReturn:
        """A row a read found breaks the row rules: freeze an owned history
        (no more rows staged on it) and raise `StoreDamaged`."""
        owned = self._owned.get(problem.schedule_id)
        if owned is not None and not owned.problems:
            owned.problems = (problem,)
        raise StoreDamaged(problem)

    async def length(self, schedule_id: str) -> int:
        """How many occurrences the history holds: one index probe for the
        newest seq (seqs are dense from 0)."""
        check_schedule_id(schedule_id)
        async with self._db.transaction("read a schedule's history") as conn:
            found = await conn.execute(
                "SELECT 1 FROM wf_schedules WHERE schedule_id = %s", (schedule_id,)
            )
            if await found.fetchone() is None:
                raise NotFound(
                    f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
                )
            cursor = await conn.execute(
                "SELECT seq FROM wf_occurrences WHERE schedule_id = %s ORDER BY seq DESC LIMIT 1",
                (schedule_id,),
            )
            newest = await cursor.fetchone()
        return 0 if newest is None else int(newest[0]) + 1

    async def occurrence_at(
        self, schedule_id: str, instant: Instant, origin: str = "schedule"
    ) -> dict[str, Any] | None:
        """The page entry of the occurrence of `origin` decided at `instant`
        (the unique key finds it), or None."""
        check_schedule_id(schedule_id)
        problems: list[Problem] = []
        target: datetime | None = None
        try:
            target = parse_instant(canonical_instant(instant))
        except (TypeError, ValueError) as exc:
            problems.append(Problem(field="instant", reason=f"must be an instant: {exc}"))
        if origin not in ORIGINS:
            problems.append(
                Problem(field="origin", reason=f"must be one of {', '.join(sorted(ORIGINS))}")
            )
        if problems:
            raise InvalidInput.from_problems("occurrence", problems)
        assert target is not None
        async with self._db.transaction("read a schedule's history") as conn:
            found = await conn.execute(
                "SELECT 1 FROM wf_schedules WHERE schedule_id = %s", (schedule_id,)
            )
            if await found.fetchone() is None:
                raise NotFound(
                    f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
                )
            cursor = await conn.execute(
                f"SELECT {COLUMNS} FROM wf_occurrences"
                " WHERE schedule_id = %s AND origin = %s AND instant = %s",
                (schedule_id, origin, target),
            )
            found_row = await cursor.fetchone()
        if found_row is None:
            return None
        row = row_of(found_row)
        try:
            entry = _entry(schedule_id, row, None)
        except Bad as bad:
            self._damaged(_problem(schedule_id, row.seq, bad.reason))
        if entry["instant"] != format_instant(target):
            self._damaged(
                _problem(
                    schedule_id,
                    row.seq,
                    f"its instant column says {format_instant(target)} but its decision row"
                    f" says {entry['instant']}",
                )
            )
        return entry

    async def backfill_decided(
        self, schedule_id: str, start: datetime, end: datetime
    ) -> frozenset[datetime]:
        """The instants of `[start, end)` a backfill may not admit (rule Q):
        admitted by the calendar (its latest status is a run status, whatever
        the run became), or decided by a backfill. One query: a range scan of
        the unique key's index for each of the two origins."""
        check_schedule_id(schedule_id)
        problems = [
            Problem(field=name, reason="must be an aware datetime")
            for name, value in (("start", start), ("end", end))
            if not isinstance(value, datetime) or value.utcoffset() is None
        ]
        if problems:
            raise InvalidInput.from_problems("backfill range", problems)
        async with self._db.transaction("read a schedule's history") as conn:
            cursor = await conn.execute(
                "SELECT ARRAY(SELECT o.instant FROM wf_occurrences o"
                " WHERE o.schedule_id = s.schedule_id AND o.origin IN ('schedule', 'backfill')"
                " AND o.instant >= %s AND o.instant < %s"
                " AND (o.origin = 'backfill' OR o.status = ANY(%s)))"
                " FROM wf_schedules s WHERE s.schedule_id = %s",
                (start, end, sorted(RUN_STATUSES), schedule_id),
            )
            found = await cursor.fetchone()
        if found is None:
            raise NotFound(
                f"schedule {schedule_id!r} does not exist", data={"schedule_id": schedule_id}
            )
        return frozenset(instant.astimezone(UTC) for instant in found[0])
