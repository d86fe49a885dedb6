"""Log lines: every log call of the code has a stable event name, JSON lines
carry it with the ids, and the access log can be switched on."""

from __future__ import annotations

import ast
import json
import logging
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.logs import EVENTS, JsonFormatter, event_of
from tests.console.conftest import wait_for
from tests.rpc.live import free_port

ROOT = Path(__file__).resolve().parents[1]
_LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}


def _logger_names(tree: ast.Module, module: str) -> dict[str, str]:
    """Each module-level `name = logging.getLogger(...)` of a module."""
    names: dict[str, str] = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
            continue
        call = node.value
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "getLogger"):
            continue
        argument = call.args[0] if call.args else None
        if isinstance(argument, ast.Name) and argument.id == "__name__":
            logger = module
        elif isinstance(argument, ast.Constant) and isinstance(argument.value, str):
            logger = argument.value
        else:
            continue
        for target in node.targets:
            if isinstance(target, ast.Name):
                names[target.id] = logger
    return names


def _log_calls() -> list[tuple[str, int, str, str, bool]]:
    """(file, line, logger, template, gives its own event) of every log call."""
    found = []
    for path in sorted([*ROOT.glob("shell/**/*.py"), *ROOT.glob("adapters/**/*.py")]):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        loggers = _logger_names(tree, module)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            target = node.func.value
            if node.func.attr not in _LEVELS or not isinstance(target, ast.Name):
                continue
            if target.id not in loggers or not node.args:
                continue
            template = node.args[0]
            assert isinstance(template, ast.Constant), f"{path}:{node.lineno}: not a literal"
            gives = any(
                keyword.arg == "extra"
                and isinstance(keyword.value, ast.Dict)
                and any(
                    isinstance(k, ast.Constant) and k.value == "event" for k in keyword.value.keys
                )
                for keyword in node.keywords
            )
            found.append((str(path.relative_to(ROOT)), node.lineno, loggers[target.id],
                          str(template.value), gives))  # fmt: skip
    return found


def test_every_log_call_has_an_event_name() -> None:
    calls = _log_calls()
    assert len(calls) > 60
    unnamed = [
        f"{where}:{line}: ({logger!r}, {template!r})"
        for where, line, logger, template, gives in calls
        if not gives and (logger, template) not in EVENTS
    ]
    assert unnamed == [], "add these to adapters.logs.EVENTS:\n" + "\n".join(unnamed)
    names = [named.event for named in EVENTS.values()]
    assert all(name.count(".") == 1 and name == name.lower() for name in names)


def _record(name: str, level: int, msg: str, args: Any, **extra: Any) -> logging.LogRecord:
    record = logging.LogRecord(name, level, __file__, 1, msg, args, None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_json_lines_carry_the_event_and_the_ids() -> None:
    formatter = JsonFormatter()
    record = _record(
        "shell.service",
        logging.ERROR,
        "run %s for %s@%s could not be created: %s",
        ("run-000007", "hourly", "2026-03-02T10:00:00Z", "gone"),
    )
    line = json.loads(formatter.format(record))
    assert line["event"] == "admission.run_not_created"
    assert (line["run_id"], line["schedule_id"], line["instant"]) == (
        "run-000007",
        "hourly",
        "2026-03-02T10:00:00Z",
    )
    assert line["level"] == "error" and line["logger"] == "shell.service"
    assert line["message"].startswith("run run-000007 for hourly@2026-03-02T10:00:00Z")
    given = _record("adapters.console", logging.INFO, "console: schedule %s %sd", ("a", "pause"),
                    event="console.schedule_paused", schedule_id="a")  # fmt: skip
    assert json.loads(formatter.format(given))["event"] == "console.schedule_paused"
    assert json.loads(formatter.format(given))["schedule_id"] == "a"
    stranger = _record("somelib", logging.WARNING, "hello %s", ("x",))
    assert event_of(stranger)[0] == "somelib.warning"
    try:
        raise ValueError("boom")
    except ValueError:
        failing = logging.LogRecord(
            "adapters.rpc", logging.ERROR, __file__, 1, "health reporter failed", None,
            sys.exc_info(),
        )  # fmt: skip
    line = json.loads(formatter.format(failing))
    assert line["event"] == "rpc.health_failed"
    assert "ValueError: boom" in line["exception"]


@pytest.mark.parametrize("access_log", [True, False])
def test_the_access_log(tmp_path: Path, access_log: bool) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    command = [sys.executable, "-m", "adapters.rpc_server_cli", "--store-root",
               str(tmp_path / "store"), "--port", str(port), "--log-format", "json"]  # fmt: skip
    if access_log:
        command.append("--access-log")
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert process.poll() is None, log.read_text()
        try:
            return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, what="the server answers")
        assert httpx.get(f"{base}/runs?status=failed").status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    lines = [json.loads(text) for text in log.read_text().splitlines() if text.startswith("{")]
    events = {line["event"] for line in lines}
    assert {"server.stopping", "server.drained", "server.stopped"} <= events
    access = [line for line in lines if line["event"] == "http.access"]
    if not access_log:
        assert access == []
        return
    wanted = {"method": "GET", "path": "/runs?status=failed", "status": 200}
    assert any(wanted.items() <= line.items() for line in access)
