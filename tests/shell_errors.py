"""The ERROR records the shell logged during a test, for the fixtures that
fail a test on them (`tests/service`, `tests/reliability`)."""

from __future__ import annotations

import logging

import pytest

__all__ = ["shell_errors"]


def shell_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The messages of the shell's ERROR records of the test's setup, call and
    teardown so far. Read from a fixture's teardown: there `caplog.records`
    holds the teardown's records only, not the test's."""
    records = [*caplog.get_records("setup"), *caplog.get_records("call"), *caplog.records]
    return [
        r.getMessage() for r in records if r.name.startswith("shell") and r.levelno >= logging.ERROR
    ]
