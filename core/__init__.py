"""The pure scheduling core of wf-scheduler.

Everything here is deterministic and free of I/O: schedule definitions and
their validation, trigger calendars, input bindings, the events `decide`
consumes and the commands it returns, the immutable scheduler state, and
`decide` / `next_wakeup` themselves. Time is always an argument.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

# Names resolve on first use (PEP 562) so that `import core.errors` -- all the
# `wf-schedule` CLI needs before a command runs -- does not load pydantic and
# croniter through the definitions and calendar modules.
if TYPE_CHECKING:
    from core.bindings import (
        BINDING_KEY,
        BINDING_NAMES,
        binding_problems,
        is_binding,
        resolve_inputs,
        resolve_value,
    )
    from core.calendar import (
        CompiledCron,
        CompiledOneShot,
        CompiledTrigger,
        DstNote,
        compile_trigger,
    )
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
    from core.decide import (
        decide,
        next_wakeup,
    )
    from core.definitions import (
        CronTrigger,
        OneShotTrigger,
        ScheduleDefinition,
        SchedulePatch,
        Trigger,
        apply_patch,
        check_oneshot_in_future,
        definition_to_payload,
        parse_definition,
        parse_patch,
    )
    from core.errors import (
        AlreadyExists,
        CoreMisuse,
        InvalidDefinition,
        InvalidInput,
        InvalidState,
        NotFound,
        Problem,
        RevisionConflict,
        SchedulerUnavailable,
        SchedulingError,
        error_class_for_code,
    )
    from core.events import (
        CapacityChanged,
        Event,
        OccurrenceAdmitted,
        PreflightFailed,
        RecordsContradicted,
        RecoveredRun,
        RunStatusChanged,
        ScheduleCreated,
        ScheduleDeleted,
        SchedulePaused,
        ScheduleRecovered,
        ScheduleResumed,
        ScheduleUpdated,
    )
    from core.occurrences import (
        DECISION_STATUSES,
        OCCURRENCE_STATUSES,
        RUN_STATUSES,
        TERMINAL_RUN_STATUSES,
        TERMINAL_STATUSES,
        OccurrenceStatus,
        RunStatus,
    )
    from core.schedule_state import (
        LIFECYCLE_STATES,
        LifecycleState,
        lifecycle_state,
        oneshot_finished,
    )
    from core.state import (
        NO_RUNS,
        ActiveRun,
        ActiveRuns,
        SchedulerState,
        ScheduleState,
        ScheduleView,
        check_capacity,
        initial_state,
        schedule_ids,
        schedule_view,
        slots_in_use,
    )

__all__ = [
    "BINDING_KEY",
    "BINDING_NAMES",
    "DECISION_STATUSES",
    "LIFECYCLE_STATES",
    "NO_RUNS",
    "OCCURRENCE_STATUSES",
    "RUN_STATUSES",
    "TERMINAL_RUN_STATUSES",
    "TERMINAL_STATUSES",
    "ActiveRun",
    "ActiveRuns",
    "AdmitOccurrence",
    "AlreadyExists",
    "BlockSchedule",
    "CapacityChanged",
    "Command",
    "CompiledCron",
    "CompiledOneShot",
    "CompiledTrigger",
    "CoreMisuse",
    "CreateAdmittedRun",
    "CronTrigger",
    "DstNote",
    "Event",
    "InvalidDefinition",
    "InvalidInput",
    "InvalidState",
    "LifecycleState",
    "LogWarning",
    "NotFound",
    "OccurrenceAdmitted",
    "OccurrenceStatus",
    "OneShotTrigger",
    "PersistRuntime",
    "PreflightFailed",
    "Problem",
    "RecordOccurrence",
    "RecordsContradicted",
    "RecoveredRun",
    "RevisionConflict",
    "RunStatus",
    "RunStatusChanged",
    "ScheduleCreated",
    "ScheduleDefinition",
    "ScheduleDeleted",
    "SchedulePatch",
    "SchedulePaused",
    "ScheduleRecovered",
    "ScheduleResumed",
    "ScheduleState",
    "ScheduleUpdated",
    "ScheduleView",
    "SchedulerState",
    "SchedulerUnavailable",
    "SchedulingError",
    "StartRun",
    "Trigger",
    "apply_patch",
    "binding_problems",
    "check_capacity",
    "check_oneshot_in_future",
    "compile_trigger",
    "decide",
    "definition_to_payload",
    "error_class_for_code",
    "initial_state",
    "is_binding",
    "lifecycle_state",
    "next_wakeup",
    "oneshot_finished",
    "parse_definition",
    "parse_patch",
    "resolve_inputs",
    "resolve_value",
    "schedule_ids",
    "schedule_view",
    "slots_in_use",
]

# Where each exported name lives; `__getattr__` imports that module on first use.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "core.bindings": (
        "BINDING_KEY",
        "BINDING_NAMES",
        "binding_problems",
        "is_binding",
        "resolve_inputs",
        "resolve_value",
    ),
    "core.calendar": (
        "CompiledCron",
        "CompiledOneShot",
        "CompiledTrigger",
        "DstNote",
        "compile_trigger",
    ),
    "core.commands": (
        "AdmitOccurrence",
        "BlockSchedule",
        "Command",
        "CreateAdmittedRun",
        "LogWarning",
        "PersistRuntime",
        "RecordOccurrence",
        "StartRun",
    ),
    "core.decide": (
        "decide",
        "next_wakeup",
    ),
    "core.definitions": (
        "CronTrigger",
        "OneShotTrigger",
        "ScheduleDefinition",
        "SchedulePatch",
        "Trigger",
        "apply_patch",
        "check_oneshot_in_future",
        "definition_to_payload",
        "parse_definition",
        "parse_patch",
    ),
    "core.errors": (
        "AlreadyExists",
        "CoreMisuse",
        "InvalidDefinition",
        "InvalidInput",
        "InvalidState",
        "NotFound",
        "Problem",
        "RevisionConflict",
        "SchedulerUnavailable",
        "SchedulingError",
        "error_class_for_code",
    ),
    "core.events": (
        "CapacityChanged",
        "Event",
        "OccurrenceAdmitted",
        "PreflightFailed",
        "RecordsContradicted",
        "RecoveredRun",
        "RunStatusChanged",
        "ScheduleCreated",
        "ScheduleDeleted",
        "SchedulePaused",
        "ScheduleRecovered",
        "ScheduleResumed",
        "ScheduleUpdated",
    ),
    "core.schedule_state": (
        "LIFECYCLE_STATES",
        "LifecycleState",
        "lifecycle_state",
        "oneshot_finished",
    ),
    "core.occurrences": (
        "DECISION_STATUSES",
        "OCCURRENCE_STATUSES",
        "RUN_STATUSES",
        "TERMINAL_RUN_STATUSES",
        "TERMINAL_STATUSES",
        "OccurrenceStatus",
        "RunStatus",
    ),
    "core.state": (
        "NO_RUNS",
        "ActiveRun",
        "ActiveRuns",
        "SchedulerState",
        "ScheduleState",
        "ScheduleView",
        "check_capacity",
        "initial_state",
        "schedule_ids",
        "schedule_view",
        "slots_in_use",
    ),
}
_HOME: dict[str, str] = {name: home for home, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'core' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


class _LazyPackage(types.ModuleType):
    # The import system binds each imported submodule on its package, and
    # `core.decide` is also the name of the function this package exports:
    # the function must win, as it did when `__init__` imported it eagerly.
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _HOME and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _LazyPackage
