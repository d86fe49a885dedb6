"""What `wf-schedule` prints: JSON, tables and colours on stdout, errors on stderr.

Human output goes to stdout and errors to stderr as `error: <message>`, one
line per bad field, each error printed once. With `--json` everything,
errors included (`{"error": {...}}`), is JSON on stdout.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from adapters.client import ServerUnreachable
from adapters.rpc.protocol import RpcError, Unauthorized
from core.errors import InvalidState, RevisionConflict, SchedulingError
from core.schedule_state import lifecycle_state

# rich is imported when there is something to print: it costs as much as the
# rest of the CLI's imports together, and `--help` prints through click.
if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

__all__ = [
    "ORIGIN_STYLES",
    "START_SERVER_HINT",
    "STATE_STYLES",
    "STATUS_STYLES",
    "backfill_text",
    "err",
    "occurrence_table",
    "origin_text",
    "out",
    "print_error",
    "print_json",
    "print_table",
    "print_usage_error",
    "show",
    "show_backfill_plan",
    "show_cancelled_backfill",
    "show_run",
    "show_schedule",
    "show_trigger",
    "state_text",
    "status_text",
    "table",
    "text",
    "trigger_text",
]

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

# Where an occurrence came from: the calendar (dim, as most rows are), or an
# operator's request (`wf-schedule trigger`, `wf-schedule backfill`).
ORIGIN_STYLES: Final[Mapping[str, str]] = {
    "schedule": "dim",
    "trigger": "bold magenta",
    "backfill": "bold blue",
}

START_SERVER_HINT: Final = (
    "start it with `uv run wf-rpc-server --store-root .wf_store --enable-scheduler`"
    " (or pass --url / set WF_SCHEDULER_URL)"
)


@functools.cache
def out() -> Console:
    """The console for results (stdout)."""
    from rich.console import Console

    # Piped output is for logs and scripts: do not fold tables at 80 columns.
    return Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)


@functools.cache
def err() -> Console:
    """The console for errors (stderr)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def text(content: str, style: str = "") -> Text:
    from rich.text import Text

    return Text(content, style=style)


def table(**options: Any) -> Table:
    from rich.table import Table

    return Table(**options)


def print_table(listing: Table) -> None:
    """Print `listing` on stdout. Piped, each line without the padding rich
    puts after its last cell: scripts, diffs and pasted output get no
    trailing spaces. (On a terminal they are invisible, and colours stay.)"""
    console = out()
    if console.is_terminal:
        console.print(listing)
        return
    with console.capture() as captured:
        console.print(listing)
    lines = captured.get().split("\n")
    sys.stdout.write("\n".join(line.rstrip() for line in lines))
    sys.stdout.flush()


def print_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=False, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def show(payload: Any, as_json: bool, summary: str) -> None:
    """`payload` as JSON, or the one-line `summary` of it."""
    if as_json:
        print_json(payload)
    else:
        out().print(summary)


# -- schedules, occurrences, runs -------------------------------------------------


def state_text(schedule: Mapping[str, Any]) -> Text:
    """The schedule's state, coloured."""
    state = schedule.get("state")
    if not isinstance(state, str):
        # A server from before `state`: its flags (it cannot tell `finished`).
        state = lifecycle_state(
            deleted=bool(schedule.get("deleted")),
            blocked=bool(schedule.get("blocked")),
            paused=bool(schedule.get("paused")),
            finished=False,
        )
    return text(state, style=STATE_STYLES.get(state, ""))


def trigger_text(trigger: Any) -> str:
    if not isinstance(trigger, Mapping):
        return str(trigger)
    if trigger.get("kind") == "cron":
        return f"cron {trigger.get('expression')} ({trigger.get('timezone', 'UTC')})"
    if trigger.get("kind") == "oneshot":
        return f"once at {trigger.get('at')}"
    return json.dumps(trigger)


