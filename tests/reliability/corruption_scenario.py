"""A small store with one schedule to damage and one that must go on.

`build_scenario(root)` leaves, after a clean stop at 09:33:

- `victim`: gate plan (interrupts), every minute, skip overlap; created,
  updated, paused and resumed before 09:31 (four lifecycle records); its
  09:31 run is interrupted (it keeps the overlap place) and 09:32 and 09:33
  are `skipped-overlap`;
- `bystander`: constant plan, every minute; 09:31-09:33 completed.

The damage functions below edit one file of that store the way a disk, an
operator or a bug might. Each returns nothing; the test restarts the service
on the damaged root and checks what it makes of it.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from shell import ManualClock
from shell.file_backend import FileOwnership
from shell.store_format import ScheduleFiles
from tests import run_log_files
from tests.service.conftest import CONSTANT_PLAN, GATE_PLAN, Harness

__all__ = [
    "BYSTANDER",
    "RESTART_AT",
    "SCENARIO_START",
    "VICTIM",
    "Damage",
    "abandon",
    "build_scenario",
    "lines_of",
    "minute",
    "run_records",
    "victim_run",
]

SCENARIO_START = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
RESTART_AT = SCENARIO_START + timedelta(minutes=3, seconds=30)
VICTIM = "victim"
BYSTANDER = "bystander"
EVERY_MINUTE = {"kind": "cron", "expression": "* * * * *", "timezone": "UTC"}


def minute(m: int) -> datetime:
    """09:30 + m minutes."""
    return SCENARIO_START + timedelta(minutes=m)


async def build_scenario(root: Path) -> None:
    harness = Harness(root, ManualClock(SCENARIO_START))
    try:
        await harness.boot()
        await harness.deploy("gate.default", GATE_PLAN)
        await harness.deploy("report.default", CONSTANT_PLAN)
        schedules = harness.schedules
        await schedules.create_schedule(
            schedule_id=VICTIM, deployment_id="gate.default", trigger=EVERY_MINUTE
        )
        await schedules.create_schedule(
            schedule_id=BYSTANDER,
            deployment_id="report.default",
            trigger=EVERY_MINUTE,
            inputs={"when": {"$bind": "occurrence.instant"}},
        )
        await harness.at(SCENARIO_START + timedelta(seconds=20))
        await schedules.update_schedule(
            schedule_id=VICTIM, expected_revision=1, lateness_allowance_s=120
        )
        await harness.at(SCENARIO_START + timedelta(seconds=30))
        await schedules.pause_schedule(schedule_id=VICTIM)
        await harness.at(SCENARIO_START + timedelta(seconds=40))
        await schedules.resume_schedule(schedule_id=VICTIM)
        for m in (1, 2, 3):
            await harness.at(minute(m))
        statuses = await harness.statuses(VICTIM)
        assert statuses == [
            ("09:31", "interrupted"),
            ("09:32", "skipped-overlap"),
            ("09:33", "skipped-overlap"),
        ], statuses
    finally:
        await harness.shutdown()


def victim_run(root: Path) -> str:
    """The id of the victim's interrupted 09:31 run."""
    for run_id, record in sorted(run_log_files.records(root).items()):
        origin = record.get("origin") or {}
        if origin.get("schedule_id") == VICTIM:
            return run_id
    raise AssertionError("the scenario has no victim run")


def run_records(root: Path) -> dict[str, Any]:
    """Every run's record (its last intact frame in the run log), by run id."""
    return run_log_files.records(root)


def lines_of(path: str | Path) -> list[bytes]:
    with open(path, "rb") as handle:
        return handle.read().splitlines(keepends=True)


