"""Benchmark: what a backfill request costs before its first run.

An every-minute schedule's file history of R rows (default 530,000: a year
and a few days), written through the real history store (one group commit
per 10,000 rows): every tenth minute skipped, the others admitted and
completed; then an earlier backfill's rows for the skipped minutes of the
first week, at the end of the log. For backfill ranges of 1,000 minutes
ending 1 hour, 1 week and 1 year ago:

- `backfill_decided`: the history read a request makes (the file store reads
  the rows recorded since the range's start, newest first);
- the plan `decide` makes when it applies the request (`calendar_instants`
  and `plan_backfill` over the 1,000 instants).

Prints the median of 5 timings of each. Run:

    uv run --frozen --group bench python bench/backfill.py [--rows R]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from core.calendar import compile_trigger
from core.definitions import CronTrigger
from core.operator_actions import calendar_instants, plan_backfill
from shell.durable import GroupCommit
from shell.history_store import HistoryStore

SNAPSHOT = {"deployment_id": "report.default", "inputs": {}, "max_steps": None, "revision": 1}
MINUTE = timedelta(minutes=1)


def build(root: Path, rows: int, end: datetime) -> HistoryStore:
    (root / "schedules" / "s").mkdir(parents=True)
    history = HistoryStore(root)
    history.recover("s")
    first = end - rows * MINUTE
    for chunk in range(0, rows, 10_000):
        with GroupCommit() as batch:
            for i in range(chunk, min(rows, chunk + 10_000)):
                at = first + i * MINUTE
                if i % 10 == 0:
                    history.append_decision(
                        "s", instant=at, status="skipped-overlap", recorded_at=at, batch=batch
                    )
                else:
                    history.stage_admitted(
                        "s",
                        instant=at,
                        run_id=f"run-{i:09d}",
                        snapshot=SNAPSHOT,
                        recorded_at=at,
                        batch=batch,
                    )
        with GroupCommit() as batch:
            for i in range(chunk, min(rows, chunk + 10_000)):
                if i % 10:
                    history.append_transition(
                        "s",
                        instant=first + i * MINUTE,
                        status="completed",
                        run_id=f"run-{i:09d}",
                        recorded_at=first + i * MINUTE,
                        batch=batch,
                    )
    # An earlier backfill made up for the skipped minutes of the first week:
    # its rows sit at the end of the log, where a request's search must find them.
    with GroupCommit() as batch:
        for i in range(0, min(rows, 7 * 24 * 60), 10):
            history.stage_admitted(
                "s",
                instant=first + i * MINUTE,
                run_id=f"run-b{i:09d}",
                snapshot=SNAPSHOT,
                recorded_at=end,
                batch=batch,
                origin="backfill",
            )
    return history


def median_ms(action: object, repeat: int = 5) -> float:
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()  # type: ignore[operator]
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=530_000)
    args = parser.parse_args()
    end = datetime(2026, 3, 2, tzinfo=UTC)
    trigger = compile_trigger(CronTrigger(kind="cron", expression="* * * * *"))
    with tempfile.TemporaryDirectory(prefix="wf-bench-backfill-") as tmp:
        started = time.perf_counter()
        history = build(Path(tmp), args.rows, end)
        print(f"history: {args.rows} rows written in {time.perf_counter() - started:.1f} s")
        span = 1000 * MINUTE
        for label, ago in (("1 hour", timedelta(hours=1)), ("1 week", timedelta(days=7))) + (
            (("1 year", timedelta(days=365)),) if args.rows >= 527_000 else ()
        ):
            stop = end - ago
            start = stop - span
            if start < end - args.rows * MINUTE:
                continue
            decided = history.backfill_decided("s", start, stop)
            read = median_ms(
                lambda start=start, stop=stop: history.backfill_decided("s", start, stop)
            )
            instants = calendar_instants(trigger, start, stop)

            def plan(
                instants: tuple[datetime, ...] = instants, decided: frozenset[datetime] = decided
            ) -> None:
                plan_backfill(instants, watermark=end, pending=(), admitted=decided)

            planned = plan_backfill(instants, watermark=end, pending=(), admitted=decided)
            plan_ms = median_ms(
                lambda start=start, stop=stop: calendar_instants(trigger, start, stop)
            ) + median_ms(plan)
            print(
                f"range of 1000 minutes ending {label} ago: backfill_decided {read:.1f} ms"
                f" ({len(decided)} decided), plan {plan_ms:.1f} ms"
                f" ({len(planned.instants)} planned)"
            )
        history.close()


if __name__ == "__main__":
    main()
