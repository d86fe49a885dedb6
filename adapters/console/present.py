"""How the console words and colours things: triggers in words, instants in a
schedule's zone, in UTC and relative to now, durations, and the status
colours of the `wf-schedule` CLI (`adapters/admin/output.py`) as CSS
classes. Pure functions of their arguments (`now` is passed in).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from adapters.admin.output import STATE_STYLES, STATUS_STYLES
from core.calendar import compile_trigger
from core.definitions import parse_definition
from core.errors import InvalidDefinition

__all__ = [
    "ORIGIN_TITLES",
    "backfill_progress",
    "css_class",
    "duration_text",
    "instant_in_zone",
    "next_instants",
    "origin_label",
    "parse_utc",
    "relative_text",
    "trigger_words",
]

_DAYS: Final = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_MONTHS: Final = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


# An occurrence an operator asked for, as the ledger labels it (a calendar
# occurrence has no label): its name, and what it means on hover.
ORIGIN_TITLES: Final[Mapping[str, str]] = {
    "trigger": "run now by an operator (trigger): an instant of its own, outside the calendar",
    "backfill": "a past calendar instant that had not run, admitted by an operator's backfill",
}


def origin_label(row: Mapping[str, Any]) -> dict[str, str] | None:
    """The ledger's label for an occurrence an operator asked for (`origin`
    "trigger" or "backfill"): `{"name", "title"}`; None for the calendar's."""
    origin = row.get("origin")
    if not isinstance(origin, str) or origin not in ORIGIN_TITLES:
        return None
    return {"name": origin, "title": ORIGIN_TITLES[origin]}


