"""The startup checkpoint seen from the scheduler: a start after a clean stop
takes each unchanged schedule from the checkpoint instead of its files, and
ends up with exactly the state a start reading every file would build; any
change made while the scheduler was stopped is seen; a damaged checkpoint is
ignored; a running scheduler rewrites it at quiet moments, so a start after
a crash reads only the schedules changed since."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Collection
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import shell.startup_checkpoint as startup_checkpoint
from adapters.host import run_log
from adapters.host.api import WorkflowApi
from core.state import schedule_ids, schedule_view, slots_in_use
from shell.definition_store import DefinitionStore
from shell.file_backend import _RecoveryReader
from shell.history_store import HistoryStore
from shell.runtime_store import RuntimeStore
from shell.startup_checkpoint import CHECKPOINT_FILE
from shell.store_format import ScheduleFiles
from tests.reliability.world import World

from .conftest import CONSTANT_PLAN, GATE_PLAN, START, Harness


@pytest.fixture
async def harness(file_harness: Harness) -> Harness:
    """These tests are about the files of the file backend."""
    return file_harness


MINUTE = timedelta(minutes=1)


@pytest.fixture(autouse=True)
def no_settle_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    """The files of these tests were all written within the last second, which
    the checkpoint's margin for files other processes write would leave out;
    `test_a_file_changed_within_the_margin_is_read` keeps the margin."""
    monkeypatch.setattr(startup_checkpoint, "_SETTLE_NS", 0)


class FileReads:
    """Which schedules' files a start read whole, not taking them from the
    checkpoint (`schedules`), and whose history it read from its files
    (`histories`: those and the ones whose history changed since)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.schedules: list[str] = []
        self.histories: list[str] = []
        # Those whose history it read whole (every row, not the index's tail).
        self.full_scans: list[str] = []
        read_whole, recover = _RecoveryReader._read_whole, HistoryStore.recover

        def spy(reader: _RecoveryReader, item: Any) -> None:
            self.schedules.append(item.schedule_id)
            read_whole(reader, item)

        def history_spy(store: HistoryStore, schedule_id: str, **options: Any) -> Any:
            self.histories.append(schedule_id)
            if options.get("full_scan"):
                self.full_scans.append(schedule_id)
            return recover(store, schedule_id, **options)

        monkeypatch.setattr(_RecoveryReader, "_read_whole", spy)
        monkeypatch.setattr(HistoryStore, "recover", history_spy)


def views(harness: Harness) -> dict[str, Any]:
    assert harness.service is not None
    state = harness.service.state
    return {
        "schedules": {sid: schedule_view(state, sid) for sid in schedule_ids(state)},
        "slots": slots_in_use(state),
    }


def assert_checkpoint_says_what_the_files_say(
    harness: Harness, *, due_soon: Collection[str] = ()
) -> None:
    """Each entry of the checkpoint holds what reading its schedule's files
    gives, and their identities as they are; but for the schedules
    `due_soon`, which a running checkpoint keeps as captured (due again
    before the next one, `shell.service_housekeeping`): each part of those
    whose files still have the entry's identities holds what they say."""
    root = harness.root
    entries = startup_checkpoint._parse((root / CHECKPOINT_FILE).read_bytes()).entries
    assert entries
    definitions, runtime, history = DefinitionStore(root), RuntimeStore(root), HistoryStore(root)
    for schedule_id, entry in entries.items():
        files = ScheduleFiles.of(root, schedule_id)
        current = startup_checkpoint.current_identities_text(files)
        if schedule_id not in due_soon:
            assert entry.identities_text == current
        unchanged, _ = entry.compare(current)
        assert unchanged is not None
        records, record, state = entry.parts()
        if unchanged.lifecycle:
            assert records == definitions.records_after(schedule_id, 0)
        if unchanged.runtime:
            assert record == runtime.load(schedule_id).record
        if unchanged.history:
            history.recover(schedule_id)
            assert state == history.export_state(schedule_id)


def _written(checkpoint: Path) -> tuple[int, int, int]:
    """The checkpoint file's identity: rewritten whole or appended to, it changes."""
    st = checkpoint.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns


