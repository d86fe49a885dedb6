"""The console shows the operator's requests: each occurrence's origin in a
schedule's ledger (a "trigger" or "backfill" label), and the schedule's
backfill with its progress. A real `wf-rpc-server` on the world's store (on
files and on PostgreSQL), a real Chromium; the requests are made over
JSON-RPC, and the page is held to what the API answers."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from tests.console.conftest import LiveConsole, wait_for
from tests.console.world import CRON_BERLIN_HOURLY, GATED, MAINTENANCE


def _iso(instant: Any) -> str:
    return str(instant.isoformat().replace("+00:00", "Z"))


def _ledger(page: Any) -> list[list[str]]:
    """Each ledger row: its origin label ("" for the calendar's), status, run."""
    return list(
        page.eval_on_selector_all(
            "#ledger tbody tr",
            """rs => rs.map(r => [
                (r.cells[0].querySelector('[data-origin]') || {dataset: {origin: ''}})
                    .dataset.origin,
                r.cells[2].innerText.trim(),
                r.cells[3].innerText.trim()])""",
        )
    )


def test_the_ledger_labels_triggers_and_backfills_and_the_page_shows_progress(
    console: LiveConsole, browser: Any, screenshots: Path
) -> None:
    live, world = console, console.world
    page = browser.new_page(viewport={"width": 1400, "height": 900})

    # A trigger: its row is labelled, with its run.
    answer = live.rpc("workflow.schedules.trigger", {"schedule_id": CRON_BERLIN_HOURLY})
    assert answer["run_id"]
    page.goto(f"{live.base}/schedules/{CRON_BERLIN_HOURLY}")
    assert page.locator("#backfill").count() == 0, "no backfill: no backfill card"
    rows = _ledger(page)
    labelled = [row for row in rows if row[0]]
    assert [(origin, run) for origin, _, run in labelled] == [("trigger", answer["run_id"])]
    assert rows[0][0] == "trigger", "the newest row"
    title = page.get_attribute("#ledger [data-origin=trigger]", "title")
    assert title is not None and "run now by an operator" in title
    # The calendar's rows carry no label.
    assert len(rows) > 1 and all(origin == "" for origin, _, _ in rows[1:])

    # A backfill of the four-hour pause: its runs, labelled, and its progress.
    start, end = world.start + timedelta(hours=2, minutes=10), world.start + timedelta(hours=6)
    plan = live.rpc(
        "workflow.schedules.backfill",
        {"schedule_id": MAINTENANCE, "start": _iso(start), "end": _iso(end)},
    )["backfill"]
    assert plan["planned"] == 4

    def done() -> dict[str, Any] | None:
        schedule = live.rpc("workflow.schedules.get", {"schedule_id": MAINTENANCE})
        # None until the scheduler took the request (a round after it, on a busy machine).
        backfill: dict[str, Any] | None = schedule["backfill"]
        return backfill if backfill is not None and backfill["state"] == "done" else None

    wait_for(done, what="the backfill admits its four instants")

    def ran() -> list[dict[str, Any]] | None:
        rows = live.rpc(
            "workflow.schedules.occurrences.list", {"schedule_id": MAINTENANCE, "limit": 100}
        )["occurrences"]
        backfilled = [row for row in rows if row.get("origin") == "backfill"]
        statuses = {row["status"] for row in backfilled}
        return backfilled if len(backfilled) == 4 and statuses == {"completed"} else None

    backfilled = wait_for(ran, what="the backfill's runs complete")
    page.goto(f"{live.base}/schedules/{MAINTENANCE}")
    assert page.inner_text("#backfill-state") == "done"
    assert page.inner_text("#backfill-progress") == "4 of 4 admitted"
    assert page.locator("#backfill-next").count() == 0
    rows = _ledger(page)
    shown = [(status, run) for origin, status, run in rows if origin == "backfill"]
    # Newest first: recorded last, the backfill's rows lead the ledger.
    assert shown == [("completed", row["run_id"]) for row in reversed(backfilled)]
    assert [origin for origin, _, _ in rows[:4]] == ["backfill"] * 4
    _shot = screenshots / f"schedule-backfill-{live.backend}.png"
    page.screenshot(path=str(_shot), full_page=True)

    # The runs list and a run's page label the runs the same way.
    page.goto(f"{live.base}/runs")
    labels = dict(
        page.eval_on_selector_all(
            "#runs tbody tr",
            """rs => rs.map(r => [r.dataset.run,
                (r.cells[2].querySelector('[data-origin]') || {dataset: {origin: ''}})
                    .dataset.origin])""",
        )
    )
    assert labels[answer["run_id"]] == "trigger"
    assert all(labels[row["run_id"]] == "backfill" for row in backfilled)
    assert [run for run, origin in labels.items() if origin] == sorted(
        [answer["run_id"], *(row["run_id"] for row in backfilled)], reverse=True
    ), "the calendar's and manual runs carry no label"
    page.goto(f"{live.base}/runs/{answer['run_id']}")
    assert page.inner_text("dd [data-origin]") == "trigger"

    # A backfill that cannot start (the gated export's run waits for
    # approval): running, none admitted yet, the next instant shown; cancelled.
    plan = live.rpc(
        "workflow.schedules.backfill",
        {
            "schedule_id": GATED,
            "start": _iso(world.start + timedelta(hours=1)),
            "end": _iso(world.start + timedelta(hours=5)),
        },
    )["backfill"]
    assert plan["planned"] >= 1
    page.goto(f"{live.base}/schedules/{GATED}")
    schedule = live.rpc("workflow.schedules.get", {"schedule_id": GATED})
    backfill = schedule["backfill"]
    assert backfill["state"] == "running"
    assert page.inner_text("#backfill-state") == "running"
    assert page.inner_text("#backfill-progress") == (
        f"{backfill['admitted']} of {backfill['planned']} admitted"
    )
    assert page.locator("#backfill-next").count() == 1
    live.rpc("workflow.schedules.backfill.cancel", {"schedule_id": GATED})
    page.goto(f"{live.base}/schedules/{GATED}")
    assert page.inner_text("#backfill-state") == "cancelled"
    assert f"{backfill['planned'] - backfill['admitted']} not run" in page.inner_text("#backfill")
    page.close()
