"""The host's records in PostgreSQL (see persistence.py and docs/host.md).

Tables of `shell/pg/migrations/0001_initial.sql`:

- `wf_artifacts(artifact_id, version, record)`;
- `wf_deployments(deployment_id, record)`;
- `wf_runs(run_number, status, schedule_id, record)`: `status` mirrors the
  record's, `schedule_id` is its origin's for a scheduled run (NULL
  otherwise);
- the sequence `wf_run_number` issues run numbers.

`record` holds the document the file store keeps in its file. Every write is
one transaction opened with `Database.transaction(<operation>, fenced=True)`:
a process whose scheduler lost the store's ownership commits nothing
(`StoreFenced`). A connection error leaves as `StoreUnavailable` (the
transaction converts it; any other driver error is converted here too), a
value PostgreSQL cannot hold in `jsonb` (a string with a NUL character) as
`InvalidInput`, and a new run whose number is already in `wf_runs` as
`AlreadyExists`: the primary key is what refuses a second record of a run,
beside the store's cache and its per-run locks.

Reads happen at load only; afterwards the stores answer from their caches, so
reads keep working while the database is down.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Final

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from core.errors import AlreadyExists, InvalidInput, Problem
from shell.pg.batch import PHASE_RUNS, PgBatch
from shell.pg.database import Database

from .identifiers import format_run_id, parse_run_id
from .persistence import CounterRead, Stored
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
_UPSERT_RUN: Final = (
    _INSERT_RUN + " ON CONFLICT (run_number) DO UPDATE SET status = EXCLUDED.status,"
    " schedule_id = EXCLUDED.schedule_id, record = EXCLUDED.record"
)


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
async def _writing(database: Database, operation: str) -> AsyncIterator[AsyncConnection[TupleRow]]:
    """One fenced write transaction; driver errors leave as domain errors
    (see the module docstring). `AlreadyExists` is the caller's to word."""
    try:
        async with database.transaction(operation, fenced=True) as conn:
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


async def _rows(database: Database, operation: str, query: str) -> list[tuple[Any, ...]]:
    try:
        return list(await database.fetch_all(operation, query))
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

    async def delete(self, deployment_id: str) -> None:
        async with _writing(self._db, "delete a deployment") as conn:
            await conn.execute(
                "DELETE FROM wf_deployments WHERE deployment_id = %s", (deployment_id,)
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


class PgRuns:
    """Run records in `wf_runs`: a new run is an INSERT (its primary key
    refuses a second record of the run), a change an upsert; a group of
    records is one transaction (`executemany`)."""

    key_name = "row"

    def __init__(self, database: Database) -> None:
        self._db = database

    async def load(self) -> AsyncIterator[Stored[int | None]]:
        rows = await _rows(
            self._db,
            "read the runs",
            "SELECT run_number, status, schedule_id, record FROM wf_runs ORDER BY run_number",
        )
        for number, status, schedule_id, record in rows:
            yield Stored(
                location=run_location(format_run_id(int(number))),
                key=int(number),
                document=record,
                columns={"status": status, "schedule_id": schedule_id},
            )

    def unstorable(self, field: str, value: Any) -> list[Problem]:
        return _nul_problems(field, value)

    def exists(self, run_id: str) -> bool:
        # The store's cache holds every row it loaded or wrote; a row written
        # since by someone else is refused by the primary key at the INSERT.
        return False

    async def write(self, record: RunRecord, *, created: bool) -> None:
        try:
            async with _writing(self._db, "write a run record") as conn:
                await conn.execute(_INSERT_RUN if created else _UPSERT_RUN, _run_row(record))
        except psycopg.errors.UniqueViolation:
            raise _taken([record.run_id]) from None

    async def write_many(self, records: Sequence[RunRecord], *, created: AbstractSet[str]) -> None:
        new = [_run_row(r) for r in records if r.run_id in created]
        changed = [_run_row(r) for r in records if r.run_id not in created]
        try:
            async with (
                _writing(self._db, "write run records") as conn,
                conn.cursor() as cursor,
            ):
                if new:
                    await cursor.executemany(_INSERT_RUN, new)
                if changed:
                    await cursor.executemany(_UPSERT_RUN, changed)
        except psycopg.errors.UniqueViolation:
            raise _taken([r.run_id for r in records if r.run_id in created]) from None

    def stages_into(self, batch: object) -> bool:
        # A round's transaction (`shell.pg.batch`) on this database: the
        # admission and its run record commit together.
        return isinstance(batch, PgBatch) and batch.database is self._db

    def stage_created(self, batch: object, records: Sequence[RunRecord]) -> None:
        assert isinstance(batch, PgBatch)
        for record in records:
            batch.add(PHASE_RUNS, _COPY_RUNS, _run_row(record))


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
