"""A fork server for `wf-schedule`, so the docs test pays its imports once.

`wf-schedule` spends about 0.75 s importing before it does anything; a page of
thirty commands would spend most of its time there. `serve SOCKET` imports
the CLI once and, per connection, forks: the child takes the caller's
stdin/stdout/stderr (passed as file descriptors), working directory,
environment and arguments, runs the real entry point `adapters.schedule_cli.main`
and reports its exit status. Each command is still its own process with its
own stdio; only the import is shared.

Without arguments this file is the client the shell calls (`python -I -S
doc_zygote.py ARGS...`): standard library only, so it starts in milliseconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["client", "serve"]

_MAX_REQUEST = 1 << 20


def client(socket_path: str, argv: list[str]) -> int:
    """Run `wf-schedule argv` in the fork server with this process's stdio; its status."""
    request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(socket_path)
        socket.send_fds(conn, [len(request).to_bytes(8, "big")], [0, 1, 2])
        conn.sendall(request)
        status = conn.recv(4)
    return int.from_bytes(status, "big", signed=True) if len(status) == 4 else 1


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    header, fds, _flags, _addr = socket.recv_fds(conn, 8, 3)
    size = int.from_bytes(header, "big")
    if size > _MAX_REQUEST:
        raise ValueError(f"request of {size} bytes")
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("client went away")
        data += chunk
    return json.loads(data), fds


def _child(conn: socket.socket, main: Callable[[], None]) -> None:
    status = 1
    try:
        request, fds = _receive(conn)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(str(request["cwd"]))
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["wf-schedule", *request["argv"]]
        try:
            main()
            status = 0
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                status = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                status = 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        try:
            conn.sendall(status.to_bytes(4, "big", signed=True))
        finally:
            os._exit(status)


# Run once before forking: what the CLI imports or builds on first use (httpx's
# transport, an SSL context, rich's table rendering) is then shared too. Port 9
# (discard) has no listener, so the health check fails at once.
_WARM_UP = (
    ["health", "--url", "http://127.0.0.1:9/rpc"],
    ["preview", "--cron", "0 * * * *", "--count", "1"],
)


def _warm_up(main: Callable[[], None]) -> None:
    import io

    for argv in _WARM_UP:
        sys.argv = ["wf-schedule", *argv]
        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
            contextlib.suppress(SystemExit),
        ):
            main()


def serve(socket_path: str) -> None:
    """Import the CLI, then fork a child per connection until killed."""
    import signal

    from adapters.schedule_cli import main

    _warm_up(main)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(socket_path)
        listener.listen(16)
        print("ready", flush=True)
        while True:
            conn, _ = listener.accept()
            if os.fork() == 0:
                listener.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _child(conn, main)
            conn.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])
    else:
        sys.exit(client(os.environ["WF_DOC_ZYGOTE"], sys.argv[1:]))
