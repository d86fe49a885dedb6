"""The run log on files (adapters/host/run_log.py): frames, damage found and
failed closed, torn tails, compaction, and run records staged into the
scheduler's journaled commit."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from adapters.host import run_log
from adapters.host.persistence import complete
from adapters.host.records import RunRecord, Snapshot
from adapters.host.run_log import LOG_DIR, FileRunLog, encode_frame, scan_segment
from adapters.host.runs import RunStore
from core.errors import InvalidState
from shell.durable import CrashAt, GroupCommit, SimulatedCrash, set_fault_injector
from shell.journal import CommitJournal, replay_journal
from tests import run_log_files

from .conftest import GREETING_PLAN, Builder, deploy

NOW = "2026-03-02T09:00:00Z"


def _record(number: int, status: str = "admitted", **changes: Any) -> RunRecord:
    return RunRecord(
        run_id=f"run-{number:06d}",
        status=status,  # type: ignore[arg-type]
        origin=None,
        snapshot=Snapshot(
            deployment_id="d.default", artifact_id="a", artifact_version=1, inputs={}
        ),
        created_at=NOW,
        updated_at=changes.pop("updated_at", NOW),
        attempt=0,
        **changes,
    )


def _store(root: Path) -> tuple[RunStore, list[dict[str, Any]]]:
    store = RunStore(FileRunLog(root))
    findings = complete(store.load(lambda: NOW))
    return store, findings


async def test_the_last_frame_of_a_run_is_its_record(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    await store.put_many([_record(1), _record(2)])
    await store.put(_record(1, updated_at="2026-03-02T09:05:00Z"))
    again, findings = _store(tmp_path)
    assert findings == []
    assert again.get("run-000001").updated_at == "2026-03-02T09:05:00Z"
    assert again.get("run-000002").updated_at == NOW
    # One segment, three frames: nothing was created per run.
    [segment] = run_log_files.segment_paths(tmp_path)
    assert len(scan_segment(segment.read_bytes()).frames) == 3


async def test_each_process_appends_to_a_segment_of_its_own(tmp_path: Path) -> None:
    first, _ = _store(tmp_path)
    await first.put(_record(1))
    second, _ = _store(tmp_path)
    await second.put(_record(2))
    assert [p.name for p in run_log_files.segment_paths(tmp_path)] == [
        "00000001.seg",
        "00000002.seg",
    ]


async def test_a_damaged_last_frame_fails_the_run_closed(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    await store.put_many([_record(1), _record(2)])
    segment = run_log_files.damage_last_frame(tmp_path, "run-000001", at=5)
    again, findings = _store(tmp_path)
    assert [(f["run_id"], f["finding"]) for f in findings] == [("run-000001", "unreadable")]
    assert f"{segment}, byte 0) does not match: damaged in place" in findings[0]["reason"]
    with pytest.raises(InvalidState, match="damaged in place"):
        again.get("run-000001")
    assert again.get("run-000002").status == "admitted"


async def test_a_damaged_frame_superseded_by_a_later_one_is_harmless(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    await store.put(_record(1))
    run_log_files.damage_last_frame(tmp_path, "run-000001")
    await store.put(_record(1, updated_at="2026-03-02T09:05:00Z"))
    again, findings = _store(tmp_path)
    assert findings == []
    assert again.get("run-000001").updated_at == "2026-03-02T09:05:00Z"


async def test_a_damaged_header_is_skipped_and_its_run_named_by_its_trailer(
    tmp_path: Path,
) -> None:
    store, _ = _store(tmp_path)
    await store.put_many([_record(1), _record(2), _record(3)])
    path, offset, _ = run_log_files.last_frame(tmp_path, "run-000002") or (None, 0, 0)
    assert path is not None
    data = bytearray(path.read_bytes())
    data[offset : offset + 4] = b"XXXX"  # the magic: no frame starts here any more
    path.write_bytes(bytes(data))
    again, findings = _store(tmp_path)
    assert [(f["run_id"], f["finding"]) for f in findings] == [("run-000002", "unreadable")]
    with pytest.raises(InvalidState):
        again.get("run-000002")
    assert {again.get("run-000001").status, again.get("run-000003").status} == {"admitted"}


async def test_bytes_that_name_no_run_are_reported(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    await store.put_many([_record(1), _record(2)])
    place = run_log_files.last_frame(tmp_path, "run-000001")
    assert place is not None
    path, _, first_size = place
    data = bytearray(path.read_bytes())
    # Wipe the first frame's trailer and header: nothing says whose it was.
    data[:8] = b"\0" * 8
    data[first_size - 12 : first_size] = b"\0" * 12
    path.write_bytes(bytes(data))
    again, findings = _store(tmp_path)
    assert [(f["run_id"], f["finding"]) for f in findings] == [(None, "unreadable")]
    assert "hold no intact run record frame" in findings[0]["reason"]
    assert again.get("run-000002").status == "admitted"


async def test_a_torn_tail_is_a_finding_not_damage(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    await store.put(_record(1))
    [path] = run_log_files.segment_paths(tmp_path)
    frame = encode_frame(2, json.dumps(_record(2).to_json()).encode())
    with path.open("ab") as handle:
        handle.write(frame[: len(frame) // 2])  # a write cut short by the crash
    again, findings = _store(tmp_path)
    assert [(f["run_id"], f["finding"]) for f in findings] == [(None, "torn-tail")]
    assert again.get("run-000001").status == "admitted"
    assert again.highest_number() == 1
    await again.put(_record(2))  # its own segment: nothing follows the torn bytes
    third, findings = _store(tmp_path)
    assert third.get("run-000002").status == "admitted"


async def test_mostly_superseded_segments_are_compacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_log, "ROLL_AT_BYTES", 4096)
    store, _ = _store(tmp_path)
    for round_ in range(12):
        await store.put_many(
            [_record(n, updated_at=f"2026-03-02T09:{round_:02d}:00Z") for n in range(1, 5)]
        )
    segments = run_log_files.segment_paths(tmp_path)
    total = sum(p.stat().st_size for p in segments)
    live = 4 * len(encode_frame(1, json.dumps(_record(1).to_json()).encode()))
    # Without compaction the log would hold all 48 frames.
    assert total < 48 * live / 4 / 2
    again, findings = _store(tmp_path)
    assert findings == []
    assert {again.get(f"run-{n:06d}").updated_at for n in range(1, 5)} == {"2026-03-02T09:11:00Z"}


async def test_a_crash_in_compaction_loses_no_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_log, "ROLL_AT_BYTES", 2048)
    for point in ("after:run-log:compact-copy", "before:run-log:compact-remove"):
        root = tmp_path / point.replace(":", "_")
        store, _ = _store(root)
        await store.put(_record(3))  # live in the first segment: compaction copies it
        previous = set_fault_injector(CrashAt(point))
        try:
            with pytest.raises(SimulatedCrash):
                for round_ in range(30):
                    written = f"2026-03-02T09:{round_:02d}:00Z"
                    await store.put_many([_record(n, updated_at=written) for n in (1, 2)])
        finally:
            set_fault_injector(previous)
        again, findings = _store(root)
        assert findings == []
        # Compaction follows the flush of the write it interrupted: that write stays.
        assert [again.get(f"run-{n:06d}").updated_at for n in (1, 2, 3)] == [written] * 2 + [NOW]


def _running(number: int) -> RunRecord:
    return RunRecord.from_json(
        {
            **_record(number).to_json(),
            "status": "running",
            "attempt": 1,
            "executing": {"attempt": 1, "kind": "start", "since": NOW},
            "progress": {"node": "n", "state": {}, "steps": 0},
        }
    )


async def test_a_start_that_fails_an_abandoned_run_keeps_every_other_run_on_disk(
    tmp_path: Path,
) -> None:
    """Failing the abandoned run is a write, and a write compacts segments
    that look superseded: the runs the start had not taken yet must already
    count as live in theirs, or their frames go with it."""
    store, _ = _store(tmp_path)
    await store.put_many([_record(1), _record(2), _record(3)])
    # Run 1 dies executing; runs 2 and 3 finish, their frames after its own.
    await store.put(_running(1))
    await store.put_many([_failed(_record(2)), _failed(_record(3))])
    _, findings = _store(tmp_path)
    assert [(f["run_id"], f["finding"]) for f in findings] == [("run-000001", "abandoned")]
    again, findings = _store(tmp_path)
    assert findings == []
    assert [again.get(f"run-{n:06d}").status for n in (1, 2, 3)] == ["failed"] * 3


async def test_a_damaged_segment_is_never_compacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_log, "ROLL_AT_BYTES", 2048)
    store, _ = _store(tmp_path)
    await store.put_many([_record(n) for n in range(1, 4)])
    run_log_files.damage_last_frame(tmp_path, "run-000003")
    again, _ = _store(tmp_path)
    for round_ in range(20):
        await again.put_many(
            [_record(n, updated_at=f"2026-03-02T09:{round_:02d}:00Z") for n in (1, 2)]
        )
    assert (tmp_path / LOG_DIR / "00000001.seg").exists()  # the evidence stays


def _journaled(root: Path) -> tuple[CommitJournal, GroupCommit]:
    journal = CommitJournal(root)
    journal.open()
    return journal, GroupCommit(journal=journal)


def _commit_crashing_at(batch: GroupCommit, point: str) -> None:
    previous = set_fault_injector(CrashAt(point))
    try:
        with pytest.raises(SimulatedCrash):
            batch.commit()
    finally:
        set_fault_injector(previous)


async def test_admitted_records_commit_with_the_scheduler_batch(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    journal, batch = _journaled(tmp_path)
    assert store.stages_into(batch)
    store.stage_created(batch, [_record(1), _record(2)])
    batch.append_bytes(tmp_path / "rows.log", b"admitted rows\n")
    assert store.cached(1) is None
    batch.commit()
    assert store.get("run-000001").status == "admitted"
    await store.put(_record(1, updated_at="2026-03-02T09:05:00Z"))  # after the staged frames
    again, findings = _store(tmp_path)
    assert findings == []
    assert again.get("run-000001").updated_at == "2026-03-02T09:05:00Z"
    assert again.get("run-000002").status == "admitted"
    journal.close()


async def test_a_crash_after_the_journal_flush_is_replayed_into_the_log(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    await store.put(_record(1))  # opens this process's segment
    _journal, batch = _journaled(tmp_path)
    store.stage_created(batch, [_record(2), _record(3)])
    _commit_crashing_at(batch, "before:apply:00000001.seg")
    assert run_log_files.read_record(tmp_path, "run-000002") is None  # not applied yet
    replay_journal(tmp_path)
    again, findings = _store(tmp_path)
    assert findings == []
    assert [again.get(f"run-{n:06d}").status for n in (1, 2, 3)] == ["admitted"] * 3


async def test_a_crash_before_the_journal_flush_leaves_no_record(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    _journal, batch = _journaled(tmp_path)
    store.stage_created(batch, [_record(1)])
    _commit_crashing_at(batch, "before:commit")
    replay_journal(tmp_path)
    again, findings = _store(tmp_path)
    assert findings == [] and again.highest_number() == 0


def test_a_batch_without_a_journal_takes_no_run_records(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    assert not store.stages_into(GroupCommit())
    other = tmp_path / "other"
    other.mkdir()
    assert not store.stages_into(GroupCommit(journal=CommitJournal(other)))


async def test_a_server_reads_an_older_store_with_a_file_per_run(build: Builder) -> None:
    server = build()
    await deploy(server, GREETING_PLAN, "hello.default")
    run_id = (await server.api.run_deployment("hello.default", {"name": "x"}))["run_id"]
    root = server.store_root
    record = run_log_files.read_record(root, run_id)
    for path in run_log_files.segment_paths(root):
        path.unlink()
    (root / "runs").mkdir()
    (root / "runs" / f"{run_id}.json").write_text(json.dumps(record))
    again = build()
    assert again.recovery_report == []
    assert (await again.api.inspect_run(run_id))["status"] == "completed"
    # A later change is appended to the log, which now wins over the file.
    second = (await again.api.run_deployment("hello.default", {"name": "y"}))["run_id"]
    third = build()
    assert third.recovery_report == []
    assert [(await third.api.inspect_run(r))["status"] for r in (run_id, second)] == [
        "completed"
    ] * 2


def _failed(admitted: RunRecord) -> RunRecord:
    return RunRecord.from_json(
        {
            **admitted.to_json(),
            "status": "failed",
            "attempt": 1,
            "progress": {"node": "n", "state": {}, "steps": 0},
            "checkpoint": {
                "attempt": 1,
                "status": "failed",
                "node": "n",
                "state": {},
                "steps": 0,
                "at": NOW,
            },
            "error": {"kind": "boom", "message": "it broke"},
        }
    )


async def test_finished_runs_are_read_back_whole_from_the_log_not_kept_in_memory(
    tmp_path: Path,
) -> None:
    store, _ = _store(tmp_path)
    admitted = _record(1)
    await store.put_many([admitted, _record(2)])
    failed = _failed(admitted)
    await store.put(failed)
    # Each read is a new, equal record, read from the log.
    assert store.get("run-000001") == failed and store.get("run-000001") is not failed
    records, _ = store.page("failed", None, 10)
    assert [r.run_id for r in records] == ["run-000001"]
    assert store.page("admitted", None, 10)[0] == [_record(2)]
    again, findings = _store(tmp_path)
    assert findings == [] and again.get("run-000001") == failed
    # The proof that no copy is kept: its frame damaged in place after the
    # start fails the next read closed, as a start would have found it.
    run_log_files.damage_last_frame(tmp_path, "run-000001", at=40)
    with pytest.raises(InvalidState, match="checksum that does not match: damaged in place"):
        again.get("run-000001")
    assert again.page(None, None, 10)[0] == [_record(2)]
    assert [b["run_id"] for b in again.broken()] == ["run-000001"]
    _, findings = _store(tmp_path)
    assert [(f["run_id"], f["finding"]) for f in findings] == [("run-000001", "unreadable")]


async def test_a_start_takes_finished_runs_unparsed_and_a_read_checks_them(
    tmp_path: Path,
) -> None:
    """A finished run's record is parsed and checked when it is read, not at
    every start: one whose intact frame holds a record that breaks the
    record's rules (never written so by the store) is found at its read."""
    store, _ = _store(tmp_path)
    await store.put_many([_record(1), _record(2)])
    # Completed with attempt 0: a record of a run that never executed.
    bad = {**_record(1).to_json(), "status": "completed"}
    run_log_files.append_payload(
        tmp_path, "run-000001", json.dumps(bad, separators=(",", ":")).encode()
    )
    again, findings = _store(tmp_path)
    assert findings == []
    assert [r.run_id for r in again.page("completed", None, 10)[0]] == []
    with pytest.raises(InvalidState, match="status completed with attempt 0"):
        again.get("run-000001")
    assert again.get("run-000002").status == "admitted"
    # Written another way (not as the store writes a record), a finished
    # run is parsed at the start, and its finding reported there.
    run_log_files.append_payload(
        tmp_path, "run-000002", json.dumps({**_record(2).to_json(), "status": "completed"}).encode()
    )
    _, findings = _store(tmp_path)
    assert [(f["run_id"], f["finding"]) for f in findings] == [("run-000002", "contradictory")]


