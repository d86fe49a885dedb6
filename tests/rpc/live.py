"""Serving an ASGI app on a real loopback socket for the duration of a test."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

from adapters.host import build_local_static_workflow_server, build_postgres_workflow_server
from adapters.rpc.server import bind_socket, build_server
from shell.pg.database import Database

__all__ = [
    "BACKENDS",
    "SwitchableApi",
    "build_test_server",
    "free_port",
    "server_on",
    "serving",
    "wait_until",
]

# The backends the live suites run on: files under a store root, PostgreSQL.
BACKENDS = ("file", "pg")


class SwitchableApi:
    """Forwards every attribute to `target`, so one live server (started once per
    module: uvicorn's graceful stop alone takes 0.2 s) serves a fresh API per test."""

    def __init__(self) -> None:
        self.target: Any = None

    def __getattr__(self, name: str) -> Any:
        if self.target is None:
            raise AttributeError(name)
        return getattr(self.target, name)


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Run `app` under uvicorn on 127.0.0.1:<free port>; yield its base URL."""
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = build_server(app, host="127.0.0.1", port=port, log_level="warning")
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await server.wait_started(task)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=10)
        sock.close()


def free_port() -> int:
    """A port nothing listens on right now (for subprocess servers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_until(
    probe: Callable[[], Any], *, timeout_s: float = 10.0, interval_s: float = 0.05
) -> Any:
    """Poll an async `probe` until it returns something truthy; return that."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = await probe()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s (last: {value!r})")
        await asyncio.sleep(interval_s)


def build_test_server(root: Any, *, schedules: bool = True) -> Any:
    """The real host, with the real schedules API when `schedules`."""
    return build_local_static_workflow_server(root, schedules=schedules)


@contextlib.asynccontextmanager
async def server_on(
    backend: str, root: Any, pg_url: str | None, *, schedules: bool = True
) -> AsyncIterator[Any]:
    """The real host (and schedules API) on `backend`: the files under `root`,
    or the PostgreSQL database at `pg_url`, closed afterwards."""
    if backend == "file":
        yield build_local_static_workflow_server(root, schedules=schedules)
        return
    assert pg_url is not None
    database = Database(pg_url)
    await database.open()
    server = await build_postgres_workflow_server(database, schedules=schedules)
    try:
        yield server
    finally:
        await server.close()
