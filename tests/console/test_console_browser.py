"""The console in a real browser, against a real server process with a day of
real history (tests/console/world.py), on files and on PostgreSQL.

What is checked is what a person sees: the text of each page against what
the JSON-RPC API answers for the same store, the CLI's status colours, links
that lead where they say, a pause that takes effect and shows, a resume
whose bad payload is refused naming the field, forms that refuse a
cross-site request, and the login a server with a token asks for. Each page
is saved as a screenshot in the folder the walk prints.
"""

from __future__ import annotations

import html
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.console.conftest import TOKEN, LiveConsole, start_console, stop_console, wait_for
from tests.console.world import APPROVALS, CRON_BERLIN_HOURLY, DST, NIGHTLY

# The CLI's colours (adapters/admin/output.py) as the stylesheet renders them.
GREEN = "rgb(26, 127, 55)"
RED = "rgb(198, 40, 40)"
YELLOW = "rgb(154, 103, 0)"
CYAN = "rgb(0, 131, 143)"
GREY = "rgb(107, 117, 128)"


def _color(page: Any, selector: str) -> str:
    return str(page.eval_on_selector(selector, "e => getComputedStyle(e).color"))


def _shot(page: Any, folder: Path, name: str, backend: str) -> None:
    page.screenshot(path=str(folder / f"{name}-{backend}.png"), full_page=True)


def _states(live: LiveConsole) -> Counter[str]:
    return Counter(
        s["state"] for s in live.rpc("workflow.schedules.list", {"include_deleted": True})
    )


def _all_runs(live: LiveConsole) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = live.rpc("workflow.runs.list", {"limit": 100, "cursor": cursor})
        runs += page["runs"]
        cursor = page["next_cursor"]
        if cursor is None:
            return runs