def backfill_progress(
    backfill: Mapping[str, Any] | None, zone: object, now: datetime
) -> dict[str, Any] | None:
    """What the schedule page shows of its backfill (`get_schedule`'s
    `backfill`): its state, `admitted` of `planned` as words and a percentage,
    the range and the next instant in the schedule's zone, when it was
    requested and ended. None when the schedule never had one."""
    if not isinstance(backfill, Mapping):
        return None
    planned = backfill.get("planned")
    admitted = backfill.get("admitted")
    percent = 0
    if isinstance(planned, int) and isinstance(admitted, int):
        percent = 100 if planned <= 0 else min(100, 100 * admitted // planned)

    def local(key: str) -> str:
        instant = parse_utc(backfill.get(key))
        return instant_in_zone(instant, zone) if instant is not None else "-"

    def relative(key: str) -> str:
        instant = parse_utc(backfill.get(key))
        return relative_text(instant, now) if instant is not None else ""

    left_out = [
        f"{backfill[key]} {words}"
        for key, words in (
            ("already_admitted", "already admitted before"),
            ("left_to_calendar", "left to the calendar"),
        )
        if backfill.get(key)
    ]
    return {
        "state": backfill.get("state"),
        "admitted": admitted,
        "planned": planned,
        "remaining": backfill.get("remaining"),
        "percent": percent,
        "words": f"{admitted} of {planned} admitted",
        "start": local("start"),
        "end": local("end"),
        "next": local("next") if backfill.get("next") else None,
        "overlap": "allowed" if backfill.get("overlap") == "allow" else "the schedule's policy",
        "requested": local("requested_at"),
        "requested_relative": relative("requested_at"),
        "ended": local("ended_at") if backfill.get("ended_at") else None,
        "left_out": ", ".join(left_out),
    }


def css_class(status: object) -> str:
    """The CSS class of an occurrence's or run's status, or a schedule's state:
    `st-<name>`; the stylesheet gives each the CLI's colour (`STATUS_STYLES`,
    `STATE_STYLES`)."""
    name = str(status)
    if name in STATUS_STYLES or name in STATE_STYLES:
        return f"st-{name}"
    return "st-unknown"


def parse_utc(text: object) -> datetime | None:
    """An API instant (`...Z`) as an aware datetime, None when absent or bad."""
    if not isinstance(text, str) or not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo is not None else None


def _zone(name: object) -> ZoneInfo:
    try:
        return ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def instant_in_zone(instant: datetime, zone: object) -> str:
    """`2026-03-29 03:00 CEST` (seconds shown only when not zero)."""
    local = instant.astimezone(_zone(zone))
    pattern = "%Y-%m-%d %H:%M:%S %Z" if local.second or local.microsecond else "%Y-%m-%d %H:%M %Z"
    return local.strftime(pattern)


def relative_text(instant: datetime, now: datetime) -> str:
    """`in 14 min`, `3 h ago`, `now`: how far `instant` is from `now`."""
    seconds = (instant - now).total_seconds()
    future = seconds > 0
    span = abs(seconds)
    if span < 1:
        return "now"
    if span < 60:
        amount = f"{int(span)} s"
    elif span < 3600:
        amount = f"{int(span // 60)} min"
    elif span < 86400 * 2:
        hours, rest = divmod(int(span), 3600)
        minutes = rest // 60
        amount = f"{hours} h {minutes} min" if minutes and hours < 10 else f"{hours} h"
    else:
        amount = f"{int(span // 86400)} days"
    return f"in {amount}" if future else f"{amount} ago"


def duration_text(seconds: float | None) -> str:
    """`1.2 s`, `3 min 4 s`, `2 h 5 min`; `-` when unknown."""
    if seconds is None or seconds < 0:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f} s" if seconds >= 0.1 else f"{seconds * 1000:.0f} ms"
    if seconds < 3600:
        minutes, rest = divmod(int(seconds), 60)
        return f"{minutes} min {rest} s" if minutes else f"{rest} s"
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours} h {rest // 60} min"


def _number(field: str) -> int | None:
    return int(field) if field.isdigit() else None


def _at(hour: int, minute: int) -> str:
    return f"{hour:02d}:{minute:02d}"


def _days_words(field: str) -> str | None:
    if field == "1-5":
        return "on weekdays"
    if field in ("0,6", "6,0", "6,7", "6-7", "sat,sun"):
        return "on weekends"
    names: list[str] = []
    for part in field.split(","):
        number = _number(part)
        if number is None or number > 7:
            return None
        names.append(_DAYS[number % 7])
    return "on " + ", ".join(names)


def _cron_words(expression: str) -> str | None:
    """The common shapes of a five-field expression in words; None for the rest."""
    fields = expression.split()
    if len(fields) != 5:
        return None
    minute, hour, dom, month, dow = fields
    minute_n, hour_n = _number(minute), _number(hour)
    if fields == ["*"] * 5:
        return "every minute"
    if minute.startswith("*/") and _number(minute[2:]) and fields[1:] == ["*"] * 4:
        return f"every {int(minute[2:])} minutes"
    if minute_n is not None and fields[1:] == ["*"] * 4:
        return f"every hour at :{minute_n:02d}"
    if (
        minute_n is not None
        and hour.startswith("*/")
        and _number(hour[2:])
        and fields[2:] == ["*"] * 3
    ):
        return f"every {int(hour[2:])} hours at :{minute_n:02d}"
    if minute_n is None or hour_n is None:
        return None
    at = _at(hour_n, minute_n)
    if dom == "*" and month == "*" and dow == "*":
        return f"every day at {at}"
    if dom == "*" and month == "*":
        days = _days_words(dow)
        return f"{days} at {at}" if days else None
    dom_n = _number(dom)
    if dom_n is not None and month == "*" and dow == "*":
        return f"monthly on day {dom_n} at {at}"
    month_n = _number(month)
    if dom_n is not None and month_n is not None and 1 <= month_n <= 12 and dow == "*":
        return f"every year on {_MONTHS[month_n - 1]} {dom_n} at {at}"
    return None


def trigger_words(trigger: object) -> str:
    """`every hour at :00, Europe/Berlin`; `once at 2026-03-29 02:30 CEST`; a
    cron expression of another shape as `cron <expr>, <zone>`."""
    if not isinstance(trigger, Mapping):
        return "-"
    if trigger.get("kind") == "oneshot":
        at = parse_utc(trigger.get("at"))
        return f"once at {instant_in_zone(at, 'UTC')}" if at else f"once at {trigger.get('at')}"
    if trigger.get("kind") == "cron":
        expression = str(trigger.get("expression", ""))
        zone = str(trigger.get("timezone", "UTC"))
        words = _cron_words(expression)
        return f"{words}, {zone}" if words else f"cron {expression}, {zone}"
    return "-"


def next_instants(schedule: Mapping[str, Any], now: datetime, count: int) -> list[dict[str, Any]]:
    """The schedule's next `count` trigger instants after `now`, each with its
    wall time in the schedule's zone, UTC, relative text, and DST mark
    (`gap`: the wall time does not exist and croniter moved it; `fold`: the
    wall time happens twice and this is one of them). Empty for a schedule
    whose definition cannot be compiled."""
    definition = {
        key: schedule[key]
        for key in (
            "schedule_id",
            "deployment_id",
            "trigger",
            "inputs",
            "overlap",
            "max_active_runs",
            "misfire",
            "lateness_allowance_s",
            "max_steps",
        )
        if key in schedule
    }
    try:
        compiled = compile_trigger(parse_definition(definition).trigger)
    except (InvalidDefinition, KeyError, TypeError, ValueError):
        return []
    zone = compiled.timezone
    shown: list[dict[str, Any]] = []
    for instant in compiled.iter_after(now):
        shown.append(
            {
                "utc": instant.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ"),
                "local": instant_in_zone(instant, zone),
                "relative": relative_text(instant, now),
                "dst": compiled.dst_note(instant),
            }
        )
        if len(shown) == count:
            break
    return shown


def seconds_between(start: object, end: object) -> float | None:
    """Seconds from one API instant to another (None if either is missing)."""
    first, last = parse_utc(start), parse_utc(end)
    if first is None or last is None:
        return None
    return (last - first).total_seconds()


def ago(instant: object, now: datetime) -> str:
    """Relative text of an API instant, `-` when absent."""
    parsed = parse_utc(instant)
    return relative_text(parsed, now) if parsed is not None else "-"


def week_before(now: datetime) -> datetime:
    return now - timedelta(days=7)


def _count_phrase(row: Mapping[str, Any]) -> str:
    count = row.get("count")
    if isinstance(count, int) and count > 1:
        first = parse_utc(row.get("first_instant"))
        last = parse_utc(row.get("last_instant"))
        if first is not None and last is not None:
            return f"{count} instants, {first:%Y-%m-%d %H:%M}Z to {last:%Y-%m-%d %H:%M}Z"
        return f"{count} instants"
    return "this instant"


def reason_text(row: Mapping[str, Any], schedule: Mapping[str, Any]) -> str:
    """Why a row has its status: the reason the store recorded when there is
    one (a failure, a preflight rejection), otherwise what the status means
    for this schedule's policies (docs/operations.md, "Inspecting")."""
    recorded = row.get("reason")
    if isinstance(recorded, str) and recorded:
        return recorded
    status = row.get("status")
    allowance = schedule.get("lateness_allowance_s", 60)
    limit = schedule.get("max_active_runs")
    if status == "skipped-overlap":
        if schedule.get("overlap") == "parallel" and limit:
            return f"not admitted: {limit} run(s) of this schedule were already active (overlap)"
        return "not admitted: a run of this schedule was still active (overlap skip)"
    if status == "skipped-misfire":
        return (
            f"missed by more than the lateness allowance of {allowance:g} s"
            f" (misfire skip): {_count_phrase(row)}"
            if isinstance(allowance, int | float)
            else f"missed (misfire skip): {_count_phrase(row)}"
        )
    if status == "coalesced":
        return f"missed in one catch-up and folded into a newer candidate: {_count_phrase(row)}"
    if status == "superseded":
        return (
            "a held candidate replaced by a newer one (misfire latest), or dropped by a pause,"
            " delete or edit"
        )
    if status == "pending":
        return "held: waits for overlap or a free slot"
    return ""
