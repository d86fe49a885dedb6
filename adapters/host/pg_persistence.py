"""The host's records in PostgreSQL (see persistence.py and docs/host.md).

Tables of `shell/pg/migrations/0001_initial.sql`:

- `wf_artifacts(artifact_id, version, record)`;
- `wf_deployments(deployment_id, record)`;
- `wf_runs(run_number, status, schedule_id, record)`: `status` mirrors the
  record's, `schedule_id` is its origin's for a scheduled run (NULL
  otherwise);
- the sequence `wf_run_number` issues run numbers.

`record` holds the document the file store keeps in its file. Every write is
one transaction. A connection error leaves as `StoreUnavailable` (the
transaction converts it; any other driver error is converted here too), a
value PostgreSQL cannot hold in `jsonb` (a string with a NUL character) as
`InvalidInput`, and a new run whose number is already in `wf_runs` as
`AlreadyExists`: the primary key is what refuses a second record of a run,
beside the store's cache and its per-run locks.

Several servers may share the database (docs/operations.md, "Several
servers"):

- a run record changes only from the version this server last read
  (`wf_runs.version`, moved on by every change): a change of a run that
  another server changed meanwhile (resumed, launched, or failed as
  abandoned) is refused as `RunChanged`, writing nothing;
- a run write is fenced by this server's registration (`as_server`: see
  `shell.pg.servers`): once declared gone, nothing it writes to a run
  commits (`StoreFenced`);
- a change of a run, a deployment or an artifact tells the other servers as
  it commits (`shell.pg.listener`, channel `wf_store`), which refresh what
  they cache of it;
- `read`, `read_page` and `read_executing` read through the cache, for
  answers that must be the store's, not this server's memory.

The stores load every row at start and answer most reads from their caches,
so those keep working while the database is down.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Final

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from core.errors import AlreadyExists, InvalidInput, Problem
from shell.pg.batch import PHASE_RUNS, PgBatch
from shell.pg.database import Database
from shell.pg.listener import STORE, send

from .identifiers import format_run_id, parse_run_id
from .persistence import CounterRead, RunChanged, Stored
from .records import RunRecord, schedule_id_of

__all__ = [
    "PgArtifacts",
    "PgDeployments",
    "PgRunCounter",
    "PgRuns",
    "artifact_location",
    "deployment_location",
    "run_location",
]

ARTIFACTS: Final = "wf_artifacts"
DEPLOYMENTS: Final = "wf_deployments"
RUNS: Final = "wf_runs"
SEQUENCE: Final = "wf_run_number"

_UPSERT_ARTIFACT: Final = (
    "INSERT INTO wf_artifacts (artifact_id, version, record) VALUES (%s, %s, %s)"
    " ON CONFLICT (artifact_id, version) DO UPDATE SET record = EXCLUDED.record"
)
_UPSERT_DEPLOYMENT: Final = (
    "INSERT INTO wf_deployments (deployment_id, record) VALUES (%s, %s)"
    " ON CONFLICT (deployment_id) DO UPDATE SET record = EXCLUDED.record"
)
_INSERT_RUN: Final = (
    "INSERT INTO wf_runs (run_number, status, schedule_id, record) VALUES (%s, %s, %s, %s)"
)
# New runs staged into a scheduler round's batch are copied in with its rows.
_COPY_RUNS: Final = "COPY wf_runs (run_number, status, schedule_id, record) FROM STDIN"
# A change from the version read, or nothing (see the module docstring).
_UPDATE_RUN: Final = (
    "UPDATE wf_runs SET status = %s, schedule_id = %s, record = %s, version = version + 1"
    " WHERE run_number = %s AND version = %s RETURNING run_number, version"
)
_RUN_COLUMNS: Final = "run_number, status, schedule_id, record, version"


def artifact_location(artifact_id: str, version: object) -> str:
    return f"table {ARTIFACTS}, artifact_id {artifact_id!r}, version {version}"


def deployment_location(deployment_id: str) -> str:
    return f"table {DEPLOYMENTS}, deployment_id {deployment_id!r}"


def run_location(run_id: str) -> str:
    """As `shell.pg.backend.PgBackend.run_location` names a run record."""
    return f"table {RUNS}, run_id {run_id!r}"


def _nul_problems(field: str, value: Any) -> list[Problem]:
    """Where the JSON `value` holds a NUL character (U+0000), which no `jsonb`
    value can hold (PostgreSQL refuses the whole statement)."""
    if isinstance(value, str):
        if "\x00" in value:
            reason = "holds a NUL character (U+0000), which PostgreSQL cannot store"
            return [Problem(field=field, reason=reason)]
        return []
    if isinstance(value, Mapping):
        found: list[Problem] = []
        for key, item in value.items():
            if "\x00" in key:
                reason = "has a key with a NUL character (U+0000), which PostgreSQL cannot store"
                found.append(Problem(field=field, reason=reason))
            found += _nul_problems(f"{field}.{key}", item)
        return found
    if isinstance(value, Sequence):
        return [
            p for index, item in enumerate(value) for p in _nul_problems(f"{field}.{index}", item)
        ]
    return []


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@contextlib.asynccontextmanager
async def _writing(
    database: Database, operation: str, *, as_server: bool = False
) -> AsyncIterator[AsyncConnection[TupleRow]]:
    """One write transaction (fenced by this server's registration with
    `as_server`); driver errors leave as domain errors (see the module
    docstring). `AlreadyExists` is the caller's to word."""
    try:
        async with database.transaction(operation, as_server=as_server) as conn:
            yield conn
    except psycopg.errors.UniqueViolation:
        raise
    except psycopg.DataError as exc:
        raise InvalidInput.from_problems(
            operation,
            [Problem(field="record", reason=f"PostgreSQL cannot store it: {_first_line(exc)}")],
        ) from None
    except psycopg.Error as exc:
        raise database.unavailable(exc, operation) from None


