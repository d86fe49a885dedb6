"""Fixtures shared by every test directory: a real PostgreSQL server.

`pg_server` is started once per session, lazily (only a session that runs a
test asking for it pays the ~1 s of initdb). `pg_url` gives each test its own
empty database, so tests cannot see each other's rows.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator

import pytest

from tests.pgserver import PostgresServer

_database_numbers = itertools.count(1)


def _postgres_required() -> bool:
    # CI sets WF_REQUIRE_POSTGRES=1: a missing server there must fail, never skip.
    return os.environ.get("WF_REQUIRE_POSTGRES", "") not in ("", "0")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL server for the whole session (not durable)."""
    if not PostgresServer.available():
        reason = PostgresServer.unavailable_reason()
        if _postgres_required():
            pytest.fail(f"{reason}, and WF_REQUIRE_POSTGRES is set", pytrace=False)
        pytest.skip(reason)
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


def _heal(server: PostgresServer) -> None:
    # A fault test that failed half-way must not leave the session's server paused or
    # down for every test after it.
    if server.paused:
        server.resume()
    if not server.is_running():
        server.start()


@pytest.fixture
def pg_url(pg_server: PostgresServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of a fresh, empty database, dropped after the test."""
    slug = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower()).strip("_")
    name = f"t{next(_database_numbers)}_{slug}"[:63]
    _heal(pg_server)
    url = pg_server.create_database(name, template="template0")
    yield url
    _heal(pg_server)
    pg_server.drop_database(name)
