"""The seeded workload of a simulation: schedules and what operators do to them.

`plan_workload` draws, from its own stream, N schedule definitions (cron
every minute, every 2, 5 or 15 minutes, or hourly, in UTC or a half-hour
zone; overlap skip or parallel with a limit of 1-3; misfire skip or latest;
lateness allowances from 0 to 5 minutes) and a timeline of operator actions:
creates, edits (trigger, policy, allowance, inputs, deployment; some with a
stale revision), pauses and resumes, a few deletes, changes of the execution
capacity, a deployment taken away for a while, and clean restarts. With
`operator_actions`, also operator requests drawn from a stream of their own
(so a workload without them is the same as before they existed): runs
started now (`trigger`, some overriding the overlap policy), backfills of a
past range (some overriding it too) and cancels of them. Actions happen at
whole seconds that are never on a minute, so no action ever coincides with
a trigger instant (a trigger request lands between two calendar instants).
With `clock_steps`, from a stream of its own too: up to two moments at which
the host's clock is set, back by 5 s to an hour (seven times in ten) or
forward by a minute to three hours, and an odd number of microseconds
(`Workload.clock_steps`; rule L). Every time here is a moment of the
simulation's own time (`shell.sim.timeline`), which is the clock's reading
until a step: what operators do after a step back happens while the clock
is behind.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, Literal

__all__ = [
    "DEPLOYMENTS",
    "Action",
    "ActionKind",
    "ClockStep",
    "Workload",
    "plan_workload",
    "random_patch",
]

DEPLOYMENTS: Final = ("dep-a", "dep-b", "dep-c")

ActionKind = Literal[
    "create",
    "update",
    "pause",
    "resume",
    "delete",
    "capacity",
    "deployment-off",
    "deployment-on",
    "restart",
    "trigger",
    "backfill",
    "cancel-backfill",
]

_CRONS: Final = (
    ("* * * * *", 35),
    ("*/2 * * * *", 15),
    ("*/5 * * * *", 25),
    ("*/15 * * * *", 10),
    ("0 * * * *", 15),
)


@dataclass(frozen=True, slots=True, order=True)
class Action:
    """One operator action; `slot` names the schedule (its id may change when
    an interrupted create burns one)."""

    at: datetime
    order: int
    kind: ActionKind = field(compare=False)
    slot: int = field(default=-1, compare=False)
    args: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True, order=True)
class ClockStep:
    """The host's clock set on by `by` (back when negative) at the moment `at`."""

    at: datetime
    by: timedelta


@dataclass(frozen=True, slots=True)
class Workload:
    start: datetime
    end: datetime
    capacity: int
    actions: tuple[Action, ...]
    clock_steps: tuple[ClockStep, ...] = ()


def _trigger(rng: random.Random) -> dict[str, Any]:
    expression = rng.choices([c for c, _ in _CRONS], weights=[w for _, w in _CRONS])[0]
    zone = rng.choice(("UTC", "Asia/Kolkata")) if expression.startswith("0 ") else "UTC"
    return {"kind": "cron", "expression": expression, "timezone": zone}


def _policy(rng: random.Random) -> dict[str, Any]:
    if rng.random() < 0.55:
        policy: dict[str, Any] = {"overlap": "skip", "max_active_runs": 1}
    else:
        policy = {"overlap": "parallel", "max_active_runs": rng.randint(1, 3)}
    policy["misfire"] = rng.choice(("skip", "latest"))
    return policy


def _override(rng: random.Random) -> str | None:
    """`overlap` of an operator request: mostly the schedule's own policy."""
    return "allow" if rng.random() < 0.3 else None


def _inputs(rng: random.Random, schedule_id: str) -> dict[str, Any]:
    inputs: dict[str, Any] = {"when": {"$bind": "occurrence.instant"}, "tag": schedule_id}
    if rng.random() < 0.5:
        inputs["revision"] = {"$bind": "schedule.revision"}
    return inputs


def definition(rng: random.Random, schedule_id: str) -> dict[str, Any]:
    """Keyword arguments of a `create_schedule` call (`schedule_id` aside)."""
    return {
        "deployment_id": rng.choice(DEPLOYMENTS),
        "trigger": _trigger(rng),
        "inputs": _inputs(rng, schedule_id),
        **_policy(rng),
        "lateness_allowance_s": rng.choice((0.0, 15.0, 60.0, 300.0)),
        "max_steps": rng.choice((None, 50)),
    }


