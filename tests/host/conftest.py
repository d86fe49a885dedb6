"""Shared fixtures and plans for the host tests.

`build` builds servers on files (a store root under the test's tmp_path): for
tests about files themselves. `host` is a `HostStore` on either persistence,
files or a fresh PostgreSQL database (`pg_url`), and `server` a server built
on it: every test that takes either runs once per persistence.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import psycopg
import pytest
from psycopg.types.json import Jsonb

from adapters import build_local_static_workflow_server
from adapters.host import LocalStaticWorkflowServer, build_postgres_workflow_server
from adapters.host.identifiers import parse_run_id
from adapters.host.run_log import LOG_DIR
from core.errors import StoreUnavailable
from shell.pg.database import Database
from shell.store_format import LOCK_FILE
from tests import run_log_files
from tests.pgdeath import die_on_the_database

from .samples import APPROVAL_PLAN, GREETING_PLAN, chain_plan, sleep_plan

__all__ = [
    "APPROVAL_PLAN",
    "BACKENDS",
    "GREETING_PLAN",
    "START",
    "Builder",
    "HostStore",
    "TickingClock",
    "chain_plan",
    "deploy",
    "sleep_plan",
    "tree_snapshot",
]

Backend = Literal["files", "postgres"]
BACKENDS: tuple[Backend, ...] = ("files", "postgres")

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class TickingClock:
    """A fake clock: every reading is one millisecond after the previous one."""

    def __init__(self, start: datetime = START) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


def tree_snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` with its bytes: to prove a call wrote nothing.
    The lock file is left out: each start records its holder there."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != LOCK_FILE
    }


Builder = Callable[..., LocalStaticWorkflowServer]


def gone(servers: list[LocalStaticWorkflowServer]) -> None:
    """The processes of `servers` died (a restart follows): the kernel
    released their stores' locks."""
    for earlier in servers:
        if earlier.store_lock is not None:
            earlier.store_lock.abandon()
    servers.clear()


@pytest.fixture
def build(tmp_path: Path) -> Iterator[Builder]:
    """Build (or rebuild, as after a restart) a server on the test's store root."""

    built: list[LocalStaticWorkflowServer] = []

    def make(**kwargs: Any) -> LocalStaticWorkflowServer:
        kwargs.setdefault("clock", TickingClock())
        gone(built)
        built.append(build_local_static_workflow_server(tmp_path, **kwargs))
        return built[-1]

    yield make
    gone(built)


# The host's tables and, for each, the order its rows are digested in.
HOST_TABLES: dict[str, str] = {
    "wf_artifacts": "artifact_id, version",
    "wf_deployments": "deployment_id",
    "wf_runs": "run_number",
}