async def _rows(
    database: Database,
    operation: str,
    query: str,
    params: tuple[Any, ...] | None = None,
    *,
    background: bool = False,
) -> list[tuple[Any, ...]]:
    try:
        return list(await database.fetch_all(operation, query, params, background=background))
    except psycopg.Error as exc:
        raise database.unavailable(exc, operation) from None


class PgArtifacts:
    """Artifact versions in `wf_artifacts`."""

    key_name = "the row's key"

    def __init__(self, database: Database) -> None:
        self._db = database

    async def load(self) -> AsyncIterator[Stored[tuple[str, str]]]:
        rows = await _rows(
            self._db,
            "read the artifacts",
            "SELECT artifact_id, version, record FROM wf_artifacts ORDER BY artifact_id, version",
        )
        for artifact_id, version, record in rows:
            yield Stored(
                location=artifact_location(artifact_id, version),
                key=(artifact_id, str(version)),
                document=record,
            )

    def unstorable(self, field: str, value: Any) -> list[Problem]:
        return _nul_problems(field, value)

    async def write(self, artifact_id: str, version: int, document: dict[str, Any]) -> None:
        # An upsert, as a file is replaced: the store refuses a version that
        # exists with other content; a row it could not read is overwritten.
        async with _writing(self._db, "write an artifact") as conn:
            await conn.execute(_UPSERT_ARTIFACT, (artifact_id, version, Jsonb(document)))
            await send(conn, self._db, STORE, {"artifact": artifact_id, "version": version})

    async def read_versions(self, artifact_id: str) -> list[Stored[tuple[str, str]]]:
        rows = await _rows(
            self._db,
            "read an artifact",
            "SELECT version, record FROM wf_artifacts WHERE artifact_id = %s ORDER BY version",
            (artifact_id,),
        )
        return [
            Stored(
                location=artifact_location(artifact_id, version),
                key=(artifact_id, str(version)),
                document=record,
            )
            for version, record in rows
        ]


class PgDeployments:
    """Deployments in `wf_deployments`."""

    key_name = "the row's key"

    def __init__(self, database: Database) -> None:
        self._db = database

    async def load(self) -> AsyncIterator[Stored[str]]:
        rows = await _rows(
            self._db,
            "read the deployments",
            "SELECT deployment_id, record FROM wf_deployments ORDER BY deployment_id",
        )
        for deployment_id, record in rows:
            yield Stored(
                location=deployment_location(deployment_id), key=deployment_id, document=record
            )

    def unstorable(self, field: str, value: Any) -> list[Problem]:
        return _nul_problems(field, value)

    async def write(self, deployment_id: str, document: dict[str, Any]) -> None:
        async with _writing(self._db, "write a deployment") as conn:
            await conn.execute(_UPSERT_DEPLOYMENT, (deployment_id, Jsonb(document)))
            await send(conn, self._db, STORE, {"deployment": deployment_id})

    async def delete(self, deployment_id: str) -> None:
        async with _writing(self._db, "delete a deployment") as conn:
            await conn.execute(
                "DELETE FROM wf_deployments WHERE deployment_id = %s", (deployment_id,)
            )
            await send(conn, self._db, STORE, {"deployment": deployment_id})

    async def read(self, deployment_id: str) -> Stored[str] | None:
        rows = await _rows(
            self._db,
            "read a deployment",
            "SELECT record FROM wf_deployments WHERE deployment_id = %s",
            (deployment_id,),
        )
        if not rows:
            return None
        return Stored(
            location=deployment_location(deployment_id), key=deployment_id, document=rows[0][0]
        )


