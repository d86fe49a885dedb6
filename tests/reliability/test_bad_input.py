"""Bad input over every JSON-RPC method: an error, never a 500, and no write.

Hypothesis draws params for each method from `bad_inputs` (wrong types, huge
strings, deep nesting, unicode, path-traversal ids, naive datetimes, unknown
zones, 6-field cron, limits 0 and 101, negative and stale revisions, unknown
params), plus malformed envelopes and raw bodies. Each is posted to the ASGI
app in process (the bulk) or to a real uvicorn server (a sample); the
scheduler service runs on the same store. Every input is tried on both
backends: the files under a store root, and a PostgreSQL database. For
every input:

- the answer is a JSON-RPC error object (HTTP 200, or 413 for an oversized
  body), never an HTTP 500 and never an internal error (-32603);
- nothing in the store changed: not a byte under the store root (the whole
  tree is compared), not a row of any table (a digest of every table and the
  run-id sequence are compared).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.host import build_local_static_workflow_server, build_postgres_workflow_server
from adapters.rpc.app import create_app
from adapters.rpc.protocol import INTERNAL_ERROR
from shell import ManualClock, SchedulerServiceConfig, build_scheduler_service
from shell.pg.database import Database
from tests.pgserver import PostgresServer
from tests.reliability import bad_inputs as bad
from tests.reliability.figures import record
from tests.rpc.live import serving
from tests.service.conftest import CONSTANT_PLAN, GATE_PLAN

NOW = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
RPC_HEADERS = {"content-type": "application/json"}
# Far more than a page of any list, far less than the server's body bound.
MAX_BODY = 1_048_576

# Examples per method in process (more with WF_BAD_INPUT_EXAMPLES); the
# envelope and raw-body tests draw twice and one and a half times as many.
IN_PROCESS_EXAMPLES = int(os.environ.get("WF_BAD_INPUT_EXAMPLES", "60"))
LIVE_EXAMPLES = 40


def tree(root: Path) -> dict[str, bytes | None]:
    """Every file (bytes) and directory (None) under `root`."""
    found: dict[str, bytes | None] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs:
            found[os.path.relpath(os.path.join(directory, name), root)] = None
        for name in files:
            path = os.path.join(directory, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, root)] = handle.read()
    return found


# Every table of a PostgreSQL store, with the key that orders its rows.
TABLES = {
    "wf_artifacts": "artifact_id, version",
    "wf_deployments": "deployment_id",
    "wf_runs": "run_number",
    "wf_schedules": "schedule_id",
    "wf_schedule_lifecycle": "schedule_id, seq",
    "wf_schedule_runtime": "schedule_id",
    "wf_occurrences": "schedule_id, seq",
    "wf_scheduler_owner": "singleton",
    "wf_schema_version": "version",
}
# What a row is compared by: the whole row, but the leadership's lease, which
# the leader renews every few seconds whatever the calls (`wf_servers`, the
# servers' heartbeats, is left out for the same reason).
ROW_TEXT = {"wf_scheduler_owner": "(t.epoch, t.holder)::text"}


_DIGESTS = (
    " UNION ALL ".join(
        f"SELECT '{table}', count(*)::text || ' ' ||"
        f" md5(coalesce(string_agg({ROW_TEXT.get(table, 't::text')}, E'\\n' ORDER BY {key}),"
        f" '')) FROM {table} t"
        for table, key in TABLES.items()
    )
    + " UNION ALL SELECT 'wf_run_number', last_value || ' ' || is_called FROM wf_run_number"
)


def digests(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Per table, its row count and the md5 of its rows in key order; and the
    run-id sequence's state (one query, on a connection of the test's)."""
    return dict(conn.execute(_DIGESTS).fetchall())


@dataclass
class Rig:
    """One store with a scheduler, served in process and over a socket."""

    root: Path
    loop: asyncio.AbstractEventLoop
    local: httpx.AsyncClient
    live: httpx.AsyncClient
    snapshot: Callable[[], dict[str, Any]]
    before: dict[str, Any]
    tried: dict[str, int] = field(default_factory=dict)

    def post(self, body: bytes, *, over_socket: bool = False) -> httpx.Response:
        client = self.live if over_socket else self.local
        return self.loop.run_until_complete(client.post("/rpc", content=body, headers=RPC_HEADERS))

    def check(self, kind: str, body: bytes, *, over_socket: bool = False) -> None:
        """Post `body`; it must be refused with JSON-RPC errors and change nothing."""
        self.tried[kind] = self.tried.get(kind, 0) + 1
        response = self.post(body, over_socket=over_socket)
        shown = body[:300]
        assert response.status_code in (200, 413), (response.status_code, shown)
        answer = response.json()
        errors = answer if isinstance(answer, list) else [answer]
        assert errors, shown
        for item in errors:
            assert "error" in item and "result" not in item, (item, shown)
            assert item["error"]["code"] != INTERNAL_ERROR, (item, shown)
            assert isinstance(item["error"]["message"], str) and item["error"]["message"]
        after = self.snapshot()
        if after != self.before:
            changed = sorted(
                k for k in set(after) | set(self.before) if after.get(k) != self.before.get(k)
            )
            raise AssertionError(f"a refused call changed {changed}: {shown!r}")


