"""A schedule's timeline as SVG, drawn on the server.

One strip per window (the last day, the last week), time running left to
right up to now:

- each run is a bar from its admission to its last recorded change (to now
  while it is admitted, running or interrupted), coloured by status; runs
  that overlap in time get lanes of their own (the first lane whose last
  bar has ended), so parallel runs are side by side, never on top of each
  other;
- an interrupted run's span since it was interrupted is hatched: it waits
  for input and still holds its overlap slot;
- instants decided without a run (skipped for overlap or misfire,
  coalesced, superseded, rejected by preflight) are marks on a row of their
  own, a coalesced or superseded row spanning its first to last instant;
- the schedule's paused spans, from its lifecycle records, are shaded
  behind everything.

Every bar and mark has a `<title>` (a browser shows it on hover) and a run's
bar links to its page. `build_timeline` is a pure function of its arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape
from typing import Any, Final

from adapters.console.present import parse_utc

__all__ = ["Bar", "Mark", "build_timeline", "paused_spans"]

_WIDTH: Final = 960
_LEFT: Final = 8
_RIGHT: Final = 8
_LANE: Final = 14
_GAP: Final = 3
_AXIS: Final = 18
_MARKS: Final = 14
_MAX_LANES: Final = 8

_RUN_STATUSES: Final = frozenset(
    {"admitted", "running", "interrupted", "completed", "failed", "exhausted"}
)


@dataclass(frozen=True, slots=True)
class Bar:
    run_id: str | None
    status: str
    start: datetime
    end: datetime
    instant: datetime
    interrupted_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Mark:
    status: str
    start: datetime
    end: datetime
    reason: str | None


def paused_spans(
    records: Sequence[Mapping[str, Any]], now: datetime
) -> list[tuple[datetime, datetime]]:
    """The paused spans of a schedule from its lifecycle records (`paused`
    to the next `resumed` or `deleted`, or to now)."""
    spans: list[tuple[datetime, datetime]] = []
    began: datetime | None = None
    for record in records:
        at = parse_utc(record.get("at"))
        if at is None:
            continue
        kind = record.get("kind")
        if kind == "paused" and began is None:
            began = at
        elif kind in ("resumed", "deleted") and began is not None:
            spans.append((began, at))
            began = None
    if began is not None:
        spans.append((began, now))
    return spans


def _split(rows: Sequence[Mapping[str, Any]], now: datetime) -> tuple[list[Bar], list[Mark]]:
    bars: list[Bar] = []
    marks: list[Mark] = []
    for row in rows:
        status = str(row.get("status"))
        instant = parse_utc(row.get("instant"))
        if instant is None or status == "pending":
            continue
        decided = parse_utc(row.get("decided_at")) or instant
        changed = parse_utc(row.get("updated_at")) or decided
        if status in _RUN_STATUSES:
            open_ = status in ("admitted", "running", "interrupted")
            bars.append(
                Bar(
                    run_id=row.get("run_id"),
                    status=status,
                    start=min(decided, instant) if decided < instant else decided,
                    end=now if open_ else max(changed, decided),
                    instant=instant,
                    interrupted_at=changed if status == "interrupted" else None,
                )
            )
        else:
            first = parse_utc(row.get("first_instant")) or instant
            last = parse_utc(row.get("last_instant")) or instant
            marks.append(Mark(status=status, start=first, end=last, reason=row.get("reason")))
    return bars, marks


def _lanes(bars: Sequence[Bar]) -> list[tuple[int, Bar]]:
    ends: list[datetime] = []
    placed: list[tuple[int, Bar]] = []
    for bar in sorted(bars, key=lambda b: (b.start, b.instant)):
        for lane, end in enumerate(ends):
            if end <= bar.start:
                ends[lane] = bar.end
                placed.append((lane, bar))
                break
        else:
            ends.append(bar.end)
            placed.append((len(ends) - 1, bar))
    return placed


def _ticks(start: datetime, end: datetime) -> list[tuple[datetime, str]]:
    span = end - start
    if span <= timedelta(days=1, hours=1):
        step, pattern = timedelta(hours=3), "%H:%M"
        first = start.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        while first.hour % 3:
            first += timedelta(hours=1)
    else:
        step, pattern = timedelta(days=1), "%a %d"
        first = start.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    ticks: list[tuple[datetime, str]] = []
    at = first
    while at < end:
        ticks.append((at, at.strftime(pattern)))
        at += step
    return ticks


def build_timeline(
    *,
    title: str,
    start: datetime,
    end: datetime,
    rows: Sequence[Mapping[str, Any]],
    paused: Sequence[tuple[datetime, datetime]],
    complete_from: datetime | None = None,
) -> str:
    """The SVG (as text) of one window `[start, end]` (UTC). `rows` are
    occurrence rows (`list_schedule_occurrences`); `complete_from`, when the
    rows read do not reach back to `start`, is where they begin: the part
    before it is marked as not drawn."""
    usable = _WIDTH - _LEFT - _RIGHT
    total = (end - start).total_seconds() or 1.0

    def x(at: datetime) -> float:
        offset = (min(max(at, start), end) - start).total_seconds()
        return round(_LEFT + usable * offset / total, 1)

    bars, marks = _split(rows, end)
    bars = [b for b in bars if b.end >= start and b.start <= end]
    marks = [m for m in marks if m.end >= start and m.start <= end]
    placed = _lanes(bars)
    lanes = max((lane for lane, _ in placed), default=-1) + 1
    shown_lanes = min(max(lanes, 1), _MAX_LANES)
    lanes_top = _AXIS
    marks_top = lanes_top + shown_lanes * (_LANE + _GAP)
    height = marks_top + _MARKS + 16
    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" role="img"'
        f' viewBox="0 0 {_WIDTH} {height}" width="100%"'
        f' aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse"'
        ' patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff3c4"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#b58900" stroke-width="3"/>'
        "</pattern></defs>",
        f'<rect class="tl-bg" x="{_LEFT}" y="{lanes_top}" width="{usable}"'
        f' height="{marks_top + _MARKS - lanes_top}"/>',
    ]
    for began, ended in paused:
        if ended < start or began > end:
            continue
        out.append(
            f'<rect class="tl-paused" x="{x(began)}" y="{lanes_top}"'
            f' width="{max(1.0, x(ended) - x(began))}" height="{marks_top + _MARKS - lanes_top}">'
            f"<title>paused {began:%Y-%m-%d %H:%M:%SZ} to {ended:%Y-%m-%d %H:%M:%SZ}</title>"
            "</rect>"
        )
    if complete_from is not None and complete_from > start:
        out.append(
            f'<rect class="tl-unread" x="{_LEFT}" y="{lanes_top}"'
            f' width="{x(complete_from) - _LEFT}" height="{marks_top + _MARKS - lanes_top}">'
            f"<title>not drawn: older than the rows read (from"
            f" {complete_from:%Y-%m-%d %H:%M:%SZ})</title></rect>"
        )
    for at, label in _ticks(start, end):
        out.append(
            f'<line class="tl-tick" x1="{x(at)}" y1="{_AXIS - 4}" x2="{x(at)}"'
            f' y2="{marks_top + _MARKS}"/>'
            f'<text class="tl-label" x="{x(at) + 2}" y="{_AXIS - 6}">{label}</text>'
        )
    for lane, bar in placed:
        if lane >= _MAX_LANES:
            continue
        y = lanes_top + lane * (_LANE + _GAP)
        left = x(bar.start)
        right = x(bar.end)
        tip = (
            f"{bar.run_id or 'no run'}: {bar.status}, instant {bar.instant:%Y-%m-%d %H:%M:%SZ},"
            f" {bar.start:%H:%M:%S} to {bar.end:%H:%M:%S}"
        )
        body = (
            f'<rect class="tl-bar st-{escape(bar.status)}" x="{left}" y="{y}"'
            f' width="{max(2.0, right - left)}" height="{_LANE}">'
            f"<title>{escape(tip)}</title></rect>"
        )
        if bar.interrupted_at is not None:
            hatch_left = x(bar.interrupted_at)
            body += (
                f'<rect class="tl-interrupted" x="{hatch_left}" y="{y}"'
                f' width="{max(2.0, right - hatch_left)}" height="{_LANE}" fill="url(#hatch)">'
                f"<title>{escape(bar.run_id or '')} interrupted since"
                f" {bar.interrupted_at:%Y-%m-%d %H:%M:%SZ}: waits for input</title></rect>"
            )
        if bar.run_id:
            body = f'<a href="/runs/{escape(bar.run_id)}">{body}</a>'
        out.append(body)
    if lanes > _MAX_LANES:
        out.append(
            f'<text class="tl-label" x="{_WIDTH - 200}" y="{marks_top - 2}">'
            f"+{lanes - _MAX_LANES} more lanes not drawn</text>"
        )
    for mark in marks:
        left = x(mark.start)
        width = max(2.0, x(mark.end) - left)
        tip = f"{mark.status} at {mark.start:%Y-%m-%d %H:%M:%SZ}"
        if mark.end != mark.start:
            tip += f" to {mark.end:%Y-%m-%d %H:%M:%SZ}"
        if mark.reason:
            tip += f": {mark.reason}"
        out.append(
            f'<rect class="tl-mark st-{escape(mark.status)}" x="{left}" y="{marks_top + 2}"'
            f' width="{width}" height="{_MARKS - 4}"><title>{escape(tip)}</title></rect>'
        )
    out.append(
        f'<text class="tl-label" x="{_LEFT}" y="{height - 1}">'
        f"{start:%Y-%m-%d %H:%M}Z</text>"
        f'<text class="tl-label" text-anchor="end" x="{_WIDTH - _RIGHT}" y="{height - 1}">'
        f"now {end:%H:%M:%S}Z</text>"
    )
    out.append("</svg>")
    return "".join(out)
