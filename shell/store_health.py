"""Whether the store takes writes, as the last writes found.

An OS error from the store (a full disk, a read-only or failing filesystem)
leaves an API call as `core.errors.StoreUnavailable`, never as a bare
`OSError` (which the JSON-RPC server would have to answer as an internal
error): `store_call` decorates the API's methods to do that, and records the
failure in the `StoreHealth` they share with the scheduler service. A store
that raises `StoreUnavailable` itself (a database that does not answer) is
recorded the same way.

Health is kept per source, because each recovers differently:

- `api`: an API call failed with a store error. The next API write that
  succeeds clears it; so does a health report's probe (below), because
  nothing else writes for a client that does not retry.
- `scheduler`: a scheduler round failed with a store error. The scheduler
  retries by itself (it rebuilds its state from the stores and decides
  again), so its next round that completes clears it.
- `store`: a store that can vanish on its own (a database server) did not
  answer its watcher (`shell.pg.health`); its next answer clears it.

While any source is failing, the report is degraded (see `report`). So it
is while the store is fenced (its lock file removed or replaced, or its root
renamed, under this process: `shell.fence`): every write is refused from
then on, so a report checks the fence itself (two `stat`s), and the first
report after the loss trips it, before any write found it. When an
API failure is recorded, `report` tries a small durable write in the store
root (4 KiB, fsynced, then removed) at most once per `probe_interval_s`; if
it succeeds, the store takes writes again and the API failure is cleared.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Concatenate, Final, Literal, ParamSpec, Protocol, TypeVar

from core.errors import StoreFenced, StoreUnavailable
from shell.durable import fault_point, write_all
from shell.fence import check_fence
from shell.store_format import format_instant

__all__ = ["PROBE_BYTES", "HealthSource", "StoreHealth", "store_call"]

HealthSource = Literal["api", "scheduler", "store"]

# Enough to need a fresh block on any filesystem, little enough to be free.
PROBE_BYTES: Final = 4096
_PROBE_NAME: Final = ".store-probe"


@dataclass(slots=True)
class _Failing:
    error: StoreUnavailable
    since: datetime
    last: datetime
    count: int


def _utc_now() -> datetime:
    return datetime.now(UTC)


class StoreHealth:
    """The store's health as seen by the writes of one process (see the module docstring).

    `store_root` is where the probe writes (None: no probe, as for the
    in-memory stores of a simulation); `probe_interval_s` bounds how often.
    Every caller runs on the event loop: no locking.
    """

    def __init__(
        self,
        store_root: str | os.PathLike[str] | None = None,
        *,
        now: Callable[[], datetime] = _utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        probe_interval_s: float = 1.0,
    ) -> None:
        self.store_root = os.fspath(store_root) if store_root is not None else None
        self._now = now
        self._monotonic = monotonic
        self.probe_interval_s = probe_interval_s
        self._probed_at: float | None = None
        self._failing: dict[HealthSource, _Failing] = {}
        self._fenced_since: datetime | None = None
        # Told of every failure as it is recorded (the store-error metric).
        self._listeners: list[Callable[[HealthSource, StoreUnavailable], None]] = []

    def add_failure_listener(
        self, listener: Callable[[HealthSource, StoreUnavailable], None]
    ) -> None:
        """Call `listener(source, error)` for every store failure recorded from
        now on (it must not raise)."""
        self._listeners.append(listener)

    @property
    def degraded(self) -> bool:
        """True while some source's last store operation failed."""
        return bool(self._failing)

    def is_failing(self, source: HealthSource) -> bool:
        """True while `source`'s last store operation failed."""
        return source in self._failing

    def failed(self, source: HealthSource, error: StoreUnavailable) -> None:
        """`source`'s store operation just failed with `error`."""
        for listener in self._listeners:
            listener(source, error)
        now = self._now()
        current = self._failing.get(source)
        if current is None:
            self._failing[source] = _Failing(error=error, since=now, last=now, count=1)
        else:
            current.error, current.last, current.count = error, now, current.count + 1

    def succeeded(self, source: HealthSource) -> None:
        """A write of `source` reached the store (for the scheduler: a round completed)."""
        self._failing.pop(source, None)

    def unavailable(self, exc: OSError, *, operation: str) -> StoreUnavailable:
        """The domain error for an API call's `exc`, recorded as an API failure."""
        error = StoreUnavailable.from_os_error(exc, operation=operation)
        self.failed("api", error)
        return error

    def report(self) -> dict[str, Any] | None:
        """None while the store takes writes; otherwise what fails:

            {"status": "unavailable", "disk_full", "errno", "path", "operation",
             "message", "since", "last_failure_at", "failures", "failing": [sources]}

        describing the most recent failure (`since`: when the oldest failing
        source began failing; `failures`: how many operations failed since).
        May probe first (see the module docstring)."""
        fenced = self._fenced()
        if fenced is not None:
            return fenced
        if "api" in self._failing:
            self._probe()
        if not self._failing:
            return None
        latest = max(self._failing.values(), key=lambda f: f.last)
        data = latest.error.data
        return {
            "status": "unavailable",
            "disk_full": bool(data.get("disk_full")),
            "errno": data.get("errno"),
            "path": data.get("path"),
            "operation": data.get("operation"),
            "message": latest.error.message,
            "since": format_instant(min(f.since for f in self._failing.values())),
            "last_failure_at": format_instant(latest.last),
            "failures": sum(f.count for f in self._failing.values()),
            "failing": sorted(self._failing),
        }

    def _fenced(self) -> dict[str, Any] | None:
        """The report of a fenced store (None while it is not): `status`
        `fenced`, `path` the lock file, `since` when a report first found it."""
        if self.store_root is None:
            return None
        try:
            check_fence(self.store_root)
        except StoreFenced as fence:
            if self._fenced_since is None:
                self._fenced_since = self._now()
            since = format_instant(self._fenced_since)
            return {
                "status": "fenced",
                "disk_full": False,
                "errno": None,
                "path": fence.data.get("lock"),
                "operation": None,
                "message": fence.message,
                "since": since,
                "last_failure_at": since,
                "failures": sum(f.count for f in self._failing.values()),
                "failing": sorted({*self._failing, "fence"}),
            }
        self._fenced_since = None
        return None

    def _probe(self) -> None:
        if self.store_root is None:
            return
        now = self._monotonic()
        if self._probed_at is not None and now - self._probed_at < self.probe_interval_s:
            return
        self._probed_at = now
        path = os.path.join(self.store_root, f"{_PROBE_NAME}.{os.getpid()}.tmp")
        try:
            check_fence(path)
        except StoreFenced:
            # A fenced store is not probed: the probe is a write.
            return
        try:
            fault_point("before:write:store-probe")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                write_all(fd, b"\0" * PROBE_BYTES)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
        self.succeeded("api")


