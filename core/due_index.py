"""A persistent min-heap of `(instant, schedule_id)` keys.

`decide` keeps two of these in its state: the due-time index (when each live
schedule next needs attention) and the slot queue (candidates waiting for an
execution slot, oldest instant first). Both use lazy deletion: an entry is
never removed when its schedule changes; instead the reader checks the entry
against the schedule's current value and drops it if it no longer matches.
`decide` rebuilds a heap from its live entries when stale ones pile up.

The heap is a leftist heap of nested tuples: every operation returns a new
heap and shares structure with the old one, so a state that holds a heap is
never changed by a later `decide`. Push and pop cost O(log n) in the worst
case (the right spine of a leftist heap is at most log2(n + 1) long); peek is
O(1).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TypeAlias

__all__ = ["HeapKey", "KeyHeap"]

HeapKey: TypeAlias = tuple[datetime, str]
# (rank, key, left, right); rank is the length of the right spine.
_Node: TypeAlias = "tuple[int, HeapKey, _Node | None, _Node | None]"


def _merge(a: _Node | None, b: _Node | None) -> _Node | None:
    if a is None:
        return b
    if b is None:
        return a
    # Walk down the right spines, keeping the smaller root at each step ...
    path: list[_Node] = []
    while True:
        if b[1] < a[1]:
            a, b = b, a
        path.append(a)
        right = a[3]
        if right is None:
            break
        a = right
    # ... then rebuild bottom-up, swapping children to keep the leftist shape.
    node: _Node = b
    for parent in reversed(path):
        left = parent[2]
        if left is None or left[0] < node[0]:
            node = (1 + (0 if left is None else left[0]), parent[1], node, left)
        else:
            node = (node[0] + 1, parent[1], left, node)
    return node


@dataclass(frozen=True, slots=True)
class KeyHeap:
    """An immutable min-heap of `(instant, schedule_id)` keys (duplicates allowed)."""

    root: _Node | None = None
    size: int = 0

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.root is not None

    def peek(self) -> HeapKey | None:
        """The smallest key, or None when the heap is empty."""
        return None if self.root is None else self.root[1]

    def push(self, key: HeapKey) -> KeyHeap:
        """A heap that also holds `key`."""
        return KeyHeap(_merge((1, key, None, None), self.root), self.size + 1)

    def pop(self) -> tuple[HeapKey, KeyHeap]:
        """The smallest key and the heap without it. Raises IndexError when empty."""
        root = self.root
        if root is None:
            raise IndexError("pop from an empty KeyHeap")
        return root[1], KeyHeap(_merge(root[2], root[3]), self.size - 1)

    def __iter__(self) -> Iterator[HeapKey]:
        """Every key, in no particular order."""
        stack: list[_Node] = [] if self.root is None else [self.root]
        while stack:
            node = stack.pop()
            yield node[1]
            if node[2] is not None:
                stack.append(node[2])
            if node[3] is not None:
                stack.append(node[3])

    @classmethod
    def of(cls, keys: Iterable[HeapKey]) -> KeyHeap:
        """A heap of `keys`, built in O(n log n) by sorting.

        A sorted run chained through left children is a valid leftist heap
        (every right spine is empty), so no merging is needed.
        """
        ordered = sorted(keys, reverse=True)
        root: _Node | None = None
        for key in ordered:
            root = (1, key, root, None)
        return cls(root, len(ordered))
