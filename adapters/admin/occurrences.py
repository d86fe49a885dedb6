"""`wf-schedule occurrences`: a schedule's history, a page at a time, in full
(`--all`), newest first (`--last`), followed as it grows (`--watch`) or
polled until a row reaches a status (`--wait-for`).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from adapters.admin.output import (
    occurrence_table,
    origin_text,
    out,
    print_json,
    print_table,
    status_text,
    text,
)
from adapters.admin.schedules import ScheduleId
from adapters.admin.session import (
    EXIT_OK,
    JsonOption,
    TokenOption,
    UrlOption,
    call_server,
    fail,
)
from adapters.client import DEFAULT_URL, App
from core.occurrences import OCCURRENCE_STATUSES

if TYPE_CHECKING:
    from rich.text import Text

__all__ = ["WATCH_INTERVAL_S", "newest_first", "occurrences"]

WATCH_INTERVAL_S: Final = 0.5


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
    # A synthesized candidate has no `seq`: it is in no history yet. (Its
    # instant orders it; a recorded row's seq, not its instant, says when it
    # was recorded: a backfill records old instants last.)
    pending = [row for row in rows if row.get("seq") is None]
    recorded = [row for row in rows if row.get("seq") is not None]
    pending.sort(key=lambda row: str(row.get("instant", "")), reverse=True)
    return pending + recorded[::-1]


def _row_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    # A row is shown again only when what it says changed (a status, a run).
    return (row.get("instant"), row.get("status"), row.get("run_id"), row.get("count"))


def _row_line(row: Mapping[str, Any]) -> Text:
    count = row.get("count")
    line = text(f"{row.get('instant', '')}  ")
    if row.get("origin") not in (None, "schedule"):
        line.append_text(origin_text(row["origin"]))
        line.append("  ")
    line.append_text(status_text(str(row.get("status", ""))))
    line.append(f"  {row.get('run_id') or '-'}")
    if count not in (None, 1):
        line.append(f"  x{count}")
    if row.get("reason"):
        line.append(f"  {row['reason']}")
    return line


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
        out().print(_row_line(row))


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
    """Show occurrence history in the order decided, oldest first (a held
    candidate shows as pending)."""
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
            call_server(
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
        rows = call_server(
            url, token, as_json, lambda app: _wait_for(app, schedule_id, wait_for, limit, waited)
        )
        if rows is None:
            fail(
                TimeoutError(f"no {wait_for!r} occurrence of {schedule_id} within {waited} s"),
                as_json,
            )
        page: dict[str, Any] = {"occurrences": rows, "next_cursor": None}
    elif all_pages or last is not None:
        rows = call_server(
            url,
            token,
            as_json,
            lambda app: _all_occurrences(app, schedule_id, 100 if last else limit),
        )
        page = {"occurrences": rows, "next_cursor": None}
    else:
        page = call_server(
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
        print_json(page)
        return
    rows = page.get("occurrences", [])
    if not rows:
        out().print(f"no occurrences of {schedule_id} yet")
    else:
        print_table(occurrence_table(rows))
    if page.get("next_cursor"):
        out().print(text(f"more: --cursor {page['next_cursor']}  (or --all)", style="dim"))
