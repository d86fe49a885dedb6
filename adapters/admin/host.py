"""The `wf-schedule` commands for the server and what it hosts: `health`, and
the `artifact`, `deployment` and `run` groups, so a server can be set up and
its runs followed from a terminal.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from adapters.admin.output import (
    err,
    out,
    print_json,
    print_table,
    show,
    show_run,
    status_text,
    table,
    text,
)
from adapters.admin.session import (
    EXIT_STORE_UNAVAILABLE,
    JsonOption,
    TokenOption,
    UrlOption,
    call_server,
    fail,
    json_object_option,
    read_json_file,
)
from adapters.client import DEFAULT_URL, App, ServerUnreachable
from core.errors import InvalidInput, Problem

__all__ = ["artifact_app", "deployment_app", "health", "register_host_commands", "run_app"]


def health(
    wait: Annotated[
        float,
        typer.Option(
            "--wait", min=0, help="Keep trying this many seconds while the server is starting."
        ),
    ] = 0.0,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Check that the server answers (and whether its scheduler runs); exit 10
    while it reports degraded (its store refuses writes)."""

    async def probe(app: App) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            try:
                return await app.health()
            except ServerUnreachable:
                if loop.time() >= deadline:
                    raise
                await asyncio.sleep(0.1)

    report = call_server(url, token, as_json, probe)
    degraded = report.get("status") != "ok"
    if as_json:
        print_json(report)
    else:
        scheduler = report.get("scheduler")
        out().print(f"{report.get('status')}" + (f" (scheduler {scheduler})" if scheduler else ""))
        store = report.get("store")
        if isinstance(store, Mapping) and store.get("message"):
            line = f"store: {store['message']} (since {store.get('since')})"
            err().print(text(line, style="red"))
    if degraded:
        raise typer.Exit(EXIT_STORE_UNAVAILABLE)


artifact_app = typer.Typer(
    help="Artifacts (immutable plan versions).", no_args_is_help=True, rich_markup_mode=None
)
deployment_app = typer.Typer(
    help="Deployments (artifact version + inputs).", no_args_is_help=True, rich_markup_mode=None
)
run_app = typer.Typer(help="Runs.", no_args_is_help=True, rich_markup_mode=None)

FileArgument = Annotated[
    Path, typer.Argument(help="JSON file.", exists=True, dir_okay=False, readable=True)
]