def _run_row(record: RunRecord) -> tuple[Any, ...]:
    number = parse_run_id(record.run_id)
    assert number is not None
    return (number, record.status, schedule_id_of(record), Jsonb(record.to_json()))


def _taken(run_ids: Sequence[str]) -> AlreadyExists:
    if len(run_ids) == 1:
        return AlreadyExists(
            f"run {run_ids[0]} already exists (a row of table {RUNS} holds it)",
            data={"run_id": run_ids[0]},
        )
    return AlreadyExists(
        f"one of the runs {', '.join(run_ids)} already exists (a row of table {RUNS} holds it);"
        " nothing of this batch was written",
        data={"run_ids": list(run_ids)},
    )


def _changed(record: RunRecord, current: tuple[Any, ...] | None) -> RunChanged:
    now = f"it is {current[0]} now" if current is not None else "its row is gone"
    return RunChanged(
        f"run {record.run_id} was changed by another server since this one read it ({now});"
        " nothing was written: read it again",
        data={"run_id": record.run_id, "status": current[0] if current is not None else None},
    )


def _stored_run(row: tuple[Any, ...]) -> Stored[int | None]:
    number, status, schedule_id, record = row[:4]
    return Stored(
        location=run_location(format_run_id(int(number))),
        key=int(number),
        document=record,
        columns={"status": status, "schedule_id": schedule_id},
    )


