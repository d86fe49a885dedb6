"""The PostgreSQL backend: the whole store in one PostgreSQL database.

See `docs/storage.md` ("PostgreSQL") for the schema and `docs/operations.md`
for running on it. `Database` is the connection pool, schema and errors;
`PgBackend` the schedule stores (`shell.store_ports.ScheduleBackend`).
"""

from shell.pg.database import Database, display_url, is_store_url

__all__ = ["Database", "display_url", "is_store_url"]
