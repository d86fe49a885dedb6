"""The row rules of a schedule's history: what a row of `history.jsonl` may say.

Every row read back (the replay of a load, the rows a load takes from the
index, a page) is checked by these rules, and every row appended enters the
state through them, so readers and the writer cannot drift apart. `apply_row` checks one row against
the history before it (`State`) and enters it; `check_decision` and
`check_transition` check a row on its own, for readers that take the order
from the index. The run-row moves themselves are `core.occurrences`'s table.
The row format is described in `shell/history_store.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, TypeGuard

from core.fast_init import fast_init
from core.occurrences import (
    DECISION_STATUSES,
    RUN_STATUSES,
    TERMINAL_STATUSES,
    decision_row_refusal,
    origin_row_refusal,
    request_refusal,
    run_row_refusal,
    span_refusal,
)
from shell.store_format import format_instant, parse_instant

__all__ = [
    "Bad",
    "BadLatest",
    "Entry",
    "Open",
    "OpenOccurrence",
    "State",
    "apply_row",
    "check_decision",
    "check_snapshot",
    "check_transition",
    "enter_decision",
    "enter_transition",
    "is_int",
    "unknown",
]


# --- records ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenOccurrence:
    """An admitted occurrence whose run has not reached a terminal status."""

    seq: int
    instant: str
    status: str
    run_id: str | None
    reason: str | None
    snapshot: dict[str, Any] | None
    revision: int | None
    decided_at: str
    updated_at: str
    # Who opened it: "schedule" (the calendar), "trigger" or "backfill".
    origin: str = "schedule"


class Entry(NamedTuple):
    """Where an occurrence's rows are in the log and its latest status: what the
    index stores per seq (`shell/history_index.py` packs it)."""

    decision_off: int
    decision_len: int
    latest_off: int
    latest_len: int
    status: str


@fast_init
@dataclass(frozen=True, slots=True)
class Open:
    """An open occurrence as the state holds it: what `OpenOccurrence` shows,
    plus where its rows are (its index entry)."""

    seq: int
    instant: str
    status: str
    run_id: str | None
    reason: str | None
    decision_off: int
    decision_len: int
    latest_off: int
    latest_len: int
    snapshot: dict[str, Any] | None
    revision: int | None
    decided_at: str
    updated_at: str
    origin: str = "schedule"

    def entry(self) -> Entry:
        return Entry(
            self.decision_off, self.decision_len, self.latest_off, self.latest_len, self.status
        )

    def public(self) -> OpenOccurrence:
        return OpenOccurrence(
            seq=self.seq,
            instant=self.instant,
            status=self.status,
            run_id=self.run_id,
            reason=self.reason,
            snapshot=self.snapshot,
            revision=self.revision,
            decided_at=self.decided_at,
            updated_at=self.updated_at,
            origin=self.origin,
        )


@dataclass(slots=True)
class State:
    """A schedule's history as of log offset `size`.

    `last_decided` is the newest *calendar* decision: calendar decisions
    strictly increase. A trigger's row (rule P) is keyed by the moment of
    the request and `last_trigger` is the newest one: triggers strictly
    increase among themselves. A backfill's row (rule Q) is keyed by the
    calendar instant it makes up for, which has its calendar row already:
    it follows no order, and no instant is open twice. A load through the
    index knows `last_trigger` from the index header and the rows it
    replays, and `last_trigger_request` from those rows only (the rows of
    the newest commit and after, the only ones a runtime record can lag
    behind); a full scan knows both exactly."""

    size: int = 0
    count: int = 0
    lines: int = 0
    last_decided: datetime | None = None
    last_decided_text: str | None = None
    open: dict[int, Open] = field(default_factory=dict)
    by_instant: dict[str, int] = field(default_factory=dict)
    # Index entries changed since the last index write.
    touched: dict[int, Entry] = field(default_factory=dict)
    last_trigger: datetime | None = None
    # The lifecycle seq of the newest trigger row's request (when it names one).
    last_trigger_request: int | None = None

    def copy(self) -> State:
        return State(
            self.size,
            self.count,
            self.lines,
            self.last_decided,
            self.last_decided_text,
            dict(self.open),
            dict(self.by_instant),
            {},
            self.last_trigger,
            self.last_trigger_request,
        )


class Bad(Exception):
    """A row that cannot be parsed or contradicts the history before it."""

    def __init__(self, reason: str, seq: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.seq = seq


class BadLatest(Bad):
    """A page read's latest row of an occurrence is the bad one (not its decision)."""


