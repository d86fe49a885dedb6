"""The packages that resolve their names on first use (`core`, `adapters`)
export exactly what `__all__` says: each name has a home module, and that
module really defines it."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

import adapters
import core


@pytest.mark.parametrize("package", [core, adapters], ids=lambda p: p.__name__)
def test_every_exported_name_has_a_home_that_defines_it(package: ModuleType) -> None:
    homes: dict[str, str] = package._HOME
    assert set(homes) == set(package.__all__)
    for name, home in homes.items():
        assert hasattr(importlib.import_module(home), name), f"{home} has no {name}"
        assert getattr(package, name) is getattr(importlib.import_module(home), name)