async def test_a_run_lock_excludes_while_held_and_is_dropped_after_its_last_user(
    tmp_path: Path,
) -> None:
    store, _ = _store(tmp_path)
    inside: list[str] = []
    order: list[str] = []

    async def hold(name: str) -> None:
        async with store.lock("run-000001"):
            inside.append(name)
            assert len(inside) == 1, inside  # never two holders at once
            await asyncio.sleep(0)
            order.append(name)
            inside.remove(name)

    await asyncio.gather(hold("a"), hold("b"), hold("c"))
    assert order == ["a", "b", "c"]
    async with store.locked(["run-000002", "run-000001"]):
        assert store.lock("run-000001").locked()
    # Nothing holds or awaits them: a million finished runs keep no lock.
    assert store._locks == {}


async def test_a_run_lock_passes_over_a_waiter_cancelled_while_it_waits(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    got: list[str] = []
    release = asyncio.Event()

    async def holder() -> None:
        async with store.lock("run-000001"):
            await release.wait()

    async def waiter(name: str) -> None:
        async with store.lock("run-000001"):
            got.append(name)

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(waiter("cancelled"))
    patient = asyncio.create_task(waiter("patient"))
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.sleep(0)
    release.set()
    await asyncio.wait_for(asyncio.gather(first, patient), timeout=5)
    assert cancelled.cancelled()
    assert got == ["patient"]
    assert store._locks == {}


async def test_a_run_lock_handed_to_a_waiter_cancelled_before_it_runs_goes_on_to_the_next(
    tmp_path: Path,
) -> None:
    store, _ = _store(tmp_path)
    got: list[str] = []

    async def waiter(name: str) -> None:
        async with store.lock("run-000001"):
            got.append(name)

    lock = store.lock("run-000001")
    assert lock.take_now()
    handed = asyncio.create_task(waiter("handed"))
    next_one = asyncio.create_task(waiter("next"))
    await asyncio.sleep(0)
    # The release hands the lock to the first waiter, which is cancelled
    # before it can run: it must pass the lock on, not keep it.
    lock.release()
    handed.cancel()
    await asyncio.wait_for(next_one, timeout=5)  # a lock kept by no one would hang
    assert handed.cancelled()
    assert got == ["next"]
    assert not store.lock("run-000001").locked()


async def test_locking_a_batch_waits_for_a_run_another_holds_then_holds_every_one(
    tmp_path: Path,
) -> None:
    store, _ = _store(tmp_path)
    release = asyncio.Event()
    inside = asyncio.Event()

    async def holder() -> None:
        async with store.lock("run-000002"):
            inside.set()
            await release.wait()

    async def batch() -> list[bool]:
        async with store.locked(["run-000003", "run-000002", "run-000001"]):
            return [store.lock(f"run-00000{n}").locked() for n in (1, 2, 3)]

    held = asyncio.create_task(holder())
    await inside.wait()
    batched = asyncio.create_task(batch())
    await asyncio.sleep(0)
    # Taken in run order: the first is held by the batch, which waits at the second.
    assert store.lock("run-000001").locked() and not batched.done()
    assert not store.lock("run-000003").locked()
    release.set()
    assert await batched == [True, True, True]
    await held
    assert store._locks == {}


async def test_locking_a_batch_of_free_runs_holds_each_once_even_if_named_twice(
    tmp_path: Path,
) -> None:
    store, _ = _store(tmp_path)
    async with store.locked(["run-000003", "run-000001", "run-000003"]):
        assert store.lock("run-000001").locked() and store.lock("run-000003").locked()
        waiting = asyncio.create_task(_hold_briefly(store, "run-000003"))
        await asyncio.sleep(0)
        assert not waiting.done()  # held by the batch
    await asyncio.wait_for(waiting, timeout=5)
    assert store._locks == {}


async def _hold_briefly(store: Any, run_id: str) -> None:
    async with store.lock(run_id):
        await asyncio.sleep(0)


async def test_the_runs_changed_since_a_position_are_the_new_the_changed_and_the_unfinished(
    tmp_path: Path,
) -> None:
    """What a scheduler's start checks when its checkpoint noted where the log
    stood (`core.recovery_checks.claims_since`): every run with a frame
    written after, and every run not finished, whatever its frames."""
    store, _ = _store(tmp_path)
    await store.put_many([_failed(_record(n)) if n != 3 else _record(3) for n in range(1, 5)])
    position = store.position()
    assert position is not None
    again, _ = _store(tmp_path)  # a later process: its writes go to a segment of its own
    await again.put(_failed(_record(2, updated_at="2026-03-02T09:05:00Z")))
    await again.put_many([_failed(_record(5))])
    changed = await again.changed_since(position)
    assert [r.run_id for r in changed or []] == ["run-000002", "run-000003", "run-000005"]
    # A frame appended by hand after the position is among them too.
    edited = _failed(_record(4, updated_at="2026-03-02T09:06:00Z"))
    run_log_files.append_document(tmp_path, "run-000004", edited.to_json())
    later, _ = _store(tmp_path)
    found = await later.changed_since(position)
    assert [r.run_id for r in found or []] == [f"run-{n:06d}" for n in (2, 3, 4, 5)]
    # Where the log stands now: nothing written since, the unfinished run only.
    now = later.position()
    assert now is not None
    assert [r.run_id for r in await later.changed_since(now) or []] == ["run-000003"]


async def test_frames_copied_by_compaction_count_as_written_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_log, "ROLL_AT_BYTES", 4096)
    store, _ = _store(tmp_path)
    await store.put_many([_failed(_record(n)) for n in range(1, 4)])
    position = store.position()
    assert position is not None
    # Enough rewrites of run 4 to fill and seal segments, compacting the
    # first: runs 1-3 are copied to the active segment, after the position.
    for second in range(40):
        await store.put(_record(4, updated_at=f"2026-03-02T09:00:{second:02d}Z"))
    assert run_log_files.segment_paths(tmp_path)[0].name != "00000001.seg"
    changed = await store.changed_since(position)
    assert [r.run_id for r in changed or []] == [f"run-{n:06d}" for n in range(1, 5)]