class _HasStoreHealth(Protocol):
    store_health: StoreHealth


_S = TypeVar("_S", bound=_HasStoreHealth)
_P = ParamSpec("_P")
_R = TypeVar("_R")

# The arguments that name what a call works on, shown in its operation: the
# first group the call has.
_ID_ARGUMENTS: Final = (
    ("schedule_id",),
    ("artifact_id", "version"),
    ("deployment_id",),
    ("run_id",),
)


def _operation(name: str, function: Callable[..., Any], args: Any, kwargs: Any) -> str:
    try:
        bound = inspect.signature(function).bind(None, *args, **kwargs).arguments
    except TypeError:
        bound = dict(kwargs)
    payload = bound.get("payload")
    if "deployment_id" not in bound and isinstance(payload, Mapping):
        bound = {**bound, "deployment_id": payload.get("deployment_id")}
    for group in _ID_ARGUMENTS:
        if bound.get(group[0]) is not None:
            shown = ", ".join(f"{key}={bound[key]!r}" for key in group if key in bound)
            return f"{name}({shown})"
    return f"{name}()"


def store_call(
    *, writes: bool
) -> Callable[
    [Callable[Concatenate[_S, _P], Coroutine[Any, Any, _R]]],
    Callable[Concatenate[_S, _P], Coroutine[Any, Any, _R]],
]:
    """Decorate an API coroutine method so that an `OSError` it raises leaves
    as `StoreUnavailable` (recorded in `self.store_health`, the `OSError` its
    cause); a `StoreUnavailable` it raises is recorded likewise and leaves as
    it is. With `writes`, a call that returns clears a recorded API failure
    (only for calls that always write when they succeed)."""

    def decorate(
        function: Callable[Concatenate[_S, _P], Coroutine[Any, Any, _R]],
    ) -> Callable[Concatenate[_S, _P], Coroutine[Any, Any, _R]]:
        name = function.__name__

        @functools.wraps(function)
        async def wrapper(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                result = await function(self, *args, **kwargs)
            except StoreUnavailable as exc:
                self.store_health.failed("api", exc)
                raise
            except OSError as exc:
                operation = _operation(name, function, args, kwargs)
                raise self.store_health.unavailable(exc, operation=operation) from exc
            if writes:
                self.store_health.succeeded("api")
            return result

        return wrapper

    return decorate