# --- checking rows ----------------------------------------------------------------------


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _instant_of(row: Mapping[str, Any], key: str, seq: int) -> datetime:
    try:
        return parse_instant(row.get(key))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise Bad(f"{key} is not an ISO-8601 instant: {row.get(key)!r}", seq) from None


def _canonical_text(text: str, parsed: datetime) -> str:
    """The at-rest text of an instant already parsed from `text`.

    Rows this store wrote are canonical ("YYYY-MM-DDTHH:MM:SS[.ffffff]Z");
    recognising that shape is much cheaper than formatting again.
    """
    if (
        text[-1:] == "Z"
        and text[10:11] == "T"
        and (len(text) == 20 or (len(text) == 27 and parsed.microsecond))
    ):
        return text
    return format_instant(parsed)


def _optional_str(row: Mapping[str, Any], key: str, seq: int) -> str | None:
    value = row.get(key)
    if value is not None and not isinstance(value, str):
        raise Bad(f"{key} must be a string", seq)
    return value


def check_snapshot(value: object, seq: int) -> dict[str, Any]:
    """`value` as the snapshot of admitted row `seq`, or `Bad`."""
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("deployment_id"), str)
        or not isinstance(value.get("inputs"), dict)
        or not (value.get("max_steps") is None or is_int(value.get("max_steps")))
        or not is_int(value.get("revision"))
    ):
        raise Bad(
            "an admitted row needs snapshot {deployment_id, inputs, max_steps, revision}", seq
        )
    return value


# --- applying rows ----------------------------------------------------------------------


def apply_row(
    state: State,
    row: object,
    offset: int,
    length: int,
    known: Callable[[int], Open | Entry],
) -> None:
    """Apply the row found at `offset` to `state`, or raise `Bad` leaving
    `state` unchanged. `known(seq)` supplies an occurrence the state does not
    hold (recovery reads it from the index)."""
    if not isinstance(row, dict):
        raise Bad("record is not a JSON object")
    seq = row.get("seq")
    if not is_int(seq) or seq < 0:
        raise Bad(f"seq must be a non-negative integer, got {seq!r}")
    if "update" not in row:
        _apply_decision(state, row, seq, offset, length)
    elif row["update"] is True:
        _apply_transition(state, row, seq, offset, length, known)
    else:
        raise Bad("update must be true when present", seq)


class _Decision(NamedTuple):
    """A decision row's fields, checked by the row rules (`check_decision`)."""

    status: str
    instant: datetime
    instant_text: str
    first: datetime
    recorded_text: str
    run_id: str | None
    reason: str | None
    revision: int | None
    snapshot: dict[str, Any] | None
    # None for a calendar row; "trigger" or "backfill" (rules P, Q).
    origin: str | None
    # A trigger row's request (its lifecycle seq), when it names one.
    request: int | None


class _Transition(NamedTuple):
    """A transition row's fields, checked by the row rules (`check_transition`)."""

    status: str
    instant_text: str
    recorded_text: str
    run_id: str | None
    reason: str | None


