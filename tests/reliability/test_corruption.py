"""Corrupt records fail closed: each store file damaged in turn, then a restart.

Every case starts from the same store (see `corruption_scenario`): a `victim`
schedule whose 09:31 run is interrupted (it holds the overlap place) and a
`bystander` that completes a run every minute. One file is damaged, a new
server and service start on the root, and the clock moves on two minutes.

For damage to a schedule's records (definition, lifecycle, runtime,
history, its run records) the guarantees are:

- the server and the service start;
- the victim is blocked, and `get_schedule` shows a diagnostic naming the
  file, the record and the reason;
- the victim admits nothing, and its interrupted run keeps its place
  (nothing is cleared silently);
- the bystander goes on admitting and completing runs.

A torn final line of an append-only log is a crash artifact: it is dropped
with a warning and nothing is blocked. Derived or host-level files (the
history index, the run-id counter, the lock file) are repaired or
overwritten with a warning, never trusted and never blocking; no run id is
issued twice.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from adapters.host.run_log import FileRunLog
from core.errors import InvalidState
from core.state import schedule_view
from shell import ManualClock, startup_checkpoint
from shell.durable import CrashAt, set_fault_injector
from tests import run_log_files
from tests.reliability import corruption_scenario as sc
from tests.reliability.figures import record
from tests.service.conftest import CONSTANT_PLAN, Harness

DIR = "schedules/victim/"


@dataclass(frozen=True)
class Blocked:
    """The victim must be blocked by a diagnostic naming `file` (relative to
    the store root; `{run}` is the victim's run id, `{new}` the id a damage
    added) whose reason contains `reason` and whose record locator contains
    `record`; `warning` must also be logged."""

    file: str
    reason: str
    record: str = ""
    warning: str | None = None
    # Damage behind the history's durable checkpoint is found when it is read.
    found_on_read: bool = False
    # The operator's resume of the interrupted run removes the contradiction:
    # the next start finds the records sound and lifts the block, saying so.
    lifted_by_resume: bool = False
    # The store is started and stopped cleanly in place before the damage, so
    # the damaged start has a startup checkpoint of these very files.
    checkpointed: bool = False


@dataclass(frozen=True)
class Repaired:
    """Nothing is blocked; `warning` (if given) must be logged."""

    warning: str | None


CASES: dict[str, tuple[sc.Damage, Blocked | Repaired]] = {
    # definition.json: a cache of the lifecycle log, but damage still blocks.
    "definition-truncated": (
        sc.definition_truncated,
        Blocked(DIR + "definition.json", "unreadable snapshot"),
    ),
    "definition-garbage": (
        sc.definition_garbage,
        Blocked(DIR + "definition.json", "unreadable snapshot"),
    ),
    "definition-duplicated": (
        sc.definition_duplicated,
        Blocked(DIR + "definition.json", "unreadable snapshot"),
    ),
    "definition-ahead-of-log": (
        sc.definition_ahead_of_log,
        Blocked(DIR + "definition.json", "ahead of the lifecycle log"),
    ),
    "definition-wrong-revision": (
        sc.definition_wrong_revision,
        Blocked(DIR + "lifecycle.jsonl", "definition.json says 7"),
    ),
    # lifecycle.jsonl: the truth of the definition.
    "lifecycle-torn": (sc.lifecycle_torn, Repaired("torn final line")),
    "lifecycle-truncated": (
        sc.lifecycle_truncated,
        Blocked(DIR + "definition.json", "ahead of the lifecycle log", warning="torn final line"),
    ),
    "lifecycle-garbage": (
        sc.lifecycle_garbage,
        Blocked(DIR + "lifecycle.jsonl", "unparseable", record="line 5"),
    ),
    "lifecycle-duplicated": (
        sc.lifecycle_duplicated,
        Blocked(DIR + "lifecycle.jsonl", "where 5 was expected"),
    ),
    "lifecycle-contradictory": (
        sc.lifecycle_contradictory,
        Blocked(DIR + "lifecycle.jsonl", "not paused"),
    ),
    # runtime.jsonl: last line wins.
    "runtime-torn": (sc.runtime_torn, Repaired("torn final line")),
    "runtime-truncated": (
        sc.runtime_truncated_to_nothing,
        Blocked(DIR + "runtime.jsonl", "runtime record is missing", lifted_by_resume=True),
    ),
    "runtime-garbage": (
        sc.runtime_garbage,
        Blocked(DIR + "runtime.jsonl", "unreadable runtime record"),
    ),
    # A repeated last record is the same record: nothing to block.
    "runtime-duplicated": (sc.runtime_duplicated, Repaired(None)),
    "runtime-ahead-of-lifecycle": (
        sc.runtime_ahead_of_lifecycle,
        Blocked(DIR + "runtime.jsonl", "consumed lifecycle seq 9"),
    ),
    # history.jsonl: the truth of the occurrences.
    "history-torn": (sc.history_torn, Repaired("torn final line")),
    "history-truncated": (
        sc.history_truncated,
        Blocked(DIR + "history.jsonl", "shorter than", warning="torn final line"),
    ),
    "history-truncated-at-a-line": (
        sc.history_truncated_at_a_line,
        Blocked(DIR + "history.jsonl", "shorter than"),
    ),
    "history-garbage": (sc.history_garbage, Blocked(DIR + "history.jsonl", "unparseable")),
    # Damage in place behind the index checkpoint: with no startup checkpoint
    # to compare the log with, only a page that reads it finds it ...
    "history-garbage-inside": (
        sc.without_startup_checkpoint(sc.history_garbage_inside),
        Blocked(DIR + "history.jsonl", "unparseable", record="line 3", found_on_read=True),
    ),
    "history-instant-flipped": (
        sc.without_startup_checkpoint(sc.history_instant_flipped),
        Blocked(
            DIR + "history.jsonl",
            "not an ISO-8601 instant",
            record="line 3, byte",
            found_on_read=True,
        ),
    ),
    # ... and after a clean stop the start sees the log was written in place
    # (not only appended to), reads it whole and finds it.
    "history-garbage-inside-after-a-clean-stop": (
        sc.history_garbage_inside,
        Blocked(DIR + "history.jsonl", "unparseable", record="line 3", checkpointed=True),
    ),
    "history-instant-flipped-after-a-clean-stop": (
        sc.history_instant_flipped,
        Blocked(
            DIR + "history.jsonl",
            "not an ISO-8601 instant",
            record="line 3, byte",
            checkpointed=True,
        ),
    ),
    # The first damage found is the one named, not what follows from it
    # (the runs of the rows the replay no longer reaches).
    "history-first-line-duplicated": (
        sc.history_first_line_duplicated,
        Blocked(
            DIR + "history.jsonl",
            "duplicate decision for seq 0",
            record="line 2, byte",
        ),
    ),
    "history-duplicated": (
        sc.history_duplicated,
        Blocked(DIR + "history.jsonl", "duplicate decision for seq 2"),
    ),
    "history-contradictory": (
        sc.history_contradictory,
        Blocked(DIR + "history.jsonl", "went backwards"),
    ),
    # history.idx: derived from the log, rebuilt.
    "index-truncated": (sc.index_truncated, Repaired("rebuilding it from the log")),
    "index-garbage": (sc.index_garbage, Repaired("rebuilding it from the log")),
    # Entries past the header's count are not read, and are overwritten.
    "index-duplicated": (sc.index_duplicated, Repaired(None)),
    "index-contradictory": (sc.index_contradictory, Repaired("rebuilding it from the log")),
    # Run records (host store).
    "run-truncated": (sc.run_truncated, Blocked("run-log ({run})", "unreadable")),
    "run-garbage": (sc.run_garbage, Blocked("run-log ({run})", "unreadable")),
    "run-duplicated": (sc.run_duplicated, Blocked("run-log ({new})", "also claimed by")),
    "run-claims-a-skipped-instant": (
        sc.run_claims_a_skipped_instant,
        Blocked("run-log ({new})", "never admitted"),
    ),
    "run-claims-a-future-instant": (
        sc.run_claims_a_future_instant,
        Blocked("run-log ({new})", "never admitted"),
    ),
    # The same after a clean stop whose checkpoint vouches for every run
    # issued: a start checks only the runs after them, these among them.
    "run-duplicated-after-a-clean-stop": (
        sc.run_duplicated,
        Blocked("run-log ({new})", "also claimed by", checkpointed=True),
    ),
    "run-claims-a-future-instant-after-a-clean-stop": (
        sc.run_claims_a_future_instant,
        Blocked("run-log ({new})", "never admitted", checkpointed=True),
    ),
    "run-contradictory": (sc.run_contradictory, Blocked("run-log ({run})", "origin")),
    "run-missing": (sc.run_missing, Blocked(DIR + "history.jsonl", "no run record")),
    # The run-id counter: repaired from the run files, never reissuing an id.
    "counter-truncated": (sc.counter_truncated, Repaired("counter-repaired")),
    "counter-garbage": (sc.counter_garbage, Repaired("counter-repaired")),
    "counter-duplicated": (sc.counter_duplicated, Repaired("counter-repaired")),
    "counter-behind": (sc.counter_behind, Repaired("counter-repaired")),
    # The lock file: holder info only; the OS lock is the truth.
    "lock-truncated": (sc.lock_truncated, Repaired(None)),
    "lock-garbage": (sc.lock_garbage, Repaired(None)),
    "lock-duplicated": (sc.lock_duplicated, Repaired(None)),
    "lock-names-a-dead-holder": (sc.lock_names_a_dead_holder, Repaired(None)),
}


FILES_DAMAGED = sorted({name.split("-")[0] for name in CASES})
record(
    "corruption",
    f"{len(CASES)} damages of {len(FILES_DAMAGED)} kinds of store file"
    f" ({', '.join(FILES_DAMAGED)}), each followed by a restart (two for the blocking ones)",
)


@pytest.fixture(autouse=True)
def _no_fault_injector() -> Iterator[None]:
    previous = set_fault_injector(None)
    yield
    set_fault_injector(previous)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scenario") / "store"
    asyncio.run(sc.build_scenario(root))
    return root


async def _all_runs(harness: Harness) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = await harness.api.list_runs(cursor=cursor, limit=100)
        runs.extend(page["runs"])
        cursor = page["next_cursor"]
        if cursor is None:
            return runs


def _claims(root: Path, schedule_id: str) -> set[str]:
    """Run ids whose (readable) record files claim `schedule_id`."""
    claimed: set[str] = set()
    for run_id, stored in sc.run_records(root).items():
        try:
            origin = stored.get("origin") or {}
        except AttributeError:  # a frame holding no record at all
            continue
        if origin.get("schedule_id") == schedule_id:
            claimed.add(run_id)
    return claimed


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level]


def _run_numbers(root: Path) -> set[int]:
    return {int(run_id.split("-")[1]) for run_id in sc.run_records(root)}


async def _stop_cleanly_in_place(root: Path) -> None:
    """Start and stop a server on `root`, leaving a startup checkpoint of its
    files as they are (a copied store's files are new files to it). Files
    written just before are taken as settled (see `startup_checkpoint`)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(startup_checkpoint, "_SETTLE_NS", 0)
        harness = Harness(root, ManualClock(sc.RESTART_AT - timedelta(seconds=10)))
        try:
            await harness.boot()
        finally:
            await harness.shutdown()
    checkpoint = startup_checkpoint.take_startup_checkpoint(root)
    assert sc.VICTIM in checkpoint.entries
    # The stop noted where the run records stood: the next start checks only
    # the runs written after (and the unfinished), so damage written after
    # must still be found.
    assert checkpoint.runs_checked_at is not None


def _params() -> list[Any]:
    # Blocking a schedule is logged at ERROR on purpose: an operator must see it.
    return [
        pytest.param(
            name,
            marks=[pytest.mark.expected_errors] if isinstance(CASES[name][1], Blocked) else [],
        )
        for name in sorted(CASES)
    ]


@pytest.mark.parametrize("case", _params())
async def test_damaged_store_file(
    case: str, template: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    damage, expected = CASES[case]
    root = tmp_path / "store"
    shutil.copytree(template, root)
    if isinstance(expected, Blocked) and expected.checkpointed:
        await _stop_cleanly_in_place(root)
    run = sc.victim_run(root)
    before_runs = _run_numbers(root)
    damage(root)
    new = sorted(_run_numbers(root) - before_runs)
    victim_claims = _claims(root, sc.VICTIM)
    caplog.set_level(logging.INFO)

    harness = Harness(root, ManualClock(sc.RESTART_AT))
    try:
        service = await harness.boot()  # the server and the service start
        for m in (4, 5):
            await harness.at(sc.minute(m))
        victim = await harness.schedules.get_schedule(schedule_id=sc.VICTIM)
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]

        # The bystander goes on, whatever happened to the victim.
        by_rows = await harness.statuses(sc.BYSTANDER)
        assert by_rows[-2:] == [("09:34", "completed"), ("09:35", "completed")], by_rows

        # No run id is ever issued twice.
        runs = await _all_runs(harness)
        bystander_new = [
            r["run_id"]
            for r in runs
            if (r["origin"] or {}).get("schedule_id") == sc.BYSTANDER
            and r["origin"]["instant"] >= "2026-03-02T09:34"
        ]
        assert len(bystander_new) == 2
        assert all(int(r.split("-")[1]) > max(before_runs | set(new)) for r in bystander_new)

        if isinstance(expected, Repaired):
            if expected.warning is not None:
                assert any(expected.warning in w for w in warnings), warnings
            assert victim["blocked"] is None, victim["blocked"]
            rows = await harness.statuses(sc.VICTIM)
            # Every instant decided exactly once; the interrupted run still holds overlap.
            assert rows == [
                ("09:31", "interrupted"),
                ("09:32", "skipped-overlap"),
                ("09:33", "skipped-overlap"),
                ("09:34", "skipped-overlap"),
                ("09:35", "skipped-overlap"),
            ], rows
            return

        if expected.found_on_read:
            # Startup reads only the history's tail; a page that reads the
            # damage fails naming it, and blocks the schedule from then on.
            assert victim["blocked"] is None
            with pytest.raises(InvalidState) as damaged:
                await harness.statuses(sc.VICTIM)
            assert damaged.value.data["file"] == DIR + "history.jsonl"
            await harness.service.settle()  # type: ignore[union-attr]
            victim = await harness.schedules.get_schedule(schedule_id=sc.VICTIM)
        blocked = victim["blocked"]
        assert blocked is not None, f"{case}: the victim is not blocked"
        file = expected.file.format(run=run, new=f"run-{new[0]:06d}" if new else "")
        assert blocked["file"] == file, blocked
        assert blocked["record"] and expected.record in blocked["record"], blocked
        assert expected.reason in blocked["reason"], blocked
        if expected.warning is not None:
            assert any(expected.warning in w for w in warnings), warnings

        # The victim admitted nothing after the damage ...
        victim_runs = {
            r["run_id"] for r in runs if (r["origin"] or {}).get("schedule_id") == sc.VICTIM
        }
        assert victim_runs <= victim_claims, victim_runs - victim_claims
        # ... and nothing was cleared silently: its interrupted run keeps its
        # place (where the history still knows it) and stays resumable.
        if sc.VICTIM in service.state.schedules:
            view = schedule_view(service.state, sc.VICTIM)
            assert view.blocked is not None
            history_knows = case not in {"history-truncated"}
            assert (sc.minute(1) in view.active) == history_knows, view.active
        if run in {r["run_id"] for r in runs}:
            assert (await harness.api.inspect_run(run))["status"] == "interrupted"
            # An operator resumes it: its report must not cost the others a round.
            await harness.clock.set(sc.minute(5) + timedelta(seconds=30))
            resumed = await harness.api.resume_run(run, {"go": True})
            assert resumed["status"] == "completed"
            await harness.service.settle()  # type: ignore[union-attr]
        await harness.at(sc.minute(6))
        assert (await harness.statuses(sc.BYSTANDER))[-1] == ("09:36", "completed")

        # The scheduler's own writes never lift the block: after another
        # restart the damage is found again and the victim stays blocked.
        await harness.shutdown()
        harness = Harness(root, ManualClock(sc.minute(6) + timedelta(seconds=30)))
        await harness.boot()
        await harness.at(sc.minute(7))
        again = await harness.schedules.get_schedule(schedule_id=sc.VICTIM)
        if expected.lifted_by_resume:
            assert again["blocked"] is None
            lifted = [m for m in _messages(caplog, logging.WARNING) if "lifting its block" in m]
            assert lifted and file in lifted[0], lifted
            rows = await harness.statuses(sc.VICTIM)
            assert len({instant for instant, _ in rows}) == len(rows), rows
        else:
            assert again["blocked"] is not None
            assert again["blocked"]["file"] == file, again["blocked"]
            runs = await _all_runs(harness)
            assert {
                r["run_id"] for r in runs if (r["origin"] or {}).get("schedule_id") == sc.VICTIM
            } <= victim_claims
        assert (await harness.statuses(sc.BYSTANDER))[-1] == ("09:37", "completed")
    finally:
        await harness.shutdown()
    # The only errors allowed are the announcements of the block itself.
    errors = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("shell") and r.levelno >= logging.ERROR
    ]
    assert all(f"schedule {sc.VICTIM} is blocked" in e for e in errors), errors


