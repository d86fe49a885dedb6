"""The imperative shell: the scheduler service, the schedules API and the stores."""

from shell.clock import Clock, ManualClock, SystemClock
from shell.config import SchedulerServiceConfig, parse_scheduler_config
from shell.schedules_api import SchedulesApi, build_schedules_api
from shell.service import SchedulerService, build_scheduler_service

__all__ = [
    "Clock",
    "ManualClock",
    "SchedulerService",
    "SchedulerServiceConfig",
    "SchedulesApi",
    "SystemClock",
    "build_scheduler_service",
    "build_schedules_api",
    "parse_scheduler_config",
]
