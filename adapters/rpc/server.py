"""Running the ASGI app under uvicorn, programmatically, inside our own event loop.

uvicorn's `Server.serve` installs process signal handlers and re-raises the
captured signal after shutting down, which would turn a graceful SIGTERM into
exit status 143. `EmbeddedServer` leaves signals to its owner (the
`wf-rpc-server` command, or a test), which sets `should_exit` itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Generator
from typing import Any

import uvicorn

__all__ = ["EmbeddedServer", "bind_socket", "build_server"]


class EmbeddedServer(uvicorn.Server):
    """A uvicorn server that never touches process signal handlers."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    @property
    def bound_port(self) -> int:
        """The port actually listened on (useful after binding port 0)."""
        for server in getattr(self, "servers", []):
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        raise RuntimeError("server is not listening yet")

    async def wait_started(self, task: asyncio.Task[Any], timeout_s: float = 10.0) -> None:
        """Wait until the server listens; raise if `task` (its `serve()`) died first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self.started:
            if task.done():
                task.result()
                raise RuntimeError("server stopped before it started listening")
            if loop.time() > deadline:
                raise TimeoutError(f"server did not start within {timeout_s} s")
            await asyncio.sleep(0.01)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket; `port=0` picks a free one (read it with getsockname)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must be IPPROTO_TCP (not 0): asyncio sets TCP_NODELAY on accepted
    # connections only then, and without it every response waits ~40 ms for a
    # delayed ACK between its header and body writes.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.setblocking(False)
    return sock


def build_server(
    app: Any,
    *,
    host: str,
    port: int,
    graceful_timeout_s: float | None = 10.0,
    log_level: str = "info",
    access_log: bool = False,
    configure_logging: bool = False,
) -> EmbeddedServer:
    """An `EmbeddedServer` for `app`. With `configure_logging=False` uvicorn
    leaves the process's logging setup alone."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="off",
        log_level=log_level,
        access_log=access_log,
        log_config=uvicorn.config.LOGGING_CONFIG if configure_logging else None,
        timeout_graceful_shutdown=None
        if graceful_timeout_s is None
        else max(1, round(graceful_timeout_s)),
        server_header=False,
    )
    return EmbeddedServer(config)