def _append(path: str | Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


def _json_line(record: dict[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode() + b"\n"


Damage = Callable[[Path], None]


@dataclass(frozen=True)
class Files:
    """Paths of the victim's files in a root."""

    schedule: ScheduleFiles

    @classmethod
    def of(cls, root: Path) -> Files:
        return cls(ScheduleFiles.of(root, VICTIM))

    def rel(self, path: str) -> str:
        return self.schedule.relative(path)


# --- definition.json ------------------------------------------------------------------


def definition_truncated(root: Path) -> None:
    path = Files.of(root).schedule.definition
    os.truncate(path, os.path.getsize(path) // 2)


def definition_garbage(root: Path) -> None:
    Path(Files.of(root).schedule.definition).write_bytes(b"\x00\xffnot a snapshot at all")


def definition_duplicated(root: Path) -> None:
    path = Path(Files.of(root).schedule.definition)
    path.write_bytes(path.read_bytes() * 2)


def definition_ahead_of_log(root: Path) -> None:
    path = Path(Files.of(root).schedule.definition)
    snapshot = json.loads(path.read_bytes())
    snapshot["lifecycle_seq"] = 9
    path.write_bytes(_json_line(snapshot))


def definition_wrong_revision(root: Path) -> None:
    path = Path(Files.of(root).schedule.definition)
    snapshot = json.loads(path.read_bytes())
    snapshot["revision"] = 7
    path.write_bytes(_json_line(snapshot))


# --- lifecycle.jsonl -------------------------------------------------------------------


def lifecycle_truncated(root: Path) -> None:
    """Cut inside the last (consumed) record: the runtime record says the
    scheduler consumed seq 4, the log now ends at 3."""
    path = Files.of(root).schedule.lifecycle
    last = lines_of(path)[-1]
    os.truncate(path, os.path.getsize(path) - len(last) // 2)


def lifecycle_torn(root: Path) -> None:
    """A crash mid-append of a change nobody saw acknowledged."""
    _append(Files.of(root).schedule.lifecycle, b'{"at":"2026-03-02T09:33:10Z","kind":"pau')


def lifecycle_garbage(root: Path) -> None:
    _append(Files.of(root).schedule.lifecycle, b"this is not json\n")


def lifecycle_duplicated(root: Path) -> None:
    path = Files.of(root).schedule.lifecycle
    _append(path, lines_of(path)[-1])


def lifecycle_contradictory(root: Path) -> None:
    """A resume of a schedule that is not paused."""
    path = Files.of(root).schedule.lifecycle
    seq = len(lines_of(path)) + 1
    _append(
        path,
        _json_line({"seq": seq, "kind": "resumed", "at": "2026-03-02T09:33:10Z", "revision": 2}),
    )


# --- runtime.jsonl ---------------------------------------------------------------------


def runtime_torn(root: Path) -> None:
    path = Files.of(root).schedule.runtime
    last = lines_of(path)[-1]
    _append(path, last[: len(last) // 2])


def runtime_truncated_to_nothing(root: Path) -> None:
    os.truncate(Files.of(root).schedule.runtime, 0)


def runtime_garbage(root: Path) -> None:
    _append(Files.of(root).schedule.runtime, b"{not json}\n")


def runtime_duplicated(root: Path) -> None:
    path = Files.of(root).schedule.runtime
    _append(path, lines_of(path)[-1])


def runtime_ahead_of_lifecycle(root: Path) -> None:
    path = Files.of(root).schedule.runtime
    record = json.loads(lines_of(path)[-1])
    record["lifecycle_seq"] = 9
    _append(path, _json_line(record))


# --- history.jsonl ---------------------------------------------------------------------


def history_torn(root: Path) -> None:
    _append(Files.of(root).schedule.history, b'{"instant":"2026-03-02T09:34:00Z","seq":3,"st')


def history_truncated(root: Path) -> None:
    """Cut inside the first row: the admitted row of the interrupted run is lost."""
    path = Files.of(root).schedule.history
    os.truncate(path, len(lines_of(path)[0]) // 2)


def history_truncated_at_a_line(root: Path) -> None:
    """Whole rows gone: the log is shorter than the index's durable checkpoint."""
    path = Files.of(root).schedule.history
    os.truncate(path, sum(len(line) for line in lines_of(path)[:-1]))


def history_garbage(root: Path) -> None:
    _append(Files.of(root).schedule.history, b"garbage\n")


def without_startup_checkpoint(damage: Damage) -> Damage:
    """`damage`, with the startup checkpoint gone too, as a crash before the
    running scheduler wrote one leaves the store: a start cannot compare the
    files with what it last knew of them."""

    def damaged(root: Path) -> None:
        damage(root)
        (root / "startup.checkpoint").unlink(missing_ok=True)

    damaged.__doc__ = damage.__doc__
    return damaged


def history_garbage_inside(root: Path) -> None:
    """An old row (the 09:32 decision, line 3) overwritten in place with bytes
    of the same length."""
    path = Path(Files.of(root).schedule.history)
    lines = lines_of(path)
    old = next(i for i, line in enumerate(lines) if b'"instant":"2026-03-02T09:32:00Z"' in line)
    lines[old] = b"#" * (len(lines[old]) - 1) + b"\n"
    path.write_bytes(b"".join(lines))


def history_instant_flipped(root: Path) -> None:
    """One byte of an old row's instant flipped in place: the line is still
    JSON, its instant (09:32, of the skipped-overlap decision seq 1) is not."""
    path = Path(Files.of(root).schedule.history)
    data = path.read_bytes()
    at = data.index(b'"instant":"2026-03-02T09:32:00Z"') + len(b'"instant":"2026-03-02T09:32:0')
    path.write_bytes(data[:at] + b"j" + data[at + 1 :])


def history_first_line_duplicated(root: Path) -> None:
    """The first row written twice (a replayed write, a bad copy): every row
    after it moves, and the 09:31 occurrence is decided twice."""
    path = Path(Files.of(root).schedule.history)
    lines = lines_of(path)
    path.write_bytes(b"".join([lines[0], *lines]))


def history_duplicated(root: Path) -> None:
    path = Files.of(root).schedule.history
    _append(path, lines_of(path)[-1])


def history_contradictory(root: Path) -> None:
    """The interrupted run's occurrence goes back to `admitted`."""
    path = Files.of(root).schedule.history
    first = json.loads(lines_of(path)[0])
    _append(
        path,
        _json_line(
            {
                "seq": 0,
                "update": True,
                "instant": first["instant"],
                "status": "admitted",
                "run_id": first["run_id"],
                "recorded_at": "2026-03-02T09:33:10Z",
            }
        ),
    )


# --- history.idx (derived: repaired, never blocking) ----------------------------------


def index_truncated(root: Path) -> None:
    path = Files.of(root).schedule.history_index
    os.truncate(path, os.path.getsize(path) - 20)


def index_garbage(root: Path) -> None:
    Path(Files.of(root).schedule.history_index).write_bytes(b"garbage" * 20)


def index_duplicated(root: Path) -> None:
    path = Path(Files.of(root).schedule.history_index)
    data = path.read_bytes()
    path.write_bytes(data + data[64:])


def index_contradictory(root: Path) -> None:
    """Two entries swapped: each is well-formed, but points at the wrong row."""
    path = Path(Files.of(root).schedule.history_index)
    data = bytearray(path.read_bytes())
    first, second = data[64:96], data[96:128]
    data[64:96], data[96:128] = second, first
    path.write_bytes(bytes(data))


# --- run records -----------------------------------------------------------------------


def _victim_record(root: Path) -> dict[str, Any]:
    return dict(run_records(root)[victim_run(root)])


def run_truncated(root: Path) -> None:
    run_log_files.truncate_last_frame(root, victim_run(root))


def run_garbage(root: Path) -> None:
    run_log_files.damage_last_frame(root, victim_run(root), at=3)


def _next_run_number(root: Path) -> int:
    return max(int(run_id.split("-")[1]) for run_id in run_records(root)) + 1


def _write_run(root: Path, record: dict[str, Any]) -> None:
    counter = root / "counters" / "run_id"
    number = int(record["run_id"].split("-")[1])
    last = json.loads(counter.read_text(encoding="utf-8"))["last_issued"]
    run_log_files.append_document(root, record["run_id"], record)
    if number > last:
        counter.write_text(json.dumps({"last_issued": number}) + "\n", encoding="utf-8")


def run_duplicated(root: Path) -> None:
    """A second run record claiming the victim's 09:31 occurrence."""
    record = _victim_record(root)
    record["run_id"] = f"run-{_next_run_number(root):06d}"
    _write_run(root, record)


def run_claims_a_skipped_instant(root: Path) -> None:
    """An interrupted run claiming 09:32, which the victim skipped."""
    record = _victim_record(root)
    record["run_id"] = f"run-{_next_run_number(root):06d}"
    record["origin"] = dict(record["origin"], instant="2026-03-02T09:32:00Z")
    _write_run(root, record)


def run_claims_a_future_instant(root: Path) -> None:
    """A completed run claiming 09:40, which the victim never decided at all."""
    record = _victim_record(root)
    number = _next_run_number(root)
    bystander = next(
        r
        for r in run_records(root).values()
        if (r.get("origin") or {}).get("schedule_id") == BYSTANDER
    )
    done = dict(bystander)
    done["run_id"] = f"run-{number:06d}"
    done["origin"] = dict(record["origin"], instant="2026-03-02T09:40:00Z")
    _write_run(root, done)


def run_contradictory(root: Path) -> None:
    """The occurrence's run names another instant in its origin."""
    record = _victim_record(root)
    record["origin"] = dict(record["origin"], instant="2026-03-02T09:29:00Z")
    run_log_files.append_document(root, record["run_id"], record)


def run_missing(root: Path) -> None:
    """The interrupted run's record is gone (history saw it run)."""
    run_log_files.remove_run(root, victim_run(root))


# --- the run-id counter (host data: repaired, never reused) ----------------------------


def _counter(root: Path) -> Path:
    return root / "counters" / "run_id"


def counter_truncated(root: Path) -> None:
    os.truncate(_counter(root), 0)


def counter_garbage(root: Path) -> None:
    _counter(root).write_bytes(b"\x00\x01garbage")


def counter_duplicated(root: Path) -> None:
    path = _counter(root)
    path.write_bytes(path.read_bytes() * 2)


def counter_behind(root: Path) -> None:
    _counter(root).write_text('{"last_issued": 1}\n', encoding="utf-8")


# --- scheduler.lock (ownership: overwritten by the new holder) -------------------------


def _lock(root: Path) -> Path:
    return root / "scheduler.lock"


def lock_truncated(root: Path) -> None:
    _lock(root).write_bytes(b'{"host": "some')


def lock_garbage(root: Path) -> None:
    _lock(root).write_bytes(b"\x00\xff garbage")


def lock_duplicated(root: Path) -> None:
    holder = b'{"host":"elsewhere","pid":1,"since":"2026-03-02T09:00:00Z"}\n'
    _lock(root).write_bytes(holder * 2)


def lock_names_a_dead_holder(root: Path) -> None:
    _lock(root).write_bytes(b'{"host":"elsewhere","pid":999999,"since":"2026-03-02T09:00:00Z"}\n')


async def abandon(harness: Harness) -> None:
    """The process dies: the loop stops without writing anything more, and the
    kernel drops the flock when the descriptor closes."""
    service = harness.service
    if service is not None:
        task = service._task
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        ownership = service._backend.ownership
        if isinstance(ownership, FileOwnership):
            ownership.lock.abandon()
        service._running = False
    if harness.server is not None:
        await harness.server.api.cancel_executing()
    harness.service = None
    harness.server = None