class HostStore:
    """One store the host tests build servers on (as a restart would, again
    and again), and read or damage behind the servers' backs: files under
    `root`, or the PostgreSQL database at `url`."""

    def __init__(self, kind: Backend, root: Path, url: str | None = None) -> None:
        self.kind: Backend = kind
        self.root = root
        self.url = url
        self._databases: list[Database] = []
        self._servers: list[LocalStaticWorkflowServer] = []

    async def build(self, **kwargs: Any) -> LocalStaticWorkflowServer:
        """A server on this store (each call is a restart: a new server)."""
        kwargs.setdefault("clock", TickingClock())
        if self.kind == "files":
            gone(self._servers)
            self._servers.append(build_local_static_workflow_server(self.root, **kwargs))
            return self._servers[-1]
        assert self.url is not None
        for earlier in self._databases:
            # A restart: the process of the server before this one is gone.
            with contextlib.suppress(StoreUnavailable):
                await die_on_the_database(earlier)
        database = Database(self.url)
        await database.open()
        self._databases.append(database)
        return await build_postgres_workflow_server(database, **kwargs)

    def hand_over(self) -> None:
        """The servers built so far let another process take the store (on
        files, as if their process had exited; on PostgreSQL several share it)."""
        gone(self._servers)

    async def close(self) -> None:
        gone(self._servers)
        for database in self._databases:
            await database.close()
        self._databases.clear()

    # -- reading and changing the store behind the servers' backs ---------------

    def connect(self) -> psycopg.Connection[Any]:
        assert self.url is not None
        return psycopg.connect(self.url, autocommit=True, connect_timeout=5)

    def snapshot(self) -> dict[str, Any]:
        """Everything the host stored: every file, or a digest of each host
        table and the run id sequence (to prove a call wrote nothing)."""
        if self.kind == "files":
            return tree_snapshot(self.root)
        with self.connect() as conn:
            digests: dict[str, Any] = {}
            for table, order in HOST_TABLES.items():
                row = conn.execute(
                    f"SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY {order}), ''))"
                    f" FROM {table} t"
                ).fetchone()
                digests[table] = row
            digests["wf_run_number"] = conn.execute(
                "SELECT last_value, is_called FROM wf_run_number"
            ).fetchone()
            return digests

    def location(self, run_id: str) -> str:
        """How findings and errors name the run's record."""
        if self.kind == "files":
            return f"{self.root / LOG_DIR} ({run_id})"
        return f"table wf_runs, run_id {run_id!r}"

    def record(self, run_id: str) -> Any:
        """The stored record of the run, as JSON (None: there is none)."""
        if self.kind == "files":
            return run_log_files.read_record(self.root, run_id)
        with self.connect() as conn:
            row = conn.execute(
                "SELECT record FROM wf_runs WHERE run_number = %s", (parse_run_id(run_id),)
            ).fetchone()
        return None if row is None else row[0]

    def write_record(self, run_id: str, document: Any) -> None:
        """Replace the stored record of the run with `document` (a row keeps
        its columns in step with it, as far as the document says)."""
        if self.kind == "files":
            run_log_files.append_document(self.root, run_id, document)
            return
        status = document.get("status") if isinstance(document, dict) else None
        origin = document.get("origin") if isinstance(document, dict) else None
        schedule_id = (
            origin.get("schedule_id")
            if isinstance(origin, dict) and origin.get("kind") == "schedule"
            else None
        )
        with self.connect() as conn:
            conn.execute(
                "UPDATE wf_runs SET record = %s, status = coalesce(%s, status), schedule_id = %s"
                " WHERE run_number = %s",
                (
                    Jsonb(document),
                    status if isinstance(status, str) else None,
                    schedule_id,
                    parse_run_id(run_id),
                ),
            )

    def rewrite(self, run_id: str, **changes: Any) -> None:
        """Change top-level fields of the stored record of the run."""
        record = self.record(run_id)
        assert record is not None
        record.update(changes)
        self.write_record(run_id, record)


@pytest.fixture(params=BACKENDS)
def host_store(request: pytest.FixtureRequest, tmp_path: Path) -> HostStore:
    if request.param == "postgres":
        return HostStore("postgres", tmp_path, request.getfixturevalue("pg_url"))
    return HostStore("files", tmp_path)


@pytest.fixture
async def host(host_store: HostStore) -> AsyncIterator[HostStore]:
    """The test's store, on files and on PostgreSQL (one run each)."""
    try:
        yield host_store
    finally:
        await host_store.close()


@pytest.fixture
async def server(host: HostStore) -> LocalStaticWorkflowServer:
    return await host.build()


async def deploy(
    server: LocalStaticWorkflowServer,
    plan: dict[str, Any],
    deployment_id: str = "demo.default",
    *,
    inputs: dict[str, Any] | None = None,
    artifact_id: str | None = None,
) -> str:
    """Create an artifact (version 1) for `plan` and a deployment of it."""
    artifact_id = artifact_id or deployment_id.split(".")[0]
    await server.api.create_artifact_from_plan(artifact_id, 1, copy.deepcopy(plan))
    await server.api.save_deployment(
        {
            "deployment_id": deployment_id,
            "artifact_id": artifact_id,
            "artifact_version": 1,
            "inputs": inputs or {},
        }
    )
    return deployment_id