def show_schedule(schedule: Mapping[str, Any], as_json: bool, verb: str | None = None) -> None:
    """A schedule: one line saying what `verb` did to it, or every field."""
    if as_json:
        print_json(schedule)
        return
    if verb is not None:
        out().print(
            f"{verb} {schedule.get('schedule_id')} (revision {schedule.get('revision')}, ",
            state_text(schedule),
            ")",
            sep="",
        )
        return
    fields = table(show_header=False, box=None, pad_edge=False)
    fields.add_column("field", style="bold")
    fields.add_column("value", overflow="fold")
    for key, value in schedule.items():
        if key == "state":
            continue  # shown last, coloured
        if key == "trigger":
            shown: Any = trigger_text(value)
        elif key == "backfill" and isinstance(value, Mapping):
            shown = backfill_text(value)
        elif isinstance(value, dict | list):
            shown = json.dumps(value)
        elif value is None:
            shown = text("-", style="dim")
        else:
            shown = str(value)
        fields.add_row(key, shown)
    fields.add_row("state", state_text(schedule))
    print_table(fields)


def _range_text(backfill: Mapping[str, Any]) -> str:
    return f"range {backfill.get('start')} to {backfill.get('end')} (end excluded)"


def backfill_text(backfill: Mapping[str, Any]) -> str:
    """A schedule's backfill (`get_schedule`'s `backfill`) in one line: its
    state, its progress and its range, e.g. `running: 1 of 3 admitted, next
    2026-01-05T07:00:00Z; range ... (requested ...)`."""
    state = str(backfill.get("state"))
    planned, admitted = backfill.get("planned"), backfill.get("admitted")
    progress = f"{state}: {admitted} of {planned} admitted"
    if state == "running" and backfill.get("next"):
        progress += f", next {backfill['next']}"
    elif state == "cancelled" and backfill.get("remaining"):
        progress += f", {backfill['remaining']} not run"
    left_out = [
        f"{backfill[key]} {words}"
        for key, words in (
            ("already_admitted", "already admitted"),
            ("left_to_calendar", "left to the calendar"),
        )
        if backfill.get(key)
    ]
    if left_out:
        progress += f" ({', '.join(left_out)})"
    overlap = ", overlap allowed" if backfill.get("overlap") == "allow" else ""
    when = f"requested {backfill.get('requested_at')}"
    if backfill.get("ended_at"):
        when += f", ended {backfill['ended_at']}"
    return f"{progress}; {_range_text(backfill)}{overlap} ({when})"


def show_trigger(result: Mapping[str, Any], as_json: bool) -> None:
    """What `trigger` answers: the occurrence it made, or that the scheduler
    has not decided it yet."""
    if as_json:
        print_json(result)
        return
    schedule_id = result.get("schedule_id")
    overlap = " (overlap allowed)" if result.get("overlap") == "allow" else ""
    status = str(result.get("status"))
    if status == "requested":
        out().print(
            f"triggered {schedule_id}{overlap}: requested at {result.get('requested_at')}, not"
            f" decided yet (its occurrence will be {result.get('instant')}: see"
            f" `wf-schedule occurrences {schedule_id}`)"
        )
        return
    line = text(f"triggered {schedule_id}{overlap}: {result.get('instant')} ")
    line.append_text(status_text(status))
    if result.get("run_id"):
        line.append(f", run {result['run_id']}")
    else:
        line.append(f" (no run: see `wf-schedule occurrences {schedule_id}`)")
    out().print(line)


def show_backfill_plan(result: Mapping[str, Any], as_json: bool) -> None:
    """What `backfill` answers: the plan, and where to follow it."""
    if as_json:
        print_json(result)
        return
    schedule_id = result.get("schedule_id")
    plan = result.get("backfill") or {}
    planned = plan.get("planned")
    overlap = ", overlap allowed" if plan.get("overlap") == "allow" else ""
    if planned:
        what = f"{planned} to run, {plan.get('first')} to {plan.get('last')}, oldest first"
    else:
        what = "nothing to run"
    out().print(f"backfill of {schedule_id} requested: {what}{overlap}")
    out().print(
        f"  {_range_text(plan)}: {plan.get('instants')} calendar instants,"
        f" {plan.get('already_admitted')} already admitted,"
        f" {plan.get('left_to_calendar')} left to the calendar"
    )
    if planned:
        out().print(f"  progress: `wf-schedule get {schedule_id}`", markup=False)