def _call_body(method: str, params: Any) -> bytes:
    try:
        text = json.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
    except RecursionError:
        pytest.skip("hypothesis drew a value json cannot encode")
    return text.encode("utf-8", "surrogatepass")


async def _build(
    root: Path, pg_url: str | None, stack: contextlib.AsyncExitStack
) -> tuple[Any, Any]:
    clock = ManualClock(NOW)
    if pg_url is None:
        server = build_local_static_workflow_server(root, schedules=True, clock=clock.now)
    else:
        database = Database(pg_url)
        await database.open()
        server = await build_postgres_workflow_server(database, schedules=True, clock=clock.now)
        stack.push_async_callback(server.close)
    api = server.api
    await api.create_artifact_from_plan("report", 1, CONSTANT_PLAN)
    await api.create_artifact_from_plan("gate", 1, GATE_PLAN)
    for name in ("report", "gate"):
        await api.save_deployment(
            {"deployment_id": f"{name}.default", "artifact_id": name, "artifact_version": 1}
        )
    interrupted = await api.run_deployment("gate.default", {})
    assert interrupted["run_id"] == bad.INTERRUPTED_RUN
    assert interrupted["status"] == "interrupted"
    service = build_scheduler_service(
        server, SchedulerServiceConfig(enabled=True, poll_interval_s=3600), clock=clock
    )
    await service.start()
    stack.push_async_callback(service.stop)
    await api.schedules.create_schedule(
        schedule_id="hourly",
        deployment_id="report.default",
        trigger=bad.CRON_HOURLY,
        inputs={"when": {"$bind": "occurrence.instant"}},
    )
    await service.settle()
    app = create_app(api, max_body_bytes=MAX_BODY)
    base = await stack.enter_async_context(serving(app))
    live = await stack.enter_async_context(httpx.AsyncClient(base_url=base, timeout=10))
    local = await stack.enter_async_context(
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
            base_url="http://127.0.0.1",
        )
    )
    return local, live


@pytest.fixture(scope="module", params=["file", "pg"])
def rig(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Rig]:
    root = tmp_path_factory.mktemp("bad-input") / "store"
    pg_url: str | None = None
    snapshot: Callable[[], dict[str, Any]] = lambda: tree(root)  # noqa: E731
    if request.param == "pg":
        server: PostgresServer = request.getfixturevalue("pg_server")
        pg_url = server.create_database("bad_input", template="template0")
        reader = server.connect("bad_input")
        snapshot = lambda: digests(reader)  # noqa: E731
    loop = asyncio.new_event_loop()
    stack = contextlib.AsyncExitStack()
    try:
        local, live = loop.run_until_complete(_build(root, pg_url, stack))
        rig = Rig(
            root=root, loop=loop, local=local, live=live, snapshot=snapshot, before=snapshot()
        )
        yield rig
        total = sum(rig.tried.values())
        changed = "0 bytes changed" if pg_url is None else "0 rows of 9 tables changed"
        record(
            f"bad input ({'files' if pg_url is None else 'PostgreSQL'})",
            f"{total} inputs refused over {len(bad.METHOD_PARAMS)} methods"
            f" ({rig.tried.get('live', 0)} of them over a real socket), {changed}",
        )
    finally:
        loop.run_until_complete(stack.aclose())
        loop.close()
        if pg_url is not None:
            reader.close()
            request.getfixturevalue("pg_server").drop_database("bad_input")


@pytest.fixture(autouse=True)
def _no_internal_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.WARNING)
    yield
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors


_BASE = settings(
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)


def _examples(count: int) -> settings:
    return settings(_BASE, max_examples=count)