async def populate(harness: Harness) -> None:
    """Schedules in most shapes a store holds: runs completed, a run waiting
    on an interrupt (an open occurrence), paused, edited, deleted, never fired."""
    await harness.boot(max_concurrent_runs=4)
    await harness.deploy("report.default", CONSTANT_PLAN)
    await harness.deploy("gate.default", GATE_PLAN)
    api = harness.schedules
    every_minute = {"kind": "cron", "expression": "* * * * *", "timezone": "UTC"}
    for schedule_id in ("every", "paused", "edited", "deleted"):
        await api.create_schedule(
            schedule_id=schedule_id,
            deployment_id="report.default",
            trigger=every_minute,
            inputs={"when": {"$bind": "occurrence.instant"}},
        )
    await api.create_schedule(
        schedule_id="gated",
        deployment_id="gate.default",
        trigger={"kind": "cron", "expression": "*/5 * * * *", "timezone": "Europe/Berlin"},
        overlap="skip",
    )
    await api.create_schedule(
        schedule_id="later",
        deployment_id="report.default",
        trigger={"kind": "oneshot", "at": "2027-01-01T00:00:00Z"},
        inputs={"when": "new year"},
    )
    for minute in range(1, 7):  # "gated" fires at 09:35 and waits on its interrupt
        await harness.at(START + minute * MINUTE)
    await api.pause_schedule(schedule_id="paused")
    await api.update_schedule(
        schedule_id="edited",
        trigger={"kind": "cron", "expression": "*/2 * * * *", "timezone": "UTC"},
        expected_revision=1,
    )
    await api.delete_schedule(schedule_id="deleted")
    await harness.at(START + 7 * MINUTE)


async def restart(harness: Harness) -> None:
    await harness.shutdown()
    await harness.boot(max_concurrent_runs=4)


