"""The error hierarchy shared by every layer.

Every error a caller can provoke derives from `SchedulingError` and carries a
stable machine-readable `code`, the JSON-RPC error number it travels under
(`rpc_code`) and the `wf-schedule` exit status it ends a command with
(`exit_status`). A subclass that declares neither inherits its parent's, so a
refinement such as `StoreFenced` keeps its parent's number and exit status and
names itself in `code`. The JSON-RPC adapter reads `rpc_code`, the client maps
`code` back to these same classes, the CLI reads `exit_status`. Any other
exception that escapes a layer is a bug.

The numbers are stable (scripts key on them): append, never renumber. They are
documented in docs/rpc.md and docs/cli.md, and a test holds those tables to
these attributes.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

__all__ = [
    "ERROR_CLASSES",
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
    "StoreFenced",
    "StoreUnavailable",
    "error_class_for_code",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One thing wrong with an input: where (a dotted field path) and why."""

    field: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "reason": self.reason}


class SchedulingError(Exception):
    """Base of every domain error. `code` is stable; `data` is JSON-safe detail."""

    code: ClassVar[str] = "scheduling_error"
    # The JSON-RPC error number (docs/rpc.md) and the `wf-schedule` exit status
    # (docs/cli.md), for this class and every subclass that declares neither.
    rpc_code: ClassVar[int] = -32000
    exit_status: ClassVar[int] = 1

    def __init__(self, message: str, *, data: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = dict(data or {})

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.data}


class InvalidInput(SchedulingError):
    """Bad input from outside. `problems` names each bad field and why."""

    code: ClassVar[str] = "invalid_input"
    rpc_code: ClassVar[int] = -32001
    exit_status: ClassVar[int] = 5

    def __init__(
        self,
        message: str,
        *,
        problems: Iterable[Problem] = (),
        data: Mapping[str, Any] | None = None,
    ) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        merged = dict(data or {})
        if self.problems:
            merged["problems"] = [p.as_dict() for p in self.problems]
        if self.problems and message == "":
            message = "; ".join(f"{p.field}: {p.reason}" for p in self.problems)
        super().__init__(message, data=merged)

    @classmethod
    def from_problems(cls, what: str, problems: Iterable[Problem]) -> InvalidInput:
        listed = tuple(problems)
        summary = "; ".join(f"{p.field}: {p.reason}" for p in listed)
        return cls(f"invalid {what}: {summary}", problems=listed)


class InvalidDefinition(InvalidInput):
    """A schedule definition or update patch was rejected; nothing was written."""

    code: ClassVar[str] = "invalid_definition"
    rpc_code: ClassVar[int] = -32002


class NotFound(SchedulingError):
    """The named schedule, deployment, artifact or run does not exist."""

    code: ClassVar[str] = "not_found"
    rpc_code: ClassVar[int] = -32003
    exit_status: ClassVar[int] = 3


class AlreadyExists(SchedulingError):
    """The caller-chosen id is taken (ids are never reused, not even after delete)."""

    code: ClassVar[str] = "already_exists"
    rpc_code: ClassVar[int] = -32004
    exit_status: ClassVar[int] = 4


class RevisionConflict(SchedulingError):
    """`expected_revision` is stale: someone else changed the schedule first."""

    code: ClassVar[str] = "revision_conflict"
    rpc_code: ClassVar[int] = -32005
    exit_status: ClassVar[int] = 4


class InvalidState(SchedulingError):
    """The operation does not apply to the object's current state
    (for example resuming a run that is not interrupted)."""

    code: ClassVar[str] = "invalid_state"
    rpc_code: ClassVar[int] = -32006
    exit_status: ClassVar[int] = 6


class SchedulerUnavailable(SchedulingError):
    """The scheduler is not enabled, not owned by this process, or shutting down."""

    code: ClassVar[str] = "scheduler_unavailable"
    rpc_code: ClassVar[int] = -32007
    exit_status: ClassVar[int] = 7


class StoreFenced(SchedulerUnavailable):
    """This process was fenced off its store: the store's `scheduler.lock`
    was removed or replaced, or the store root renamed, while its scheduler
    held the lock. Every write under the store root is refused from then on
    (nothing is written), for the life of that lock; reads keep working.
    Restart the server to own the store again.

    A `SchedulerUnavailable` (JSON-RPC -32007, `wf-schedule` exit 7) with its
    own code. `data`: `lock` (the lock file's path), `store_root`, `pid`."""

    code: ClassVar[str] = "store_fenced"


# The errnos that mean "no space": a full filesystem, or the owner's quota.
_DISK_FULL: Final = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})


class StoreUnavailable(SchedulingError):
    """The store refused a read or a write: the disk is full (`ENOSPC`,
    `EDQUOT`), the filesystem is read-only (`EROFS`) or failing (`EIO`), or
    another OS error. The call that raises it has left nothing half-done that
    a retry would trip over; retry once the store is fixed.

    `data`: `operation` (what was being done), `errno` (its name, e.g.
    `"ENOSPC"`, or null), `path` (the file or directory, when known) and
    `disk_full` (true for ENOSPC and EDQUOT)."""

    code: ClassVar[str] = "store_unavailable"
    rpc_code: ClassVar[int] = -32009
    exit_status: ClassVar[int] = 10

    @classmethod
    def from_os_error(cls, exc: OSError, *, operation: str) -> StoreUnavailable:
        """The domain error for `exc`, raised while doing `operation`."""
        number = exc.errno
        name = errno.errorcode.get(number) if number is not None else None
        path = exc.filename if isinstance(exc.filename, str) else None
        if path is None and isinstance(exc.filename, bytes):
            path = exc.filename.decode("utf-8", "surrogateescape")
        detail = exc.strerror or str(exc) or type(exc).__name__
        disk_full = number in _DISK_FULL
        if disk_full:
            what = "disk quota exceeded" if number != errno.ENOSPC else "disk full"
            hint = "; free space on the store's filesystem, then retry"
        elif number == errno.EROFS:
            what, hint = "store is read-only", "; remount it read-write, then retry"
        elif number == errno.EIO:
            what, hint = "store I/O error", "; check the disk, then retry"
        else:
            what, hint = "store error", ""
        where = f" at {path}" if path else ""
        code = f" ({name})" if name else ""
        return cls(
            f"{what}: {operation} failed{where}: {detail}{code}{hint}",
            data={"operation": operation, "errno": name, "path": path, "disk_full": disk_full},
        )


class CoreMisuse(SchedulingError):
    """The caller of the pure core broke its protocol (for example an event about
    a schedule the state does not know). Names the state and the event."""

    code: ClassVar[str] = "core_misuse"
    rpc_code: ClassVar[int] = -32008


# Every class a `code` on the wire may name, so the client raises the same
# class the server did. Listed, not collected by `__init_subclass__`: a
# subclass elsewhere (a test's, or the RPC layer's `InvalidParams`) must not
# take over a code.
ERROR_CLASSES: Final[tuple[type[SchedulingError], ...]] = (
    SchedulingError,
    InvalidInput,
    InvalidDefinition,
    NotFound,
    AlreadyExists,
    RevisionConflict,
    InvalidState,
    SchedulerUnavailable,
    StoreFenced,
    StoreUnavailable,
    CoreMisuse,
)

_BY_CODE: Final[dict[str, type[SchedulingError]]] = {cls.code: cls for cls in ERROR_CLASSES}


def error_class_for_code(code: str) -> type[SchedulingError]:
    """The error class for a stable code; unknown codes map to the base class."""
    return _BY_CODE.get(code, SchedulingError)
