"""What an append to a schedule's history may say: its arguments checked and
its row built, the same for every backend.

`DecisionAppend.of(...)` and `TransitionAppend.of(...)` check the arguments of
`append_decision` and `append_transition` (raising `InvalidInput` that names
every bad field before anything is staged); `build(state)` makes the row the
history holds and `enter(...)` applies it to the state by the row rules of
`shell/history_rows.py`. The file store encodes the row as a log line
(`shell/history_store.py`), the database store inserts it
(`shell/pg/history.py`): the row is the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from core.errors import InvalidInput, InvalidState, Problem
from core.fast_init import fast_init
from core.occurrences import (
    DECISION_STATUSES,
    RUN_STATUSES,
    origin_row_refusal,
    request_refusal,
)
from shell.history_rows import Bad, Open, State, check_snapshot, enter_decision, is_int
from shell.store_format import Instant, canonical_instant, parse_instant

__all__ = ["SNAPSHOT_PROBLEM", "DecisionAppend", "TransitionAppend"]

SNAPSHOT_PROBLEM: Final = Problem(
    field="snapshot", reason="must be JSON {deployment_id, inputs, max_steps, revision}"
)


@fast_init
@dataclass(frozen=True, slots=True)
class DecisionAppend:
    """A checked `append_decision`: the row that opens the occurrence at `instant`."""

    instant_text: str
    status: str
    recorded_text: str
    run_id: str | None
    reason: str | None
    count: int
    first_text: str | None
    last_text: str | None
    revision: int | None
    snapshot: dict[str, Any] | None
    origin: str | None = None
    request: int | None = None

    @classmethod
    def of(
        cls,
        *,
        instant: Instant,
        status: str,
        recorded_at: Instant,
        run_id: str | None = None,
        reason: str | None = None,
        count: int = 1,
        first_instant: Instant | None = None,
        last_instant: Instant | None = None,
        revision: int | None = None,
        snapshot: Mapping[str, Any] | None = None,
        origin: str | None = None,
        request: int | None = None,
    ) -> DecisionAppend:
        """Raises `InvalidInput` naming every malformed argument (see
        `HistoryStore.append_decision`)."""
        problems: list[Problem] = []

        def instant_field(value: Instant | None, name: str) -> str | None:
            if value is None:
                return None
            try:
                return canonical_instant(value)
            except (TypeError, ValueError) as exc:
                problems.append(Problem(field=name, reason=f"must be an aware instant: {exc}"))
                return None

        instant_text = instant_field(instant, "instant")
        recorded_text = instant_field(recorded_at, "recorded_at")
        first_text = instant_field(first_instant, "first_instant")
        last_text = instant_field(last_instant, "last_instant")
        if status not in DECISION_STATUSES:
            problems.append(
                Problem(field="status", reason=f"must be one of {sorted(DECISION_STATUSES)}")
            )
        if not is_int(count) or count < 1:
            problems.append(Problem(field="count", reason="must be a positive integer"))
        elif count > 1 and (first_text is None or last_text is None):
            problems.append(
                Problem(field="first_instant", reason="count > 1 needs first and last instants")
            )
        elif count == 1 and (first_text is not None or last_text is not None):
            problems.append(
                Problem(field="first_instant", reason="only a row with count > 1 has them")
            )
        if (status == "admitted") != (snapshot is not None):
            problems.append(
                Problem(field="snapshot", reason="is required for admitted and only for it")
            )
        elif snapshot is not None:
            # Whether it is JSON at all is found when the row is encoded,
            # before anything is staged.
            try:
                check_snapshot(dict(snapshot), 0)
            except Bad:
                problems.append(SNAPSHOT_PROBLEM)
        for name, value in (("run_id", run_id), ("reason", reason)):
            if value is not None and not isinstance(value, str):
                problems.append(Problem(field=name, reason="must be a string"))
        if revision is not None and (not is_int(revision) or revision < 1):
            problems.append(Problem(field="revision", reason="must be a positive integer"))
        refusal = origin_row_refusal(origin, status, count)
        if refusal is not None:
            problems.append(Problem(field="origin", reason=refusal))
        refusal = request_refusal(origin, request)
        if refusal is not None:
            problems.append(Problem(field="request", reason=refusal))
        if problems:
            raise InvalidInput.from_problems("history row", problems)
        assert instant_text is not None and recorded_text is not None
        return cls(
            instant_text=instant_text,
            status=status,
            recorded_text=recorded_text,
            run_id=run_id,
            reason=reason,
            count=count,
            first_text=first_text,
            last_text=last_text,
            revision=revision,
            snapshot=dict(snapshot) if snapshot is not None else None,
            origin=origin,
            request=request,
        )

    @classmethod
    def admitted(
        cls,
        *,
        instant: Instant,
        run_id: str,
        snapshot: Mapping[str, Any],
        recorded_at: Instant,
        origin: str | None = None,
        request: int | None = None,
    ) -> DecisionAppend:
        """The `admitted` row of an admission, at its snapshot's revision
        (`stage_admitted`'s general path on every backend)."""
        revision = snapshot.get("revision") if isinstance(snapshot, Mapping) else None
        return cls.of(
            instant=instant,
            status="admitted",
            recorded_at=recorded_at,
            run_id=run_id,
            revision=revision if is_int(revision) else None,
            snapshot=snapshot,
            origin=origin,
            request=request,
        )

    def build(self, state: State) -> dict[str, Any]:
        """The decision row, at the next seq of `state`."""
        row: dict[str, Any] = {
            "seq": state.count,
            "instant": self.instant_text,
            "status": self.status,
            "recorded_at": self.recorded_text,
        }
        optional = {"run_id": self.run_id, "reason": self.reason, "revision": self.revision}
        row.update({k: v for k, v in optional.items() if v is not None})
        if self.snapshot is not None:
            row["snapshot"] = dict(self.snapshot)
        if self.count > 1:
            row.update(count=self.count, first_instant=self.first_text, last_instant=self.last_text)
        if self.origin is not None:
            row["origin"] = self.origin
        if self.request is not None:
            row["request"] = self.request
        return row

    def enter(self, state: State, row: Mapping[str, Any], offset: int, length: int) -> None:
        """Enter the row built by `build` into `state` (every field is checked
        already: no second parse), or raise `Bad` as a row read back would be
        refused."""
        instant_at = parse_instant(self.instant_text)
        first_at = parse_instant(self.first_text) if self.first_text is not None else instant_at
        last_at = parse_instant(self.last_text) if self.last_text is not None else instant_at
        if self.count > 1 and (not first_at < last_at or last_at != instant_at):
            raise Bad("a coalesced row needs first_instant < last_instant == instant", row["seq"])
        enter_decision(
            state,
            row["seq"],
            offset,
            length,
            status=self.status,
            instant=instant_at,
            instant_text=self.instant_text,
            first=first_at,
            recorded_text=self.recorded_text,
            run_id=self.run_id,
            reason=self.reason,
            revision=self.revision,
            snapshot=dict(self.snapshot) if self.snapshot is not None else None,
            origin=self.origin,
            request=self.request,
        )


@fast_init
@dataclass(frozen=True, slots=True)
class TransitionAppend:
    """A checked `append_transition`: a move of an open occurrence to `status`."""

    seq: int | None
    instant_text: str | None
    status: str
    recorded_text: str
    run_id: str | None
    reason: str | None

    @classmethod
    def of(
        cls,
        *,
        status: str,
        recorded_at: Instant,
        seq: int | None = None,
        instant: Instant | None = None,
        run_id: str | None = None,
        reason: str | None = None,
    ) -> TransitionAppend:
        """Raises `InvalidInput` naming every malformed argument (see
        `HistoryStore.append_transition`)."""
        problems: list[Problem] = []
        if (seq is None) == (instant is None):
            problems.append(Problem(field="seq", reason="give exactly one of seq and instant"))
        if seq is not None and (not is_int(seq) or seq < 0):
            problems.append(Problem(field="seq", reason="must be a non-negative integer"))
        if status not in RUN_STATUSES:
            problems.append(
                Problem(field="status", reason=f"must be one of {sorted(RUN_STATUSES)}")
            )
        instant_text: str | None = None
        recorded_text = ""
        for name, value in (("instant", instant), ("recorded_at", recorded_at)):
            if value is None:
                continue
            try:
                text = canonical_instant(value)
            except (TypeError, ValueError) as exc:
                problems.append(Problem(field=name, reason=f"must be an aware instant: {exc}"))
                continue
            if name == "instant":
                instant_text = text
            else:
                recorded_text = text
        for name, value in (("run_id", run_id), ("reason", reason)):
            if value is not None and not isinstance(value, str):
                problems.append(Problem(field=name, reason="must be a string"))
        if problems:
            raise InvalidInput.from_problems("history row", problems)
        return cls(seq, instant_text, status, recorded_text, run_id, reason)

    def target(self, schedule_id: str, state: State) -> Open:
        """The open occurrence of `state` the move is for; `InvalidState` when
        there is none."""
        seq = self.seq if self.seq is not None else state.by_instant.get(self.instant_text or "")
        current = state.open.get(seq) if seq is not None else None
        if current is None:
            what = f"seq {self.seq}" if self.seq is not None else f"instant {self.instant_text}"
            raise InvalidState(
                f"history of {schedule_id!r} has no open occurrence at {what}",
                data={"schedule_id": schedule_id},
            )
        return current

    def says_nothing_new(self, current: Open) -> bool:
        """The same status with no run id to attach: an append writes nothing."""
        return self.status == current.status and (
            self.run_id is None or self.run_id == current.run_id
        )

    def build(self, current: Open) -> dict[str, Any]:
        """The transition row of `current`; it carries the run id once known."""
        row: dict[str, Any] = {
            "seq": current.seq,
            "update": True,
            "instant": current.instant,
            "status": self.status,
            "recorded_at": self.recorded_text,
        }
        known_run = self.run_id if self.run_id is not None else current.run_id
        if known_run is not None:
            row["run_id"] = known_run
        if self.reason is not None:
            row["reason"] = self.reason
        return row