async def test_a_start_after_a_clean_stop_reads_no_schedule_file_and_builds_the_same_state(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    await populate(harness)
    reads = FileReads(monkeypatch)
    await harness.shutdown()
    checkpoint = harness.root / CHECKPOINT_FILE
    header = json.loads(checkpoint.read_bytes().split(b"\n", 1)[0])
    assert header["schedules"] == 6
    assert_checkpoint_says_what_the_files_say(harness)

    reads.schedules.clear()
    await harness.boot(max_concurrent_runs=4, checkpoint_interval_s=0)
    assert reads.schedules == []  # every schedule came from the checkpoint
    # A start leaves it for the next one, should it die before the running
    # scheduler writes another (this one writes none while running).
    assert json.loads(checkpoint.read_bytes().split(b"\n", 1)[0]) == header
    # A scheduler started from the checkpoint runs, so its stop must write
    # what changed since (runtime records, histories), not what it started from.
    await harness.schedules.pause_schedule(schedule_id="edited")
    await harness.at(START + 8 * MINUTE)
    await harness.schedules.resume_schedule(schedule_id="edited")
    await harness.at(START + 8 * MINUTE + timedelta(seconds=1))
    await harness.shutdown()
    assert_checkpoint_says_what_the_files_say(harness)

    reads.schedules.clear()
    await harness.boot(max_concurrent_runs=4)
    assert reads.schedules == []
    from_checkpoint = views(harness)
    assert from_checkpoint["schedules"]["gated"].active  # the run waiting on its interrupt

    await harness.shutdown()
    checkpoint.unlink()
    reads.schedules.clear()
    await harness.boot(max_concurrent_runs=4)
    assert sorted(set(reads.schedules)) == [
        "deleted",
        "edited",
        "every",
        "gated",
        "later",
        "paused",
    ]
    assert views(harness) == from_checkpoint

    # And the scheduler goes on from there as it would have.
    await harness.at(START + 9 * MINUTE)
    statuses = await harness.statuses("every")
    assert statuses[-1] == ("09:39", "completed")
    assert [s for _, s in statuses].count("completed") == len(statuses)


async def test_changes_made_while_the_scheduler_was_stopped_are_seen(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    await populate(harness)
    await harness.shutdown()
    # Another server (no scheduler) edits schedules while the scheduler is down.
    await harness.build_server()
    api = harness.schedules
    await api.pause_schedule(schedule_id="every")
    await api.resume_schedule(schedule_id="paused")
    await api.update_schedule(
        schedule_id="later",
        trigger={"kind": "oneshot", "at": "2027-06-01T00:00:00Z"},
        expected_revision=1,
    )
    await api.create_schedule(
        schedule_id="fresh",
        deployment_id="report.default",
        trigger={"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"},
        inputs={"when": "hourly"},
    )
    reads = FileReads(monkeypatch)
    await harness.boot(max_concurrent_runs=4)
    assert sorted(set(reads.schedules)) == ["every", "fresh", "later", "paused"]
    seen = views(harness)["schedules"]
    assert seen["every"].paused
    assert not seen["paused"].paused
    assert seen["later"].revision == 2
    assert seen["later"].next_instant is not None
    assert seen["later"].next_instant.isoformat() == "2027-06-01T00:00:00+00:00"
    assert "fresh" in seen


class ClaimListings:
    """How a start read the runs' claims: the run ids the host answered as
    written since the checkpoint or not finished (`changed`, one list per
    start that asked), and the pages of every run it listed (`pages`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.changed: list[list[str]] = []
        self.pages = 0
        list_page, changed = WorkflowApi.list_run_claims, WorkflowApi.changed_run_claims

        async def page_spy(api: WorkflowApi, *args: Any, **kwargs: Any) -> dict[str, Any]:
            self.pages += 1
            return await list_page(api, *args, **kwargs)

        async def changed_spy(api: WorkflowApi, since: str) -> list[dict[str, Any]] | None:
            found = await changed(api, since)
            if found is not None:
                self.changed.append([claim["run_id"] for claim in found])
            return found

        monkeypatch.setattr(WorkflowApi, "list_run_claims", page_spy)
        monkeypatch.setattr(WorkflowApi, "changed_run_claims", changed_spy)


async def test_a_start_after_a_clean_stop_checks_only_the_claims_of_unfinished_runs(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run written before the checkpoint's position was checked or
    admitted with its row (`core.recovery_checks.claims_since`): a start
    after a clean stop lists no page of runs, only the unfinished ones, and
    after running on, only those again."""
    await populate(harness)
    gated = [row["run_id"] for row in await harness.occurrences("gated")]
    assert len(gated) == 1  # waiting on its interrupt: not finished
    await harness.shutdown()
    listings = ClaimListings(monkeypatch)
    await harness.boot(max_concurrent_runs=4)
    assert (listings.pages, listings.changed) == (0, [gated])
    # More runs, each admitted by this scheduler; its stop notes where the
    # records stand again.
    for minute in range(8, 11):
        await harness.at(START + minute * MINUTE)
    await harness.until_runs_ended("every")
    assert len(await harness.occurrences("every")) > 6
    await harness.shutdown()
    await harness.boot(max_concurrent_runs=4)
    assert (listings.pages, listings.changed) == (0, [gated, gated])
    assert views(harness)["schedules"]["every"].blocked is None


@pytest.mark.expected_errors  # the restored history blocks its schedule, which is logged
async def test_a_history_restored_from_an_older_copy_has_every_run_checked(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A history log shorter than the checkpoint saw (restored from a copy
    made a clean stop earlier) may have gone back behind runs it admitted:
    the start checks every run's claim, finds the runs of the instants the
    copy does not hold, and blocks the schedule instead of deciding them
    again."""
    await harness.boot()
    await harness.deploy("report.default", CONSTANT_PLAN)
    await harness.schedules.create_schedule(
        schedule_id="every",
        deployment_id="report.default",
        trigger={"kind": "cron", "expression": "* * * * *", "timezone": "UTC"},
    )
    await harness.at(START + MINUTE)
    await harness.until_runs_ended("every")
    await harness.shutdown()
    files = ScheduleFiles.of(harness.root, "every")
    older = {path: Path(path).read_bytes() for path in (files.history, files.history_index)}
    await harness.boot()
    for minute in (2, 3):
        await harness.at(START + minute * MINUTE)
    await harness.until_runs_ended("every")
    runs_before = {row["run_id"] for row in await harness.occurrences("every")}
    assert len(runs_before) == 3
    await harness.shutdown()
    for path, data in older.items():
        Path(path).write_bytes(data)  # in place: the same files, shorter

    listings = ClaimListings(monkeypatch)
    await harness.boot()
    assert listings.pages > 0 and listings.changed == []  # every run listed
    blocked = views(harness)["schedules"]["every"].blocked
    assert blocked is not None and "never admitted" in blocked, blocked
    await harness.at(START + 4 * MINUTE)
    runs = await harness.api.list_runs(limit=100)
    assert len(runs["runs"]) == 3  # nothing admitted again, nothing new while blocked


@pytest.mark.expected_errors  # the damage blocks a schedule, which is logged
async def test_history_damaged_while_stopped_blocks_the_schedule_as_without_a_checkpoint(
    harness: Harness,
) -> None:
    await populate(harness)
    await harness.shutdown()
    history = harness.root / "schedules" / "every" / "history.jsonl"
    with history.open("ab") as handle:
        handle.write(b'{"not": "a history row"}\n')
    await harness.boot(max_concurrent_runs=4)
    blocked = views(harness)["schedules"]["every"].blocked
    assert blocked is not None and "history.jsonl" in blocked
    assert views(harness)["schedules"]["edited"].blocked is None


@pytest.mark.expected_errors  # the damage blocks a schedule, which is logged
async def test_a_history_written_in_place_while_stopped_is_read_whole(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler only appends to a history log: one of the same size with
    other times (or another file) was written by someone else, anywhere, and
    its index cannot vouch for its old rows. The start reads it whole and
    finds the damage there, naming the line; a log that only grew is read
    from its index checkpoint on, as before."""
    await populate(harness)
    await harness.shutdown()
    history = harness.root / "schedules" / "every" / "history.jsonl"
    data = history.read_bytes()
    at = data.index(b'"instant":"2026-03-02T09:32:00Z"') + len(b'"instant":"2026-03-02T09:32:0')
    history.write_bytes(data[:at] + b"j" + data[at + 1 :])
    line = data[:at].count(b"\n") + 1
    appended = harness.root / "schedules" / "edited" / "history.jsonl"
    with appended.open("ab") as handle:
        handle.write(b'{"not": "a history row"}\n')
    reads = FileReads(monkeypatch)
    await harness.boot(max_concurrent_runs=4)
    assert reads.full_scans == ["every"]
    schedules = views(harness)["schedules"]
    blocked = schedules["every"].blocked
    assert blocked is not None
    assert f"history.jsonl (line {line}, byte " in blocked, blocked
    assert "not an ISO-8601 instant" in blocked
    assert schedules["edited"].blocked is not None
    assert schedules["paused"].blocked is None


@pytest.mark.expected_errors  # the damage blocks a schedule, which is logged
async def test_a_history_log_replaced_by_another_file_is_read_whole(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An editor that writes a new file and renames it over the log (as
    `sed -i` does) leaves the lifecycle log the same file: the history log
    alone was replaced, and the start reads it whole."""
    await populate(harness)
    await harness.shutdown()
    history = harness.root / "schedules" / "every" / "history.jsonl"
    data = history.read_bytes()
    at = data.index(b'"instant":"2026-03-02T09:32:00Z"') + len(b'"instant":"2026-03-02T09:32:0')
    replacement = history.with_name("history.jsonl.edit")
    replacement.write_bytes(data[:at] + b"j" + data[at + 1 :])
    os.replace(replacement, history)
    reads = FileReads(monkeypatch)
    await harness.boot(max_concurrent_runs=4)
    assert reads.full_scans == ["every"]
    blocked = views(harness)["schedules"]["every"].blocked
    assert blocked is not None and "not an ISO-8601 instant" in blocked, blocked


async def test_a_copied_store_is_not_taken_for_rewritten_logs(
    harness: Harness,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A store copied or restored from a backup has every file new at once:
    the checkpoint does not describe those files, which are read as without
    it, and no log is reported as rewritten."""
    await populate(harness)
    await harness.shutdown()
    copy = tmp_path / "copy"
    shutil.copytree(harness.root, copy)
    reads = FileReads(monkeypatch)
    caplog.set_level(logging.WARNING)
    copied = Harness(copy, harness.clock)
    try:
        await copied.boot(max_concurrent_runs=4)
        assert reads.full_scans == []
        assert not [r for r in caplog.records if "rewritten" in r.getMessage()]
        assert all(v.blocked is None for v in views(copied)["schedules"].values())
    finally:
        await copied.shutdown()


@pytest.mark.parametrize(
    "damaged",
    [
        "runtime.jsonl",
        # Rows missing from the history block the schedule, which is logged.
        pytest.param("history.jsonl", marks=pytest.mark.expected_errors),
        "history.idx",
    ],
)
async def test_a_file_damaged_after_the_checkpoint_gives_what_a_full_read_gives(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, damaged: str
) -> None:
    """Only that file's part is read again (the lifecycle records come from
    the checkpoint); the outcome is the full read's, block or repair."""
    await populate(harness)
    await harness.shutdown()
    path = harness.root / "schedules" / "every" / damaged
    data = path.read_bytes()
    path.write_bytes(data[:-7] + b"garbage")
    reads = FileReads(monkeypatch)
    await harness.boot(max_concurrent_runs=4)
    assert reads.schedules == []
    assert reads.histories == ([] if damaged == "runtime.jsonl" else ["every"])
    from_checkpoint = views(harness)
    await harness.shutdown()
    (harness.root / CHECKPOINT_FILE).unlink()
    path.write_bytes(data[:-7] + b"garbage")
    await harness.boot(max_concurrent_runs=4)
    assert views(harness) == from_checkpoint


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: data[:-40], id="truncated"),
        pytest.param(lambda data: data[:-3] + b"XYZ", id="bytes changed"),
        pytest.param(lambda data: b'{"format": "other"}\n' + data.split(b"\n", 1)[1], id="format"),
        pytest.param(lambda data: b"", id="empty"),
    ],
)
async def test_a_damaged_checkpoint_is_ignored_and_every_schedule_read(
    harness: Harness,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    damage: Any,
) -> None:
    await populate(harness)
    await harness.shutdown()
    checkpoint = harness.root / CHECKPOINT_FILE
    checkpoint.write_bytes(damage(checkpoint.read_bytes()))
    reads = FileReads(monkeypatch)
    caplog.set_level(logging.WARNING, logger="shell.startup_checkpoint")
    await harness.boot(max_concurrent_runs=4)
    assert len(set(reads.schedules)) == 6
    assert any("ignoring the startup checkpoint" in r.getMessage() for r in caplog.records)
    # The damaged one is gone; the running scheduler wrote a sound one.
    assert_checkpoint_says_what_the_files_say(harness)
    assert views(harness)["schedules"]["paused"].paused


async def test_an_entry_that_does_not_decode_is_read_from_the_files(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    await populate(harness)
    await harness.shutdown()
    checkpoint = harness.root / CHECKPOINT_FILE
    entries = startup_checkpoint._parse(checkpoint.read_bytes()).entries
    broken = entries["every"]
    entries["every"] = startup_checkpoint.CachedSchedule(
        broken.identities_text, broken.records_json, broken.runtime_json, "[1, 2]"
    )
    startup_checkpoint.write_startup_checkpoint(harness.root, entries)
    reads = FileReads(monkeypatch)
    await harness.boot(max_concurrent_runs=4)
    assert reads.schedules == ["every"]
    assert views(harness)["schedules"]["every"].blocked is None


async def test_a_crash_before_the_first_running_checkpoint_goes_by_the_last_one_written(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start leaves the checkpoint it went by: one that dies before its
    first quiet moment (a crash loop, a deploy killed early) leaves the next
    start that one, not a store to read whole."""
    monkeypatch.setattr(run_log, "COMPACT_DEAD_RATIO", 1.0)  # as below
    await populate(harness)
    await harness.shutdown()
    checkpoint = harness.root / CHECKPOINT_FILE
    written = checkpoint.read_bytes()
    await harness.boot(max_concurrent_runs=4, checkpoint_interval_s=0)  # writes none
    await harness.at(START + 8 * MINUTE)  # "every" and "edited" fire at 09:38
    fired = {
        row["run_id"]
        for schedule_id in ("every", "edited", "gated")
        for row in await harness.occurrences(schedule_id)
        if row["instant"] == "2026-03-02T09:38:00Z" or row["status"] == "interrupted"
    }
    await World.abandon(harness)  # type: ignore[arg-type]  # dies without stopping
    assert checkpoint.read_bytes() == written

    reads = FileReads(monkeypatch)
    listings = ClaimListings(monkeypatch)
    await harness.boot(max_concurrent_runs=4)
    # Only the histories (and runtime records) of the two that fired are read.
    assert reads.schedules == []
    assert sorted(reads.histories) == ["edited", "every"]
    # Of the runs, those of 09:38 and gated's unfinished one.
    assert listings.pages == 0 and len(fired) == 3
    assert [set(changed) for changed in listings.changed] == [fired]
    from_checkpoint = views(harness)

    # A start reading every file builds the same state.
    await World.abandon(harness)  # type: ignore[arg-type]
    checkpoint.unlink()
    reads = FileReads(monkeypatch)
    listings = ClaimListings(monkeypatch)
    await harness.boot(max_concurrent_runs=4)
    assert len(set(reads.schedules)) == 6  # no checkpoint: every file read
    assert listings.pages > 0  # and every run's claim checked
    assert views(harness) == from_checkpoint


async def test_a_running_scheduler_checkpoints_so_a_start_after_a_crash_reads_what_changed(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No compaction of the run log (only a segment without a live frame is
    # removed): the copies it makes are writes after the checkpoint too,
    # which a start checks (tests/host/test_run_log.py).
    monkeypatch.setattr(run_log, "COMPACT_DEAD_RATIO", 1.0)
    await populate(harness)
    checkpoint = harness.root / CHECKPOINT_FILE
    assert checkpoint.exists()  # written at the first quiet moment after populate's boot
    await harness.shutdown()
    await harness.boot(max_concurrent_runs=4)
    # The start consumed the stop's checkpoint and wrote one of its own; the
    # schedules due again within its interval (09:38, 09:38 and 09:40) were
    # kept as the start took them.
    assert_checkpoint_says_what_the_files_say(harness, due_soon={"every", "edited", "gated"})
    written = _written(checkpoint)
    # Changes after it: "every" and "edited" (every two minutes) fire at
    # 09:38, "paused" is resumed; the other three do not change.
    await harness.schedules.resume_schedule(schedule_id="paused")
    await harness.at(START + 8 * MINUTE)
    assert _written(checkpoint) == written  # not rewritten before the interval
    fired = {
        row["run_id"]
        for schedule_id in ("every", "edited", "paused", "gated")
        for row in await harness.occurrences(schedule_id)
        if row["instant"] == "2026-03-02T09:38:00Z" or row["status"] == "interrupted"
    }
    await World.abandon(harness)  # type: ignore[arg-type]  # dies without stopping

    reads = FileReads(monkeypatch)
    listings = ClaimListings(monkeypatch)
    await harness.boot(max_concurrent_runs=4)
    # "paused"'s lifecycle changed: read whole. The two that fired only
    # changed their runtime records and histories: those are read, their
    # lifecycle records come from the checkpoint.
    assert reads.schedules == ["paused"]
    assert sorted(reads.histories) == ["edited", "every", "paused"]
    # Of the runs, only those written since the checkpoint (the three of
    # 09:38) and the one not finished (gated's) had their claims checked.
    assert listings.pages == 0 and len(fired) == 4
    assert [set(changed) for changed in listings.changed] == [fired]
    from_checkpoint = views(harness)
    assert not from_checkpoint["schedules"]["paused"].paused
    assert from_checkpoint["schedules"]["gated"].active  # the run waiting on its interrupt

    # A start reading every file builds the same state.
    await World.abandon(harness)  # type: ignore[arg-type]
    checkpoint.unlink()
    await harness.boot(max_concurrent_runs=4)
    assert views(harness) == from_checkpoint
    await harness.at(START + 9 * MINUTE)
    statuses = await harness.statuses("every")
    assert statuses[-2:] == [("09:38", "completed"), ("09:39", "completed")]


async def test_the_running_checkpoint_waits_for_its_interval_and_a_quiet_moment(
    harness: Harness,
) -> None:
    await harness.boot(max_concurrent_runs=4, checkpoint_interval_s=600)
    await harness.deploy("report.default", CONSTANT_PLAN)
    checkpoint = harness.root / CHECKPOINT_FILE
    assert not checkpoint.exists()  # no schedule yet: nothing to write
    await harness.schedules.create_schedule(
        schedule_id="quarter",
        deployment_id="report.default",
        trigger={"kind": "cron", "expression": "*/15 * * * *", "timezone": "UTC"},
        inputs={"when": "quarter"},
    )
    await harness.at(START + MINUTE)
    first = _written(checkpoint)  # the first quiet moment after the create
    await harness.at(START + 9 * MINUTE)
    assert _written(checkpoint) == first  # 9 minutes < the interval
    # Past the interval, but the next instant (09:45) is 5 s away: not quiet.
    await harness.at(START.replace(minute=44, second=55))
    assert _written(checkpoint) == first
    await harness.at(START.replace(minute=45, second=1))
    assert _written(checkpoint) != first
    assert "quarter" in startup_checkpoint._parse(checkpoint.read_bytes()).entries


async def test_the_running_checkpoint_examines_only_what_the_scheduler_touched(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other entries are kept as they were, even when their files
    changed behind the scheduler's back: the start after it sees that. So is
    the entry of a touched schedule due again before the next checkpoint:
    its history will change before then."""
    await populate(harness)
    await harness.shutdown()
    await harness.boot(max_concurrent_runs=4, checkpoint_interval_s=120)
    checkpoint = harness.root / CHECKPOINT_FILE
    before = startup_checkpoint._parse(checkpoint.read_bytes()).entries
    lifecycle = harness.root / "schedules" / "later" / "lifecycle.jsonl"
    os.utime(lifecycle)  # same bytes, another identity
    examined: list[str] = []
    real = startup_checkpoint.file_identities

    def spy(files: ScheduleFiles, **options: Any) -> Any:
        examined.append(files.schedule_id)
        return real(files, **options)

    monkeypatch.setattr(startup_checkpoint, "file_identities", spy)
    await harness.schedules.pause_schedule(schedule_id="every")
    # The next checkpoint, at 09:39 (two minutes after the start's): "edited"
    # fires at 09:38 and is due at 09:40, before 09:41, as is "gated";
    # "every" is paused: due never.
    base = checkpoint.read_bytes()
    await harness.at(START + 9 * MINUTE)
    after = startup_checkpoint._parse(checkpoint.read_bytes()).entries
    assert sorted(set(examined)) == ["every"]
    assert after["later"] == before["later"]
    assert after["edited"] == before["edited"]
    assert after["every"] != before["every"]
    # Only the changed entry was written, appended to the file as it was.
    data = checkpoint.read_bytes()
    assert data.startswith(base)
    section_header, section_body = data[len(base) :].split(b"\n", 1)
    assert json.loads(section_header)["lines"] == 1
    assert section_body.startswith(b"every\t")

    await World.abandon(harness)  # type: ignore[arg-type]
    reads = FileReads(monkeypatch)
    await harness.boot(max_concurrent_runs=4)
    # "every"'s entry was refreshed after its pause; "edited"'s lifecycle
    # records still come from its kept entry, its history from its files.
    assert reads.schedules == ["later"]
    assert "edited" in reads.histories and "every" not in reads.histories
    from_checkpoint = views(harness)
    await World.abandon(harness)  # type: ignore[arg-type]
    checkpoint.unlink()
    await harness.boot(max_concurrent_runs=4)
    assert views(harness) == from_checkpoint


async def test_a_clean_stop_rewrites_the_checkpoint_whole(harness: Harness) -> None:
    """Sections appended while the scheduler ran are folded into one base at
    its stop: the next start reads the smallest file."""
    await populate(harness)
    await harness.shutdown()
    await harness.boot(max_concurrent_runs=4, checkpoint_interval_s=120)
    checkpoint = harness.root / CHECKPOINT_FILE
    base = checkpoint.read_bytes()
    await harness.schedules.pause_schedule(schedule_id="every")
    await harness.at(START + 9 * MINUTE)
    appended = checkpoint.read_bytes()
    assert appended.startswith(base) and len(appended) > len(base)
    entries = startup_checkpoint._parse(appended).entries
    await harness.shutdown()
    data = checkpoint.read_bytes()
    header, body = data.split(b"\n", 1)
    assert json.loads(header)["bytes"] == len(body)  # a base, no section after it
    assert startup_checkpoint._parse(data).entries.keys() == entries.keys()
    assert startup_checkpoint._parse(data).entries["every"] == entries["every"]


async def test_an_idle_scheduler_does_not_rewrite_the_checkpoint(harness: Harness) -> None:
    await harness.boot(max_concurrent_runs=4, checkpoint_interval_s=60)
    await harness.deploy("report.default", CONSTANT_PLAN)
    await harness.schedules.create_schedule(
        schedule_id="later",
        deployment_id="report.default",
        trigger={"kind": "oneshot", "at": "2027-01-01T00:00:00Z"},
        inputs={"when": "new year"},
    )
    await harness.at(START + 2 * MINUTE)
    checkpoint = harness.root / CHECKPOINT_FILE
    written = _written(checkpoint)  # the create was a change
    for minute in range(3, 30, 3):
        await harness.at(START + minute * MINUTE)
    assert _written(checkpoint) == written  # 27 minutes with nothing to do
    await harness.schedules.pause_schedule(schedule_id="later")
    await harness.at(START + 31 * MINUTE)
    assert _written(checkpoint) != written
    assert startup_checkpoint._parse(checkpoint.read_bytes()).entries.keys() == {"later"}


@pytest.mark.parametrize("after", ["clean stop", "crash"])
async def test_temp_files_older_than_the_start_are_swept_at_the_first_quiet_moment(
    harness: Harness, after: str
) -> None:
    """Whether the schedule is taken from the checkpoint or read; a temp file
    written moments before the start may be another process's write in
    flight, and is left for the next start."""
    await populate(harness)
    await harness.shutdown()
    await harness.boot(max_concurrent_runs=4)  # writes a running checkpoint
    if after == "crash":
        await World.abandon(harness)  # type: ignore[arg-type]
        (harness.root / CHECKPOINT_FILE).unlink()
    else:
        await harness.shutdown()
    directory = harness.root / "schedules" / "every"
    stale = directory / ".runtime.jsonl.4242.deadbeef.tmp"
    recent = directory / ".definition.json.4343.cafe.tmp"
    # The store root's own atomic writes leave theirs there.
    stale_in_root = harness.root / ".run-log.index.4242.feedface.tmp"
    recent_in_root = harness.root / ".startup.checkpoint.4343.f00d.tmp"
    stale.write_bytes(b"half a write")
    recent.write_bytes(b"in flight")
    stale_in_root.write_bytes(b"half an index")
    recent_in_root.write_bytes(b"in flight")
    an_hour_ago = time.time() - 3600
    os.utime(stale, (an_hour_ago, an_hour_ago))
    os.utime(stale_in_root, (an_hour_ago, an_hour_ago))
    await harness.boot(max_concurrent_runs=4)
    assert not stale.exists()
    assert recent.exists()
    assert not stale_in_root.exists()
    assert recent_in_root.exists()
    assert {p.name for p in directory.iterdir()} == {
        "lifecycle.jsonl",
        "definition.json",
        "runtime.jsonl",
        "history.jsonl",
        "history.idx",
        recent.name,
    }


async def test_a_file_changed_within_the_margin_is_read(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(startup_checkpoint, "_SETTLE_NS", 3600 * 10**9)
    await populate(harness)
    await harness.shutdown()
    # Every lifecycle log was written within the hour: none is trusted.
    entries = startup_checkpoint._parse((harness.root / CHECKPOINT_FILE).read_bytes()).entries
    assert entries == {}
