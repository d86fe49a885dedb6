"""`wf-schedule`: operator command line for schedules.

`wf-schedule preview` shows the instants a trigger would fire at, in UTC and
in the trigger's zone, with croniter's DST resolution labelled. It uses only
the pure core (definitions and calendar) and needs no server.

Exit codes: 0 on success, 2 when an option is invalid (the message on stderr
names the option and the definition field it maps to).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from itertools import islice
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from adapters.schedule_admin import WfScheduleGroup, register_admin_commands
from adapters.simulate_cli import register_simulate_command
from core.errors import InvalidDefinition, Problem

# The calendar and definitions pull in croniter and pydantic: `preview` imports
# them when it runs, so that `--help` and the server commands start fast.
if TYPE_CHECKING:
    from core.calendar import CompiledTrigger, DstNote

__all__ = ["app", "main", "package_version"]

app = typer.Typer(
    name="wf-schedule",
    cls=WfScheduleGroup,
    help="Administer and inspect wf-scheduler schedules.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help: typer's rich help formatter imports rich.markdown and
    # rich.traceback, which would double the time `--help` takes to start.
    rich_markup_mode=None,
)

EXIT_INVALID: Final = 2
MAX_COUNT: Final = 10_000

DST_NOTE_TEXT: Final[dict[DstNote, str]] = {
    "gap": "gap: wall time did not exist, croniter moved it",
    "fold": "fold: repeated hour",
}

# Definition fields as the options that set them, so errors name what the user typed.
_OPTION_FOR_FIELD: Final = {
    "trigger.expression": "--cron",
    "trigger.timezone": "--timezone",
    "trigger.at": "--at",
}


def package_version() -> str:
    """The installed wf-scheduler version (the one `--version` prints)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("wf-scheduler")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"wf-schedule {package_version()}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print the wf-scheduler version and exit.",
        ),
    ] = False,
) -> None:
    """Administer and inspect wf-scheduler schedules."""
    # A callback keeps `preview` a named subcommand even while it is the only one.


def _fail(problems: list[Problem]) -> typer.Exit:
    from rich.console import Console

    err = Console(stderr=True, highlight=False, soft_wrap=True)
    for problem in problems:
        option = _OPTION_FOR_FIELD.get(problem.field, problem.field)
        where = option if option == problem.field else f"{option} ({problem.field})"
        err.print(f"error: {where}: {problem.reason}", markup=False)
    return typer.Exit(code=EXIT_INVALID)


def _parse_after(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC)
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise _fail(
            [Problem(field="--after", reason=f"is not an ISO-8601 date-time: {text!r}")]
        ) from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise _fail([Problem(field="--after", reason="must include a UTC offset (or Z)")])
    return value.astimezone(UTC)


def _compile(cron: str | None, at: str | None, timezone: str | None) -> CompiledTrigger:
    from core.calendar import compile_trigger
    from core.definitions import parse_definition

    if (cron is None) == (at is None):
        raise _fail([Problem(field="--cron/--at", reason="give exactly one of --cron or --at")])
    trigger: dict[str, Any]
    if cron is not None:
        trigger = {"kind": "cron", "expression": cron, "timezone": timezone or "UTC"}
    else:
        if timezone is not None:
            raise _fail(
                [
                    Problem(
                        field="--timezone",
                        reason="applies to --cron only; --at carries its own UTC offset",
                    )
                ]
            )
        trigger = {"kind": "oneshot", "at": at}
    try:
        # The ids are placeholders: only the trigger is being previewed.
        definition = parse_definition(
            {"schedule_id": "preview", "deployment_id": "preview", "trigger": trigger}
        )
    except InvalidDefinition as exc:
        raise _fail(list(exc.problems)) from None
    return compile_trigger(definition.trigger)


def _iso(instant: datetime) -> str:
    return instant.isoformat().replace("+00:00", "Z")


@app.command()
def preview(
    cron: Annotated[
        str | None, typer.Option("--cron", help='Five-field cron expression, e.g. "0 * * * *".')
    ] = None,
    at: Annotated[
        str | None, typer.Option("--at", help="One-shot instant, ISO-8601 with a UTC offset.")
    ] = None,
    timezone: Annotated[
        str | None, typer.Option("--timezone", help="IANA zone for --cron (default UTC).")
    ] = None,
    count: Annotated[
        int, typer.Option("--count", min=1, max=MAX_COUNT, help="How many instants to show.")
    ] = 10,
    after: Annotated[
        str | None,
        typer.Option(
            "--after", help="Show instants strictly after this ISO-8601 instant (default: now)."
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a JSON list instead of a table.")
    ] = False,
) -> None:
    """Show the next instants a trigger fires at, in UTC and in its zone."""
    from rich.table import Table

    from adapters.admin.output import out, print_table

    compiled = _compile(cron, at, timezone)
    start = _parse_after(after)
    instants = list(islice(compiled.iter_after(start), count))
    if as_json:
        rows = [
            {
                "index": index,
                "instant": _iso(instant),
                "local_instant": compiled.local(instant).isoformat(),
                "timezone": compiled.timezone,
                "dst_note": compiled.dst_note(instant),
            }
            for index, instant in enumerate(instants, start=1)
        ]
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    described = f"cron {cron!r} in {compiled.timezone}" if cron is not None else f"one-shot {at}"
    table = Table(title=f"{described}, after {_iso(start)}", title_justify="left")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("UTC instant", no_wrap=True)
    table.add_column(f"Local instant ({compiled.timezone})", no_wrap=True)
    table.add_column("DST note", overflow="fold")
    for index, instant in enumerate(instants, start=1):
        note = compiled.dst_note(instant)
        table.add_row(
            str(index),
            _iso(instant),
            compiled.local(instant).isoformat(),
            DST_NOTE_TEXT[note] if note is not None else "",
        )
    print_table(table)
    if not instants:
        out().print("no instants after this point (a one-shot fires only once)")


register_simulate_command(app)
register_admin_commands(app)


def main() -> None:
    """Console-script entry point (`wf-schedule`)."""
    app()


if __name__ == "__main__":
    main()
