"""The PostgreSQL test server itself: queries, restart, crash recovery, terminated
backends, pause, and that nothing runs as root. All on the session's server."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import psycopg
import pytest

from tests.pgserver import PostgresServer


def _uid_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status")
    if status.exists():
        line = next(x for x in status.read_text().splitlines() if x.startswith("Uid:"))
        return int(line.split()[2])  # effective uid
    out = subprocess.run(["ps", "-o", "uid=", "-p", str(pid)], capture_output=True, text=True)
    return int(out.stdout.strip())


def _rows(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        return [row[0] for row in conn.execute("SELECT x FROM t ORDER BY x").fetchall()]


def _commit_rows(url: str, *values: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS t (x int)")
        for value in values:
            conn.execute("INSERT INTO t VALUES (%s)", (value,))


def test_a_query_works_on_a_fresh_empty_database(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog',"
            " 'information_schema')"
        ).fetchone()
        assert tables == (0,)
        assert conn.execute("SELECT 6 * 7").fetchone() == (42,)
        encoding = conn.execute("SHOW server_encoding").fetchone()
        assert encoding == ("UTF8",)


def test_restart_keeps_the_data_and_the_port(pg_server: PostgresServer, pg_url: str) -> None:
    _commit_rows(pg_url, 1, 2)
    port = pg_server.port
    pg_server.restart()
    assert pg_server.port == port
    assert _rows(pg_url) == [1, 2]


def test_sigkill_then_start_recovers_committed_data(pg_server: PostgresServer, pg_url: str) -> None:
    _commit_rows(pg_url, 1)
    with psycopg.connect(pg_url) as conn:  # in flight when the server dies: rolled back
        conn.execute("INSERT INTO t VALUES (99)")
        postmaster = pg_server.pid
        assert postmaster is not None
        pg_server.kill(signal.SIGKILL)
        assert not pg_server.is_running()
        assert pg_server.pid is None
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(pg_url, connect_timeout=2).close()
    pg_server.start()
    assert pg_server.pid not in (None, postmaster)
    assert _rows(pg_url) == [1]


def test_terminate_backends_breaks_an_open_connection(
    pg_server: PostgresServer, pg_url: str
) -> None:
    dbname = pg_url.rsplit("/", 1)[1]
    with (
        psycopg.connect(pg_url, application_name="victim") as victim,
        psycopg.connect(pg_url, application_name="bystander") as bystander,
    ):
        assert pg_server.terminate_backends(dbname=dbname, application_name="victim") == 1
        with pytest.raises(psycopg.OperationalError):
            victim.execute("SELECT 1")
        assert bystander.execute("SELECT 1").fetchone() == (1,)
        assert pg_server.terminate_backends(dbname=dbname) == 1
        with pytest.raises(psycopg.OperationalError):
            bystander.execute("SELECT 1")


def test_pause_freezes_every_server_process_and_resume_thaws_them(
    pg_server: PostgresServer, pg_url: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert backend is not None
        pg_server.pause()
        try:
            assert pg_server.paused
            stat = Path(f"/proc/{backend[0]}/stat")
            if stat.exists():
                assert stat.read_text().rsplit(")", 1)[1].split()[0] == "T"
        finally:
            pg_server.resume()
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_the_server_does_not_run_as_root(pg_server: PostgresServer, pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert backend is not None
        postmaster = pg_server.pid
        assert postmaster is not None
        for pid in (postmaster, backend[0]):
            uid = _uid_of(pid)
            assert uid != 0
            if os.geteuid() != 0:
                assert uid == os.geteuid()
