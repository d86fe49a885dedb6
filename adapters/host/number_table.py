"""A table of small unsigned integers by run number, in arrays.

Run ids come from a counter, so the numbers of a store's runs are dense: a
row of a few integers per run fits in arrays indexed by the number, a few
bytes a column, where a dict of tuples takes about 200 bytes a run (an
entry, a tuple, and an object per integer). A server that has run a million
scheduled runs keeps their places in the log and their statuses in about 20
MB, not several hundred. A number far past the others (a file named so by
hand) goes to a dict instead, so that no number can make the arrays huge.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import Final

__all__ = ["NumberTable"]

# How far past the arrays' end a number may be and still extend them.
_DENSE_REACH: Final = 1 << 20


class NumberTable:
    """Rows of `len(typecodes)` unsigned integers by non-negative number;
    each typecode is an `array` one ("B", "I", "Q"...), the column's width."""

    __slots__ = ("_columns", "_count", "_far", "_present", "_width")

    def __init__(self, typecodes: str) -> None:
        self._columns = tuple(array(code) for code in typecodes)
        self._width = len(typecodes)
        self._present = bytearray()
        self._far: dict[int, tuple[int, ...]] = {}
        self._count = 0

    @classmethod
    def from_columns(
        cls, typecodes: str, present: bytearray, columns: Sequence[bytes | memoryview]
    ) -> NumberTable:
        """A table with no far numbers from its arrays' bytes (`export`): a
        start takes a million rows in a few copies, not a million calls.
        Raises ValueError when the bytes do not make rows of `typecodes`."""
        table = cls(typecodes)
        if len(columns) != table._width:
            raise ValueError(f"{len(columns)} columns for {table._width}")
        for column, data in zip(table._columns, columns, strict=True):
            column.frombytes(data)
            if len(column) != len(present):
                raise ValueError("a column is not as long as the table")
        if present.strip(b"\x00\x01"):
            raise ValueError("the presence bytes are not 0 or 1")
        table._present = present
        table._count = present.count(1)
        return table

    def export(self) -> tuple[bytes, tuple[bytes, ...]] | None:
        """The presence bytes and each column's bytes, for `from_columns`;
        None while a number is kept apart from the arrays (far)."""
        if self._far:
            return None
        return bytes(self._present), tuple(column.tobytes() for column in self._columns)

    def column_holds(self, index: int, value: int) -> bool:
        """Whether any row holds `value` in column `index` (a scan in C)."""
        column = self._columns[index]
        present = self._present
        position = -1
        while True:
            try:
                position = column.index(value, position + 1)
            except ValueError:
                break
            if present[position]:
                return True
        return any(row[index] == value for row in self._far.values())

    def reserve(self, size: int) -> None:
        """Grow the arrays to hold every number below `size` (a table begun
        empty beside one of that many rows keeps no number apart)."""
        if size > len(self._present):
            self._extend_to(size - 1, anyway=True)

    def column_bytes(self, index: int) -> bytes:
        """Column `index` of the arrays' rows, by number (0 where no row)."""
        return self._columns[index].tobytes()

    def __len__(self) -> int:
        return self._count

    @property
    def reach(self) -> int:
        """How many numbers the arrays hold (rows or not)."""
        return len(self._present)

    def __contains__(self, number: object) -> bool:
        if type(number) is not int or number < 0:
            return False
        if number < len(self._present):
            return bool(self._present[number])
        return number in self._far

    def get(self, number: int) -> tuple[int, ...] | None:
        if 0 <= number < len(self._present):
            if not self._present[number]:
                return None
            # A list first: a generator's frame costs more than its items.
            return tuple([column[number] for column in self._columns])
        return self._far.get(number)

    def first(self, number: int) -> int:
        """The first column of the row of `number`, 0 without a row: for a
        table whose rows never hold 0 there (a status's code, a segment's
        number), the quickest look (a page filtered by status makes
        thousands)."""
        if 0 <= number < len(self._present):
            return self._columns[0][number]
        row = self._far.get(number)
        return 0 if row is None else row[0]

    def set(self, number: int, *row: int) -> None:
        if number < 0 or len(row) != self._width:
            raise ValueError(f"no row {row} of {self._width} for number {number}")
        present = self._present
        if number >= len(present) and not self._extend_to(number):
            if number not in self._far:
                self._count += 1
            self._far[number] = row
            return
        if not present[number]:
            present[number] = 1
            self._count += 1
        # `zip` without `strict`: the width was checked above, and this is a
        # start's step for every run.
        for column, value in zip(self._columns, row, strict=False):
            column[number] = value

    def pop(self, number: int) -> bool:
        """Remove the row of `number`; whether there was one."""
        if 0 <= number < len(self._present):
            if not self._present[number]:
                return False
            self._present[number] = 0
            for column in self._columns:
                column[number] = 0
            self._count -= 1
            return True
        if self._far.pop(number, None) is None:
            return False
        self._count -= 1
        return True

    def items(self) -> Iterator[tuple[int, tuple[int, ...]]]:
        """Every (number, row), the arrays' by number first."""
        present = self._present
        columns = self._columns
        number = present.find(1)
        while number >= 0:
            yield number, tuple(column[number] for column in columns)
            number = present.find(1, number + 1)
        yield from self._far.items()

    def _extend_to(self, number: int, *, anyway: bool = False) -> bool:
        """Grow the arrays to hold `number` (doubling); False when it is too
        far past their end (unless `anyway`)."""
        size = len(self._present)
        if number >= size + _DENSE_REACH + size and not anyway:
            return False
        grown = max(number + 1, 2 * size, 1024)
        extra = grown - size
        self._present.extend(bytes(extra))
        for column in self._columns:
            column.frombytes(bytes(extra * column.itemsize))
        # Numbers kept apart before that the arrays now reach move into them.
        for far in [n for n in self._far if n < grown]:
            row = self._far.pop(far)
            self._present[far] = 1
            for column, value in zip(self._columns, row, strict=True):
                column[far] = value
        return True