@artifact_app.command("create")
def artifact_create(
    file: FileArgument,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create an artifact from FILE:
    {"artifact_id", "version", "plan", "title"?, "description"?}."""
    spec = read_json_file(file, "an artifact")
    allowed = {"artifact_id", "version", "plan", "title", "description"}
    try:
        problems = [Problem(field=k, reason="unknown field") for k in sorted(set(spec) - allowed)]
        problems += [
            Problem(field=k, reason="required")
            for k in ("artifact_id", "version", "plan")
            if k not in spec
        ]
        if problems:
            raise InvalidInput.from_problems(f"artifact file {file}", problems)
    except InvalidInput as exc:
        fail(exc, as_json)
    created = call_server(url, token, as_json, lambda app: app.create_artifact_from_plan(**spec))
    show(created, as_json, f"artifact {created['artifact_id']} v{created['version']} created")


@artifact_app.command("get")
def artifact_get(
    artifact_id: Annotated[str, typer.Argument(help="Artifact id.")],
    version: Annotated[int | None, typer.Option("--version", help="Default: latest.")] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show an artifact version (the latest by default)."""
    item = call_server(url, token, as_json, lambda app: app.get_artifact(artifact_id, version))
    show(item, as_json, json.dumps(item, indent=2))


@artifact_app.command("list")
def artifact_list(
    url: UrlOption = DEFAULT_URL, token: TokenOption = None, as_json: JsonOption = False
) -> None:
    """List artifact versions."""
    items = call_server(url, token, as_json, lambda app: app.list_artifacts())
    lines = [f"{a.get('artifact_id')} v{a.get('version')}  {a.get('title') or ''}" for a in items]
    show(items, as_json, "\n".join(lines) or "no artifacts")


@deployment_app.command("save")
def deployment_save(
    file: FileArgument,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create or replace a deployment from FILE:
    {"deployment_id", "artifact_id", "artifact_version", "inputs"?, "title"?}."""
    payload = read_json_file(file, "a deployment")
    saved = call_server(url, token, as_json, lambda app: app.save_deployment(payload))
    show(
        saved,
        as_json,
        f"deployment {saved['deployment_id']} saved "
        f"({saved['artifact_id']} v{saved['artifact_version']})",
    )


@deployment_app.command("get")
def deployment_get(
    deployment_id: Annotated[str, typer.Argument(help="Deployment id.")],
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a deployment."""
    item = call_server(url, token, as_json, lambda app: app.get_deployment(deployment_id))
    show(item, as_json, json.dumps(item, indent=2))


@deployment_app.command("list")
def deployment_list(
    url: UrlOption = DEFAULT_URL, token: TokenOption = None, as_json: JsonOption = False
) -> None:
    """List deployments."""
    items = call_server(url, token, as_json, lambda app: app.list_deployments())
    lines = [
        f"{d.get('deployment_id')}  {d.get('artifact_id')} v{d.get('artifact_version')}"
        for d in items
    ]
    show(items, as_json, "\n".join(lines) or "no deployments")


@deployment_app.command("delete")
def deployment_delete(
    deployment_id: Annotated[str, typer.Argument(help="Deployment id.")],
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Delete even while schedules use it (their runs are then rejected)."
        ),
    ] = False,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete a deployment (existing runs keep their snapshots); refused, naming
    them, while schedules that are not deleted use it, unless --force."""
    item = call_server(url, token, as_json, lambda app: app.delete_deployment(deployment_id, force))
    show(item, as_json, f"deployment {deployment_id} deleted")


@run_app.command("start")
def run_start(
    deployment_id: Annotated[str, typer.Argument(help="Deployment id.")],
    inputs: Annotated[str | None, typer.Option("--inputs", help="JSON object.")] = None,
    max_steps: Annotated[int | None, typer.Option("--max-steps")] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Start a manual run (returns its id at once)."""
    given = json_object_option(inputs, "--inputs")
    run_id = call_server(
        url, token, as_json, lambda app: app.start_run(deployment_id, given, max_steps)
    )
    show({"run_id": run_id}, as_json, str(run_id))


@run_app.command("resume")
def run_resume(
    run_id: Annotated[str, typer.Argument(help="Run id of an interrupted run.")],
    payload: Annotated[
        str,
        typer.Option(
            "--payload",
            help="JSON value the interrupt's resume_schema accepts (e.g. '{\"approved\": true}').",
            show_default=False,
        ),
    ],
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Resume an interrupted run with --payload; prints the run once it stops again."""
    try:
        value = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not valid JSON: {exc.msg}", param_hint="--payload") from None
    item = call_server(url, token, as_json, lambda app: app.resume_run(run_id, value))
    show_run(item, as_json)


@run_app.command("inspect")
def run_inspect(
    run_id: Annotated[str, typer.Argument(help="Run id, e.g. run-000001.")],
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a run: status, snapshot, output or error."""
    item = call_server(url, token, as_json, lambda app: app.inspect_run(run_id))
    show_run(item, as_json)


@run_app.command("list")
def run_list(
    status: Annotated[str | None, typer.Option("--status", help="Only this status.")] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """List every run, oldest first."""

    async def every(app: App) -> list[dict[str, Any]]:
        return [run async for run in app.iter_runs(status=status, page_size=100)]

    runs = call_server(url, token, as_json, every)
    if as_json:
        print_json(runs)
        return
    if not runs:
        out().print("no runs")
        return
    listing = table(box=None, pad_edge=False, header_style="bold")
    for name in ("RUN", "STATUS", "DEPLOYMENT", "ORIGIN", "UPDATED"):
        listing.add_column(name, overflow="fold")
    for run in runs:
        origin = run.get("origin")
        listing.add_row(
            str(run.get("run_id")),
            status_text(str(run.get("status"))),
            str((run.get("snapshot") or {}).get("deployment_id", "")),
            json.dumps(origin) if origin is not None else "manual",
            str(run.get("updated_at", "")),
        )
    print_table(listing)


def register_host_commands(app: typer.Typer) -> None:
    """Add `health` and the artifact, deployment and run groups to `app`."""
    app.command("health")(health)
    app.add_typer(artifact_app, name="artifact")
    app.add_typer(deployment_app, name="deployment")
    app.add_typer(run_app, name="run")
