"""decide's mutable working copy of a schedule follows `ScheduleState` field
for field: a field added to `ScheduleState` and not carried through the copy
fails here rather than being silently dropped (or reset) by a `decide` call."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields
from typing import Any

import pytest

from core.decide import _ScheduleDraft
from core.state import ScheduleState
from tests.property.builders import at, cron

FIELD_NAMES = [field.name for field in fields(ScheduleState)]


def test_the_working_copy_has_exactly_the_fields_of_the_schedule_state() -> None:
    assert sorted(_ScheduleDraft.__slots__) == sorted(FIELD_NAMES)


def test_copying_in_and_freezing_carries_every_field_unchanged() -> None:
    # A distinct marker per field: a field copied from the wrong source, or
    # not at all, cannot pass by coincidence.
    markers: dict[str, Any] = {name: object() for name in FIELD_NAMES}
    state = ScheduleState(**markers)
    copy = _ScheduleDraft.of(state)
    for name in FIELD_NAMES:
        assert getattr(copy, name) is markers[name], name
    frozen = copy.freeze()
    for name in FIELD_NAMES:
        assert getattr(frozen, name) is markers[name], name
    # Built without its __init__, it is still the frozen dataclass.
    assert type(frozen) is ScheduleState and frozen == state
    with pytest.raises(FrozenInstanceError):
        frozen.revision = 2  # type: ignore[misc]


def test_a_fresh_working_copy_sets_every_field() -> None:
    copy = _ScheduleDraft.fresh(cron("r"), 1, at(9, 30), at(9, 30))
    frozen = copy.freeze()
    for name in FIELD_NAMES:
        assert getattr(frozen, name) is getattr(copy, name), name
    assert frozen.schedule_id == "r"
    assert frozen.next_instant == at(10)
