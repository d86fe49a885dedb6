"""Fixtures shared by the store tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shell.durable import set_fault_injector
from shell.fence import active_fences, clear_fences


@pytest.fixture(autouse=True)
def _no_fault_injector() -> Iterator[None]:
    # A test that installs a crash hook must never leak it into the next one.
    previous = set_fault_injector(None)
    yield
    set_fault_injector(previous)


@pytest.fixture(autouse=True)
def _no_fence_left() -> Iterator[None]:
    # A tripped fence stays registered, as in the process it fenced: a test
    # that trips one must not leave it to the next (which may count fences).
    yield
    for fence in active_fences():
        clear_fences(fence.store_root)


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    root.mkdir()
    return root
