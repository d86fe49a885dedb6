"""Which backfill the API sees before a request or a cancel (`backfill_in_force`):
the scheduler's state, with the operator records written after it applied."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.operator_actions import Backfill, backfill_in_force

AT = datetime(2026, 3, 2, 12, tzinfo=UTC)


def _backfill(state: str) -> Backfill:
    return Backfill(
        start=AT.replace(hour=9),
        end=AT.replace(hour=11),
        overlap=None,
        requested_at=AT,
        state=state,  # type: ignore[arg-type]
        planned=2,
        admitted=1,
        remaining=(AT.replace(hour=10),) if state == "running" else (),
    )


@pytest.mark.parametrize(
    ("applied", "unapplied", "expected"),
    [
        # Nothing written since: the state's backfill, while it runs.
        (None, [], None),
        ("running", [], "running"),
        ("done", [], None),
        ("cancelled", [], None),
        # Other records do not count.
        ("running", ["updated", "paused", "triggered"], "running"),
        (None, ["resumed"], None),
        # A cancel written and not yet applied ends it: a second is refused.
        ("running", ["backfill-cancelled"], None),
        ("running", ["backfill-cancelled", "paused"], None),
        # A request not yet applied: a second request is refused, a cancel waits for it.
        (None, ["backfill"], "requested"),
        ("done", ["backfill", "updated"], "requested"),
        ("cancelled", ["backfill-cancelled", "backfill"], "requested"),
        # Beside a running one, decide ignores the request: the running one stays.
        ("running", ["backfill"], "running"),
        # The newest of them decides.
        (None, ["backfill", "backfill-cancelled"], None),
        # A cancel then a request: the running one ends, the request starts anew.
        ("running", ["backfill-cancelled", "backfill"], "requested"),
        ("running", ["backfill", "backfill-cancelled", "backfill"], "requested"),
    ],
)
def test_the_newest_operator_record_decides_over_the_applied_backfill(
    applied: str | None, unapplied: list[str], expected: str | None
) -> None:
    backfill = _backfill(applied) if applied is not None else None
    assert backfill_in_force(backfill, unapplied) == expected
