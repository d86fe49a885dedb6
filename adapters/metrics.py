"""Prometheus metrics of one `wf-rpc-server`, served at `/metrics`.

Two kinds, both in a registry of the server's own (never the process-global
one, so that tests can build many servers in one process):

- **Events counted as they happen**: `SchedulerMetrics` is the scheduler
  service's observer (`shell.observer`): decisions made durable (by status,
  counting calendar instants), admission lateness, wake-up and commit
  durations, recovery findings. It also listens to the host's run status
  reports (runs started and finished) and to the store's health (store
  errors).
- **Levels read at scrape time** (`_LevelCollector`): runs executing, slots
  in use and their bound, schedules by state, the commit journal's size, the
  next instant a schedule is due, whether the scheduler runs.

Naming follows Prometheus' conventions: a `wf_` prefix, base units
(`_seconds`, `_bytes`), `_total` on counters. No metric has a per-schedule
label: 10,000 schedules would be 10,000 series. docs/operations.md lists
every metric with example alert rules.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from core.decide import next_wakeup
from core.errors import StoreUnavailable
from core.events import Event, RecordsContradicted, ScheduleRecovered
from core.occurrences import TERMINAL_RUN_STATUSES
from core.schedule_state import LIFECYCLE_STATES
from shell.observer import Decision

__all__ = ["CONTENT_TYPE", "SchedulerMetrics", "render"]

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

# Lateness of an admission: from its calendar instant to its durable admission.
# On time is well under a second; a misfire allowance is 60 s by default.
_LATENESS_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
# A wake-up and its group commit: milliseconds idle, seconds for a 10,000-herd.
_DURATION_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
)


class SchedulerMetrics:
    """The metrics of one server. Hand it to `build_scheduler_service(...,
    observer=metrics)`, call `watch_host(api)` once, `attach_service(service)`
    when the scheduler runs, and `set_schedule_counts` with a reader of the
    schedules by state (the console's catalog). `render()` gives the text."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.decisions = Counter(
            "wf_occurrences_decided",
            "Calendar instants decided and made durable, by the status of their decision row"
            " (admitted, skipped-overlap, skipped-misfire, coalesced, superseded,"
            " preflight-rejected, ...).",
            ["status"],
            registry=self.registry,
        )
        self.lateness = Histogram(
            "wf_admission_lateness_seconds",
            "From an occurrence's calendar instant to its admission being durable.",
            buckets=_LATENESS_BUCKETS,
            registry=self.registry,
        )
        self.runs_started = Counter(
            "wf_runs_started",
            "Runs that began executing (a first start, not a resume), by origin"
            " (schedule or manual).",
            ["origin"],
            registry=self.registry,
        )
        self.runs_finished = Counter(
            "wf_runs_finished",
            "Runs that reached a terminal status, by outcome (completed, failed, exhausted).",
            ["outcome"],
            registry=self.registry,
        )
        self.wakeup = Histogram(
            "wf_scheduler_wakeup_duration_seconds",
            "One wake-up of the scheduler loop: events, decide, group commit, launches.",
            buckets=_DURATION_BUCKETS,
            registry=self.registry,
        )
        self.commit = Histogram(
            "wf_scheduler_commit_duration_seconds",
            "One group commit of a wake-up's decisions (a journal append and fsync, or a"
            " database transaction).",
            buckets=_DURATION_BUCKETS,
            registry=self.registry,
        )
        self.prepared_rounds = Counter(
            "wf_scheduler_prepared_rounds",
            "Rounds decided and staged ahead of their instant, by outcome: committed at the"
            " instant, or dropped (something happened before it; decided again).",
            ["outcome"],
            registry=self.registry,
        )
        self.findings = Counter(
            "wf_recovery_findings",
            "Findings of startup recovery, by kind (abandoned, ambiguous-resume, unreadable"
            " records, records-contradicted, schedule-blocked, ...).",
            ["kind"],
            registry=self.registry,
        )
        self.store_errors = Counter(
            "wf_store_errors",
            "Store operations that failed (a full or failing disk, a database that does not"
            " answer), by who saw it: api, scheduler or store (the database watcher).",
            ["source"],
            registry=self.registry,
        )
        # Runs seen interrupted in this process: their next `running` is a resume.
        self._interrupted: set[str] = set()
        self._levels = _LevelCollector()
        self.registry.register(self._levels)
        # Told of every decision made durable (the console's catalog renews
        # those schedules first).
        self.decision_listeners: list[Callable[[Sequence[Decision]], None]] = []

    # --- the scheduler service's observer (shell.observer.SchedulerObserver) ----------

    def recovered(self, events: Sequence[Event]) -> None:
        for event in events:
            if isinstance(event, RecordsContradicted):
                self.findings.labels(kind="records-contradicted").inc()
            elif isinstance(event, ScheduleRecovered) and event.blocked_reason is not None:
                self.findings.labels(kind="schedule-blocked").inc()

    def decided(self, decisions: Sequence[Decision], now: datetime) -> None:
        for listener in self.decision_listeners:
            listener(decisions)
        for decision in decisions:
            self.decisions.labels(status=decision.status).inc(decision.count)
            if decision.status == "admitted":
                self.lateness.observe(max(0.0, (now - decision.instant).total_seconds()))

    def committed(self, seconds: float) -> None:
        self.commit.observe(seconds)

    def round_finished(self, seconds: float) -> None:
        self.wakeup.observe(seconds)

    def prepared(self, outcome: Literal["committed", "dropped"]) -> None:
        self.prepared_rounds.labels(outcome=outcome).inc()

    # --- the host and the store ----------------------------------------------------

    def watch_host(self, api: Any, recovery_report: Iterable[Mapping[str, Any]] = ()) -> None:
        """Count the host's recovery findings and, from now on, its run status
        reports and the store's failures (when `api` has a `store_health`)."""
        for finding in recovery_report:
            self.findings.labels(kind=str(finding.get("finding", "unknown"))).inc()
        api.add_run_listener(self._on_run_status)
        health = getattr(api, "store_health", None)
        if health is not None:
            health.add_failure_listener(self._on_store_failure)
        self._levels.api = api

    def _on_run_status(
        self, run_id: str, status: str, origin: Mapping[str, Any] | None, message: str | None
    ) -> None:
        del message
        if status == "interrupted":
            self._interrupted.add(run_id)
        elif status == "running":
            # A resume reports `running` too: only a first attempt is a start.
            # (A run interrupted before a restart and resumed after it counts
            # as a start: this process never saw it interrupted.)
            if run_id in self._interrupted:
                self._interrupted.discard(run_id)
                return
            scheduled = origin is not None and origin.get("kind") == "schedule"
            self.runs_started.labels(origin="schedule" if scheduled else "manual").inc()
        elif status in TERMINAL_RUN_STATUSES:
            self._interrupted.discard(run_id)
            self.runs_finished.labels(outcome=status).inc()

    def _on_store_failure(self, source: str, error: StoreUnavailable) -> None:
        del error
        self.store_errors.labels(source=source).inc()

    # --- levels ---------------------------------------------------------------------

    def attach_service(self, service: Any) -> None:
        """The scheduler service whose state the slot and due gauges read."""
        self._levels.service = service

    def set_journal(self, path: Path | None) -> None:
        """The commit journal whose size is reported (None: no journal, PostgreSQL)."""
        self._levels.journal = path

    def set_schedule_counts(self, counts: Callable[[], Mapping[str, int] | None]) -> None:
        """`counts()` gives the schedules by state (None: not known yet)."""
        self._levels.counts = counts

    def render(self) -> bytes:
        """The registry in Prometheus' text format."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class _LevelCollector(Collector):
    """Gauges read at scrape time from the host, the service and the catalog."""

    def __init__(self) -> None:
        self.api: Any = None
        self.service: Any = None
        self.journal: Path | None = None
        self.counts: Callable[[], Mapping[str, int] | None] = lambda: None

    def describe(self) -> Iterable[Metric]:
        # Described as empty so that registering does not run `collect` early.
        return []

    def collect(self) -> Iterable[Metric]:
        if self.api is not None:
            executing = GaugeMetricFamily(
                "wf_runs_executing",
                "Runs executing in this server now (scheduled and manual).",
            )
            executing.add_metric([], len(self.api.executing_runs()))
            yield executing
        service = self.service
        running = GaugeMetricFamily(
            "wf_scheduler_running", "1 while this server's scheduler loop runs, else 0."
        )
        running.add_metric([], 1 if service is not None and service.running else 0)
        yield running
        if service is not None:
            state = service.state
            used = GaugeMetricFamily(
                "wf_scheduler_slots_in_use",
                "Execution slots held by scheduled runs (admitted or running).",
            )
            used.add_metric([], state.slots_in_use)
            yield used
            bound = GaugeMetricFamily(
                "wf_scheduler_slots", "The execution-slot bound (max_concurrent_runs)."
            )
            bound.add_metric([], state.max_concurrent_runs)
            yield bound
            due = next_wakeup(state)
            if due is not None:
                gauge = GaugeMetricFamily(
                    "wf_scheduler_next_due_timestamp_seconds",
                    "When the scheduler next has something due on its own (Unix time).",
                )
                gauge.add_metric([], due.timestamp())
                yield gauge
        counts = self.counts()
        if counts is not None:
            by_state = GaugeMetricFamily(
                "wf_schedules", "Schedules by state (deleted ones included).", labels=["state"]
            )
            for name in LIFECYCLE_STATES:
                by_state.add_metric([name], counts.get(name, 0))
            yield by_state
        if self.journal is not None:
            try:
                size = os.stat(self.journal).st_size
            except FileNotFoundError:
                size = 0
            except OSError:
                size = None
            if size is not None:
                journal = GaugeMetricFamily(
                    "wf_store_journal_bytes",
                    "Size of the file store's commit journal (checkpointed and emptied as"
                    " it grows).",
                )
                journal.add_metric([], size)
                yield journal


def render(metrics: SchedulerMetrics) -> bytes:
    """`metrics` in Prometheus' text format."""
    return metrics.render()