@pytest.mark.parametrize("method", sorted(bad.METHOD_PARAMS))
@_examples(IN_PROCESS_EXAMPLES)
@given(data=st.data())
def test_bad_params_are_refused_without_a_write(rig: Rig, method: str, data: st.DataObject) -> None:
    params = data.draw(bad.METHOD_PARAMS[method], label="params")
    rig.check(method, _call_body(method, params))


@_examples(2 * IN_PROCESS_EXAMPLES)
@given(envelope=bad.BAD_ENVELOPES)
def test_bad_envelopes_are_refused(rig: Rig, envelope: Any) -> None:
    rig.check("envelope", _call_body_raw(envelope))


@_examples(3 * IN_PROCESS_EXAMPLES // 2)
@given(body=bad.bad_body())
def test_bad_bodies_are_refused(rig: Rig, body: bytes) -> None:
    rig.check("body", body)


@_examples(LIVE_EXAMPLES)
@given(
    method_params=st.sampled_from(sorted(bad.METHOD_PARAMS)).flatmap(
        lambda m: st.tuples(st.just(m), bad.METHOD_PARAMS[m])
    )
)
def test_a_sample_over_a_real_socket(rig: Rig, method_params: tuple[str, Any]) -> None:
    method, params = method_params
    rig.check("live", _call_body(method, params), over_socket=True)


def test_an_oversized_body_is_refused_before_it_is_read(rig: Rig) -> None:
    huge = _call_body("workflow.health", {"pad": "x" * (MAX_BODY + 1)})
    for over_socket in (False, True):
        rig.check("oversized", huge, over_socket=over_socket)


def _numbers(text: str) -> str:
    """`text` with NINES<n> spelled as n nines, and PLAN and CREATE filled in."""
    for count in (5000, 4001, 240):
        text = text.replace(f"NINES{count}", "9" * count)
    create = (
        '"schedule_id": "fresh", "deployment_id": "report.default",'
        ' "trigger": {"kind": "cron", "expression": "0 * * * *"}'
    )
    return text.replace("PLAN", json.dumps(CONSTANT_PLAN)).replace("CREATE", create)


# Named so each is tried on every run, not only when the campaign draws it.
HUGE_NUMBER_CALLS = [
    (
        "workflow.artifacts.create_from_plan",
        '{"artifact_id": "x", "version": NINES240, "plan": PLAN}',
    ),
    ("workflow.artifacts.get", '{"artifact_id": "report", "version": NINES240}'),
    ("workflow.runs.start", '{"deployment_id": "report.default", "max_steps": NINES4001}'),
    ("workflow.runs.start", '{"deployment_id": "report.default", "inputs": {"n": NINES4001}}'),
    (
        "workflow.runs.start",
        '{"deployment_id": "report.default", "inputs": {"n": 9007199254740992}}',
    ),
    ("workflow.runs.start", '{"deployment_id": "report.default", "inputs": {"n": NINES5000}}'),
    ("workflow.runs.start", '{"deployment_id": "report.default", "inputs": {"n": 1e400}}'),
    ("workflow.schedules.create", '{CREATE, "max_steps": NINES4001}'),
    ("workflow.schedules.create", '{CREATE, "overlap": "parallel", "max_active_runs": NINES4001}'),
    ("workflow.schedules.create", '{CREATE, "lateness_allowance_s": -0.0}'),
    ("workflow.schedules.create", '{CREATE, "inputs": {"when": "x", "n": -9007199254740992}}'),
    (
        "workflow.schedules.update",
        '{"schedule_id": "hourly", "expected_revision": 1, "lateness_allowance_s": -0.0}',
    ),
    (
        "workflow.schedules.update",
        '{"schedule_id": "hourly", "expected_revision": NINES4001, "max_steps": 5}',
    ),
    (
        "workflow.deployments.save",
        '{"payload": {"deployment_id": "x", "artifact_id": "report",'
        ' "artifact_version": NINES4001}}',
    ),
]


@pytest.mark.parametrize(("method", "params"), HUGE_NUMBER_CALLS)
def test_huge_numbers_and_negative_zero_are_refused_without_a_write(
    rig: Rig, method: str, params: str
) -> None:
    body = _numbers(f'{{"jsonrpc": "2.0", "id": 7, "method": "{method}", "params": {params}}}')
    rig.check("huge number", body.encode())
    answer = rig.post(body.encode()).json()
    data = answer["error"]["data"]
    # The field is named, or the body is unreadable as a whole (too many digits, 1e400).
    assert data["code"] == "parse_error" or data["problems"], answer


def _call_body_raw(envelope: Any) -> bytes:
    return json.dumps(envelope).encode("utf-8", "surrogatepass")
