"""The PostgreSQL backend: `shell.store_ports.ScheduleBackend` on one database.

`PgBackend(database)` holds the schedule stores (`shell.pg.definitions`,
`shell.pg.runtime`, `shell.pg.history`), the ownership (`shell.pg.ownership`)
and the batches (`shell.pg.batch`: a round's group commit is one
transaction). A start reads every schedule with five queries in one
consistent snapshot (`_RecoveryReader`), not one file read per schedule;
there is nothing to replay, no index to publish and no temp file to sweep, so
the backend has no upkeep.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from core.recovery_checks import CheckedClaims
from shell.definition_rules import RecordRefused, replay
from shell.pg import locations
from shell.pg.batch import PgBatch
from shell.pg.database import Database
from shell.pg.definitions import PgDefinitions, lifecycle_problem, snapshot_problem
from shell.pg.history import COLUMNS, OccurrenceRow, PgHistory, row_of
from shell.pg.listener import LEADERSHIP, SCHEDULES, Listener
from shell.pg.ownership import DEFAULT_LEASE_S, DEFAULT_RENEW_S, PgOwnership
from shell.pg.runtime import PgRuntime, runtime_load
from shell.store_format import StoreProblem
from shell.store_ports import BatchPort, RecordPart, ScheduleInputs, StoreWatcher

__all__ = ["PgBackend"]

_OPEN: Final = "('admitted', 'running', 'interrupted')"

# What a start reads of each history besides its open rows (see
# `_RecoveryReader.schedule_ids`): the last row, the newest calendar
# decision when the last row is an operator's, the newest trigger when the
# last row is not one; the unique key's index finds both (calendar and
# trigger instants strictly increase with seq).
_ROW_COLUMNS: Final = tuple(c.strip() for c in COLUMNS.split(","))


def _columns(alias: str) -> str:
    return ", ".join(f"{alias}.{c}" for c in _ROW_COLUMNS)


def _newest_of(origin: str, alias: str) -> str:
    return (
        f" LEFT JOIN LATERAL (SELECT {COLUMNS} FROM wf_occurrences"
        f" WHERE schedule_id = s.schedule_id AND origin = '{origin}' AND o.origin <> '{origin}'"
        f" ORDER BY instant DESC LIMIT 1) {alias} ON true"
    )


_LAST_ROWS: Final = (
    f"SELECT s.schedule_id, {_columns('o')}, {_columns('c')}, {_columns('t')}"
    " FROM wf_schedules s"
    f" CROSS JOIN LATERAL (SELECT {COLUMNS} FROM wf_occurrences"
    " WHERE schedule_id = s.schedule_id ORDER BY seq DESC LIMIT 1) o"
    + _newest_of("schedule", "c")
    + _newest_of("trigger", "t")
)


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class _SnapshotHead:
    """What a start reads of a schedule's snapshot row."""

    lifecycle_seq: int
    snapshot_seq: Any
    revision: Any
    blocked: Any
    kind: Any

    def problem(self, schedule_id: str, records: list[dict[str, Any]]) -> StoreProblem | None:
        """Why the snapshot does not reflect the log `records`, if it does not."""
        if self.kind != "object":
            return snapshot_problem(schedule_id, "unreadable snapshot: not a JSON object")
        if self.blocked is not None and not (
            isinstance(self.blocked, dict)
            and all(isinstance(self.blocked.get(k), str) for k in ("file", "record", "reason"))
        ):
            return snapshot_problem(
                schedule_id,
                "unreadable snapshot: blocked must be null or an object with file, record"
                " and reason",
            )
        last = records[-1]
        if (
            self.snapshot_seq != self.lifecycle_seq
            or self.lifecycle_seq != len(records)
            or self.revision != last["revision"]
        ):
            return snapshot_problem(
                schedule_id,
                f"snapshot is at lifecycle seq {self.snapshot_seq} (revision {self.revision})"
                f" but the log ends at seq {len(records)} (revision {last['revision']})",
            )
        return None


