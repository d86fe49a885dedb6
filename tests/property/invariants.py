"""Structural invariants every state returned by `decide` must satisfy."""

from __future__ import annotations

from datetime import timedelta

from core.calendar import compile_trigger
from core.decide import next_wakeup
from core.state import SchedulerState, ScheduleState

__all__ = ["check_state", "describe_state"]

_TICK = timedelta(microseconds=1)


def _expected_due(s: ScheduleState) -> object:
    if s.paused or s.deleted or s.blocked is not None:
        return None
    due = s.next_instant
    if s.waiting:
        late = s.waiting[0] + s.allowance + _TICK
        if due is None or late < due:
            due = late
    return due


def _candidate(s: ScheduleState) -> object:
    if s.paused or s.deleted or s.blocked is not None or len(s.active) >= s.limit:
        return None
    if s.latest:
        return s.held
    return s.waiting[0] if s.waiting else None


def check_state(state: SchedulerState) -> None:
    """Raise AssertionError naming the first broken invariant."""
    holding = sum(run.holds_slot for s in state.schedules.values() for run in s.active.values())
    assert state.slots_in_use == holding, (state.slots_in_use, holding)
    index = set(state.due_index)
    queue = set(state.slot_queue)
    assert state.due_live == sum(s.due is not None for s in state.schedules.values())
    assert state.queue_live == sum(s.queued is not None for s in state.schedules.values())
    for sid, s in state.schedules.items():
        assert s.schedule_id == sid == s.definition.schedule_id
        assert s.latest == (s.definition.misfire == "latest")
        assert s.limit == s.definition.active_run_limit
        assert s.allowance == timedelta(seconds=s.definition.lateness_allowance_s)
        # At most one held candidate, and only under misfire="latest".
        assert s.held is None or s.latest, sid
        assert not s.waiting or not s.latest, sid
        assert list(s.waiting) == sorted(set(s.waiting)), sid
        if s.waiting:
            # Instants wait only while an overlap place is free (once the places
            # are taken they are decided at once, oldest first).
            assert len(s.active) < s.limit, sid
        for instant in (*s.waiting, *((s.held,) if s.held else ())):
            assert instant <= s.watermark, (sid, instant, s.watermark)
            assert instant not in s.active, (sid, instant)
        if s.paused or s.deleted:
            assert s.held is None and not s.waiting, sid
        if not (s.paused or s.deleted or s.blocked is not None):
            expected = compile_trigger(s.definition.trigger).next_after(s.watermark)
            assert s.next_instant == expected, (sid, s.next_instant, expected)
            if state.last_now is not None:
                # Everything due has been settled.
                assert s.next_instant is None or s.next_instant > state.last_now, sid
        assert s.due == _expected_due(s), (sid, s.due, _expected_due(s))
        if s.due is not None:
            assert (s.due, sid) in index, sid
        cand = _candidate(s)
        if cand is not None:
            assert s.queued == cand and (cand, sid) in queue, (sid, cand, s.queued)
            # Work-conserving: a candidate waits only while every slot is taken.
            assert state.slots_in_use >= state.max_concurrent_runs, (sid, cand)
    wake = next_wakeup(state)
    if wake is not None:
        assert state.last_now is None or wake > state.last_now
        assert wake == min(s.due for s in state.schedules.values() if s.due is not None)
    else:
        assert all(s.due is None for s in state.schedules.values())
    top = state.due_index.peek()
    if top is not None and state.last_now is not None:
        assert state.schedules[top[1]].due == top[0], "index top is stale"


def describe_state(state: SchedulerState) -> str:
    lines = [f"slots {state.slots_in_use}/{state.max_concurrent_runs} last_now {state.last_now}"]
    for sid, s in sorted(state.schedules.items()):
        lines.append(
            f"  {sid}: wm {s.watermark} next {s.next_instant} held {s.held} waiting {s.waiting}"
            f" active {dict(s.active)} paused {s.paused} deleted {s.deleted} blocked {s.blocked}"
        )
    return "\n".join(lines)
