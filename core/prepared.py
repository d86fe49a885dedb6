"""Whether a round decided ahead of its instant is still that instant's round.

The service may call `decide(state, instant, [])` before `instant` and
commit what it returns at the instant (`shell/service.py`, "Prepared
rounds"). Provided nothing reached decide in between (the shell's part to
know), the round is the one decided at `now` only while every occurrence it
admits is still on time at `now` (rule B: more than the allowance late is
missed), and `now` is barely past the instant: its rows say they were
decided at the instant, which a clock that jumped further would belie.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final

from core.commands import AdmitOccurrence, Command
from core.state import SchedulerState

__all__ = ["PREPARED_STALE_AFTER", "commits_as_decided"]

# How long past its instant a round decided ahead may still be committed.
PREPARED_STALE_AFTER: Final = timedelta(seconds=1)


def commits_as_decided(
    base: SchedulerState, commands: Sequence[Command], instant: datetime, now: datetime
) -> bool:
    """Whether `commands`, decided from `base` for `instant`, may be committed
    at `now` as the round of `instant`."""
    if now - instant > PREPARED_STALE_AFTER:
        return False
    for command in commands:
        if isinstance(command, AdmitOccurrence):
            schedule = base.schedules.get(command.schedule_id)
            if schedule is None or now - command.instant > schedule.allowance:
                return False
    return True