def show_cancelled_backfill(result: Mapping[str, Any], as_json: bool) -> None:
    """What `backfill-cancel` answers: how far the backfill had got."""
    if as_json:
        print_json(result)
        return
    backfill = result.get("backfill") or {}
    out().print(
        f"backfill of {result.get('schedule_id')} cancelled at {result.get('cancelled_at')}:"
        f" {backfill.get('admitted')} of {backfill.get('planned')} admitted,"
        f" {backfill.get('remaining')} not run ({_range_text(backfill)})"
    )


def origin_text(origin: object) -> Text:
    """Where an occurrence came from (a row without one is the calendar's)."""
    name = origin if isinstance(origin, str) else "schedule"
    return text(name, style=ORIGIN_STYLES.get(name, ""))


def status_text(status: str) -> Text:
    """An occurrence's or a run's status, coloured."""
    return text(status, style=STATUS_STYLES.get(status, ""))


def occurrence_table(rows: list[Mapping[str, Any]]) -> Table:
    rendered = table(box=None, pad_edge=False, header_style="bold")
    for name in ("INSTANT", "ORIGIN", "STATUS", "RUN", "COUNT", "REASON"):
        rendered.add_column(name, overflow="fold")
    for row in rows:
        count = row.get("count")
        rendered.add_row(
            str(row.get("instant", "")),
            origin_text(row.get("origin")),
            status_text(str(row.get("status", ""))),
            str(row.get("run_id") or "-"),
            "" if count in (None, 1) else str(count),
            str(row.get("reason") or ""),
        )
    return rendered


def show_run(item: Mapping[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(item)
        return
    out().print(f"{item.get('run_id')} ", status_text(str(item.get("status"))), sep="")
    for key in ("origin", "output", "error", "interrupt"):
        if item.get(key) is not None:
            out().print(f"  {key}: {json.dumps(item[key])}")


# -- errors ---------------------------------------------------------------------


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


def _detail(exc: BaseException) -> dict[str, Any]:
    """The `{"error": ...}` object of `--json`."""
    if isinstance(exc, SchedulingError):
        return exc.to_dict()
    if isinstance(exc, RpcError):
        detail: dict[str, Any] = {"code": "rpc_error", "rpc_code": exc.code, "message": exc.message}
        if exc.data is not None:
            detail["data"] = exc.data
        if isinstance(exc, Unauthorized):
            detail["code"] = "unauthorized"
        elif isinstance(exc, ServerUnreachable):
            detail["code"] = "server_unreachable"
            if not exc.connected:
                detail["hint"] = START_SERVER_HINT
        return detail
    return {"code": "error", "message": str(exc)}


def print_error(exc: BaseException, as_json: bool) -> None:
    """Report a failed command once: JSON on stdout, or text (with a hint
    where there is one) on stderr."""
    if as_json:
        print_json({"error": _detail(exc)})
        return
    err().print(text(f"error: {_headline(exc)}", style="red"))
    for problem in getattr(exc, "problems", ()):
        err().print(f"  {problem.field}: {problem.reason}", markup=False)
    if isinstance(exc, RevisionConflict):
        err().print("  hint: run `wf-schedule get` for the current revision and retry")
    elif isinstance(exc, InvalidState) and exc.data.get("schedule_ids"):
        err().print("  hint: delete those schedules first, or pass --force")


def print_usage_error(exc: Any, as_json: bool) -> None:
    """Report a usage error (click's) once: click's text on stderr, or with
    `--json` an `{"error": ...}` object on stdout like every other failure."""
    if not as_json:
        exc.show()
        return
    detail: dict[str, Any] = {"code": "usage_error", "message": exc.format_message()}
    param = getattr(exc, "param", None)
    hint = getattr(exc, "param_hint", None)
    if hint is None and param is not None:
        hint = "/".join(getattr(param, "opts", ()) or [str(param.name)])
    if hint:
        detail["param"] = hint if isinstance(hint, str) else "/".join(hint)
    print_json({"error": detail})
