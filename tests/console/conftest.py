"""Fixtures of the console's tests: a real `wf-rpc-server` process on a store
with a day of history (`world.py`), on files or on PostgreSQL, and a real
headless Chromium (Debian's, at /usr/bin/chromium) driven by Playwright.

Screenshots go to `$WF_CONSOLE_SCREENSHOTS` when set (the documentation's
are taken so: `WF_CONSOLE_SCREENSHOTS=docs/console uv run pytest
tests/console/test_console_browser.py -k "walk and file"`), otherwise to a
temporary folder; the walk prints which.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.host import build_local_static_workflow_server, build_postgres_workflow_server
from shell.pg.database import Database
from tests.console.world import World, build_world
from tests.rpc.live import free_port

CHROMIUM = "/usr/bin/chromium"
# Headless, and nothing that reaches beyond this machine (its network is closed).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "console-test-token-0123456789"


@dataclass
class LiveConsole:
    """A running server: its base URL, the world in its store, its process."""

    base: str
    world: World
    process: subprocess.Popen[bytes]
    backend: str
    log: Path
    token: str | None = None

    def rpc(self, method: str, params: dict[str, Any] | None = None) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        answer = httpx.post(
            f"{self.base}/rpc",
            json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}},
            headers=headers,
            timeout=30,
        ).json()
        if "error" in answer:
            raise AssertionError(f"{method} failed: {answer['error']}")
        return answer["result"]

    def log_lines(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").splitlines()


def _open_server(backend: str, root: Path, pg_url: str | None) -> Callable[..., Any]:
    @contextlib.asynccontextmanager
    async def open_server(clock: Callable[[], datetime]) -> AsyncIterator[Any]:
        if backend == "file":
            server = build_local_static_workflow_server(root, schedules=True, clock=clock)
        else:
            assert pg_url is not None
            database = Database(pg_url)
            await database.open()
            server = await build_postgres_workflow_server(database, schedules=True, clock=clock)
        try:
            yield server
        finally:
            await server.close()

    return open_server


def wait_for(probe: Callable[[], Any], *, timeout_s: float = 20.0, what: str = "") -> Any:
    """Poll `probe` (every 50 ms) until it returns something truthy."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what} (last: {value!r})")
        time.sleep(0.05)


def start_console(
    backend: str,
    tmp_path: Path,
    pg_url: str | None,
    *,
    token: str | None = None,
    extra: tuple[str, ...] = (),
) -> LiveConsole:
    """Build the world in a fresh store and start `wf-rpc-server` on it."""
    root = tmp_path / "store"
    # On a thread of its own: Playwright's sync API keeps an event loop
    # running on this one.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        world = pool.submit(asyncio.run, build_world(_open_server(backend, root, pg_url))).result()
    port = free_port()
    store = ["--store-root", str(root)] if backend == "file" else ["--store-url", str(pg_url)]
    env = dict(os.environ)
    command = [
        sys.executable,
        "-m",
        "adapters.rpc_server_cli",
        *store,
        "--enable-scheduler",
        "--port",
        str(port),
        "--log-format",
        "json",
        *extra,
    ]
    if token is not None:
        env["WF_CONSOLE_TEST_TOKEN"] = token
        command += ["--token-env", "WF_CONSOLE_TEST_TOKEN"]
    log = tmp_path / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
    live = LiveConsole(
        base=f"http://127.0.0.1:{port}",
        world=world,
        process=process,
        backend=backend,
        log=log,
        token=token,
    )
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    def up() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the server exited: {log.read_text()}")
        try:
            return httpx.get(f"{live.base}/healthz", headers=headers, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, what="the server answers /healthz")
    return live


def stop_console(live: LiveConsole) -> None:
    if live.process.poll() is None:
        live.process.send_signal(signal.SIGTERM)
        try:
            live.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            live.process.kill()
            live.process.wait()


@pytest.fixture(params=["file", "pg"])
def console(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LiveConsole]:
    """A live console on each backend."""
    pg_url = request.getfixturevalue("pg_url") if request.param == "pg" else None
    live = start_console(request.param, tmp_path, pg_url)
    try:
        yield live
    finally:
        stop_console(live)


@pytest.fixture
def file_console(tmp_path: Path) -> Iterator[LiveConsole]:
    live = start_console("file", tmp_path, None)
    try:
        yield live
    finally:
        stop_console(live)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium, headless, driven by Playwright (never a downloaded browser)."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (.ci/run does)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("WF_CONSOLE_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("console-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
