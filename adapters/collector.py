"""The garbage collector policy of a long-running server process.

CPython's cyclic collector runs a full (generation 2) pass over every tracked
object each time enough objects survived younger passes. A scheduler holding
ten thousand schedules keeps a few hundred thousand long-lived objects, and a
wake-up that admits a herd allocates fast enough to trigger several full
passes of 0.2-0.7 s each in the middle of its round (measured with
`bench/herd.py`: 1.4-2.1 s of a 10,000-schedule herd went to the collector).
Two standard remedies, applied by the server's entry point and by the
benchmarks so that they measure what runs:

- a larger first-generation threshold, so that young collections (and the
  full ones they count towards) happen far less often during a burst;
- `gc.freeze()` once startup is over: everything loaded until then (modules,
  recovered schedules and run records) moves to the permanent generation,
  which full passes skip. Frozen objects are still freed by reference
  counting; only reference cycles among them are never reclaimed, and
  startup does not create garbage cycles worth reclaiming.

Nothing here changes what the server does, only when the collector runs.
The scheduler service also pauses the collector from each round's decide
until its loop is quiet again (`shell.service`), so a herd's rows are
durable before the collection of what deciding them allocated, and the pass
runs once the round's runs have reported, not while they execute.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["YOUNG_THRESHOLD", "freeze_startup_objects", "tune_collector"]

# Objects allocated (net) before a young collection; CPython's default is 700.
# At 50,000 a young pass still takes well under a millisecond. (200,000 was
# tried: no CPU per occurrence measurably saved in the spread bench, and a
# peak RSS 14-16 MiB higher at 1,000 schedules.)
YOUNG_THRESHOLD: Final = 50_000


def tune_collector() -> None:
    """Collect less often: call once, at process start."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


def freeze_startup_objects() -> None:
    """Exempt everything alive now from future full passes: call once startup
    recovery is done and before the first wake-up."""
    gc.collect()
    gc.freeze()
