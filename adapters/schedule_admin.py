"""Operator commands of `wf-schedule`, spoken to a running `wf-rpc-server`.

Schedules: `create`, `list`, `get`, `update`, `pause`, `resume`, `delete`,
`occurrences`; `health`; plus `artifact create|get|list`, `deployment save|get|list|delete`
and `run start|inspect|list` so a server can be set up from a terminal.

Every command takes `--url` (env `WF_SCHEDULER_URL`, default
http://127.0.0.1:8765/rpc), `--token` (env `WF_SCHEDULER_TOKEN`) and `--json`
(machine-readable output on stdout, errors included as `{"error": {...}}`).

Exit status (stable, for scripts):

    0  success
    1  any other failure (server internal error, --wait-for timed out)
    2  usage error (bad flags, unreadable file)
    3  not found                       (not_found)
    4  conflict                        (revision_conflict, already_exists)
    5  invalid input                   (invalid_input, invalid_definition, invalid_params)
    6  invalid state                   (invalid_state)
    7  scheduler unavailable           (scheduler_unavailable; store_fenced)
    8  server unreachable
    9  unauthorized (token missing or wrong)
   10  store unavailable: disk full, read-only or failing (store_unavailable;
       also `health` while the server reports degraded)
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, NoReturn

import typer
from typer.core import TyperGroup

from adapters.client import DEFAULT_URL, App, ServerUnreachable, endpoint_url
from adapters.rpc.protocol import RpcError, Unauthorized
from core.errors import (
    ERROR_CLASSES,
    InvalidInput,
    InvalidState,
    NotFound,
    Problem,
    RevisionConflict,
    SchedulingError,
    StoreUnavailable,
)
from core.occurrences import OCCURRENCE_STATUSES
from core.schedule_state import lifecycle_state

# rich is imported when there is something to print: it costs as much as the
# rest of the CLI's imports together, and `--help` prints through click.
if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

__all__ = [
    "ENV_TOKEN",
    "ENV_URL",
    "EXIT_CODES",
    "STATE_STYLES",
    "STATUS_STYLES",
    "WfScheduleGroup",
    "exit_code_for",
    "parse_when",
    "register_admin_commands",
]

ENV_URL: Final = "WF_SCHEDULER_URL"
ENV_TOKEN: Final = "WF_SCHEDULER_TOKEN"

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
EXIT_STORE_UNAVAILABLE: Final = StoreUnavailable.exit_status

# The error classes that declare an exit status of their own (other errors
# exit EXIT_FAILURE): a view of the classes' `exit_status`, for docs and tests.
EXIT_CODES: Final[tuple[tuple[type[Exception], int], ...]] = tuple(
    (cls, cls.exit_status)
    for cls in (*ERROR_CLASSES, ServerUnreachable, Unauthorized)
    if "exit_status" in vars(cls) and cls.exit_status != EXIT_FAILURE
)

STATUS_STYLES: Final[Mapping[str, str]] = {
    "pending": "blue",
    "admitted": "cyan",
    "running": "bold cyan",
    "interrupted": "yellow",
    "completed": "green",
    "failed": "bold red",
    "exhausted": "magenta",
    "preflight-rejected": "red",
    "skipped-overlap": "dim",
    "skipped-misfire": "dim",
    "coalesced": "dim",
    "superseded": "dim",
}

# A schedule's state (`core/schedule_state.py`), coloured on a terminal.
STATE_STYLES: Final[Mapping[str, str]] = {
    "deleted": "dim",
    "blocked": "bold red",
    "finished": "blue",
    "paused": "yellow",
    "active": "green",
}

_RELATIVE: Final = re.compile(r"^\+(\d+(?:\.\d+)?)([smhd])$")
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@functools.cache
def _out() -> Console:
    from rich.console import Console

    # Piped output is for logs and scripts: do not fold tables at 80 columns.
    return Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)


@functools.cache
def _err() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def _text(content: str, style: str = "") -> Text:
    from rich.text import Text

    return Text(content, style=style)


def _table(**options: Any) -> Table:
    from rich.table import Table

    return Table(**options)


def exit_code_for(exc: BaseException) -> int:
    """The documented exit status for an error."""
    if isinstance(exc, InvalidInput) and exc.data.get("not_found"):
        # A definition naming a deployment that does not exist.
        return NotFound.exit_status
    if isinstance(exc, SchedulingError | RpcError):
        return exc.exit_status
    return EXIT_FAILURE


class Overlap(StrEnum):
    skip = "skip"
    parallel = "parallel"


class Misfire(StrEnum):
    skip = "skip"
    latest = "latest"


# -- shared options -----------------------------------------------------------

UrlOption = Annotated[
    str,
    typer.Option(
        "--url",
        envvar=ENV_URL,
        help="Server JSON-RPC endpoint (a bare http://host:port gets /rpc).",
        show_default=True,
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar=ENV_TOKEN,
        help=f"Bearer token (prefer the {ENV_TOKEN} environment variable).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
ScheduleId = Annotated[str, typer.Argument(help="Schedule id.", show_default=False)]


# -- output helpers -------------------------------------------------------------


def _print_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=False, ensure_ascii=False) + "\n")
    sys.stdout.flush()


START_SERVER_HINT: Final = (
    "start it with `uv run wf-rpc-server --store-root .wf_store --enable-scheduler`"
    " (or pass --url / set WF_SCHEDULER_URL)"
)


def _headline(exc: BaseException) -> str:
    """The one-line message; an InvalidInput's problems are listed after it,
    so the summary of them that its message ends with is not repeated."""
    message = exc.message if isinstance(exc, SchedulingError | RpcError) else str(exc)
    problems = getattr(exc, "problems", ())
    summary = "; ".join(f"{p.field}: {p.reason}" for p in problems)
    if problems and message.endswith(f": {summary}"):
        return message[: -len(summary) - 2]
    if isinstance(exc, ServerUnreachable) and not exc.connected:
        return f"{message}; {START_SERVER_HINT}"
    return message


def _fail(exc: BaseException, as_json: bool) -> NoReturn:
    code = exit_code_for(exc)
    if isinstance(exc, SchedulingError):
        detail = exc.to_dict()
    elif isinstance(exc, RpcError):
        detail = {"code": "rpc_error", "rpc_code": exc.code, "message": exc.message}
        if exc.data is not None:
            detail["data"] = exc.data
        if isinstance(exc, Unauthorized):
            detail["code"] = "unauthorized"
        elif isinstance(exc, ServerUnreachable):
            detail["code"] = "server_unreachable"
            if not exc.connected:
                detail["hint"] = START_SERVER_HINT
    else:
        detail = {"code": "error", "message": str(exc)}
    if as_json:
        _print_json({"error": detail})
    else:
        _err().print(_text(f"error: {_headline(exc)}", style="red"))
        for problem in getattr(exc, "problems", ()):
            _err().print(f"  {problem.field}: {problem.reason}", markup=False)
        if isinstance(exc, RevisionConflict):
            _err().print("  hint: run `wf-schedule get` for the current revision and retry")
        elif isinstance(exc, InvalidState) and exc.data.get("schedule_ids"):
            _err().print("  hint: delete those schedules first, or pass --force")
    raise typer.Exit(code)


def _usage_error(exc: Any, as_json: bool) -> int:
    """Report a usage error once: click's text on stderr, or with --json an
    `{"error": ...}` object on stdout like every other failure."""
    if not as_json:
        exc.show()
        return exc.exit_code
    detail: dict[str, Any] = {"code": "usage_error", "message": exc.format_message()}
    param = getattr(exc, "param", None)
    hint = getattr(exc, "param_hint", None)
    if hint is None and param is not None:
        hint = "/".join(getattr(param, "opts", ()) or [str(param.name)])
    if hint:
        detail["param"] = hint if isinstance(hint, str) else "/".join(hint)
    _print_json({"error": detail})
    return exc.exit_code


class WfScheduleGroup(TyperGroup):
    """The root command group: usage errors honour `--json` too."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        as_json = "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv
        try:
            result = super().main(
                args=argv,
                prog_name=prog_name,
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
        except typer.TyperException as exc:
            # typer's vendored click raises its usage errors as TyperException.
            code = _usage_error(exc, as_json)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            code = EXIT_FAILURE
        else:
            # Not standalone, click returns the code of a `typer.Exit` (or the
            # command's own result, None here).
            code = result if isinstance(result, int) else EXIT_OK
            if not standalone_mode:
                return result
        if not standalone_mode:
            raise typer.Exit(code)
        sys.exit(code)


def _run(
    url: str,
    token: str | None,
    as_json: bool,
    action: Callable[[App], Awaitable[Any]],
) -> Any:
    try:
        endpoint = endpoint_url(url)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--url") from None

    async def go() -> Any:
        async with App(endpoint, token=token) as app:
            return await action(app)

    try:
        return asyncio.run(go())
    except (SchedulingError, RpcError) as exc:
        _fail(exc, as_json)


def _read_json_file(path: Path, what: str) -> dict[str, Any]:
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(
            f"{path} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    if not isinstance(payload, dict):
        raise typer.BadParameter(f"{path} must hold a JSON object ({what})")
    return payload


def _json_object_option(raw: str | None, flag: str) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not valid JSON: {exc.msg}", param_hint=flag) from None
    if not isinstance(value, dict):
        raise typer.BadParameter("must be a JSON object", param_hint=flag)
    return value


def parse_when(raw: str, now: datetime) -> str:
    """A one-shot instant: ISO-8601 with an offset, or `+N[s|m|h|d]` from `now`."""
    match = _RELATIVE.match(raw.strip())
    if match:
        delta = timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
        return (now + delta).astimezone(UTC).isoformat()
    try:
        moment = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise typer.BadParameter(
            "expected ISO-8601 with an offset (2026-03-01T09:00:00+01:00) or +N[s|m|h|d]",
            param_hint="--at",
        ) from None
    if moment.tzinfo is None:
        raise typer.BadParameter("the time must include an offset, e.g. +00:00", param_hint="--at")
    return moment.isoformat()


def _trigger_from_flags(
    base: Mapping[str, Any] | None,
    cron: str | None,
    timezone: str | None,
    at: str | None,
) -> dict[str, Any] | None:
    if cron is not None and at is not None:
        raise typer.BadParameter("give --cron or --at, not both", param_hint="--cron/--at")
    if at is not None:
        if timezone is not None:
            raise typer.BadParameter("--timezone applies to --cron only", param_hint="--timezone")
        return {"kind": "oneshot", "at": parse_when(at, datetime.now(UTC))}
    if cron is not None:
        trigger: dict[str, Any] = {"kind": "cron", "expression": cron}
        if timezone is not None:
            trigger["timezone"] = timezone
        return trigger
    if timezone is not None:
        if base is None or base.get("kind") != "cron":
            raise typer.BadParameter(
                "--timezone needs --cron (or a cron trigger in --file)", param_hint="--timezone"
            )
        return {**base, "timezone": timezone}
    return dict(base) if base is not None else None


def _definition_flags(
    base_trigger: Mapping[str, Any] | None,
    *,
    deployment: str | None,
    cron: str | None,
    timezone: str | None,
    at: str | None,
    inputs: str | None,
    overlap: Overlap | None,
    max_active_runs: int | None,
    misfire: Misfire | None,
    lateness_allowance_s: float | None,
    max_steps: int | None,
) -> dict[str, Any]:
    """The definition's fields (but the id) as `create` and `update` flags set
    them, None where not given. Its keys are the fields a `--file` may hold;
    a test holds them to the definition model."""
    return {
        "deployment_id": deployment,
        "trigger": _trigger_from_flags(base_trigger, cron, timezone, at),
        "inputs": _json_object_option(inputs, "--inputs"),
        "overlap": overlap.value if overlap else None,
        "max_active_runs": max_active_runs,
        "misfire": misfire.value if misfire else None,
        "lateness_allowance_s": lateness_allowance_s,
        "max_steps": max_steps,
    }


def _merge_definition(file_payload: Mapping[str, Any], flags: Mapping[str, Any]) -> dict[str, Any]:
    # The flags name every field the command takes, given or not.
    unknown = sorted(set(file_payload) - set(flags))
    if unknown:
        raise InvalidInput.from_problems(
            "schedule file",
            [Problem(field=name, reason="unknown field") for name in unknown],
        )
    merged = {k: v for k, v in file_payload.items() if v is not None}
    merged.update({k: v for k, v in flags.items() if v is not None})
    return merged


def _state_of(schedule: Mapping[str, Any]) -> Text:
    state = schedule.get("state")
    if not isinstance(state, str):
        # A server from before `state`: its flags (it cannot tell `finished`).
        state = lifecycle_state(
            deleted=bool(schedule.get("deleted")),
            blocked=bool(schedule.get("blocked")),
            paused=bool(schedule.get("paused")),
            finished=False,
        )
    return _text(state, style=STATE_STYLES.get(state, ""))


def _trigger_text(trigger: Any) -> str:
    if not isinstance(trigger, Mapping):
        return str(trigger)
    if trigger.get("kind") == "cron":
        return f"cron {trigger.get('expression')} ({trigger.get('timezone', 'UTC')})"
    if trigger.get("kind") == "oneshot":
        return f"once at {trigger.get('at')}"
    return json.dumps(trigger)


def _show_schedule(schedule: Mapping[str, Any], as_json: bool, verb: str | None = None) -> None:
    if as_json:
        _print_json(schedule)
        return
    if verb is not None:
        _out().print(
            f"{verb} {schedule.get('schedule_id')} (revision {schedule.get('revision')}, ",
            _state_of(schedule),
            ")",
            sep="",
        )
        return
    table = _table(show_header=False, box=None, pad_edge=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in schedule.items():
        if key == "state":
            continue  # shown last, coloured
        if key == "trigger":
            shown: Any = _trigger_text(value)
        elif isinstance(value, dict | list):
            shown = json.dumps(value)
        elif value is None:
            shown = _text("-", style="dim")
        else:
            shown = str(value)
        table.add_row(key, shown)
    table.add_row("state", _state_of(schedule))
    _out().print(table)


def _status_text(status: str) -> Text:
    return _text(status, style=STATUS_STYLES.get(status, ""))


def _occurrence_table(rows: list[Mapping[str, Any]]) -> Table:
    table = _table(box=None, pad_edge=False, header_style="bold")
    for name in ("INSTANT", "STATUS", "RUN", "COUNT", "REASON"):
        table.add_column(name, overflow="fold")
    for row in rows:
        count = row.get("count")
        table.add_row(
            str(row.get("instant", "")),
            _status_text(str(row.get("status", ""))),
            str(row.get("run_id") or "-"),
            "" if count in (None, 1) else str(count),
            str(row.get("reason") or ""),
        )
    return table


# -- schedule commands ------------------------------------------------------------


def create(
    schedule_id: Annotated[
        str | None, typer.Argument(help="Schedule id (or schedule_id in --file).")
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", "-f", help="JSON object with create_schedule's fields."),
    ] = None,
    deployment: Annotated[str | None, typer.Option("--deployment", help="Deployment id.")] = None,
    cron: Annotated[
        str | None, typer.Option("--cron", help='Five-field cron, e.g. "0 * * * *".')
    ] = None,
    timezone: Annotated[
        str | None, typer.Option("--timezone", help="IANA zone for --cron (default UTC).")
    ] = None,
    at: Annotated[
        str | None,
        typer.Option("--at", help="One-shot: ISO-8601 with offset, or +N[s|m|h|d] from now."),
    ] = None,
    inputs: Annotated[str | None, typer.Option("--inputs", help="Inputs as a JSON object.")] = None,
    overlap: Annotated[Overlap | None, typer.Option("--overlap")] = None,
    max_active_runs: Annotated[
        int | None, typer.Option("--max-active-runs", help="Required with --overlap parallel.")
    ] = None,
    misfire: Annotated[Misfire | None, typer.Option("--misfire")] = None,
    lateness_allowance_s: Annotated[
        float | None, typer.Option("--lateness-allowance-s", help="Seconds (default 60).")
    ] = None,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", help="Step budget per run.")
    ] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a schedule from a JSON file, flags, or both (flags win)."""
    base = _read_json_file(file, "a schedule definition") if file is not None else {}
    try:
        flags = _definition_flags(
            base.get("trigger"),
            deployment=deployment,
            cron=cron,
            timezone=timezone,
            at=at,
            inputs=inputs,
            overlap=overlap,
            max_active_runs=max_active_runs,
            misfire=misfire,
            lateness_allowance_s=lateness_allowance_s,
            max_steps=max_steps,
        )
        merged = _merge_definition(base, {"schedule_id": schedule_id, **flags})
        missing = [
            Problem(field=name, reason=f"required ({flag})")
            for name, flag in (
                ("schedule_id", "argument SCHEDULE_ID or schedule_id in --file"),
                ("deployment_id", "--deployment or deployment_id in --file"),
                ("trigger", "--cron, --at, or trigger in --file"),
            )
            if name not in merged
        ]
        if missing:
            raise InvalidInput.from_problems("schedule", missing)
    except InvalidInput as exc:
        _fail(exc, as_json)
    created = _run(url, token, as_json, lambda app: app.create_schedule(**merged))
    _show_schedule(created, as_json, verb="created")


def list_(
    include_deleted: Annotated[
        bool, typer.Option("--include-deleted", help="Also list deleted schedules.")
    ] = False,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """List schedules."""
    schedules = _run(
        url, token, as_json, lambda app: app.list_schedules(include_deleted=include_deleted)
    )
    if as_json:
        _print_json(schedules)
        return
    if not schedules:
        _out().print("no schedules")
        return
    table = _table(box=None, pad_edge=False, header_style="bold")
    for name in ("SCHEDULE", "DEPLOYMENT", "TRIGGER", "STATE", "REV", "NEXT"):
        table.add_column(name, overflow="fold")
    for item in schedules:
        table.add_row(
            str(item.get("schedule_id")),
            str(item.get("deployment_id")),
            _trigger_text(item.get("trigger")),
            _state_of(item),
            str(item.get("revision")),
            str(item.get("next_instant") or "-"),
        )
    _out().print(table)


def get(
    schedule_id: ScheduleId,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one schedule's full definition and state."""
    schedule = _run(url, token, as_json, lambda app: app.get_schedule(schedule_id=schedule_id))
    _show_schedule(schedule, as_json)


def update(
    schedule_id: ScheduleId,
    expected_revision: Annotated[
        int,
        typer.Option(
            "--expected-revision",
            help="The revision you are editing (see `get`); stale -> exit 4.",
            show_default=False,
        ),
    ],
    file: Annotated[
        Path | None,
        typer.Option("--file", "-f", help="JSON object with the fields to change."),
    ] = None,
    deployment: Annotated[str | None, typer.Option("--deployment")] = None,
    cron: Annotated[str | None, typer.Option("--cron")] = None,
    timezone: Annotated[str | None, typer.Option("--timezone")] = None,
    at: Annotated[str | None, typer.Option("--at")] = None,
    inputs: Annotated[str | None, typer.Option("--inputs", help="JSON object.")] = None,
    overlap: Annotated[Overlap | None, typer.Option("--overlap")] = None,
    max_active_runs: Annotated[int | None, typer.Option("--max-active-runs")] = None,
    misfire: Annotated[Misfire | None, typer.Option("--misfire")] = None,
    lateness_allowance_s: Annotated[float | None, typer.Option("--lateness-allowance-s")] = None,
    max_steps: Annotated[int | None, typer.Option("--max-steps")] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Change the given fields of a schedule (others stay as they are)."""
    base = _read_json_file(file, "a schedule patch") if file is not None else {}
    try:
        flags = _definition_flags(
            base.get("trigger"),
            deployment=deployment,
            cron=cron,
            timezone=timezone,
            at=at,
            inputs=inputs,
            overlap=overlap,
            max_active_runs=max_active_runs,
            misfire=misfire,
            lateness_allowance_s=lateness_allowance_s,
            max_steps=max_steps,
        )
        patch = _merge_definition(base, flags)
        if not patch:
            raise InvalidInput.from_problems(
                "update", [Problem(field="patch", reason="nothing to change: give --file or flags")]
            )
    except InvalidInput as exc:
        _fail(exc, as_json)
    updated = _run(
        url,
        token,
        as_json,
        lambda app: app.update_schedule(
            schedule_id=schedule_id, expected_revision=expected_revision, **patch
        ),
    )
    _show_schedule(updated, as_json, verb="updated")


def pause(
    schedule_id: ScheduleId,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Pause: no further admissions until resumed (active runs continue)."""
    result = _run(url, token, as_json, lambda app: app.pause_schedule(schedule_id=schedule_id))
    _show_schedule(result, as_json, verb="paused")


def resume(
    schedule_id: ScheduleId,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Resume from the next future instant (paused times are not replayed)."""
    result = _run(url, token, as_json, lambda app: app.resume_schedule(schedule_id=schedule_id))
    _show_schedule(result, as_json, verb="resumed")


def delete(
    schedule_id: ScheduleId,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete (soft): no further admissions; runs and history survive; the id is never reused."""
    result = _run(url, token, as_json, lambda app: app.delete_schedule(schedule_id=schedule_id))
    _show_schedule(result, as_json, verb="deleted")


async def _all_occurrences(app: App, schedule_id: str, page_size: int) -> list[dict[str, Any]]:
    return [
        row
        async for row in app.iter_schedule_occurrences(schedule_id=schedule_id, page_size=page_size)
    ]


async def _wait_for(
    app: App, schedule_id: str, status: str, page_size: int, timeout_s: float
) -> list[dict[str, Any]] | None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        rows = await _all_occurrences(app, schedule_id, page_size)
        if any(row.get("status") == status for row in rows):
            return rows
        if loop.time() >= deadline:
            return None
        await asyncio.sleep(0.2)


def newest_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history newest first: the synthesized pending candidates (not yet
    decided, so the newest) by instant, then the recorded rows in reverse order
    of recording."""
    pending = [row for row in rows if row.get("recorded_at") is None]
    recorded = [row for row in rows if row.get("recorded_at") is not None]
    pending.sort(key=lambda row: str(row.get("instant", "")), reverse=True)
    return pending + recorded[::-1]


def _row_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    # A row is shown again only when what it says changed (a status, a run).
    return (row.get("instant"), row.get("status"), row.get("run_id"), row.get("count"))


def _row_line(row: Mapping[str, Any]) -> Text:
    count = row.get("count")
    line = _text(f"{row.get('instant', '')}  ")
    line.append_text(_status_text(str(row.get("status", ""))))
    line.append(f"  {row.get('run_id') or '-'}")
    if count not in (None, 1):
        line.append(f"  x{count}")
    if row.get("reason"):
        line.append(f"  {row['reason']}")
    return line


WATCH_INTERVAL_S: Final = 0.5


async def _watch(
    app: App,
    schedule_id: str,
    page_size: int,
    last: int | None,
    timeout_s: float | None,
    as_json: bool,
) -> None:
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    rows = await _all_occurrences(app, schedule_id, page_size)
    shown = {_row_key(row) for row in rows}
    first = newest_first(rows)[:last] if last is not None else rows
    for row in first:
        _emit_row(row, as_json)
    while deadline is None or loop.time() < deadline:
        pause = (
            WATCH_INTERVAL_S if deadline is None else min(WATCH_INTERVAL_S, deadline - loop.time())
        )
        await asyncio.sleep(max(pause, 0.0))
        for row in await _all_occurrences(app, schedule_id, page_size):
            key = _row_key(row)
            if key not in shown:
                shown.add(key)
                _emit_row(row, as_json)


def _emit_row(row: Mapping[str, Any], as_json: bool) -> None:
    if as_json:
        # JSON Lines: one object per row, flushed, so a pipe sees it at once.
        sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
        sys.stdout.flush()
    else:
        _out().print(_row_line(row))


def occurrences(
    schedule_id: ScheduleId,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=100, help="Rows per page (1-100).")
    ] = 50,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="next_cursor of the previous page.")
    ] = None,
    all_pages: Annotated[bool, typer.Option("--all", help="Fetch every page.")] = False,
    last: Annotated[
        int | None,
        typer.Option(
            "--last", min=1, help="Only the N newest rows, newest first (reads every page)."
        ),
    ] = None,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            help="Keep following: print each new row (or status change) once, until "
            "interrupted or --timeout; --json prints JSON Lines.",
        ),
    ] = False,
    wait_for: Annotated[
        str | None,
        typer.Option(
            "--wait-for",
            help="Poll until a row has this status (e.g. completed); implies --all.",
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            min=0,
            help="Seconds to wait with --wait-for (default 60) or to --watch (default: forever).",
        ),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show occurrence history, oldest first (a held candidate shows as pending)."""
    if wait_for is not None and wait_for not in OCCURRENCE_STATUSES:
        raise typer.BadParameter(
            f"unknown status {wait_for!r} (one of {', '.join(sorted(OCCURRENCE_STATUSES))})",
            param_hint="--wait-for",
        )
    if watch and wait_for is not None:
        raise typer.BadParameter("give --watch or --wait-for, not both", param_hint="--watch")
    if cursor is not None and (last is not None or watch):
        raise typer.BadParameter("--cursor pages oldest first; not with --last or --watch")
    if watch:
        try:
            _run(
                url,
                token,
                as_json,
                lambda app: _watch(app, schedule_id, 100, last, timeout, as_json),
            )
        except KeyboardInterrupt:
            # Interrupting a watch is how it normally ends.
            raise typer.Exit(EXIT_OK) from None
        return
    if wait_for is not None:
        waited = 60.0 if timeout is None else timeout
        rows = _run(
            url, token, as_json, lambda app: _wait_for(app, schedule_id, wait_for, limit, waited)
        )
        if rows is None:
            _fail(
                TimeoutError(f"no {wait_for!r} occurrence of {schedule_id} within {waited} s"),
                as_json,
            )
        page: dict[str, Any] = {"occurrences": rows, "next_cursor": None}
    elif all_pages or last is not None:
        rows = _run(
            url,
            token,
            as_json,
            lambda app: _all_occurrences(app, schedule_id, 100 if last else limit),
        )
        page = {"occurrences": rows, "next_cursor": None}
    else:
        page = _run(
            url,
            token,
            as_json,
            lambda app: app.list_schedule_occurrences(
                schedule_id=schedule_id, limit=limit, cursor=cursor
            ),
        )
    if last is not None:
        page["occurrences"] = newest_first(page["occurrences"])[:last]
    if as_json:
        _print_json(page)
        return
    rows = page.get("occurrences", [])
    if not rows:
        _out().print(f"no occurrences of {schedule_id} yet")
    else:
        _out().print(_occurrence_table(rows))
    if page.get("next_cursor"):
        _out().print(_text(f"more: --cursor {page['next_cursor']}  (or --all)", style="dim"))


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

    report = _run(url, token, as_json, probe)
    degraded = report.get("status") != "ok"
    if as_json:
        _print_json(report)
    else:
        scheduler = report.get("scheduler")
        _out().print(f"{report.get('status')}" + (f" (scheduler {scheduler})" if scheduler else ""))
        store = report.get("store")
        if isinstance(store, Mapping) and store.get("message"):
            line = f"store: {store['message']} (since {store.get('since')})"
            _err().print(_text(line, style="red"))
    if degraded:
        raise typer.Exit(EXIT_STORE_UNAVAILABLE)


# -- artifacts, deployments, runs --------------------------------------------------

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


def _show(payload: Any, as_json: bool, summary: str) -> None:
    if as_json:
        _print_json(payload)
    else:
        _out().print(summary)


@artifact_app.command("create")
def artifact_create(
    file: FileArgument,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create an artifact from FILE:
    {"artifact_id", "version", "plan", "title"?, "description"?}."""
    spec = _read_json_file(file, "an artifact")
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
        _fail(exc, as_json)
    created = _run(url, token, as_json, lambda app: app.create_artifact_from_plan(**spec))
    _show(created, as_json, f"artifact {created['artifact_id']} v{created['version']} created")


@artifact_app.command("get")
def artifact_get(
    artifact_id: Annotated[str, typer.Argument(help="Artifact id.")],
    version: Annotated[int | None, typer.Option("--version", help="Default: latest.")] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show an artifact version (the latest by default)."""
    item = _run(url, token, as_json, lambda app: app.get_artifact(artifact_id, version))
    _show(item, as_json, json.dumps(item, indent=2))


@artifact_app.command("list")
def artifact_list(
    url: UrlOption = DEFAULT_URL, token: TokenOption = None, as_json: JsonOption = False
) -> None:
    """List artifact versions."""
    items = _run(url, token, as_json, lambda app: app.list_artifacts())
    lines = [f"{a.get('artifact_id')} v{a.get('version')}  {a.get('title') or ''}" for a in items]
    _show(items, as_json, "\n".join(lines) or "no artifacts")


@deployment_app.command("save")
def deployment_save(
    file: FileArgument,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create or replace a deployment from FILE:
    {"deployment_id", "artifact_id", "artifact_version", "inputs"?, "title"?}."""
    payload = _read_json_file(file, "a deployment")
    saved = _run(url, token, as_json, lambda app: app.save_deployment(payload))
    _show(
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
    item = _run(url, token, as_json, lambda app: app.get_deployment(deployment_id))
    _show(item, as_json, json.dumps(item, indent=2))


@deployment_app.command("list")
def deployment_list(
    url: UrlOption = DEFAULT_URL, token: TokenOption = None, as_json: JsonOption = False
) -> None:
    """List deployments."""
    items = _run(url, token, as_json, lambda app: app.list_deployments())
    lines = [
        f"{d.get('deployment_id')}  {d.get('artifact_id')} v{d.get('artifact_version')}"
        for d in items
    ]
    _show(items, as_json, "\n".join(lines) or "no deployments")


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
    item = _run(url, token, as_json, lambda app: app.delete_deployment(deployment_id, force))
    _show(item, as_json, f"deployment {deployment_id} deleted")


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
    given = _json_object_option(inputs, "--inputs")
    run_id = _run(url, token, as_json, lambda app: app.start_run(deployment_id, given, max_steps))
    _show({"run_id": run_id}, as_json, str(run_id))


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
    item = _run(url, token, as_json, lambda app: app.resume_run(run_id, value))
    _show_run(item, as_json)


@run_app.command("inspect")
def run_inspect(
    run_id: Annotated[str, typer.Argument(help="Run id, e.g. run-000001.")],
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a run: status, snapshot, output or error."""
    item = _run(url, token, as_json, lambda app: app.inspect_run(run_id))
    _show_run(item, as_json)


def _show_run(item: Mapping[str, Any], as_json: bool) -> None:
    if as_json:
        _print_json(item)
        return
    _out().print(f"{item.get('run_id')} ", _status_text(str(item.get("status"))), sep="")
    for key in ("origin", "output", "error", "interrupt"):
        if item.get(key) is not None:
            _out().print(f"  {key}: {json.dumps(item[key])}")


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

    runs = _run(url, token, as_json, every)
    if as_json:
        _print_json(runs)
        return
    if not runs:
        _out().print("no runs")
        return
    table = _table(box=None, pad_edge=False, header_style="bold")
    for name in ("RUN", "STATUS", "DEPLOYMENT", "ORIGIN", "UPDATED"):
        table.add_column(name, overflow="fold")
    for run in runs:
        origin = run.get("origin")
        table.add_row(
            str(run.get("run_id")),
            _status_text(str(run.get("status"))),
            str((run.get("snapshot") or {}).get("deployment_id", "")),
            json.dumps(origin) if origin is not None else "manual",
            str(run.get("updated_at", "")),
        )
    _out().print(table)


def register_admin_commands(app: typer.Typer) -> None:
    """Add the schedule administration commands and the artifact/deployment/run
    groups to `app` (the `wf-schedule` CLI)."""
    app.command("create")(create)
    app.command("list")(list_)
    app.command("get")(get)
    app.command("update")(update)
    app.command("pause")(pause)
    app.command("resume")(resume)
    app.command("delete")(delete)
    app.command("occurrences")(occurrences)
    app.command("health")(health)
    app.add_typer(artifact_app, name="artifact")
    app.add_typer(deployment_app, name="deployment")
    app.add_typer(run_app, name="run")
