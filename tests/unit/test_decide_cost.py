"""decide's cost follows what is due, not how many schedules exist; the
persistent heap behind its indexes."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from core.commands import AdmitOccurrence
from core.decide import decide, next_wakeup
from core.due_index import KeyHeap
from core.events import (
    CapacityChanged,
    OccurrenceAdmitted,
    RunStatusChanged,
    ScheduleCreated,
    ScheduleUpdated,
)
from core.state import SchedulerState, initial_state
from tests.property.builders import DAY, at, cron

COUNT = 3000


@pytest.fixture(scope="module")
def crowd() -> SchedulerState:
    """COUNT schedules, each firing once a day at its own minute."""
    events = [
        ScheduleCreated(definition=cron(f"s{i:05d}", f"{i % 60} {i // 60 % 24} * * *"), at=at(0))
        for i in range(COUNT)
    ]
    state, _ = decide(initial_state(max_concurrent_runs=COUNT), at(0), events)
    return state


def changed(before: SchedulerState, after: SchedulerState) -> set[str]:
    return {
        sid for sid, record in after.schedules.items() if before.schedules.get(sid) is not record
    }


def test_a_call_with_nothing_due_touches_no_schedule(crowd: SchedulerState) -> None:
    state, commands = decide(crowd, at(0, 0, 30), [])
    assert commands == ()
    assert state.schedules is crowd.schedules
    # Nor copies its indexes.
    assert state.due_index is crowd.due_index
    assert state.slot_queue is crowd.slot_queue
    assert next_wakeup(state) == at(0, 1)


def test_a_call_touches_only_the_schedules_with_something_due(crowd: SchedulerState) -> None:
    state, _ = decide(crowd, at(9, 58), [])
    state, commands = decide(state, at(10, 2), [])
    touched = changed(crowd, state)
    due = {f"s{i:05d}" for i in range(COUNT) if (i // 60 % 24, i % 60) <= (10, 2)}
    assert touched <= due
    # Between 09:58 and 10:02, only the schedules of 09:59..10:02 had work.
    recent = {f"s{i:05d}" for i in range(COUNT) if (9, 58) < (i // 60 % 24, i % 60) <= (10, 2)}
    assert {getattr(c, "schedule_id", None) for c in commands} == recent


def test_an_event_touches_only_its_schedule(crowd: SchedulerState) -> None:
    state, _ = decide(crowd, at(0, 1), [])
    after, _ = decide(
        state,
        at(0, 1),
        [OccurrenceAdmitted(schedule_id="s00001", instant=at(0, 1), run_id="run-1")],
    )
    assert changed(state, after) == {"s00001"}
    final, _ = decide(
        after,
        at(0, 1, 30),
        [RunStatusChanged(schedule_id="s00001", instant=at(0, 1), run_id="run-1", status="failed")],
    )
    assert changed(after, final) == {"s00001"}


def test_next_wakeup_reads_a_live_index_top(crowd: SchedulerState) -> None:
    state = crowd
    for minute in range(1, 6):
        state, _ = decide(state, at(0, minute), [])
        top = state.due_index.peek()
        assert top is not None
        assert state.schedules[top[1]].due == top[0] == next_wakeup(state)


def test_stale_index_entries_are_compacted() -> None:
    state, _ = decide(
        initial_state(max_concurrent_runs=1),
        at(0),
        [ScheduleCreated(definition=cron("r", "0 12 * * *"), at=at(0))],
    )
    # Every update moves the schedule's due time and leaves a stale entry.
    for revision in range(2, 400):
        minute = revision % 60
        definition = cron("r", f"{minute} 12 * * *")
        state, _ = decide(
            state,
            at(0),
            [ScheduleUpdated(definition=definition, revision=revision, at=at(0))],
        )
        assert state.due_index.size <= 2 * state.due_live + 64
    assert state.due_live == 1
    assert next_wakeup(state) == at(12, 399 % 60)


def test_the_slot_queue_is_compacted_too() -> None:
    definitions = [cron(f"w{i}", "* * * * *", misfire="latest") for i in range(3)]
    state, _ = decide(
        initial_state(max_concurrent_runs=1),
        at(0),
        [ScheduleCreated(definition=cron("hog", "0 * * * *"), at=at(0) - timedelta(minutes=1))]
        + [ScheduleCreated(definition=d, at=at(0)) for d in definitions],
    )
    # The hog holds the only slot; each minute every waiter's candidate is
    # replaced by a newer one, leaving stale queue entries behind.
    for minute in range(1, 300):
        state, _ = decide(state, at(0, minute), [])
        assert state.slot_queue.size <= 2 * state.queue_live + 64
    state, commands = decide(state, at(5), [CapacityChanged(max_concurrent_runs=4)])
    admitted = sorted(c.schedule_id for c in commands if isinstance(c, AdmitOccurrence))
    assert admitted == ["w0", "w1", "w2"]


# --- the heap -------------------------------------------------------------------


def test_the_heap_pops_in_order_and_never_changes() -> None:
    rng = random.Random(7)
    keys = [
        (DAY + timedelta(minutes=rng.randrange(5000)), f"s{rng.randrange(50)}") for _ in range(500)
    ]
    heap = KeyHeap()
    versions = []
    for key in keys:
        heap = heap.push(key)
        versions.append(heap)
    assert len(heap) == 500
    popped = []
    current = heap
    while current:
        key, current = current.pop()
        popped.append(key)
    assert popped == sorted(keys)
    # Older versions are untouched by later pushes and pops.
    assert sorted(versions[9]) == sorted(keys[:10])
    assert len(heap) == 500 and heap.peek() == min(keys)


def test_a_heap_built_from_keys_is_a_valid_heap() -> None:
    rng = random.Random(3)
    keys = [(DAY + timedelta(seconds=rng.randrange(10**6)), "x") for _ in range(300)]
    heap = KeyHeap.of(keys)
    heap = heap.push((DAY - timedelta(days=1), "early"))
    first, heap = heap.pop()
    assert first == (DAY - timedelta(days=1), "early")
    rest = []
    while heap:
        key, heap = heap.pop()
        rest.append(key)
    assert rest == sorted(keys)


def test_a_draft_never_changes_the_heap_it_came_from_nor_the_one_it_froze() -> None:
    keys = [(DAY + timedelta(minutes=m), f"s{m}") for m in (5, 3, 9, 1, 7)]
    base = KeyHeap.of(keys)
    draft = base.edit()
    assert draft.freeze() is base  # nothing changed, nothing copied
    assert draft.pop() == min(keys)
    draft.push((DAY, "early"))
    frozen = draft.freeze()
    draft.pop()
    draft.push((DAY + timedelta(days=1), "late"))
    assert sorted(base) == sorted(keys)
    assert sorted(frozen) == sorted([*keys[:3], keys[4], (DAY, "early")])
    assert frozen.peek() == (DAY, "early")
    popped = []
    while draft:
        popped.append(draft.pop())
    assert popped == sorted([keys[0], keys[1], keys[2], keys[4], (DAY + timedelta(days=1), "late")])


def test_popping_an_empty_heap_is_an_index_error() -> None:
    with pytest.raises(IndexError):
        KeyHeap().pop()
    with pytest.raises(IndexError):
        KeyHeap().edit().pop()
    assert KeyHeap().peek() is None
    assert list(KeyHeap()) == []
