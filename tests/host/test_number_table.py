"""The run store's arrays by run number (adapters/host/number_table.py):
they answer as a dict of tuples would, whatever the numbers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.host.number_table import NumberTable

# Numbers near one another, and a few far past them (a file named by hand).
_NUMBERS = st.one_of(st.integers(0, 5000), st.integers(1 << 30, (1 << 30) + 3))
_ROWS = st.tuples(st.integers(1, 2**32 - 1), st.integers(0, 2**63), st.integers(0, 255))
_STEPS = st.lists(st.tuples(st.sampled_from(["set", "pop"]), _NUMBERS, _ROWS), max_size=200)


@given(_STEPS)
def test_the_table_answers_as_a_dict_of_tuples(
    steps: list[tuple[str, int, tuple[int, ...]]],
) -> None:
    table = NumberTable("IQB")
    model: dict[int, tuple[int, ...]] = {}
    for action, number, row in steps:
        if action == "set":
            table.set(number, *row)
            model[number] = row
        else:
            assert table.pop(number) == (model.pop(number, None) is not None)
    assert len(table) == len(model)
    assert sorted(table.items()) == sorted(model.items())
    for number in {n for _, n, _ in steps} | {0, 7, 1 << 40}:
        assert table.get(number) == model.get(number)
        assert (number in table) == (number in model)
        assert table.first(number) == (model[number][0] if number in model else 0)


def test_a_number_far_past_the_others_does_not_grow_the_arrays() -> None:
    table = NumberTable("Q")
    table.set(3, 30)
    table.set(10**12, 7)
    assert table.get(10**12) == (7,) and len(table) == 2
    # The arrays hold the near numbers only: a few kilobytes, not terabytes.
    assert len(table._present) < 1 << 21
    assert table.pop(10**12) and table.get(10**12) is None and len(table) == 1


def test_numbers_kept_apart_move_into_the_arrays_once_they_reach_them() -> None:
    table = NumberTable("I")
    table.set(5_000_000, 9)
    assert 5_000_000 in table._far
    near = [n for n in range(0, 7_000_000, 1_000_000) if n != 5_000_000]
    for number in near:
        table.set(number, 1)
    assert 5_000_000 not in table._far
    assert table.get(5_000_000) == (9,) and len(table) == 7
    assert [n for n, _ in table.items()] == sorted([*near, 5_000_000])


@given(_STEPS)
def test_exported_arrays_make_the_same_table_or_none_with_far_numbers(
    steps: list[tuple[str, int, tuple[int, ...]]],
) -> None:
    table = NumberTable("IQB")
    for action, number, row in steps:
        if action == "set":
            table.set(number, *row)
        else:
            table.pop(number)
    exported = table.export()
    if any(number >= 1 << 30 for number, _ in table.items()):
        assert exported is None  # kept apart from the arrays: no index of them
        return
    assert exported is not None
    present, columns = exported
    again = NumberTable.from_columns("IQB", bytearray(present), columns)
    assert len(again) == len(table)
    assert list(again.items()) == list(table.items())
    for value in {row[0] for _, row in table.items()} | {7}:
        assert again.column_holds(0, value) == any(r[0] == value for _, r in table.items())


def test_arrays_that_make_no_table_are_refused() -> None:
    with pytest.raises(ValueError, match="presence"):
        NumberTable.from_columns("B", bytearray(b"\x02"), (b"\x01",))
    with pytest.raises(ValueError, match="as long"):
        NumberTable.from_columns("B", bytearray(b"\x01\x01"), (b"\x01",))
    with pytest.raises(ValueError, match="columns"):
        NumberTable.from_columns("BB", bytearray(b"\x01"), (b"\x01",))
