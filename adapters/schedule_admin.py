"""Operator commands of `wf-schedule`, spoken to a running `wf-rpc-server`.

Schedules: `create`, `list`, `get`, `update`, `pause`, `resume`, `delete`,
and the operator's requests `trigger`, `backfill`, `backfill-cancel`
(`adapters.admin.schedules`), `occurrences` (`adapters.admin.occurrences`);
`health`, plus `artifact create|get|list`, `deployment save|get|list|delete`
and `run start|inspect|list` so a server can be set up from a terminal
(`adapters.admin.host`). What they share, the options and the call to the
server, is `adapters.admin.session`; what they print, `adapters.admin.output`.

Every command takes `--url` (env `WF_SCHEDULER_URL`, default
http://127.0.0.1:8765/rpc), `--token` (env `WF_SCHEDULER_TOKEN`) and `--json`
(machine-readable output on stdout, errors included as `{"error": {...}}`),
after the command's name or before it (`wf-schedule --url URL list`).

Exit status (stable, for scripts; each error class declares its own, as
`exit_status` beside its `code`, and a test holds this list to them):

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

import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from adapters.admin.host import register_host_commands
from adapters.admin.occurrences import occurrences
from adapters.admin.output import STATE_STYLES, STATUS_STYLES, print_usage_error
from adapters.admin.schedules import parse_when, register_schedule_commands
from adapters.admin.session import (
    ENV_TOKEN,
    ENV_URL,
    EXIT_CODES,
    EXIT_FAILURE,
    EXIT_OK,
    exit_code_for,
)

__all__ = [
    "ENV_TOKEN",
    "ENV_URL",
    "EXIT_CODES",
    "STATE_STYLES",
    "STATUS_STYLES",
    "WfScheduleGroup",
    "connection_options_last",
    "exit_code_for",
    "parse_when",
    "register_admin_commands",
]


# The options every server command takes, which people also put before the
# command's name, as with `git -C` or `kubectl --context`.
_VALUED_OPTIONS = ("--url", "--token")
_FLAG_OPTIONS = ("--json",)


def connection_options_last(argv: Sequence[str]) -> list[str]:
    """`argv` with the `--url`, `--token` and `--json` given before the
    command's name moved after its arguments (before a `--`), where the
    command reads them. Everything else stays in place, so an option the
    root does not take is still refused there."""
    args = list(argv)
    moved: list[str] = []
    position = 0
    while position < len(args):
        token = args[position]
        if token in _VALUED_OPTIONS and position + 1 < len(args):
            moved += args[position : position + 2]
            del args[position : position + 2]
        elif token in _FLAG_OPTIONS or token.startswith(tuple(f"{o}=" for o in _VALUED_OPTIONS)):
            moved.append(token)
            del args[position]
        elif token.startswith("-"):
            position += 1  # --version, --help: the root's own
        else:
            break  # the command's name
    if not moved:
        return args
    end = args.index("--") if "--" in args else len(args)
    return args[:end] + moved + args[end:]


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
        argv = connection_options_last(sys.argv[1:] if args is None else args)
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
            print_usage_error(exc, as_json)
            code = exc.exit_code
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


def register_admin_commands(app: typer.Typer) -> None:
    """Add the schedule administration commands and the artifact/deployment/run
    groups to `app` (the `wf-schedule` CLI)."""
    register_schedule_commands(app)
    app.command("occurrences")(occurrences)
    register_host_commands(app)
