"""`wf-rpc-server`: serve the workflow API (and, when enabled, the scheduler) over JSON-RPC.

    wf-rpc-server --store-root .wf_store --enable-scheduler
    wf-rpc-server --store-url postgresql://wf@db.internal/wf --enable-scheduler
    wf-rpc-server --config server.json --port 9000

Startup order: resolve settings (flags over config file; every problem named),
refuse a non-loopback address without a token, open and recover the store
(a store directory under its lock, held until the exit, with or without
the scheduler), start the scheduler service, then listen. On SIGTERM or
SIGINT: stop admitting (the scheduler stops first, the HTTP server stops
accepting), drain executing runs within `drain_grace_s`, and exit 0.

SIGHUP (a closed terminal, a dropped SSH session) stops the server as
SIGTERM does, unless it was ignored when the server started (`nohup`).
SIGTERM never cuts the drain, however many arrive: `kill %1` on a job
started with `uv run` signals its process group, so the server gets the
shell's SIGTERM and the one uv forwards, a millisecond apart. A SIGINT that
arrives while the drain runs (Ctrl-C a second time) cuts it: the server stops
waiting. Runs still executing when the drain ran out of time or was cut get a
stop note on their executing marks (`note_stopped`) and are cancelled; the
next startup fails them as abandoned, saying the server stopped them.

Exit status: 0 clean shutdown; 1 runtime failure (store, lock, port);
2 invalid settings or an insecure bind.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from adapters.collector import freeze_startup_objects, tune_collector
from adapters.console import Console
from adapters.host import (
    LocalStaticWorkflowServer,
    build_local_static_workflow_server,
    build_postgres_workflow_server,
)
from adapters.host.records import StopCause
from adapters.logs import configure_logging
from adapters.metrics import SchedulerMetrics
from adapters.process_limits import raise_open_file_limit
from adapters.rpc.app import create_app, leadership_health, with_store_health
from adapters.rpc.auth import InsecureBind, check_bind_security
from adapters.rpc.config import ENV_STORE_URL, ServerSettings, resolve_settings
from adapters.rpc.server import bind_socket, build_server
from core.errors import InvalidInput, Problem, SchedulingError
from shell import SchedulerService, build_scheduler_service
from shell.journal import JOURNAL_FILE
from shell.pg.database import Database, display_url
from shell.pg.health import StoreWatch

__all__ = ["ENV_HOST", "ENV_PORT", "main", "parse_args", "serve", "settings_from_args"]

ENV_HOST: Final = "WF_RPC_HOST"
ENV_PORT: Final = "WF_RPC_PORT"
EXIT_RUNTIME: Final = 1
EXIT_SETTINGS: Final = 2

logger = logging.getLogger("adapters.rpc_server")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("wf-scheduler")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wf-rpc-server",
        description=(
            "Serve the wf-scheduler workflow API over JSON-RPC 2.0 (POST /rpc), the"
            " operator console (GET /), health (GET /healthz) and Prometheus metrics"
            " (GET /metrics)."
        ),
        epilog="Flags override the config file. Exit status: 0 clean shutdown, "
        "1 runtime failure, 2 invalid settings or insecure bind.",
    )
    parser.add_argument("--version", action="version", version=f"wf-rpc-server {_version()}")
    store = parser.add_mutually_exclusive_group()
    store.add_argument(
        "--store-root", type=Path, help="store directory (created if missing; the default kind)"
    )
    store.add_argument(
        "--store-url",
        help=f"PostgreSQL store: postgresql://user[:password]@host[:port]/dbname"
        f" (env {ENV_STORE_URL})",
    )
    parser.add_argument(
        "--store-pool-size",
        type=int,
        help="most connections to a PostgreSQL store (default 10)",
    )
    parser.add_argument("--config", type=Path, help='JSON config file ({"server": {...}})')
    parser.add_argument("--host", help=f"address to listen on (default 127.0.0.1; env {ENV_HOST})")
    parser.add_argument("--port", help=f"port to listen on (default 8765; env {ENV_PORT})")
    parser.add_argument(
        "--enable-scheduler",
        action="store_true",
        help="run the scheduler service and serve workflow.schedules.*",
    )
    parser.add_argument(
        "--standby",
        action="store_true",
        help="with --store-url: run the scheduler as a standby when another server leads"
        " the store, taking over when it is gone (implies --enable-scheduler)",
    )
    auth = parser.add_mutually_exclusive_group()
    auth.add_argument("--token-file", type=Path, help="file holding the bearer token")
    auth.add_argument("--token-env", help="environment variable holding the bearer token")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log verbosity (default info)",
    )
    parser.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="log lines as readable text (default) or one JSON object a line, each with a"
        " stable event name (docs/operations.md)",
    )
    parser.add_argument(
        "--access-log",
        action="store_true",
        help="log every HTTP request (event http.access)",
    )
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return _build_parser().parse_args(argv)


def settings_from_args(
    args: argparse.Namespace, *, environ: Mapping[str, str], cwd: Path
) -> ServerSettings:
    """Resolve settings from parsed flags, `WF_RPC_HOST`/`WF_RPC_PORT` (flag
    stand-ins) and the config file. Raises InvalidInput naming each problem."""
    host = args.host if args.host is not None else environ.get(ENV_HOST)
    raw_port = args.port if args.port is not None else environ.get(ENV_PORT)
    port: int | None = None
    if raw_port is not None:
        try:
            port = int(raw_port)
        except ValueError:
            raise InvalidInput.from_problems(
                "server settings",
                [
                    Problem(
                        field="port",
                        reason=f"{raw_port!r} is not a port number (flag --port or {ENV_PORT})",
                    )
                ],
            ) from None
    store_url = args.store_url
    if store_url is None and args.store_root is None:
        store_url = environ.get(ENV_STORE_URL) or None
    return resolve_settings(
        config_path=args.config,
        store_root=args.store_root,
        store_url=store_url,
        store_pool_size=args.store_pool_size,
        host=host,
        port=port,
        enable_scheduler=bool(args.enable_scheduler),
        standby=bool(args.standby),
        token_file=args.token_file,
        token_env=args.token_env,
        environ=environ,
        cwd=cwd,
    )


async def serve(
    settings: ServerSettings, *, exiting: bool = False, access_log: bool = False
) -> int:
    """Run until SIGTERM/SIGINT; return the exit status.

    `exiting`: the process exits once this returns (the CLI). Signals are then
    ignored from the end of the stop on, instead of going back to their
    defaults: a late one would kill the process and change its exit status
    from 0 (uv forwards a second Ctrl-C 200 ms after the terminal's)."""
    try:
        # Bind before touching the store, so a busy port fails fast and changes nothing.
        sock = bind_socket(settings.host, settings.port)
    except OSError as exc:
        logger.error("cannot listen on %s:%s: %s", settings.host, settings.port, exc)
        return EXIT_RUNTIME
    try:
        return await _serve_on(sock, settings, exiting=exiting, access_log=access_log)
    finally:
        sock.close()


def _scheduler_words(service: SchedulerService | None) -> str:
    if service is None:
        return "disabled"
    return "enabled, standing by" if service.role == "standby" else "enabled"


async def _open_server(settings: ServerSettings) -> LocalStaticWorkflowServer:
    """The server on its store: the files under the store root, or the
    PostgreSQL database (opened, its schema brought up to date)."""
    if settings.store_url is None:
        assert settings.store_root is not None
        # The builder refuses a store another live process holds.
        return build_local_static_workflow_server(
            settings.store_root, schedules=settings.scheduler.enabled
        )
    database = Database(settings.store_url, pool_size=settings.store_pool_size)
    await database.open()
    try:
        return await build_postgres_workflow_server(
            database,
            schedules=settings.scheduler.enabled,
            lease_s=settings.scheduler.lease_s,
            renew_s=settings.scheduler.renew_interval_s,
        )
    except BaseException:
        await database.close()
        raise


async def _serve_on(
    sock: socket.socket, settings: ServerSettings, *, exiting: bool, access_log: bool = False
) -> int:
    server = await _open_server(settings)
    database = getattr(server, "database", None)
    # A database can go away on its own: health says so even while idle.
    watch = StoreWatch(database, server.api.store_health) if database is not None else None
    try:
        if watch is not None:
            watch.start()
        return await _serve_server(sock, server, settings, exiting=exiting, access_log=access_log)
    finally:
        if watch is not None:
            await watch.stop()
        await server.close()


async def _serve_server(
    sock: socket.socket,
    server: LocalStaticWorkflowServer,
    settings: ServerSettings,
    *,
    exiting: bool,
    access_log: bool = False,
) -> int:
    for finding in server.recovery_report:
        logger.warning("store recovery: %s", finding)
    state = {"scheduler": "disabled"}
    service: SchedulerService | None = None
    database = getattr(server, "database", None)
    server_id = database.server_id if isinstance(database, Database) else None

    def health() -> Mapping[str, Any]:
        return with_store_health(
            {
                "status": "ok",
                "schedules": server.api.schedules is not None,
                "scheduler": state["scheduler"],
                **leadership_health(
                    service if state["scheduler"] in ("running", "stopping") else None, server_id
                ),
            },
            server.api.store_health,
        )

    # The console and /metrics read the same API and health as JSON-RPC.
    console = Console(server.api, health=health, token=settings.token, now=lambda: server.clock())
    metrics = SchedulerMetrics()
    metrics.watch_host(server.api, server.recovery_report)
    metrics.set_schedule_counts(console.schedule_counts)
    metrics.decision_listeners.append(console.decided)
    console.watch(server.api)
    if server.store_root is not None:
        metrics.set_journal(server.store_root / JOURNAL_FILE)
    app = create_app(
        server.api,
        rpc_path=settings.rpc_path,
        token=settings.token,
        max_body_bytes=settings.max_body_bytes,
        health=health,
        console=console,
        metrics=metrics,
    )
    http = build_server(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=access_log,
    )
    if access_log:
        # uvicorn set its access logger to the server's level; it is asked for.
        logging.getLogger("uvicorn.access").setLevel(logging.INFO)
    if settings.scheduler.enabled:
        service = build_scheduler_service(server, settings.scheduler, observer=metrics)
    if service is not None:
        console.attach_service(service)
        metrics.attach_service(service)
    loop = asyncio.get_running_loop()
    grace_s = settings.scheduler.drain_grace_s
    stopping: asyncio.Task[None] | None = None
    drain_deadline = 0.0
    gave_up = asyncio.Event()

    async def stop_admission() -> None:
        if service is not None and service.running:
            state["scheduler"] = "stopping"
            # The service stops its loop first, then drains within the grace period.
            await service.stop()
            state["scheduler"] = "stopped"

    def begin_stop() -> None:
        nonlocal stopping, drain_deadline
        if stopping is None:
            drain_deadline = loop.time() + grace_s
            http.should_exit = True
            stopping = loop.create_task(stop_admission())

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        if stopping is None:
            logger.info(
                "%s: stopping admission, then draining (up to %g s; Ctrl-C stops waiting)",
                name,
                grace_s,
            )
            begin_stop()
        elif signum == signal.SIGINT and not gave_up.is_set():
            logger.warning("SIGINT while draining: not waiting for the drain")
            http.force_exit = True
            gave_up.set()
        else:
            # A repeated SIGTERM is what a process-group kill through `uv run`
            # delivers; only an explicit second Ctrl-C gives up on the runs.
            logger.info("%s: already stopping (only a SIGINT cuts the drain)", name)

    # Installed before the scheduler starts: from then on runs may be executing,
    # and a signal must drain them rather than kill the process.
    stop_signals = _stop_signals()
    for signum in stop_signals:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        if service is not None:
            await service.start()
            state["scheduler"] = "running"
        freeze_startup_objects()
        serving = loop.create_task(http.serve(sockets=[sock]))
        await http.wait_started(serving)
        origin = f"http://{_url_host(settings.host)}:{settings.port}"
        where = f"{origin}{settings.rpc_path}"
        store = (
            f"PostgreSQL {display_url(settings.store_url)}"
            if settings.store_url is not None
            else str(settings.store_root)
        )
        print(
            f"wf-rpc-server: listening on {where} "
            f"(scheduler {_scheduler_words(service)}, "
            f"auth {'bearer token' if settings.token else 'none, loopback only'}; "
            f"store {store}); console {origin}/",
            file=sys.stderr,
            flush=True,
        )
        await serving
    finally:
        # Also on a failed start: the scheduler must release its lock and runs must drain.
        begin_stop()
        assert stopping is not None
        await _until(stopping, gave_up)
        if service is not None and service.running and not gave_up.is_set():
            # A signal during service.start() found nothing to stop yet.
            await _until(loop.create_task(stop_admission()), gave_up)
        # Manual runs are the host's; give them what is left of the same grace period.
        remaining = max(0.0, drain_deadline - loop.time())
        drain = loop.create_task(server.api.drain(remaining))
        if not await _until(drain, gave_up):
            drain.cancel()
        if server.api.executing_runs():
            # Before they are cancelled, so that the next start can tell this
            # stop from a process that died (the scheduler noted its own runs
            # already if its drain ran out; a note is never overwritten).
            cause: StopCause = "drain-cut" if gave_up.is_set() else "drain-expired"
            await server.api.note_stopped(cause, grace_s)
        still = await server.api.cancel_executing()
        if still:
            logger.warning(
                "runs still executing at exit were stopped unfinished; the next start fails"
                " them as abandoned, saying so: %s",
                ", ".join(still),
            )
        else:
            logger.info("drained: no run was executing at exit")
        for signum in stop_signals:
            loop.remove_signal_handler(signum)
            if exiting:
                signal.signal(signum, signal.SIG_IGN)
        await console.close()
    logger.info("stopped")
    return 0


def _stop_signals() -> list[signal.Signals]:
    """The signals that stop the server with a drain: SIGTERM, SIGINT, and
    SIGHUP (the terminal closed, the SSH session dropped: otherwise the
    process would die with its runs) unless it is ignored, as `nohup`
    leaves it for a server meant to outlive its terminal."""
    signals = [signal.SIGTERM, signal.SIGINT]
    if signal.getsignal(signal.SIGHUP) == signal.SIG_DFL:
        signals.append(signal.SIGHUP)
    return signals


async def _until(task: asyncio.Task[Any], gave_up: asyncio.Event) -> bool:
    """Wait for `task` unless the operator gives up first; True if it finished."""
    waiter = asyncio.ensure_future(gave_up.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if task.done():
        task.result()
        return True
    return False


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _report(exc: SchedulingError) -> None:
    problems = getattr(exc, "problems", ())
    if not problems:
        print(f"wf-rpc-server: {exc.message}", file=sys.stderr)
        return
    print("wf-rpc-server: cannot start, invalid settings:", file=sys.stderr)
    for problem in problems:
        print(f"  {problem.field}: {problem.reason}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point of `wf-rpc-server`."""
    args = parse_args(argv)
    try:
        settings = settings_from_args(args, environ=os.environ, cwd=Path.cwd())
        check_bind_security(settings.host, settings.token)
    except InvalidInput as exc:
        _report(exc)
        sys.exit(EXIT_SETTINGS)
    except InsecureBind as exc:
        print(f"wf-rpc-server: {exc}", file=sys.stderr)
        sys.exit(EXIT_SETTINGS)
    configure_logging(args.log_level, args.log_format, access_log=args.access_log)
    tune_collector()
    raise_open_file_limit()
    try:
        status = asyncio.run(serve(settings, exiting=True, access_log=args.access_log))
    except SchedulingError as exc:
        _report(exc)
        status = EXIT_RUNTIME
    except OSError as exc:
        print(f"wf-rpc-server: store error: {exc}", file=sys.stderr)
        status = EXIT_RUNTIME
    sys.exit(status)


if __name__ == "__main__":
    main()
