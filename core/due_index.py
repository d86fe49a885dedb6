"""A persistent min-heap of `(instant, schedule_id)` keys.

`decide` keeps two of these in its state: the due-time index (when each live
schedule next needs attention) and the slot queue (candidates waiting for an
execution slot, oldest instant first). Both use lazy deletion: an entry is
never removed when its schedule changes; instead the reader checks the entry
against the schedule's current value and drops it if it no longer matches.
`decide` rebuilds a heap from its live entries when stale ones pile up.

A `KeyHeap` is an array heap (`heapq` order) that is never changed once
built, so a state that holds one is never changed by a later `decide`. Work
on it goes through a `HeapDraft`: the draft copies the array on its first
change (one `memcpy` of n pointers) and then pushes and pops in O(log n) in
C, and `freeze()` hands the result back as a new `KeyHeap`. A `decide` call
with nothing to change copies nothing; one that pops a herd of 10,000 due
schedules copies the array once instead of building 20,000 persistent nodes
(a leftist heap of tuples did that, at about 20 us a merge).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import TypeAlias

__all__ = ["HeapDraft", "HeapKey", "KeyHeap"]

HeapKey: TypeAlias = tuple[datetime, str]


class KeyHeap:
    """An immutable min-heap of `(instant, schedule_id)` keys (duplicates allowed)."""

    __slots__ = ("_keys",)

    def __init__(self, keys: Iterable[HeapKey] = ()) -> None:
        """A heap of `keys` (any order)."""
        array = list(keys)
        heapq.heapify(array)
        self._keys: list[HeapKey] = array

    @classmethod
    def _adopt(cls, array: list[HeapKey]) -> KeyHeap:
        # `array` is already in heap order and nobody else holds it.
        heap = cls.__new__(cls)
        heap._keys = array
        return heap

    @classmethod
    def of(cls, keys: Iterable[HeapKey]) -> KeyHeap:
        """A heap of `keys`, built in O(n)."""
        return cls(keys)

    @property
    def size(self) -> int:
        return len(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __bool__(self) -> bool:
        return bool(self._keys)

    def __repr__(self) -> str:
        return f"KeyHeap(size={len(self._keys)}, top={self.peek()!r})"

    def __eq__(self, other: object) -> bool:
        # Same keys in the same array order: what a value comparison of two
        # states needs (both were built by the same sequence of changes).
        return isinstance(other, KeyHeap) and self._keys == other._keys

    __hash__ = None  # type: ignore[assignment]

    def peek(self) -> HeapKey | None:
        """The smallest key, or None when the heap is empty."""
        return self._keys[0] if self._keys else None

    def push(self, key: HeapKey) -> KeyHeap:
        """A heap that also holds `key` (O(n): use a draft for many changes)."""
        draft = self.edit()
        draft.push(key)
        return draft.freeze()

    def pop(self) -> tuple[HeapKey, KeyHeap]:
        """The smallest key and the heap without it (O(n): use a draft for many
        changes). Raises IndexError when empty."""
        draft = self.edit()
        key = draft.pop()
        return key, draft.freeze()

    def edit(self) -> HeapDraft:
        """A mutable draft of this heap; this heap is never changed by it."""
        return HeapDraft(self)

    def __iter__(self) -> Iterator[HeapKey]:
        """Every key, in no particular order."""
        return iter(self._keys)


class HeapDraft:
    """A heap being changed: copy-on-write over a `KeyHeap`, O(log n) per push
    and pop after the first change. Not shared; `freeze()` ends its use."""

    __slots__ = ("_base", "_keys", "_owned")

    def __init__(self, base: KeyHeap) -> None:
        self._base = base
        self._keys: list[HeapKey] = base._keys
        self._owned = False

    def _own(self) -> list[HeapKey]:
        if not self._owned:
            self._keys = self._keys.copy()
            self._owned = True
        return self._keys

    @property
    def size(self) -> int:
        return len(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __bool__(self) -> bool:
        return bool(self._keys)

    def __iter__(self) -> Iterator[HeapKey]:
        return iter(self._keys)

    def peek(self) -> HeapKey | None:
        """The smallest key, or None when the draft is empty."""
        return self._keys[0] if self._keys else None

    def push(self, key: HeapKey) -> None:
        heapq.heappush(self._own(), key)

    def pop(self) -> HeapKey:
        """Remove and return the smallest key. Raises IndexError when empty."""
        if not self._keys:
            raise IndexError("pop from an empty heap")
        return heapq.heappop(self._own())

    def freeze(self) -> KeyHeap:
        """The draft as an immutable heap (the original when nothing changed)."""
        if not self._owned:
            return self._base
        self._owned = False  # a later change copies again: the frozen heap stays as it is
        return KeyHeap._adopt(self._keys)