@pytest.mark.parametrize(
    "token", ["", "run-log@", "run-log@1", "run-log@x:0", "run-log@1:-2", "run-log@١:0", "pg@1:0"]
)
async def test_a_position_the_log_does_not_know_answers_none(tmp_path: Path, token: str) -> None:
    store, _ = _store(tmp_path)
    await store.put(_record(1))
    assert await store.changed_since(token) is None


@pytest.mark.parametrize(
    "origin",
    [
        None,
        {"kind": "manual"},
        {"kind": "manual", "snapshot": {"x": 1}},  # a key named as the next field
        {"kind": "manual", "note": ',"snapshot":'},
        {"kind": "manual", "z": {"snapshot": [1, {"snapshot": 2}]}},
        {"kind": "manual", "note": "zwölf Läufe, 十二"},  # text longer in bytes than in letters
    ],
)
async def test_a_finished_runs_claim_is_its_origin_as_stored(
    tmp_path: Path, origin: dict[str, Any] | None
) -> None:
    """What a start without a checkpoint lists of every finished run: its
    origin taken from its frame, whatever the origin holds."""
    store, _ = _store(tmp_path)
    finished = _failed(_record(1)).model_copy(update={"origin": origin})
    await store.put_many([finished, _record(2)])
    again, _ = _store(tmp_path)
    claims, cursor = await again.fetch_claims(None, 10)
    assert claims == [("run-000001", "failed", origin), ("run-000002", "admitted", None)]
    assert cursor is None