def test_walk_every_page(
    console: LiveConsole, browser: Any, screenshots: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    live, world = console, console.world
    with capsys.disabled():
        print(f"\nconsole screenshots ({live.backend}): {screenshots}")
    page = browser.new_page(viewport={"width": 1400, "height": 900})

    # Overview: health, slots, schedules by state, failed and abandoned runs.
    response = page.goto(live.base + "/")
    assert response.status == 200
    assert page.inner_text('#health dd[data-key="scheduler"]') == "running"
    assert _color(page, '#health dd[data-key="status"] span') == GREEN
    assert page.inner_text("[data-slots-bound]") == "4"
    states = _states(live)
    for state in ("active", "paused", "finished", "deleted", "blocked"):
        shown = page.inner_text(f'#counts [data-state="{state}"]')
        assert int(shown) == states.get(state, 0), state
    assert page.inner_text("#failed").count(world.failed_run) == 1
    assert _color(page, f'#failed a[href="/runs/{world.failed_run}"]') == RED
    assert world.abandoned_run in page.inner_text("#abandoned")
    _shot(page, screenshots, "overview", live.backend)

    # The abandoned run: its disclosure, as the API has it.
    page.click(f'#abandoned a[href="/runs/{world.abandoned_run}"]')
    abandoned = live.rpc("workflow.runs.inspect", {"run_id": world.abandoned_run})
    assert page.inner_text("#status") == "failed"
    disclosure = page.inner_text("#disclosure")
    assert abandoned["error"]["message"] in disclosure
    assert "external effects may already have occurred" in disclosure
    _shot(page, screenshots, "run-abandoned", live.backend)

    # Schedules: words, the expression, state, next instant; filter; sort.
    page.click("header nav >> text=Schedules")
    assert page.url == live.base + "/schedules"
    row = page.locator(f'tr[data-schedule="{CRON_BERLIN_HOURLY}"]')
    assert "every hour at :00, Europe/Berlin" in row.inner_text()
    assert "0 * * * *" in row.inner_text()
    assert row.locator(".pill").inner_text() == "active"
    assert _color(page, f'tr[data-schedule="{CRON_BERLIN_HOURLY}"] .pill') == GREEN
    assert row.locator(".rel").inner_text().startswith("in ")
    listed = live.rpc("workflow.schedules.list", {"include_deleted": True})
    shown_ids = page.eval_on_selector_all(
        "tr[data-schedule]", "rs => rs.map(r => r.dataset.schedule)"
    )
    assert shown_ids == sorted(s["schedule_id"] for s in listed)
    _shot(page, screenshots, "schedules", live.backend)
    page.select_option('select[name="state"]', "paused")
    page.wait_for_url("**/schedules?state=paused*")
    paused = page.eval_on_selector_all("tr[data-schedule]", "rs => rs.map(r => r.dataset.schedule)")
    assert paused == sorted(s["schedule_id"] for s in listed if s["state"] == "paused")
    assert NIGHTLY in paused
    page.goto(live.base + "/schedules?sort=next")
    by_next = page.eval_on_selector_all(
        "tr[data-schedule]", "rs => rs.map(r => [r.dataset.schedule, r.dataset.next])"
    )
    due = [next_utc for _, next_utc in by_next if next_utc]
    assert due == sorted(due), "soonest first"
    assert [next_utc for _, next_utc in by_next[len(due) :]] == [""] * (len(by_next) - len(due))
    assert {schedule_id for schedule_id, next_utc in by_next if next_utc} == {
        s["schedule_id"] for s in listed if s["next_instant"] is not None
    }

    # A schedule with parallel runs: ledger, timeline, next instants, revisions.
    page.goto(live.base + "/schedules")
    page.click(f'tr[data-schedule="{APPROVALS}"] a[href="/schedules/{APPROVALS}"]')
    ledger = live.rpc(
        "workflow.schedules.occurrences.list", {"schedule_id": APPROVALS, "limit": 100}
    )["occurrences"]
    newest = [r for r in reversed(ledger) if r["status"] != "pending"]
    cells = page.eval_on_selector_all(
        "#ledger tbody tr",
        "rs => rs.map(r => [r.cells[2].innerText.trim(), r.cells[3].innerText.trim()])",
    )
    assert cells == [[r["status"], r["run_id"] or "-"] for r in newest][: len(cells)]
    assert len(cells) == min(50, len(newest))
    assert _color(page, "#ledger .st-interrupted") == YELLOW
    assert _color(page, "#ledger .st-completed") == GREEN
    assert _color(page, "#ledger .st-skipped-overlap") == GREY
    skipped = page.locator("#ledger tr", has_text="skipped-overlap").first.inner_text()
    assert "run(s) of this schedule were already active" in skipped
    assert page.locator("#upcoming tbody tr").count() == 10
    svgs = page.locator("#timeline svg.timeline")
    assert svgs.count() == 2
    day_bars = page.eval_on_selector_all(
        "#timeline svg.timeline >> nth=0",
        "s => [...s[0].querySelectorAll('rect.tl-bar')].map(b => b.getAttribute('y'))",
    )
    assert len(set(day_bars)) >= 2, "parallel runs get lanes of their own"
    assert page.locator("#timeline rect.tl-interrupted").count() >= 1
    assert "created" in page.inner_text("#revisions")
    _shot(page, screenshots, "schedule", live.backend)
    page.click("#ledger a[href^='/runs/']")
    assert page.url.startswith(live.base + "/runs/run-")
    assert page.inner_text("#status") in {"interrupted", "completed", "failed"}

    # Next instants across DST: a gap and a fold marked.
    page.goto(f"{live.base}/schedules/{DST}")
    marks = page.eval_on_selector_all("#upcoming .dst", "ms => ms.map(m => m.innerText)")
    assert "gap" in marks and "fold" in marks
    _shot(page, screenshots, "schedule-dst", live.backend)

    # Runs, newest first, and an interrupted run with its resume form.
    # The scheduler goes on running the world's schedules: the page shows the
    # list as it was just before or just after it was loaded.
    before = [r["run_id"] for r in reversed(_all_runs(live))][:50]
    page.goto(live.base + "/runs")
    shown_runs = page.eval_on_selector_all("tr[data-run]", "rs => rs.map(r => r.dataset.run)")
    after = [r["run_id"] for r in reversed(_all_runs(live))][:50]
    assert shown_runs in (before, after)
    _shot(page, screenshots, "runs", live.backend)
    page.select_option('select[name="status"]', "failed")
    page.wait_for_url("**/runs?status=failed*")
    statuses = page.eval_on_selector_all(
        "tr[data-run] td:nth-child(2)", "cs => cs.map(c => c.innerText)"
    )
    assert statuses and set(statuses) == {"failed"}
    page.goto(f"{live.base}/runs/{world.interrupted_run}")
    assert page.inner_text("#status") == "interrupted"
    assert "Approve the report?" in page.inner_text("#resume-form")
    _shot(page, screenshots, "run", live.backend)
    page.close()


def test_pause_resume_and_resume_a_run(console: LiveConsole, browser: Any) -> None:
    live = console
    page = browser.new_page()
    page.goto(f"{live.base}/schedules/{CRON_BERLIN_HOURLY}")
    page.click("#pause")
    assert page.inner_text("[role=status]") == "Schedule paused."
    assert page.inner_text("#state") == "paused"
    assert _color(page, "#state") == YELLOW
    assert live.rpc("workflow.schedules.get", {"schedule_id": CRON_BERLIN_HOURLY})["paused"]
    page.goto(live.base + "/")
    assert int(page.inner_text('#counts [data-state="paused"]')) == _states(live)["paused"]
    page.goto(f"{live.base}/schedules/{CRON_BERLIN_HOURLY}")
    page.click("#resume")
    assert page.inner_text("#state") == "active"
    schedule = live.rpc("workflow.schedules.get", {"schedule_id": CRON_BERLIN_HOURLY})
    assert schedule["state"] == "active"
    assert "resumed" in page.inner_text("#revisions")

    # A payload that is not JSON, then one the schema refuses: shown, nothing resumed.
    run_id = live.world.interrupted_run
    page.goto(f"{live.base}/runs/{run_id}")
    page.fill("textarea[name=payload]", "{approved: yes}")
    page.click("#resume-run")
    assert "payload: is not valid JSON" in page.inner_text("#resume-error")
    page.fill("textarea[name=payload]", '{"approved": "yes"}')
    page.click("#resume-run")
    error = page.inner_text("#resume-error")
    assert "invalid_input" in error and "payload.approved" in error
    assert live.rpc("workflow.runs.inspect", {"run_id": run_id})["status"] == "interrupted"
    page.fill("textarea[name=payload]", '{"approved": true}')
    page.click("#resume-run")

    def completed() -> bool:
        page.goto(f"{live.base}/runs/{run_id}")
        return page.inner_text("#status") == "completed"

    wait_for(completed, what="the resumed run completes")
    output = live.rpc("workflow.runs.inspect", {"run_id": run_id})["output"]
    assert output["summary"] in page.inner_text("#output")

    # A domain error is shown as the API words it.
    page.goto(f"{live.base}/schedules/{CRON_BERLIN_HOURLY}")
    csrf = page.eval_on_selector("input[name=csrf]", "i => i.value")
    answer = page.request.post(
        f"{live.base}/schedules/no-such-schedule/pause",
        form={"csrf": csrf},
        headers={"Origin": live.base},
    )
    assert answer.status == 404
    assert "schedule 'no-such-schedule' does not exist" in html.unescape(answer.text())
    assert "not_found" in answer.text()
    page.close()


def test_forms_refuse_cross_site_requests(file_console: LiveConsole) -> None:
    live = file_console
    target = f"{live.base}/schedules/{CRON_BERLIN_HOURLY}/pause"
    form = {"content-type": "application/x-www-form-urlencoded"}
    # From another site: refused, whatever the form holds.
    foreign = httpx.post(
        target, headers={**form, "Origin": "http://evil.example"}, content="csrf=x"
    )
    assert foreign.status_code == 403
    # From this origin but without the browser's anti-forgery cookie and field.
    bare = httpx.post(target, headers={**form, "Origin": live.base}, content="csrf=x")
    assert bare.status_code == 403
    assert "anti-forgery" in bare.text
    # A page whose DNS name was rebound to 127.0.0.1 reads nothing either.
    rebound = httpx.get(f"{live.base}/", headers={"Host": "evil.example"})
    assert rebound.status_code == 403
    assert not live.rpc("workflow.schedules.get", {"schedule_id": CRON_BERLIN_HOURLY})["paused"]


def test_a_server_with_a_token_asks_for_it(tmp_path: Path, browser: Any) -> None:
    live = start_console("file", tmp_path, None, token=TOKEN)
    try:
        assert httpx.get(f"{live.base}/runs", follow_redirects=False).status_code == 303
        assert httpx.get(f"{live.base}/metrics").status_code == 401
        scraped = httpx.get(f"{live.base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert scraped.status_code == 200
        page = browser.new_page()
        page.goto(f"{live.base}/runs")
        assert page.url.startswith(f"{live.base}/login")
        page.fill("input[name=token]", "not-the-token-at-all")
        page.click("#sign-in")
        assert "That token is not this server's." in page.inner_text("[role=alert]")
        page.fill("input[name=token]", TOKEN)
        page.click("#sign-in")
        assert page.url == f"{live.base}/runs"
        assert page.locator("tr[data-run]").count() > 0
        cookies = {c["name"]: c for c in page.context.cookies()}
        session = cookies["wf_console_session"]
        assert TOKEN not in session["value"] and session["httpOnly"]
        assert session["sameSite"] == "Strict"
        page.close()
    finally:
        stop_console(live)
