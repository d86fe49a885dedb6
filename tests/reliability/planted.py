"""Bugs planted in the real code for a test to show the simulation catches them."""

from __future__ import annotations

from typing import Any

import pytest

from shell.history_store import HistoryStore


def drop_completed_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A history that never writes a `completed` row: every seed fails."""
    original = HistoryStore.append_transition

    def lossy(self: HistoryStore, schedule_id: str, **row: Any) -> int:
        if row["status"] == "completed":
            return 0
        return original(self, schedule_id, **row)

    monkeypatch.setattr(HistoryStore, "append_transition", lossy)