async def test_a_reset_counter_never_reissues_the_run_id_of_an_admitted_occurrence(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between an admitted row and its run record leaves a reserved run
    id that only the history names; the counter, damaged as well, is repaired
    from the run records alone and falls behind it. The restart must create
    that occurrence's run under its id and hand new admissions fresh ones.
    (Where the store keeps a commit journal the run records commit with their
    rows, so no such crash point exists: this is a store without one, whose
    runs are created after the round's commit.)"""
    monkeypatch.setattr(FileRunLog, "stages_into", lambda self, batch: False)
    root = tmp_path / "store"
    harness = Harness(root, ManualClock(sc.SCENARIO_START))
    await harness.boot()
    await harness.deploy("report.default", CONSTANT_PLAN)
    await harness.schedules.create_schedule(
        schedule_id=sc.BYSTANDER,
        deployment_id="report.default",
        trigger=sc.EVERY_MINUTE,
        inputs={"when": "x"},
    )
    await harness.at(sc.minute(1))
    crash = CrashAt("before:run:admitted")
    set_fault_injector(crash)
    await harness.clock.set(sc.minute(2))
    for _ in range(200):
        if crash.crashed:
            break
        await asyncio.sleep(0.005)
    assert crash.crashed
    set_fault_injector(None)
    await sc.abandon(harness)
    (root / "counters" / "run_id").write_bytes(b"")

    harness = Harness(root, ManualClock(sc.minute(2) + timedelta(seconds=10)))
    try:
        await harness.boot()
        await harness.at(sc.minute(3))
        rows = await harness.statuses(sc.BYSTANDER)
        assert rows == [("09:31", "completed"), ("09:32", "completed"), ("09:33", "completed")]
        page = await harness.schedules.list_schedule_occurrences(schedule_id=sc.BYSTANDER)
        run_ids = [row["run_id"] for row in page["occurrences"]]
        assert len(set(run_ids)) == 3, run_ids
        for row in page["occurrences"]:
            run = await harness.api.inspect_run(row["run_id"])
            assert run["origin"]["instant"] == row["instant"]
        assert any("run-id counter was behind" in m for m in _messages(caplog, logging.WARNING))
    finally:
        await harness.shutdown()


async def test_a_lost_runtime_record_with_a_closed_history_decides_nothing_twice(
    template: Path, tmp_path: Path
) -> None:
    """Without its runtime record the watermark comes from the history; the
    schedule goes on, unblocked, and no instant is decided again."""
    root = tmp_path / "store"
    shutil.copytree(template, root)
    os.unlink(sc.ScheduleFiles.of(root, sc.BYSTANDER).runtime)
    harness = Harness(root, ManualClock(sc.RESTART_AT))
    try:
        await harness.boot()
        await harness.at(sc.minute(4))
        bystander = await harness.schedules.get_schedule(schedule_id=sc.BYSTANDER)
        assert bystander["blocked"] is None
        assert await harness.statuses(sc.BYSTANDER) == [
            ("09:31", "completed"),
            ("09:32", "completed"),
            ("09:33", "completed"),
            ("09:34", "completed"),
        ]
    finally:
        await harness.shutdown()


@pytest.mark.expected_errors
async def test_a_damaged_index_entry_blocks_when_read_until_the_index_is_rebuilt(
    template: Path, tmp_path: Path
) -> None:
    """An index entry that fails its checksum, below the oldest open
    occurrence (so the start does not read it), is found by the page that
    reads it: the schedule is blocked, stays blocked across a restart (which
    reads the whole history first), and an operator who deletes the derived
    index gets it rebuilt and the block lifted."""
    root = tmp_path / "store"
    shutil.copytree(template, root)
    index = Path(sc.ScheduleFiles.of(root, sc.BYSTANDER).history_index)
    data = bytearray(index.read_bytes())
    data[96] ^= 0xFF  # seq 1 (completed): its checksum fails
    index.write_bytes(bytes(data))
    where = f"schedules/{sc.BYSTANDER}/history.idx"

    harness = Harness(root, ManualClock(sc.RESTART_AT))
    try:
        await harness.boot()
        with pytest.raises(InvalidState) as damaged:
            await harness.statuses(sc.BYSTANDER)
        assert damaged.value.data["file"] == where
        await harness.service.settle()  # type: ignore[union-attr]
        blocked = (await harness.schedules.get_schedule(schedule_id=sc.BYSTANDER))["blocked"]
        assert blocked is not None and blocked["file"] == where
        await harness.at(sc.minute(4))  # blocked: 09:34 is not admitted

        await harness.shutdown()
        harness = Harness(root, ManualClock(sc.minute(4) + timedelta(seconds=10)))
        await harness.boot()
        again = await harness.schedules.get_schedule(schedule_id=sc.BYSTANDER)
        assert again["blocked"] is not None and again["blocked"]["file"] == where

        await harness.shutdown()
        index.unlink()  # derived data: the operator's repair
        harness = Harness(root, ManualClock(sc.minute(4) + timedelta(seconds=20)))
        await harness.boot()
        lifted = await harness.schedules.get_schedule(schedule_id=sc.BYSTANDER)
        assert lifted["blocked"] is None
        await harness.at(sc.minute(5))
        # Like downtime, the blocked span is decided by the misfire policy
        # once the block is lifted: 09:34 is 20 s late, within the allowance.
        assert await harness.statuses(sc.BYSTANDER) == [
            ("09:31", "completed"),
            ("09:32", "completed"),
            ("09:33", "completed"),
            ("09:34", "completed"),
            ("09:35", "completed"),
        ]
    finally:
        await harness.shutdown()


@pytest.mark.expected_errors
async def test_the_diagnostic_names_the_first_damage_not_what_follows_from_it(
    template: Path, tmp_path: Path
) -> None:
    """The bystander's first row written twice: the replay stops at line 2,
    so its runs of 09:32 and 09:33 claim occurrences the history no longer
    reaches, and the 09:31 run's completion cannot be recorded. The block
    shown, in memory and on disk, names the duplicate, with its line."""
    root = tmp_path / "store"
    shutil.copytree(template, root)
    path = Path(sc.ScheduleFiles.of(root, sc.BYSTANDER).history)
    lines = sc.lines_of(path)
    path.write_bytes(b"".join([lines[0], *lines]))

    harness = Harness(root, ManualClock(sc.RESTART_AT))
    try:
        await harness.boot()
        await harness.at(sc.minute(4))
        blocked = (await harness.schedules.get_schedule(schedule_id=sc.BYSTANDER))["blocked"]
        assert blocked is not None
        assert (blocked["file"], blocked["reason"]) == (
            f"schedules/{sc.BYSTANDER}/history.jsonl",
            "duplicate decision for seq 0",
        ), blocked
        assert blocked["record"].startswith("line 2, byte "), blocked
        view = schedule_view(harness.service.state, sc.BYSTANDER)  # type: ignore[union-attr]
        assert view.blocked is not None and "duplicate decision for seq 0" in view.blocked
    finally:
        await harness.shutdown()


def _finished_run(root: Path) -> str:
    """The id of the bystander's completed 09:31 run."""
    for run_id, stored in sc.run_records(root).items():
        origin = stored.get("origin") or {}
        if origin.get("schedule_id") == sc.BYSTANDER and origin.get("instant", "").startswith(
            "2026-03-02T09:31"
        ):
            return run_id
    raise AssertionError("the scenario has no completed 09:31 bystander run")


def _finished_run_deleted(root: Path) -> None:
    run_log_files.remove_run(root, _finished_run(root))


def _finished_run_truncated(root: Path) -> None:
    run_log_files.damage_last_frame(root, _finished_run(root), at=7)


def _finished_run_moved(root: Path) -> None:
    """Rewritten, still a sound record, to claim 09:29, which was never decided."""
    run_id = _finished_run(root)
    record = sc.run_records(root)[run_id]
    record["origin"]["instant"] = "2026-03-02T09:29:00Z"
    run_log_files.append_document(root, run_id, record)


def _finished_row_rewritten(root: Path) -> None:
    """The 09:31 row `completed` rewritten in place as `exhausted` (same length)."""
    path = Path(sc.ScheduleFiles.of(root, sc.BYSTANDER).history)
    data = path.read_bytes()
    at = data.index(b'"status":"completed"')
    path.write_bytes(data[:at] + b'"status":"exhausted"' + data[at + 20 :])


def _finished_row_rewritten_and_reindexed(root: Path) -> None:
    _finished_row_rewritten(root)
    os.unlink(sc.ScheduleFiles.of(root, sc.BYSTANDER).history_index)


# damage, (file, record, reason) of the block, and whether `inspect_run` of
# the run (rather than a page) finds it by itself.
FINISHED_RUN_CASES: dict[str, tuple[sc.Damage, tuple[str, str, str], bool]] = {
    "record-deleted": (
        _finished_run_deleted,
        ("schedules/bystander/history.jsonl", "line 2, byte", "has no run record"),
        False,  # there is no record for inspect_run to read
    ),
    "record-truncated": (
        _finished_run_truncated,
        ("run-log ({run})", "whole file", "unreadable record"),
        False,  # inspect_run refuses it, but cannot tell whose run it was
    ),
    "record-moved": (_finished_run_moved, ("run-log ({run})", "origin", "09:29"), True),
    "history-row-rewritten": (
        _finished_row_rewritten,
        # Found by the index entry written with the row, or (the index rebuilt
        # by a start that read the rewritten log whole) by the run record.
        ("schedules/bystander/history.jsonl", "line 2, byte", "exhausted"),
        True,
    ),
    # The same, its index rebuilt from the rewritten log: only the run record
    # can tell.
    "history-row-rewritten-and-reindexed": (
        _finished_row_rewritten_and_reindexed,
        ("schedules/bystander/history.jsonl", "line 2, byte", "its record run-log ("),
        True,
    ),
}


def _finished_run_params() -> list[Any]:
    return [
        pytest.param(case, found_by, id=f"{case}-{found_by}")
        for case, (_, _, inspect_finds) in sorted(FINISHED_RUN_CASES.items())
        for found_by in ("page", "inspect_run")
        if found_by == "page" or inspect_finds
    ]


@pytest.mark.expected_errors
@pytest.mark.parametrize(("case", "found_by"), _finished_run_params())
async def test_a_finished_run_and_its_history_row_that_disagree_block_the_schedule(
    case: str, found_by: str, template: Path, tmp_path: Path
) -> None:
    """A start checks open occurrences against their runs, not every finished
    one (that is the whole history); a page that serves a finished row checks
    its run record, and `inspect_run` of a finished run checks its row. The
    disagreement is answered as an error naming it, never served; the
    schedule is blocked from then on, across a restart too."""
    damage, (file, record, reason), _ = FINISHED_RUN_CASES[case]
    root = tmp_path / "store"
    shutil.copytree(template, root)
    run = _finished_run(root)
    damage(root)
    file = file.format(run=run)

    harness = Harness(root, ManualClock(sc.RESTART_AT))
    try:
        await harness.boot()
        bystander = await harness.schedules.get_schedule(schedule_id=sc.BYSTANDER)
        assert bystander["blocked"] is None
        with pytest.raises(InvalidState) as refused:
            if found_by == "page":
                await harness.statuses(sc.BYSTANDER)
            else:
                await harness.api.inspect_run(run)
        assert refused.value.data["file"] == file, refused.value.data
        assert record in refused.value.data["record"], refused.value.data
        assert reason in refused.value.data["reason"], refused.value.data
        await harness.service.settle()  # type: ignore[union-attr]
        blocked = (await harness.schedules.get_schedule(schedule_id=sc.BYSTANDER))["blocked"]
        assert blocked is not None
        assert (blocked["file"], blocked["record"], blocked["reason"]) == (
            refused.value.data["file"],
            refused.value.data["record"],
            refused.value.data["reason"],
        )
        with pytest.raises(InvalidState):
            await harness.statuses(sc.BYSTANDER)  # a page never serves it either
        await harness.at(sc.minute(4))
        # Blocked: 09:34 is not admitted; the victim is not concerned.
        assert not any(
            (r["origin"] or {}).get("schedule_id") == sc.BYSTANDER
            and r["origin"]["instant"] >= "2026-03-02T09:34"
            for r in await _all_runs(harness)
        )
        assert (await harness.schedules.get_schedule(schedule_id=sc.VICTIM))["blocked"] is None

        # A restart reads the whole history before it lifts such a block.
        await harness.shutdown()
        harness = Harness(root, ManualClock(sc.minute(4) + timedelta(seconds=10)))
        await harness.boot()
        again = (await harness.schedules.get_schedule(schedule_id=sc.BYSTANDER))["blocked"]
        assert again is not None and again["file"] == file, again
    finally:
        await harness.shutdown()