def check_decision(row: Mapping[str, Any], seq: int) -> _Decision:
    """The fields of decision row `seq`, or `Bad` naming the first one that
    breaks the row rules. Every decision row read back (replay, a page, the
    rows a load takes from the index) passes here."""
    status = row.get("status")
    if status not in DECISION_STATUSES:
        raise Bad(f"{status!r} is not a decision status", seq)
    instant = _instant_of(row, "instant", seq)
    recorded_at = _instant_of(row, "recorded_at", seq)
    run_id = _optional_str(row, "run_id", seq)
    reason = _optional_str(row, "reason", seq)
    revision = row.get("revision")
    count = row.get("count", 1)
    has_span = row.get("first_instant") is not None or row.get("last_instant") is not None
    refusal = decision_row_refusal(revision=revision, count=count, has_span=has_span)
    if refusal is not None:
        raise Bad(refusal, seq)
    first = instant
    if count > 1:
        first = _instant_of(row, "first_instant", seq)
        refusal = span_refusal(first, _instant_of(row, "last_instant", seq), instant)
        if refusal is not None:
            raise Bad(refusal, seq)
    snapshot = None
    if status == "admitted":
        snapshot = check_snapshot(row.get("snapshot"), seq)
    elif row.get("snapshot") is not None:
        raise Bad("only an admitted row carries a snapshot", seq)
    origin = row.get("origin")
    refusal = origin_row_refusal(origin, status, count)
    if refusal is not None:
        raise Bad(refusal, seq)
    request = row.get("request")
    refusal = request_refusal(origin, request)
    if refusal is not None:
        raise Bad(refusal, seq)
    return _Decision(
        status=status,
        instant=instant,
        instant_text=_canonical_text(row["instant"], instant),
        first=first,
        recorded_text=_canonical_text(row["recorded_at"], recorded_at),
        run_id=run_id,
        reason=reason,
        revision=revision,
        snapshot=snapshot,
        origin=origin,
        request=request,
    )


def check_transition(row: Mapping[str, Any], seq: int) -> _Transition:
    """The fields of a transition row of `seq`, or `Bad` (see `check_decision`)."""
    status = row.get("status")
    if status not in RUN_STATUSES:
        raise Bad(f"{status!r} is not a run status", seq)
    recorded_at = _instant_of(row, "recorded_at", seq)
    run_id = _optional_str(row, "run_id", seq)
    reason = _optional_str(row, "reason", seq)
    instant = _instant_of(row, "instant", seq)
    return _Transition(
        status=status,
        instant_text=_canonical_text(row["instant"], instant),
        recorded_text=_canonical_text(row["recorded_at"], recorded_at),
        run_id=run_id,
        reason=reason,
    )


def _apply_decision(state: State, row: dict[str, Any], seq: int, offset: int, length: int) -> None:
    if seq < state.count:
        raise Bad(f"duplicate decision for seq {seq}", seq)
    if seq > state.count:
        raise Bad(f"decision for seq {seq} where seq {state.count} was expected (a gap)", seq)
    fields = check_decision(row, seq)
    enter_decision(
        state,
        seq,
        offset,
        length,
        status=fields.status,
        instant=fields.instant,
        instant_text=fields.instant_text,
        first=fields.first,
        recorded_text=fields.recorded_text,
        run_id=fields.run_id,
        reason=fields.reason,
        revision=fields.revision,
        snapshot=fields.snapshot,
        origin=fields.origin,
        request=fields.request,
    )