class PgRuns:
    """Run records in `wf_runs`: a new run is an INSERT (its primary key
    refuses a second record of the run), a change an UPDATE from the version
    this server read (see the module docstring); a group of records is one
    transaction (`executemany`)."""

    key_name = "row"

    def __init__(self, database: Database) -> None:
        self._db = database
        # The version of each row as this server last read or wrote it.
        self._versions: dict[int, int] = {}

    def rereads(self, number: int) -> bool:
        # A read is a query, which a synchronous read of the cache cannot
        # await: the cache keeps finished runs' JSON.
        return False

    def reread(self, number: int) -> Stored[int | None]:
        raise RuntimeError("rows of wf_runs are not read again synchronously (see `rereads`)")

    def reread_origins(self, numbers: Sequence[int]) -> list[Any]:
        raise RuntimeError("rows of wf_runs are not read again synchronously (see `rereads`)")

    def finished_codes(self) -> bytes:
        return b""  # every row is yielded

    def close(self) -> None:
        """Nothing of its own to close: the server closes the database."""

    def position(self) -> str | None:
        # Several servers write the table; a start lists every row.
        return None

    def written_since(self, position: str) -> list[int] | None:
        return None

    @property
    def server_id(self) -> str:
        return self._db.server_id

    def _rows_read(self, rows: Sequence[tuple[Any, ...]]) -> list[Stored[int | None]]:
        """The rows read, each marked `stale` when this server has since
        written a newer version of it (a read that raced its own write: the
        cache, newer, must not go back to it)."""
        found: list[Stored[int | None]] = []
        for row in rows:
            number, version = int(row[0]), int(row[4])
            stored = _stored_run(row)
            if version < self._versions.get(number, 0):
                stored.columns["stale"] = True
            else:
                self._versions[number] = version
            found.append(stored)
        return found

    async def load(self) -> AsyncIterator[Stored[int | None]]:
        rows = await _rows(
            self._db,
            "read the runs",
            f"SELECT {_RUN_COLUMNS} FROM wf_runs ORDER BY run_number",
        )
        for stored in self._rows_read(rows):
            yield stored

    async def read(self, number: int) -> Stored[int | None] | None:
        rows = await _rows(
            self._db,
            "read a run",
            f"SELECT {_RUN_COLUMNS} FROM wf_runs WHERE run_number = %s",
            (number,),
        )
        found = self._rows_read(rows)
        return found[0] if found else None

    async def read_page(
        self, *, status: str | None, after: int | None, before: int | None, limit: int
    ) -> list[Stored[int | None]]:
        where = ["status = %s"] if status is not None else []
        params: list[Any] = [status] if status is not None else []
        if before is not None or after is None:
            if before is not None:
                where.append("run_number < %s")
                params.append(before)
            order = "DESC"
        else:
            where.append("run_number > %s")
            params.append(after)
            order = "ASC"
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = await _rows(
            self._db,
            "list runs",
            f"SELECT {_RUN_COLUMNS} FROM wf_runs{clause} ORDER BY run_number {order} LIMIT %s",
            (*params, limit),
        )
        return self._rows_read(rows)

    async def read_executing(self) -> list[Stored[int | None]]:
        rows = await _rows(
            self._db,
            "read the executing runs",
            f"SELECT {_RUN_COLUMNS} FROM wf_runs WHERE status = 'running' ORDER BY run_number",
            background=True,
        )
        return self._rows_read(rows)

    def unstorable(self, field: str, value: Any) -> list[Problem]:
        return _nul_problems(field, value)

    def exists(self, run_id: str) -> bool:
        # The store's cache holds every row it loaded or wrote; a row written
        # since by someone else is refused by the primary key at the INSERT.
        return False

    async def write(self, record: RunRecord, *, created: bool) -> bytes | None:
        await self.write_many([record], created={record.run_id} if created else set())
        return None

    async def write_many(
        self, records: Sequence[RunRecord], *, created: AbstractSet[str]
    ) -> Sequence[bytes] | None:
        new = [_run_row(r) for r in records if r.run_id in created]
        changed = [r for r in records if r.run_id not in created]
        updates = [(*_run_row(r)[1:], _run_row(r)[0], self._version(r)) for r in changed]
        versions: dict[int, int] = {}
        try:
            async with (
                _writing(self._db, "write run records", as_server=True) as conn,
                conn.cursor() as cursor,
            ):
                if new:
                    await cursor.executemany(_INSERT_RUN, new)
                if updates:
                    await cursor.executemany(_UPDATE_RUN, updates, returning=True)
                    while True:
                        for number, version in await cursor.fetchall():
                            versions[int(number)] = int(version)
                        if not cursor.nextset():
                            break
                    missed = [r for r in changed if _number(r) not in versions]
                    if missed:
                        # Rolled back whole: none of the batch is written.
                        current = await conn.execute(
                            "SELECT status FROM wf_runs WHERE run_number = %s",
                            (_number(missed[0]),),
                        )
                        raise _changed(missed[0], await current.fetchone())
                    await send(
                        conn,
                        self._db,
                        STORE,
                        {"runs": [[_number(r), r.status, schedule_id_of(r)] for r in changed]},
                    )
        except psycopg.errors.UniqueViolation:
            raise _taken([r.run_id for r in records if r.run_id in created]) from None
        for row in new:
            self._versions[int(row[0])] = 1
        self._versions.update(versions)
        return None

    def _version(self, record: RunRecord) -> int:
        # A row this server created and never read since is at version 1.
        return self._versions.get(_number(record), 1)

    def stages_into(self, batch: object) -> bool:
        # A round's transaction (`shell.pg.batch`) on this database: the
        # admission and its run record commit together.
        return isinstance(batch, PgBatch) and batch.database is self._db

    def stage_created(
        self, batch: object, records: Sequence[RunRecord], written: Callable[[], None]
    ) -> None:
        assert isinstance(batch, PgBatch)
        for record in records:
            batch.add(PHASE_RUNS, _COPY_RUNS, _run_row(record))
            self._versions[_number(record)] = 1
        batch.on_commit(written)


def _number(record: RunRecord) -> int:
    number = parse_run_id(record.run_id)
    assert number is not None
    return number


class PgRunCounter:
    """Run numbers from the sequence `wf_run_number`, which never hands a
    number out twice (a crash may skip some)."""

    location = f"sequence {SEQUENCE}"
    name = f"sequence {SEQUENCE}"
    runs_where = f"in table {RUNS}"

    def __init__(self, database: Database) -> None:
        self._db = database

    async def read(self) -> CounterRead:
        rows = await _rows(
            self._db, "read the run id sequence", "SELECT last_value, is_called FROM wf_run_number"
        )
        last_value, is_called = rows[0]
        return CounterRead(stored=int(last_value) if is_called else 0)

    async def repair(self, last: int) -> None:
        # Only ever forward: a number the sequence handed out stays used.
        async with _writing(self._db, "repair the run id sequence") as conn:
            await conn.execute(
                "SELECT setval('wf_run_number', greatest(%s,"
                " (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM wf_run_number)))",
                (last,),
            )

    async def advance(self, last: int, count: int) -> list[int]:
        async with _writing(self._db, "reserve run ids") as conn:
            cursor = await conn.execute(
                "SELECT nextval('wf_run_number') FROM generate_series(1, %s)", (count,)
            )
            rows = await cursor.fetchall()
        return sorted(int(row[0]) for row in rows)
