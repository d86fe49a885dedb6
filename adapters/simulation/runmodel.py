"""Run models: how long a simulated run takes and how it ends.

A scenario gives each schedule a run model. Every admitted occurrence draws
one `RunPlan` from it, in admission order, so the same scenario always gives
the same runs: lists are walked in order, distributions draw from a
`random.Random(seed)` owned by that schedule's model and nothing else.

A plan is a list of status changes at offsets from the admission instant:
the run is `running` at once, may be `interrupted` after `after_s` seconds of
work and resumed (`running`) `for_s` seconds later, and reaches its final
status when its work (`duration`) is done. An interruption that is never
resumed (`for_s` null) leaves the run interrupted for the rest of the horizon.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    model_validator,
)

from core.occurrences import RunStatus

__all__ = [
    "DurationSpec",
    "ExponentialDuration",
    "FixedDuration",
    "InterruptedOutcome",
    "ListDuration",
    "NormalDuration",
    "OutcomeSpec",
    "OutcomesSpec",
    "RunModel",
    "RunModelSpec",
    "RunPlan",
    "UniformDuration",
]

FinalStatus = Literal["completed", "failed", "exhausted"]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FixedDuration(_Spec):
    """Every run takes `seconds`."""

    kind: Literal["fixed"] = "fixed"
    seconds: Seconds


class ListDuration(_Spec):
    """The n-th run of the schedule takes `seconds[n]`; the list then starts over
    (`after="cycle"`) or keeps its last value (`after="last"`)."""

    kind: Literal["list"] = "list"
    seconds: Annotated[list[Seconds], Field(min_length=1)]
    after: Literal["cycle", "last"] = "cycle"


class UniformDuration(_Spec):
    """Uniform between `low_s` and `high_s`, drawn with `random.Random(seed)`."""

    kind: Literal["uniform"] = "uniform"
    low_s: Seconds
    high_s: Seconds
    seed: int = 0

    @model_validator(mode="after")
    def _ordered(self) -> UniformDuration:
        if self.high_s < self.low_s:
            raise ValueError("high_s must be >= low_s")
        return self


class NormalDuration(_Spec):
    """Gaussian with `mean_s` and `stddev_s`, clamped at `min_s` (never negative)."""

    kind: Literal["normal"] = "normal"
    mean_s: Seconds
    stddev_s: Seconds
    min_s: Seconds = 0.0
    seed: int = 0


class ExponentialDuration(_Spec):
    """Exponential with mean `mean_s` (a memoryless, long-tailed duration)."""

    kind: Literal["exponential"] = "exponential"
    mean_s: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    seed: int = 0


def _number_is_fixed(value: object) -> object:
    # `"duration": 300` is shorthand for a fixed duration.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"kind": "fixed", "seconds": value}
    return value


DurationSpec = Annotated[
    FixedDuration | ListDuration | UniformDuration | NormalDuration | ExponentialDuration,
    Field(discriminator="kind"),
    BeforeValidator(_number_is_fixed),
]


class InterruptedOutcome(_Spec):
    """The run stops for input after `after_s` seconds of work (capped at its
    duration), waits `for_s` seconds (null: forever), is resumed, and ends `then`."""

    kind: Literal["interrupted"] = "interrupted"
    after_s: Seconds = 0.0
    for_s: Seconds | None
    then: FinalStatus = "completed"


def _word_is_outcome(value: object) -> object:
    if value == "interrupted":
        raise ValueError(
            "an interrupted outcome is an object: "
            '{"kind": "interrupted", "after_s": ..., "for_s": ..., "then": ...}'
        )
    return value


def _outcome_shape(value: object) -> str:
    return "object" if isinstance(value, Mapping) else "word"


OutcomeSpec = Annotated[
    Annotated[FinalStatus, BeforeValidator(_word_is_outcome), Tag("word")]
    | Annotated[InterruptedOutcome, Tag("object")],
    Discriminator(_outcome_shape),
]


def _outcomes_shape(value: object) -> str:
    return "list" if isinstance(value, list) else "one"


OutcomesSpec = Annotated[
    Annotated[OutcomeSpec, Tag("one")]
    | Annotated[list[OutcomeSpec], Field(min_length=1), Tag("list")],
    Discriminator(_outcomes_shape),
]


class RunModelSpec(_Spec):
    """A schedule's run model: `duration` (seconds, or an object with a `kind`)
    and `outcome` (one outcome, or a list applied to successive runs in turn)."""

    duration: DurationSpec = FixedDuration(seconds=60.0)
    outcome: OutcomesSpec = "completed"


@dataclass(frozen=True, slots=True)
class RunPlan:
    """One simulated run: `(offset_s, status)` changes after admission, in order;
    the last one is the final status unless the run stays interrupted."""

    changes: tuple[tuple[float, RunStatus], ...]

    @property
    def final_status(self) -> RunStatus:
        return self.changes[-1][1]


class RunModel:
    """Draws successive `RunPlan`s from a `RunModelSpec`, deterministically."""

    __slots__ = ("_count", "_outcomes", "_random", "_spec")

    def __init__(self, spec: RunModelSpec) -> None:
        self._spec = spec
        self._count = 0
        seed = getattr(spec.duration, "seed", 0)
        self._random = random.Random(seed)
        outcome: Any = spec.outcome
        self._outcomes: Sequence[FinalStatus | InterruptedOutcome] = (
            tuple(outcome) if isinstance(outcome, list) else (outcome,)
        )

    def next_plan(self) -> RunPlan:
        """The plan of the next admitted run of this schedule."""
        index = self._count
        self._count += 1
        duration = self._duration(index)
        outcome = self._outcomes[index % len(self._outcomes)]
        if isinstance(outcome, InterruptedOutcome):
            stop = min(outcome.after_s, duration)
            if outcome.for_s is None:
                return RunPlan(((0.0, "running"), (stop, "interrupted")))
            back = stop + outcome.for_s
            return RunPlan(
                (
                    (0.0, "running"),
                    (stop, "interrupted"),
                    (back, "running"),
                    (back + duration - stop, outcome.then),
                )
            )
        return RunPlan(((0.0, "running"), (duration, outcome)))

    def _duration(self, index: int) -> float:
        spec = self._spec.duration
        if isinstance(spec, FixedDuration):
            return spec.seconds
        if isinstance(spec, ListDuration):
            values = spec.seconds
            if spec.after == "cycle":
                return values[index % len(values)]
            return values[min(index, len(values) - 1)]
        # Draws are rounded to milliseconds so instants in the output stay readable.
        if isinstance(spec, UniformDuration):
            return round(self._random.uniform(spec.low_s, spec.high_s), 3)
        if isinstance(spec, NormalDuration):
            return round(max(spec.min_s, self._random.gauss(spec.mean_s, spec.stddev_s)), 3)
        drawn = self._random.expovariate(1.0 / spec.mean_s)
        return round(drawn, 3) if math.isfinite(drawn) else spec.mean_s