def random_patch(rng: random.Random, schedule_id: str) -> dict[str, Any]:
    """Fields of an `update_schedule` call: one aspect changed."""
    aspect = rng.choice(("trigger", "policy", "lateness", "inputs", "deployment"))
    if aspect == "trigger":
        return {"trigger": _trigger(rng)}
    if aspect == "policy":
        return _policy(rng)
    if aspect == "lateness":
        return {"lateness_allowance_s": rng.choice((0.0, 15.0, 60.0, 300.0))}
    if aspect == "inputs":
        return {"inputs": _inputs(rng, schedule_id)}
    return {"deployment_id": rng.choice(DEPLOYMENTS)}


def plan_workload(
    seed: int,
    *,
    schedules: int,
    minutes: int,
    start: datetime,
    operator_actions: bool = True,
    clock_steps: bool = True,
) -> Workload:
    """The actions of one simulation, sorted by time (see the module docstring)."""
    rng = random.Random(f"wf-sim/workload/{seed}")
    end = start + timedelta(minutes=minutes)
    span = minutes * 60
    order = 0
    actions: list[Action] = []

    def at(seconds: float) -> datetime:
        # A whole second that is never on the minute: no action meets an instant.
        whole = min(int(seconds), span - 1)
        if whole % 60 == 0:
            whole += rng.randint(1, 59)
        return start + timedelta(seconds=min(whole, span - 1))

    def add(when: float, kind: ActionKind, slot: int = -1, **args: Any) -> None:
        nonlocal order
        order += 1
        actions.append(Action(at(when), order, kind, slot, args))

    for slot in range(schedules):
        created = rng.uniform(0, span * (0.15 if rng.random() < 0.6 else 0.6))
        add(created, "create", slot, definition=definition(rng, f"s{slot:02d}"))
        remaining = span - created
        for _ in range(rng.randint(0, 3)):
            add(created + rng.uniform(60, remaining), "update", slot, stale=rng.random() < 0.15)
        for _ in range(rng.randint(0, 2)):
            paused = created + rng.uniform(60, remaining)
            add(paused, "pause", slot)
            add(paused + rng.uniform(60, 2400), "resume", slot)
        if rng.random() < 0.2:
            add(created + rng.uniform(remaining * 0.5, remaining), "delete", slot)
    for _ in range(rng.randint(0, 2)):
        add(rng.uniform(0, span), "capacity", capacity=rng.randint(1, 5))
    if rng.random() < 0.5:
        off = rng.uniform(0, span)
        add(off, "deployment-off", deployment="dep-c")
        add(off + rng.uniform(120, 1800), "deployment-on", deployment="dep-c")
    for _ in range(rng.randint(0, 2)):
        add(rng.uniform(span * 0.1, span), "restart")
    capacity = rng.randint(2, 4)
    if operator_actions:
        # A stream of its own (`at` draws from it too from here on): what was
        # drawn above is the same with or without these requests.
        rng = random.Random(f"wf-sim/operator/{seed}")
        for slot in range(schedules):
            for _ in range(rng.randint(0, 3)):
                add(rng.uniform(0, span), "trigger", slot, overlap=_override(rng))
            if rng.random() < 0.45:
                requested = rng.uniform(span * 0.1, span)
                # The range is placed at the request: it ends `short`
                # minutes back and reaches `reach` minutes before that
                # (before the schedule existed, sometimes).
                add(
                    requested,
                    "backfill",
                    slot,
                    reach=rng.randint(5, 150),
                    short=rng.choice((0, 0, 1, 5, 20)),
                    overlap=_override(rng),
                )
                if rng.random() < 0.35:
                    add(requested + rng.uniform(30, 900), "cancel-backfill", slot)
    steps: list[ClockStep] = []
    if clock_steps:
        rng = random.Random(f"wf-sim/clock-steps/{seed}")
        for _ in range(rng.choice((0, 1, 1, 2))):
            when = start + timedelta(seconds=rng.uniform(span * 0.1, span * 0.9))
            odd = timedelta(microseconds=rng.randrange(1, 10**6, 2))
            if rng.random() < 0.7:
                by = -(timedelta(seconds=rng.randint(5, 3600)) + odd)
            else:
                by = timedelta(seconds=rng.randint(60, 3 * 3600)) + odd
            steps.append(ClockStep(when, by))
    return Workload(
        start=start,
        end=end,
        capacity=capacity,
        actions=tuple(sorted(actions)),
        clock_steps=tuple(sorted(steps)),
    )