def enter_decision(
    state: State,
    seq: int,
    offset: int,
    length: int,
    *,
    status: str,
    instant: datetime,
    instant_text: str,
    first: datetime,
    recorded_text: str,
    run_id: str | None,
    reason: str | None,
    revision: int | None,
    snapshot: dict[str, Any] | None,
    origin: str | None = None,
    request: int | None = None,
) -> None:
    """Enter a well-formed decision row (seq == state.count) into `state`, or
    raise `Bad` when it is out of its order (see `State`)."""
    if origin is None:
        if state.last_decided is not None and first <= state.last_decided:
            raise Bad(
                f"decision for {instant_text} is not after the previous decision"
                f" {state.last_decided_text} (duplicate or out of order)",
                seq,
            )
    elif origin == "trigger" and state.last_trigger is not None and instant <= state.last_trigger:
        raise Bad(
            f"trigger for {instant_text} is not after the previous trigger"
            f" {format_instant(state.last_trigger)} (duplicate or out of order)",
            seq,
        )
    if status == "admitted" and instant_text in state.by_instant:
        raise Bad(
            f"{instant_text} is admitted and still open (seq {state.by_instant[instant_text]})", seq
        )
    state.count += 1
    if origin is None:
        state.last_decided = instant
        state.last_decided_text = instant_text
    elif origin == "trigger":
        state.last_trigger = instant
        if request is not None:
            state.last_trigger_request = request
    entry = Entry(offset, length, offset, length, status)
    state.touched[seq] = entry
    if status == "admitted":
        state.open[seq] = Open(
            seq=seq,
            instant=instant_text,
            status=status,
            run_id=run_id,
            reason=reason,
            decision_off=offset,
            decision_len=length,
            latest_off=offset,
            latest_len=length,
            snapshot=snapshot,
            revision=revision,
            decided_at=recorded_text,
            updated_at=recorded_text,
            origin=origin or "schedule",
        )
        state.by_instant[instant_text] = seq


def _apply_transition(
    state: State,
    row: dict[str, Any],
    seq: int,
    offset: int,
    length: int,
    known: Callable[[int], Open | Entry],
) -> None:
    fields = check_transition(row, seq)
    status, run_id = fields.status, fields.run_id
    if seq >= state.count:
        raise Bad(f"transition for unknown seq {seq}", seq)
    current = state.open.get(seq)
    if current is None:
        prior: Open | Entry | None = state.touched.get(seq)
        if prior is None:
            prior = known(seq)
        if isinstance(prior, Open):
            current = prior
        elif prior.latest_off >= offset:
            return  # the index already reflects this row (written before a crash)
        else:
            raise Bad(f"a row after the terminal {prior.status} row of seq {seq}", seq)
    if current.latest_off >= offset:
        return
    if fields.instant_text != current.instant:
        raise Bad(
            f"transition names instant {row['instant']} but seq {seq} is {current.instant}", seq
        )
    enter_transition(
        state,
        current,
        offset,
        length,
        status=status,
        run_id=run_id,
        reason=fields.reason,
        recorded_text=fields.recorded_text,
    )


def enter_transition(
    state: State,
    current: Open,
    offset: int,
    length: int,
    *,
    status: str,
    run_id: str | None,
    reason: str | None,
    recorded_text: str,
) -> None:
    """Enter a well-formed transition row of the open occurrence `current`
    (its instant checked, written at `offset`) into `state`, or raise `Bad`
    when the run table refuses the move."""
    seq = current.seq
    refusal = run_row_refusal(current.status, current.run_id, status, run_id, seq)
    if refusal is not None:
        raise Bad(refusal, seq)
    if status in TERMINAL_STATUSES:
        # Closed: only its index entry is kept.
        state.open.pop(seq, None)
        state.by_instant.pop(current.instant, None)
        state.touched[seq] = Entry(
            current.decision_off, current.decision_len, offset, length, status
        )
        return
    # Built field by field: `dataclasses.replace` costs several times more,
    # and this runs for a row of most scheduled runs.
    updated = Open(
        seq=seq,
        instant=current.instant,
        status=status,
        run_id=run_id if run_id is not None else current.run_id,
        reason=reason,
        decision_off=current.decision_off,
        decision_len=current.decision_len,
        latest_off=offset,
        latest_len=length,
        snapshot=current.snapshot,
        revision=current.revision,
        decided_at=current.decided_at,
        updated_at=recorded_text,
        origin=current.origin,
    )
    state.open[seq] = updated
    state.by_instant[current.instant] = seq
    state.touched[seq] = updated.entry()


def unknown(seq: int) -> Open | Entry:
    """The `known` of `apply_row` for an append: the state holds every open
    occurrence, so a transition for any other seq is refused."""
    raise Bad(f"no open occurrence with seq {seq}", seq)