async def test_a_frame_written_another_way_is_claimed_from_its_record_read_whole(
    tmp_path: Path,
) -> None:
    """A frame appended by hand, its JSON not as `record_json` writes it
    (spaces around the origin): the claim is the record's, parsed whole."""
    store, _ = _store(tmp_path)
    await store.put(_failed(_record(1)))
    store.close()
    origin = {"kind": "manual", "by": "hand"}
    document = _failed(_record(2)).model_copy(update={"origin": origin}).to_json()
    payload = json.dumps(document, separators=(", ", ": ")).encode()
    assert b'"origin": {' in payload
    with run_log_files.segment_paths(tmp_path)[-1].open("ab") as segment:
        segment.write(run_log.encode_frame(2, payload))
    again, findings = _store(tmp_path)
    assert findings == []
    claims, _ = await again.fetch_claims(None, 10)
    assert claims == [("run-000001", "failed", None), ("run-000002", "failed", origin)]


async def test_a_finished_run_damaged_in_place_is_left_out_of_the_claims_and_broken(
    tmp_path: Path,
) -> None:
    store, _ = _store(tmp_path)
    await store.put_many([_failed(_record(n)) for n in (1, 2, 3)])
    store.close()  # the index: the start does not check the frames
    run_log_files.damage_last_frame(tmp_path, "run-000002", at=40)
    again, findings = _store(tmp_path)
    assert findings == []
    claims, _ = await again.fetch_claims(None, 2)
    assert [run_id for run_id, _, _ in claims] == ["run-000001"]  # a page of two, one unreadable
    assert [b["run_id"] for b in again.broken()] == ["run-000002"]
