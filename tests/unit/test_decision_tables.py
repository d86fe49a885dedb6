"""Execute docs/decision-tables.md: every scenario there is a test.

The format is described at the top of that document. Each table row is one
step: set the clock, deliver the row's events through a model of the shell
(tests/property/shell_model.py), and compare the commands `decide` returned
(rendered in the table's compact notation) with the row, in order. The
optional `wake` column is compared with `next_wakeup` after the step.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any

import pytest

from core.commands import (
    AdmitOccurrence,
    BlockSchedule,
    Command,
    CreateAdmittedRun,
    LogWarning,
    PersistRuntime,
    RecordOccurrence,
    StartRun,
)
from core.decide import next_wakeup
from core.definitions import apply_patch, parse_definition, parse_patch
from core.events import (
    BackfillCancelled,
    BackfillRequested,
    CapacityChanged,
    Event,
    ScheduleCreated,
    ScheduleDeleted,
    SchedulePaused,
    ScheduleResumed,
    ScheduleTriggered,
    ScheduleUpdated,
)
from tests.property.shell_model import ShellModel

DOC = Path(__file__).resolve().parents[2] / "docs" / "decision-tables.md"
DEFAULT_DEPLOYMENT = "report.default"


@dataclass
class Step:
    line: int
    clock: str
    events: str
    expected: str
    wake: str | None


@dataclass
class Scenario:
    title: str
    line: int
    day: date
    capacity: int
    definitions: list[dict[str, Any]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse_document(text: str) -> list[Scenario]:
    scenarios: list[Scenario] = []
    current: Scenario | None = None
    in_json = False
    header: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("## "):
            current = None
            continue
        if line.startswith("### "):
            current = Scenario(
                title=line[4:].strip(), line=number, day=date(2024, 1, 15), capacity=4
            )
            scenarios.append(current)
            header = []
            continue
        if current is None:
            continue
        if line.strip() == "```json":
            in_json = True
            continue
        if in_json:
            if line.strip() == "```":
                in_json = False
            elif line.strip():
                current.definitions.append(json.loads(line))
            continue
        settings = re.match(r"^Date: (\d{4}-\d{2}-\d{2})\.(?: Capacity: (\d+)\.)?\s*$", line)
        if settings:
            current.day = date.fromisoformat(settings.group(1))
            if settings.group(2):
                current.capacity = int(settings.group(2))
            continue
        if line.startswith("|"):
            cells = _cells(line)
            if not header:
                header = [c.lower() for c in cells]
                assert header[:3] == ["clock", "events", "commands"], (number, header)
                continue
            if set(line) <= set("|- :"):
                continue
            row = dict(zip(header, cells, strict=True))
            wake = row.get("wake")
            current.steps.append(
                Step(
                    line=number,
                    clock=row["clock"],
                    events=row["events"],
                    expected=row["commands"],
                    wake=wake if wake else None,
                )
            )
        elif line.strip() == "":
            header = [] if not current.steps else header
    return [s for s in scenarios if s.steps]


# --- times -------------------------------------------------------------------


def parse_time(text: str, day: date) -> datetime:
    text = text.strip().strip("`")
    if "T" in text:
        return datetime.fromisoformat(text).replace(tzinfo=UTC)
    return datetime.combine(day, time.fromisoformat(text), tzinfo=UTC)


def render_time(instant: datetime, day: date) -> str:
    instant = instant.astimezone(UTC)
    clock = instant.strftime("%H:%M:%S" if instant.second else "%H:%M")
    if instant.microsecond:
        clock = instant.strftime("%H:%M:%S.%f")
    return clock if instant.date() == day else f"{instant.date().isoformat()}T{clock}"


# --- commands in the table notation -----------------------------------------


def render(command: Command, day: date) -> str:
    def t(instant: datetime) -> str:
        return render_time(instant, day)

    if isinstance(command, RecordOccurrence):
        text = f"{command.schedule_id} {t(command.instant)} {command.status}"
        if command.origin != "schedule":
            text += f" {command.origin}"
        if command.count != 1:
            assert command.first_instant is not None
            text += f" x{command.count} {t(command.first_instant)}..{t(command.instant)}"
        if command.run_id is not None:
            text += f" {command.run_id}"
        if command.reason is not None:
            text += f' "{command.reason}"'
        return text
    if isinstance(command, AdmitOccurrence):
        text = f"admit {command.schedule_id} {t(command.instant)}"
        return text if command.origin == "schedule" else f"{text} {command.origin}"
    if isinstance(command, PersistRuntime):
        text = f"persist {command.schedule_id} {t(command.watermark)}"
        if command.held is not None:
            text += f" held {t(command.held)}"
        if command.waiting:
            text += " waiting " + ",".join(t(w) for w in command.waiting)
        backfill = command.backfill
        if backfill is not None:
            text += f" backfill {backfill.state} {backfill.admitted}/{backfill.planned}"
        return text
    if isinstance(command, CreateAdmittedRun):
        return f"create-run {command.schedule_id} {t(command.instant)}"
    if isinstance(command, StartRun):
        return f"start {command.schedule_id} {t(command.instant)} {command.run_id}"
    if isinstance(command, BlockSchedule):
        return f'block {command.schedule_id} "{command.diagnostic}"'
    if isinstance(command, LogWarning):
        return f'warn "{command.message}"'
    raise AssertionError(f"unknown command {command!r}")


def split_items(cell: str) -> list[str]:
    """Split a cell on `;` outside double quotes and JSON braces."""
    items: list[str] = []
    depth = 0
    quoted = False
    current = ""
    for char in cell:
        if char == '"':
            quoted = not quoted
        elif not quoted and char == "{":
            depth += 1
        elif not quoted and char == "}":
            depth -= 1
        if char == ";" and not quoted and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        items.append(current.strip())
    return [" ".join(item.split()) if "{" not in item else item for item in items if item != "-"]


# --- running a scenario --------------------------------------------------------


class Runner:
    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.day = scenario.day
        self.model = ShellModel(capacity=scenario.capacity)
        self.definitions = {}
        for payload in scenario.definitions:
            payload = {"deployment_id": DEFAULT_DEPLOYMENT, **payload}
            definition = parse_definition(payload)
            self.definitions[definition.schedule_id] = definition
        self.now: datetime | None = None

    def t(self, text: str) -> datetime:
        return parse_time(text, self.day)

    def run_step(self, step: Step) -> list[str]:
        now = self.t(step.clock)
        self.now = now
        events: list[Event] = []
        restart: dict[str, Any] | None = None
        walk = False
        for item in split_items(step.events):
            words = item.split(" ", 2)
            verb = words[0]
            at = now
            rest = item
            if " at " in item and verb in (
                "create",
                "pause",
                "resume",
                "delete",
                "update",
                "trigger",
                "backfill",
                "cancel-backfill",
            ):
                rest, _, when = item.rpartition(" at ")
                at = self.t(when)
                words = rest.split(" ", 2)
            if verb == "create":
                events.append(ScheduleCreated(definition=self.definitions[words[1]], at=at))
            elif verb == "update":
                sid = words[1]
                stored = self.model.schedules[sid]
                patched = apply_patch(stored.definition, parse_patch(json.loads(words[2])))
                events.append(
                    ScheduleUpdated(definition=patched, revision=stored.revision + 1, at=at)
                )
            elif verb == "pause":
                events.append(SchedulePaused(schedule_id=words[1], at=at))
            elif verb == "resume":
                events.append(ScheduleResumed(schedule_id=words[1], at=at))
            elif verb == "delete":
                events.append(ScheduleDeleted(schedule_id=words[1], at=at))
            elif verb == "trigger":
                # `trigger r` or `trigger r allow`
                overlap = "allow" if rest.split()[2:] == ["allow"] else None
                events.append(ScheduleTriggered(schedule_id=words[1], at=at, overlap=overlap))
            elif verb == "backfill":
                # `backfill r 08:00..11:00` or `backfill r 08:00..11:00 allow`
                parts = rest.split()
                first, _, last = parts[2].partition("..")
                events.append(
                    BackfillRequested(
                        schedule_id=parts[1],
                        at=at,
                        start=self.t(first),
                        end=self.t(last),
                        overlap="allow" if parts[3:] == ["allow"] else None,
                    )
                )
            elif verb == "cancel-backfill":
                events.append(BackfillCancelled(schedule_id=words[1], at=at))
            elif verb == "run":
                parts = shlex.split(rest)
                message = parts[4] if len(parts) > 4 else None
                events.append(
                    self.model.report(parts[1], self.t(parts[2]), parts[3], message)  # type: ignore[arg-type]
                )
            elif verb == "reject":
                parts = shlex.split(rest)
                self.model.rejections[(parts[1], self.t(parts[2]))] = parts[3]
            elif verb == "capacity":
                self.model.capacity = int(words[1])
                events.append(CapacityChanged(max_concurrent_runs=int(words[1])))
            elif verb == "restart":
                restart = {"contradicted": {}}
            elif verb == "corrupt":
                assert restart is not None, "corrupt belongs to a restart step"
                parts = shlex.split(rest)
                restart["contradicted"][parts[1]] = (parts[2], parts[3], parts[4])
            elif verb == "walk":
                walk = True
            else:
                raise AssertionError(f"line {step.line}: unknown event {item!r}")
        if walk:
            assert not events and restart is None
            return self.walk(now)
        if restart is not None:
            commands = self.model.restart(now, contradicted=restart["contradicted"], extra=events)
        else:
            commands = self.model.step(now, events)
        return [render(c, self.day) for c in commands]

    def walk(self, until: datetime) -> list[str]:
        """A healthy shell waking at each `next_wakeup` until `until`; each
        admitted run completes at once. Only admissions are listed."""
        admitted: list[str] = []
        while (wake := next_wakeup(self.model.state)) is not None and wake <= until:
            for command in self.model.step(wake, []):
                if isinstance(command, AdmitOccurrence):
                    admitted.append(render(command, self.day))
                    self.model.step(
                        wake,
                        [self.model.report(command.schedule_id, command.instant, "completed")],
                    )
        for command in self.model.step(until, []):
            if isinstance(command, AdmitOccurrence):
                admitted.append(render(command, self.day))
        return admitted


SCENARIOS = parse_document(DOC.read_text(encoding="utf-8"))


def test_the_document_has_scenarios() -> None:
    assert len(SCENARIOS) >= 30


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.title for s in SCENARIOS])
def test_scenario(scenario: Scenario) -> None:
    runner = Runner(scenario)
    for step in scenario.steps:
        got = runner.run_step(step)
        expected = split_items(step.expected)
        assert got == expected, (
            f"{DOC.name}:{step.line} ({scenario.title}) at {step.clock}\n"
            f"expected: {'; '.join(expected) or '-'}\n"
            f"got:      {'; '.join(got) or '-'}"
        )
        if step.wake is not None:
            wake = next_wakeup(runner.model.state)
            shown = "-" if wake is None else render_time(wake, runner.day)
            assert shown == step.wake.strip("`"), (
                f"{DOC.name}:{step.line} ({scenario.title}): next wake-up {shown}, "
                f"table says {step.wake}"
            )
