"""Paging a schedule's history: the cursor and the entry a page shows.

A cursor is the next page's first seq, tagged with a hash of the schedule id
so a cursor of one schedule is refused by another (and junk by all).
`page_row` builds one page entry from the rows the index points at, checking
them by the row rules (`shell/history_rows.py`) as every reader does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import struct
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from core.errors import InvalidInput, Problem
from shell.history_rows import Bad, BadLatest, Entry, check_decision, check_transition

__all__ = [
    "checked_row",
    "decode_cursor",
    "encode_cursor",
    "page_entry",
    "page_json",
    "page_row",
    "page_start",
]

# Format tag, schedule tag, seq: a cursor is opaque to clients but not secret.
_CURSOR: Final = struct.Struct("<2s8sQ")
_CURSOR_TAG: Final = b"h1"


# --- the cursor ----------------------------------------------------------------------


def _cursor_tag(schedule_id: str) -> bytes:
    return hashlib.sha256(schedule_id.encode()).digest()[:8]


def encode_cursor(schedule_id: str, seq: int) -> str:
    """The cursor of the page of `schedule_id`'s history that starts at `seq`."""
    raw = _CURSOR.pack(_CURSOR_TAG, _cursor_tag(schedule_id), seq)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_cursor(schedule_id: str, cursor: object) -> int | None:
    """The seq `cursor` starts at, or None when it is not a cursor issued for
    `schedule_id` (whether it is past the end is the caller's to check)."""
    if not isinstance(cursor, str) or not 0 < len(cursor) <= 64:
        return None
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) != _CURSOR.size:
        return None
    tag, owner, seq = _CURSOR.unpack(raw)
    if tag != _CURSOR_TAG or owner != _cursor_tag(schedule_id):
        return None
    return int(seq)


def page_start(schedule_id: str, limit: object, cursor: object, *, max_limit: int) -> int:
    """The seq a page of `schedule_id`'s history starts at, after checking
    the page's arguments; `InvalidInput` names `limit` (not 1..`max_limit`)
    and `cursor` (not one issued for this history). Whether the cursor is
    past the end is the store's to check."""
    problems: list[Problem] = []
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= max_limit:
        problems.append(Problem(field="limit", reason=f"must be an integer from 1 to {max_limit}"))
    start = 0
    if cursor is not None:
        decoded = decode_cursor(schedule_id, cursor)
        if decoded is None:
            problems.append(
                Problem(field="cursor", reason="is not a cursor of this schedule's history")
            )
        else:
            start = decoded
    if problems:
        raise InvalidInput.from_problems("history page", problems)
    return start


# --- page entries --------------------------------------------------------------------


def page_row(
    seq: int,
    entry: Entry,
    decision_data: bytes,
    latest_data: bytes | None,
    previous: datetime | None,
) -> tuple[dict[str, Any], datetime | None]:
    """The page entry of occurrence `seq` from its rows as read (`latest_data`
    None when its decision row is its latest), checked by the row rules and
    against the index entry that points at them and the decision before it
    (`previous`); returns it with the newest calendar decision instant so
    far (its own, unless it is an operator's row). Raises `Bad`
    (`BadLatest` when the latest row is at fault)."""
    decision_row = page_json(decision_data, seq, decision=True)
    latest_row: dict[str, Any] | None = None
    if latest_data is not None:
        try:
            latest_row = page_json(latest_data, seq, decision=False)
        except Bad as bad:
            raise BadLatest(bad.reason, seq) from None
    return page_entry(seq, entry.status, decision_row, latest_row, previous)


def page_entry(
    seq: int,
    recorded_status: str,
    decision_row: Mapping[str, Any],
    latest_row: Mapping[str, Any] | None,
    previous: datetime | None,
) -> tuple[dict[str, Any], datetime | None]:
    """The page entry of occurrence `seq` from its decision row and latest
    transition row (None when the decision is its latest), each already of
    its kind and seq (`checked_row`), checked by the row rules, against the
    status the store recorded beside them (`recorded_status`: the index
    entry's, or the database row's) and the decision before it (`previous`);
    returns it with the newest calendar decision instant so far. Raises `Bad` (`BadLatest` when the
    latest row is at fault)."""
    decision = check_decision(decision_row, seq)
    if decision.origin is None and previous is not None and decision.first <= previous:
        raise Bad(
            f"decision for {decision.instant_text} is not after the decision of seq {seq - 1}"
            " (duplicate or out of order)",
            seq,
        )
    status, run_id, reason, updated_at = (
        decision.status,
        decision.run_id,
        decision.reason,
        decision.recorded_text,
    )
    if latest_row is not None:
        try:
            if decision.status != "admitted":
                raise Bad(
                    f"the index points seq {seq} at a transition, but its decision is"
                    f" {decision.status}, which no transition follows",
                    seq,
                )
            latest = check_transition(latest_row, seq)
            if latest.instant_text != decision.instant_text:
                raise Bad(
                    f"transition names instant {latest.instant_text} but seq {seq} is"
                    f" {decision.instant_text}",
                    seq,
                )
            if run_id is not None and latest.run_id is not None and latest.run_id != run_id:
                raise Bad(f"run id changed from {run_id} to {latest.run_id} for seq {seq}", seq)
        except Bad as bad:
            raise BadLatest(bad.reason, seq) from None
        status, reason, updated_at = latest.status, latest.reason, latest.recorded_text
        run_id = latest.run_id if latest.run_id is not None else run_id
    if status != recorded_status:
        changed = (
            f"the row says {status}, but the index recorded {recorded_status} when it was"
            " written: the row was changed since"
        )
        raise BadLatest(changed, seq) if latest_row is not None else Bad(changed, seq)
    row = {
        "seq": seq,
        "instant": decision.instant_text,
        "status": status,
        "run_id": run_id,
        "reason": reason,
        "count": decision_row.get("count", 1),
        "first_instant": decision_row.get("first_instant"),
        "last_instant": decision_row.get("last_instant"),
        "revision": decision.revision,
        "decided_at": decision.recorded_text,
        "updated_at": updated_at,
        "origin": decision.origin or "schedule",
    }
    # `previous` is the newest calendar decision: the order operators' rows
    # are exempt from (`shell.history_rows.State`).
    return row, decision.instant if decision.origin is None else previous


def page_json(data: bytes, seq: int, *, decision: bool) -> dict[str, Any]:
    """The row a page read found where the index points for `seq`: one JSON
    object of that seq, of the kind (decision or transition) expected."""
    try:
        row = json.loads(data.decode()) if data.endswith(b"\n") else None
    except ValueError:
        raise Bad("unparseable record", seq) from None
    return checked_row(row, seq, decision=decision)


def checked_row(row: object, seq: int, *, decision: bool) -> dict[str, Any]:
    """`row` if it is a row of occurrence `seq` of the kind expected (decision
    or transition), else `Bad`."""
    if not isinstance(row, dict) or row.get("seq") != seq or ("update" in row) == decision:
        raise Bad("the row the index points at is not this occurrence's", seq)
    if not decision and row["update"] is not True:
        raise Bad("update must be true when present", seq)
    return row
