"""`/metrics` of a live server, parsed with prometheus-client's own parser and
checked against what the JSON-RPC API reports for the same store; then a
schedule fires and the counters move by exactly what happened."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from adapters.logs import EVENTS
from tests.console.conftest import LiveConsole, wait_for

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(live: LiveConsole) -> tuple[Samples, dict[str, Any]]:
    answer = httpx.get(f"{live.base}/metrics", timeout=10)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    families: dict[str, Any] = {}
    for family in text_string_to_metric_families(answer.text):
        families[family.name] = family
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, families


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_agree_with_the_api_and_count_what_happens(console: LiveConsole) -> None:
    live = console
    # The world's schedules go on firing on the real clock: pause them, so
    # that what the counters count below is the one-shot alone.
    for schedule in live.rpc("workflow.schedules.list"):
        if schedule["state"] == "active":
            live.rpc("workflow.schedules.pause", {"schedule_id": schedule["schedule_id"]})

    def quiet() -> tuple[Samples, dict[str, Any]] | None:
        scraped = scrape(live)
        return scraped if value(scraped[0], "wf_runs_executing") == 0 else None

    samples, families = wait_for(quiet, what="no run executes")

    # Naming: the wf_ prefix, counters as _total, no per-schedule label.
    ours = {name: f for name, f in families.items() if name.startswith("wf_")}
    assert {
        "wf_occurrences_decided",
        "wf_admission_lateness_seconds",
        "wf_runs_started",
        "wf_runs_finished",
        "wf_runs_executing",
        "wf_scheduler_slots_in_use",
        "wf_scheduler_slots",
        "wf_schedules",
        "wf_scheduler_wakeup_duration_seconds",
        "wf_scheduler_commit_duration_seconds",
        "wf_recovery_findings",
        "wf_store_errors",
    } <= set(ours)
    for family in ours.values():
        for sample in family.samples:
            assert "schedule_id" not in sample.labels
            if family.type == "counter" and not sample.name.endswith("_created"):
                assert sample.name.endswith("_total"), sample.name
    assert ("wf_store_journal_bytes" in ours) == (live.backend == "file")

    # Levels, against the API.
    listed = live.rpc("workflow.schedules.list", {"include_deleted": True})
    states = Counter(s["state"] for s in listed)
    for state in ("active", "paused", "blocked", "deleted", "finished"):
        assert value(samples, "wf_schedules", state=state) == states.get(state, 0), state
    assert value(samples, "wf_scheduler_slots") == 4
    assert value(samples, "wf_scheduler_slots_in_use") == 0
    assert value(samples, "wf_runs_executing") == 0
    assert value(samples, "wf_scheduler_running") == 1
    # The manual run the world cut off: found abandoned by this start's recovery.
    assert value(samples, "wf_recovery_findings_total", kind="abandoned") == 1
    assert value(samples, "wf_store_errors_total", source="api") == 0

    # A one-shot fires: one admission, one start, one completion, timed.
    due = datetime.now(UTC) + timedelta(seconds=1)
    live.rpc(
        "workflow.schedules.create",
        {
            "schedule_id": "metrics-once",
            "deployment_id": "hello.default",
            "trigger": {"kind": "oneshot", "at": due.isoformat()},
            "inputs": {"name": "metrics"},
        },
    )

    def finished() -> bool:
        page = live.rpc(
            "workflow.schedules.occurrences.list", {"schedule_id": "metrics-once", "limit": 10}
        )
        return any(r["status"] == "completed" for r in page["occurrences"])

    wait_for(finished, what="the one-shot's run completes")

    def settled() -> Samples | None:
        # The counters move as things happen; the schedules gauge comes from
        # the console's catalog, renewed in the background when it is costly.
        scraped, _ = scrape(live)
        finished_now = value(scraped, "wf_schedules", state="finished")
        done = value(scraped, "wf_runs_finished_total", outcome="completed")
        moved = done > value(samples, "wf_runs_finished_total", outcome="completed")
        return scraped if moved and finished_now == states["finished"] + 1 else None

    after = wait_for(settled, what="the metrics show the finished one-shot")

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(samples, name, **labels)

    assert moved("wf_occurrences_decided_total", status="admitted") == 1
    assert moved("wf_admission_lateness_seconds_count") == 1
    assert moved("wf_runs_started_total", origin="schedule") == 1
    assert moved("wf_runs_finished_total", outcome="completed") == 1
    assert moved("wf_scheduler_commit_duration_seconds_count") >= 1
    assert moved("wf_scheduler_wakeup_duration_seconds_count") >= 1
    lateness = value(after, "wf_admission_lateness_seconds_sum") - value(
        samples, "wf_admission_lateness_seconds_sum"
    )
    assert 0 <= lateness < 60

    # The same server logs one JSON object a line (--log-format json); the
    # recovery finding (the abandoned run) is an event of its own, with its run.
    lines = [json.loads(line) for line in live.log_lines() if line.startswith("{")]
    assert lines
    for line in lines:
        assert {"ts", "level", "logger", "event", "message"} <= set(line)
    findings = [line for line in lines if line["event"] == "recovery.run_store"]
    assert [line["run_id"] for line in findings] == [live.world.abandoned_run]
    assert findings[0]["level"] == "warning"
    started = [line for line in lines if line["event"] == "scheduler.started"]
    assert len(started) == 1
    assert {named.event for named in EVENTS.values()} >= {"recovery.run_store"}