class _RecoveryReader:
    """One recovery's reads: everything at once, in one snapshot of the database."""

    def __init__(self, backend: PgBackend) -> None:
        self._backend = backend
        self._inputs: dict[str, ScheduleInputs | StoreProblem | None] = {}

    async def schedule_ids(self) -> list[str]:
        db = self._backend.database
        async with db.transaction("read the store at a start") as conn:
            # One consistent view of every table, as of the start.
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            # Of the snapshot, what a start checks against the log: the whole
            # of it is checked where it is read (`PgDefinitions.get`), and the
            # definition comes from the log (parsing it twice would cost a
            # tenth of a start).
            cursor = await conn.execute(
                "SELECT schedule_id, lifecycle_seq, snapshot->'lifecycle_seq',"
                " snapshot->'revision', snapshot->'blocked', jsonb_typeof(snapshot)"
                " FROM wf_schedules ORDER BY schedule_id"
            )
            schedules = await cursor.fetchall()
            cursor = await conn.execute(
                "SELECT schedule_id, record FROM wf_schedule_lifecycle ORDER BY schedule_id, seq"
            )
            lifecycle: defaultdict[str, list[Any]] = defaultdict(list)
            for schedule_id, record in await cursor.fetchall():
                lifecycle[schedule_id].append(record)
            cursor = await conn.execute("SELECT schedule_id, record FROM wf_schedule_runtime")
            runtime = {schedule_id: record for schedule_id, record in await cursor.fetchall()}
            # The last row of each history (an index probe per schedule) and,
            # where it is not theirs, the newest calendar decision and the
            # newest trigger (a probe of the unique key's index each; the
            # calendar's only behind an operator's last row).
            cursor = await conn.execute(_LAST_ROWS)
            last: dict[str, tuple[OccurrenceRow, OccurrenceRow | None, OccurrenceRow | None]] = {}
            width = len(_ROW_COLUMNS)
            for r in await cursor.fetchall():
                rows = [r[1 + i * width : 1 + (i + 1) * width] for i in range(3)]
                calendar, trigger = (row_of(v) if v[0] is not None else None for v in rows[1:])
                last[r[0]] = (row_of(rows[0]), calendar, trigger)
            cursor = await conn.execute(
                f"SELECT schedule_id, {COLUMNS} FROM wf_occurrences"
                f" WHERE status IN {_OPEN} ORDER BY schedule_id, seq"
            )
            opened: defaultdict[str, list[OccurrenceRow]] = defaultdict(list)
            for r in await cursor.fetchall():
                opened[r[0]].append(row_of(r[1:]))
        for schedule_id, lifecycle_seq, snapshot_seq, revision, blocked, kind in schedules:
            self._inputs[schedule_id] = self._inputs_of(
                schedule_id,
                _SnapshotHead(int(lifecycle_seq), snapshot_seq, revision, blocked, kind),
                lifecycle.get(schedule_id, []),
                runtime.get(schedule_id),
                last.get(schedule_id),
                opened.get(schedule_id, []),
            )
        return [row[0] for row in schedules]

    def _inputs_of(
        self,
        schedule_id: str,
        head: _SnapshotHead,
        stored_records: list[Any],
        stored_runtime: Any,
        last: tuple[OccurrenceRow, OccurrenceRow | None, OccurrenceRow | None] | None,
        open_rows: list[OccurrenceRow],
    ) -> ScheduleInputs | StoreProblem:
        if not stored_records:
            return StoreProblem(
                schedule_id=schedule_id,
                file=locations.table("lifecycle"),
                record=locations.row(schedule_id),
                reason="the schedule has no lifecycle record",
            )
        try:
            records = replay(stored_records, schedule_id)
        except RecordRefused as refused:
            return lifecycle_problem(schedule_id, refused)
        problem = head.problem(schedule_id, records)
        if last is None:
            recovered = self._backend.history.adopt(schedule_id, None, open_rows)
        else:
            newest, calendar, trigger = last
            recovered = self._backend.history.adopt(
                schedule_id, newest, open_rows, calendar=calendar, trigger=trigger
            )
        return ScheduleInputs(
            tuple(records),
            runtime_load(schedule_id, stored_runtime),
            recovered,
            (problem,) if problem is not None else (),
            head.blocked if problem is None else None,
        )

    async def read(self, schedule_id: str) -> ScheduleInputs | StoreProblem | None:
        return self._inputs.pop(schedule_id, None)

    def checked_claims(self) -> CheckedClaims:
        # No startup checkpoint vouches for runs here: a start checks every
        # run's claim, the host listing them from its table.
        return CheckedClaims(position=None, histories_kept=False)


class PgBackend:
    """`ScheduleBackend` on PostgreSQL (see the module docstring). The
    database must be open (`await database.open()`)."""

    upkeep: None = None
    # Other servers of the database change deployments that an admission
    # staged ahead would not see.
    prepares_ahead = False

    def __init__(
        self,
        database: Database,
        *,
        clock: Callable[[], datetime] = _utc_now,
        lease_s: float = DEFAULT_LEASE_S,
        renew_s: float = DEFAULT_RENEW_S,
    ) -> None:
        self.database = database
        self.definitions = PgDefinitions(database)
        self.runtime = PgRuntime(database)
        self.history = PgHistory(database)
        self.ownership = PgOwnership(database, clock=clock, lease_s=lease_s, renew_s=renew_s)

    def new_batch(self) -> PgBatch:
        return PgBatch(self.database)

    async def commit(
        self, batch: BatchPort, then: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        pg_batch: PgBatch = batch  # type: ignore[assignment]
        await pg_batch.commit()
        if then is not None:
            await then()

    def locate(self, schedule_id: str, part: RecordPart) -> str:
        return locations.table(part)

    def run_location(self, run_id: str) -> str:
        return f"table {locations.RUNS}, run_id {run_id!r}"

    def is_run_location(self, location: str) -> bool:
        return location.startswith(f"table {locations.RUNS}")

    async def open_owned(self) -> None:
        # After a lost session: own the store again before reading it.
        await self.ownership.ensure()

    async def quiesce(self) -> int:
        return await self.database.quiesce()

    async def watch(self, watcher: StoreWatcher) -> Callable[[], None]:
        """Hear the other servers' schedule changes and leadership (see
        `shell.pg.listener`), once the listener listens."""
        listener = Listener.of(self.database)

        def on_schedule(notice: dict[str, Any]) -> None:
            schedule_id = notice.get("schedule_id")
            if notice.get("more"):
                watcher.changes_lost()
            elif isinstance(schedule_id, str):
                watcher.schedule_changed(schedule_id)

        def on_leadership(notice: dict[str, Any]) -> None:
            watcher.leadership_released()

        listener.subscribe(SCHEDULES, on_schedule)
        listener.subscribe(LEADERSHIP, on_leadership)
        listener.on_connect(watcher.changes_lost)
        await listener.wait_connected()

        def stop() -> None:
            listener.unsubscribe(SCHEDULES, on_schedule)
            listener.unsubscribe(LEADERSHIP, on_leadership)
            listener.remove_on_connect(watcher.changes_lost)

        return stop

    def recovery_reader(self, *, at_start: bool) -> _RecoveryReader:
        return _RecoveryReader(self)

    def after_recovery(self) -> None:
        return None

    async def close_owned(self, *, owned: bool, consistent: bool) -> None:
        # Nothing is cached that a start needs: every commit was a transaction.
        return None
