"""The schedule commands of `wf-schedule`: `create`, `list`, `get`,
`update`, `pause`, `resume`, `delete`, and the operator's requests
`trigger`, `backfill`, `backfill-cancel` (`occurrences` is in
`adapters.admin.occurrences`).

`create` and `update` take a definition from `--file`, from flags, or both
(flags win). The flags are the definition's fields under the names an
operator types (`--deployment` for `deployment_id`); `definition_flags` is
their one table, and a test holds it to the definition model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Final

import typer

from adapters.admin.output import (
    out,
    print_json,
    print_table,
    show_backfill_plan,
    show_cancelled_backfill,
    show_schedule,
    show_trigger,
    state_text,
    table,
    trigger_text,
)
from adapters.admin.session import (
    JsonOption,
    TokenOption,
    UrlOption,
    call_server,
    fail,
    json_object_option,
    read_json_file,
)
from adapters.client import DEFAULT_URL
from core.errors import InvalidInput, Problem

__all__ = [
    "Misfire",
    "Overlap",
    "ScheduleId",
    "definition_flags",
    "parse_ago",
    "parse_when",
    "register_schedule_commands",
]

_RELATIVE: Final = re.compile(r"^\+(\d+(?:\.\d+)?)([smhd])$")
_AGO: Final = re.compile(r"^-(\d+(?:\.\d+)?)([smhd])$")
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class Overlap(StrEnum):
    skip = "skip"
    parallel = "parallel"


class Misfire(StrEnum):
    skip = "skip"
    latest = "latest"


ScheduleId = Annotated[str, typer.Argument(help="Schedule id.", show_default=False)]


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


def parse_ago(raw: str, now: datetime) -> str:
    """A backfill bound: `-N[s|m|h|d]` (that long before `now`) as UTC
    ISO-8601 text; anything else is sent as typed, for the server to parse
    (it names `start` or `end` when it cannot)."""
    match = _AGO.match(raw.strip())
    if match is None:
        return raw.strip()
    delta = timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
    return (now - delta).astimezone(UTC).isoformat().replace("+00:00", "Z")


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


def definition_flags(
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
        "inputs": json_object_option(inputs, "--inputs"),
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


# -- commands ---------------------------------------------------------------------


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
    base = read_json_file(file, "a schedule definition") if file is not None else {}
    try:
        flags = definition_flags(
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
        fail(exc, as_json)
    created = call_server(url, token, as_json, lambda app: app.create_schedule(**merged))
    show_schedule(created, as_json, verb="created")


def list_(
    include_deleted: Annotated[
        bool, typer.Option("--include-deleted", help="Also list deleted schedules.")
    ] = False,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """List schedules."""
    schedules = call_server(
        url, token, as_json, lambda app: app.list_schedules(include_deleted=include_deleted)
    )
    if as_json:
        print_json(schedules)
        return
    if not schedules:
        out().print("no schedules")
        return
    listing = table(box=None, pad_edge=False, header_style="bold")
    for name in ("SCHEDULE", "DEPLOYMENT", "TRIGGER", "STATE", "REV", "NEXT"):
        listing.add_column(name, overflow="fold")
    for item in schedules:
        listing.add_row(
            str(item.get("schedule_id")),
            str(item.get("deployment_id")),
            trigger_text(item.get("trigger")),
            state_text(item),
            str(item.get("revision")),
            str(item.get("next_instant") or "-"),
        )
    print_table(listing)


def get(
    schedule_id: ScheduleId,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one schedule's full definition and state."""
    schedule = call_server(
        url, token, as_json, lambda app: app.get_schedule(schedule_id=schedule_id)
    )
    show_schedule(schedule, as_json)


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
    base = read_json_file(file, "a schedule patch") if file is not None else {}
    try:
        flags = definition_flags(
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
        fail(exc, as_json)
    updated = call_server(
        url,
        token,
        as_json,
        lambda app: app.update_schedule(
            schedule_id=schedule_id, expected_revision=expected_revision, **patch
        ),
    )
    show_schedule(updated, as_json, verb="updated")


def pause(
    schedule_id: ScheduleId,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Pause: no further admissions until resumed (active runs continue)."""
    result = call_server(
        url, token, as_json, lambda app: app.pause_schedule(schedule_id=schedule_id)
    )
    show_schedule(result, as_json, verb="paused")


def resume(
    schedule_id: ScheduleId,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Resume from the next future instant (paused times are not replayed)."""
    result = call_server(
        url, token, as_json, lambda app: app.resume_schedule(schedule_id=schedule_id)
    )
    show_schedule(result, as_json, verb="resumed")


def delete(
    schedule_id: ScheduleId,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete (soft): no further admissions; runs and history survive; the id is never reused."""
    result = call_server(
        url, token, as_json, lambda app: app.delete_schedule(schedule_id=schedule_id)
    )
    show_schedule(result, as_json, verb="deleted")


AllowOverlap = Annotated[
    bool,
    typer.Option(
        "--allow-overlap",
        help='Run even when the schedule\'s overlap policy would refuse (overlap "allow").',
    ),
]


def trigger(
    schedule_id: ScheduleId,
    allow_overlap: AllowOverlap = False,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run the schedule now, once (its occurrence's origin is "trigger")."""
    result = call_server(
        url,
        token,
        as_json,
        lambda app: app.trigger_schedule(
            schedule_id=schedule_id, overlap="allow" if allow_overlap else None
        ),
    )
    show_trigger(result, as_json)


def backfill(
    schedule_id: ScheduleId,
    start: Annotated[
        str,
        typer.Option(
            "--start",
            help="First instant of the range (included): ISO-8601 with an offset, or -N[s|m|h|d]"
            " for that long ago.",
            show_default=False,
        ),
    ],
    end: Annotated[
        str,
        typer.Option(
            "--end",
            help="End of the range (excluded), not in the future: ISO-8601 with an offset, or"
            " -N[s|m|h|d].",
            show_default=False,
        ),
    ],
    allow_overlap: AllowOverlap = False,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run the past range's calendar instants that did not run, oldest first."""
    now = datetime.now(UTC)
    first, last = parse_ago(start, now), parse_ago(end, now)
    result = call_server(
        url,
        token,
        as_json,
        lambda app: app.backfill_schedule(
            schedule_id=schedule_id,
            start=first,
            end=last,
            overlap="allow" if allow_overlap else None,
        ),
    )
    show_backfill_plan(result, as_json)


def backfill_cancel(
    schedule_id: ScheduleId,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Stop the schedule's running backfill (runs it already started go on)."""
    result = call_server(
        url, token, as_json, lambda app: app.cancel_backfill(schedule_id=schedule_id)
    )
    show_cancelled_backfill(result, as_json)


def register_schedule_commands(app: typer.Typer) -> None:
    """Add the schedule commands to `app`."""
    app.command("create")(create)
    app.command("list")(list_)
    app.command("get")(get)
    app.command("update")(update)
    app.command("pause")(pause)
    app.command("resume")(resume)
    app.command("delete")(delete)
    app.command("trigger")(trigger)
    app.command("backfill")(backfill)
    app.command("backfill-cancel")(backfill_cancel)
