"""Fixtures for the reliability tests: fail on ERROR logs of the shell unless
a test expects them, and print the measured figures at the end of the run."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..shell_errors import shell_errors
from .figures import FIGURES


@pytest.fixture(autouse=True)
def no_unexpected_errors(caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest) -> Any:
    """A scheduler round that raised, or a recovery that logged an error, is a
    bug even when the assertions hold: fail on any ERROR from `shell` unless
    the test is marked `@pytest.mark.expected_errors`."""
    caplog.set_level(logging.WARNING, logger="shell")
    yield
    if request.node.get_closest_marker("expected_errors"):
        return
    errors = shell_errors(caplog)
    assert not errors, errors


_SHM = Path("/dev/shm")


@pytest.fixture
def store_root(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A fresh store root, on tmpfs when the machine has one: these tests kill
    processes, not machines, so what they check does not depend on fsync
    reaching a disk, and hundreds of restarts stay fast."""
    if _SHM.is_dir() and os.access(_SHM, os.W_OK):
        base = Path(tempfile.mkdtemp(prefix="wf-reliability-", dir=_SHM))
        try:
            yield base / "store"
        finally:
            shutil.rmtree(base, ignore_errors=True)
    else:
        tmp_path: Path = request.getfixturevalue("tmp_path")
        yield tmp_path / "store"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FIGURES:
        return
    terminalreporter.write_sep("-", "reliability figures")
    for name, value in FIGURES.items():
        terminalreporter.write_line(f"{name}: {value}")
