"""Scheduler configuration (`server.scheduler` in the server's config file)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from core.errors import InvalidInput, Problem

__all__ = ["SchedulerServiceConfig", "parse_scheduler_config"]


class SchedulerServiceConfig(BaseModel):
    """Tuning of the scheduler service. Scheduling is disabled unless `enabled`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    poll_interval_s: float = Field(default=1.0, gt=0, le=3600, allow_inf_nan=False)
    # The same, when the clock tells the service of its steps (the system
    # clock on Linux) and the store is this process's alone: only a lost
    # lock and the quiet-moment work wait for a look then (see `shell.clock`).
    quiet_poll_interval_s: float = Field(default=10.0, gt=0, le=3600, allow_inf_nan=False)
    max_concurrent_runs: int = Field(default=4, ge=1, le=100_000)
    drain_grace_s: float = Field(default=30.0, ge=0, le=86_400, allow_inf_nan=False)
    # How often a running scheduler rewrites the startup checkpoint, so that a
    # start after a crash reads only the schedules changed since; 0 leaves it
    # to the clean stop alone (see `shell.startup_checkpoint`).
    checkpoint_interval_s: float = Field(default=300.0, ge=0, le=86_400, allow_inf_nan=False)
    # How long before an instant its round may be decided and staged, so that
    # at the instant only its commit is left; 0 decides every round when it
    # is due (see "Prepared rounds" in `shell.service`). A 10,000-schedule
    # herd takes 0.9-1.3 s to prepare on the benchmark machine.
    prepare_ahead_s: float = Field(default=2.0, ge=0, le=60, allow_inf_nan=False)
    # Start without leading when another server leads the store, and take
    # over when it is gone (a store several servers share: PostgreSQL).
    standby: bool = False
    # The leadership lease on a shared store (the database's clock): how
    # long one renewal keeps it, and how often the leader renews it. A
    # crashed leader is replaced within `lease_s` plus a standby's poll.
    lease_s: float = Field(default=6.0, gt=0, le=3600, allow_inf_nan=False)
    renew_interval_s: float = Field(default=2.0, gt=0, le=3600, allow_inf_nan=False)

    @model_validator(mode="after")
    def _renewed_within_the_lease(self) -> SchedulerServiceConfig:
        if self.renew_interval_s >= self.lease_s:
            raise ValueError("renew_interval_s must be shorter than lease_s")
        return self


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
