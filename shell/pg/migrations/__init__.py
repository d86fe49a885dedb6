"""The schema of a PostgreSQL store, as versioned SQL migrations.

Each migration is a file `NNNN_<name>.sql` in this package, applied once, in
order, each in its own transaction together with its row in
`wf_schema_version` (so a migration is applied wholly or not at all). A
server applies the missing ones when it opens the store, under an advisory
lock, so two servers starting together migrate once. A database whose schema
is newer than this code (a newer server migrated it) is refused, saying so:
this code cannot know what the newer schema means.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Final

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from core.errors import StoreUnavailable

__all__ = ["LATEST_VERSION", "MIGRATIONS", "Migration", "migrate", "schema_version"]

# Advisory lock keys of wf-scheduler (pg_advisory_lock(int, int)): the first
# names this application, the second the lock.
LOCK_NAMESPACE: Final = 0x77665F73  # "wf_s"
MIGRATION_LOCK: Final = 1

_NAME: Final = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def _load() -> tuple[Migration, ...]:
    found: list[Migration] = []
    for entry in resources.files(__name__).iterdir():
        match = _NAME.match(entry.name)
        if match is None:
            continue
        found.append(Migration(int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError("the migrations of shell/pg/migrations are not numbered 1, 2, 3...")
    return tuple(found)


MIGRATIONS: Final = _load()
LATEST_VERSION: Final = MIGRATIONS[-1].version

_VERSION_TABLE: Final = """
CREATE TABLE IF NOT EXISTS wf_schema_version (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


async def schema_version(conn: AsyncConnection[TupleRow]) -> int:
    """The version the database's schema is at (0: none yet)."""
    cursor = await conn.execute("SELECT to_regclass('wf_schema_version') IS NOT NULL")
    row = await cursor.fetchone()
    if row is None or not row[0]:
        return 0
    cursor = await conn.execute("SELECT coalesce(max(version), 0) FROM wf_schema_version")
    row = await cursor.fetchone()
    return int(row[0]) if row is not None else 0


async def migrate(conn: AsyncConnection[TupleRow], *, display: str) -> list[int]:
    """Apply the missing migrations on `conn` (autocommit); the versions
    applied. Raises `StoreUnavailable` for a schema newer than this code."""
    applied: list[int] = []
    await conn.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_NAMESPACE, MIGRATION_LOCK))
    try:
        current = await schema_version(conn)
        if current > LATEST_VERSION:
            raise StoreUnavailable(
                f"the PostgreSQL store {display} has schema version {current}, newer than"
                f" this wf-scheduler's {LATEST_VERSION}: a newer server migrated it;"
                " run that version (or newer) against it",
                data={
                    "operation": "open the store",
                    "store": display,
                    "schema_version": current,
                    "supported": LATEST_VERSION,
                },
            )
        for migration in MIGRATIONS:
            if migration.version <= current:
                continue
            async with conn.transaction():
                await conn.execute(_VERSION_TABLE)
                await conn.execute(migration.sql.encode())
                await conn.execute(
                    "INSERT INTO wf_schema_version (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
            applied.append(migration.version)
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_NAMESPACE, MIGRATION_LOCK))
    return applied
