"""Scheduler configuration (`server.scheduler` in the server's config file)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import InvalidInput, Problem

__all__ = ["SchedulerServiceConfig", "parse_scheduler_config"]


class SchedulerServiceConfig(BaseModel):
    """Tuning of the scheduler service. Scheduling is disabled unless `enabled`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    poll_interval_s: float = Field(default=1.0, gt=0, le=3600, allow_inf_nan=False)
    max_concurrent_runs: int = Field(default=4, ge=1, le=100_000)
    drain_grace_s: float = Field(default=30.0, ge=0, le=86_400, allow_inf_nan=False)
    # How often a running scheduler rewrites the startup checkpoint, so that a
    # start after a crash reads only the schedules changed since; 0 leaves it
    # to the clean stop alone (see `shell.startup_checkpoint`).
    checkpoint_interval_s: float = Field(default=300.0, ge=0, le=86_400, allow_inf_nan=False)


def parse_scheduler_config(
    payload: Mapping[str, Any], *, where: str = "server.scheduler"
) -> SchedulerServiceConfig:
    """Validate a `server.scheduler` mapping; every problem is named with its path."""
    try:
        return SchedulerServiceConfig.model_validate(dict(payload))
    except ValidationError as exc:
        problems = [
            Problem(
                field=".".join([where, *(str(part) for part in error["loc"])]),
                reason="unknown setting" if error["type"] == "extra_forbidden" else error["msg"],
            )
            for error in exc.errors()
        ]
        raise InvalidInput.from_problems("scheduler config", problems) from None
