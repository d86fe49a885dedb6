"""Child process of test_pg_admission_kill.py: a scheduler on a PostgreSQL
store that SIGKILLs itself at one step of an admission.

Usage: python -m tests.service.pg_admission_child <postgresql URL> <fault point>

It creates an hourly schedule, moves its manual clock to 10:00 and dies, by
SIGKILL from itself, the first time the admission of 10:00 reaches the fault
point (`before:commit`, `after:commit`, `after:run:executing-mark`, ...). The
kernel and the database are all that clean up after it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
from pathlib import Path

from shell import ManualClock
from shell.durable import set_fault_injector

from .conftest import START, TWO_STEP_PLAN, Harness

TEN = START.replace(hour=10, minute=0)


class KillAt:
    """SIGKILL this process the first time `point` is reached once armed."""

    def __init__(self, point: str) -> None:
        self.point = point
        self.armed = False

    def __call__(self, point: str) -> None:
        if self.armed and point == self.point:
            os.kill(os.getpid(), signal.SIGKILL)


async def main(url: str, point: str) -> None:
    harness = Harness(Path(tempfile.mkdtemp()) / "store", ManualClock(START), store_url=url)
    await harness.boot()
    await harness.deploy("report.default", TWO_STEP_PLAN)
    await harness.schedules.create_schedule(
        schedule_id="hourly",
        deployment_id="report.default",
        trigger={"kind": "cron", "expression": "0 * * * *"},
        inputs={"when": {"$bind": "occurrence.instant"}},
    )
    assert harness.service is not None
    await harness.service.settle()
    killer = KillAt(point)
    set_fault_injector(killer)
    killer.armed = True
    await harness.at(TEN)
    raise SystemExit(f"never reached {point}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
