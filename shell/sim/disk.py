"""The simulated disk: every byte the stores and the run API made durable.

A simulated process (stores, run API, service) keeps its own caches; the
disk is what survives the process. Killing the process means dropping every
object but this one, so after a crash only what reached the disk is seen.

Layout mirrors the file stores (`docs/storage.md`): per schedule a lifecycle
log, a snapshot, a runtime log and a history log (lists of canonical JSON
lines), plus the run records, the run-id counter, the deployments and the
lock holder.

Group commits. The in-memory runtime and history stores stage their lines
into the wake-up's real `GroupCommit` through `stage_append`; the disk hooks
the batch's `on_commit` (everything becomes durable at once) and `on_abort`
(nothing more does). A fault injected *inside* a commit is turned into what a
real commit leaves behind (`interrupt_commit`), point by point:

| point          | crash (process dies)                        | write error (commit raises)      |
| -------------- | ------------------------------------------- | -------------------------------- |
| `before:commit`| nothing                                     | nothing                          |
| `before:sync`  | a prefix of the history appends, file by    | every history append (the writes |
|                | file, the last one possibly cut short       | succeeded, the flush failed)     |
| `after:sync`   | every history append, a prefix of the       | the same                         |
|                | runtime (late) appends                      |                                  |
| `after:commit` | everything (the commit completed; the runs  | (not injected)                   |
|                | it admitted are not created yet)            |                                  |

A torn line is never kept: the real stores drop it at their next load, so a
cut-short file is a prefix of whole lines.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from shell.durable import GroupCommit
from shell.store_format import encode_json_line

__all__ = ["BATCH_POINTS", "DiskObserver", "SimDisk", "SimScheduleFiles"]

# The fault points `GroupCommit.commit()` passes even when it holds no file.
BATCH_POINTS = frozenset({"before:commit", "before:sync", "after:sync", "after:commit"})


@dataclass(slots=True)
class SimScheduleFiles:
    """One schedule's directory. It exists from the create's mkdir on."""

    lifecycle: list[bytes] = field(default_factory=list)
    snapshot: bytes | None = None
    runtime: list[bytes] = field(default_factory=list)
    history: list[bytes] = field(default_factory=list)


class DiskObserver(Protocol):
    def history_durable(self, rows: Mapping[str, Sequence[bytes]], *, complete: bool) -> None:
        """History lines just became durable, per schedule, in order. `complete`
        is False when they are what a fault left of a batch."""
        ...


@dataclass(slots=True)
class _Staged:
    batch: GroupCommit
    # Insertion-ordered: the order in which the batch first touched each file.
    plain: dict[str, list[bytes]] = field(default_factory=dict)
    late: dict[str, list[bytes]] = field(default_factory=dict)


class SimDisk:
    """The durable state of one simulated store root (see the module docstring)."""

    def __init__(self, *, deployments: Sequence[str] = ()) -> None:
        self.schedules: dict[str, SimScheduleFiles] = {}
        self.runs: dict[str, bytes] = {}
        self.run_counter = 0
        self.deployments: set[str] = set(deployments)
        self.lock_holder: dict[str, Any] | None = None
        self.observers: list[DiskObserver] = []
        self._staged: dict[int, _Staged] = {}
        self._just_committed = False

    # --- group commits -----------------------------------------------------------

    def stage_append(
        self,
        batch: GroupCommit,
        schedule_id: str,
        kind: Literal["history", "runtime"],
        line: bytes,
    ) -> None:
        """Stage one line for `batch`: history lines are plain appends, runtime
        lines late ones (durable only after every history line of the batch)."""
        key = id(batch)
        staged = self._staged.get(key)
        if staged is None:
            staged = self._staged[key] = _Staged(batch)
            batch.on_commit(self._on_commit(key))
            batch.on_abort(self._on_abort(key))
        target = staged.plain if kind == "history" else staged.late
        target.setdefault(schedule_id, []).append(line)

    def _on_commit(self, key: int) -> Callable[[], None]:
        def committed() -> None:
            staged = self._staged.pop(key, None)
            if staged is not None:
                self._write(staged.plain, staged.late, complete=True)
                self._just_committed = True

        return committed

    def _on_abort(self, key: int) -> Callable[[], None]:
        def aborted() -> None:
            self._staged.pop(key, None)

        return aborted

    def committing(self, point: str) -> bool:
        """Whether `point` (one of `BATCH_POINTS`) is passed by the commit of a
        batch holding in-memory writes: one is open (the service stages and
        commits without awaiting in between, so it is the one committing), or,
        for `after:commit`, one just committed."""
        if point == "after:commit":
            just, self._just_committed = self._just_committed, False
            return just
        return bool(self._staged)

    def interrupt_commit(self, point: str, *, crash: bool, rng: random.Random) -> None:
        """Leave on the disk what a fault at `point` inside the open batch's
        commit leaves (see the module docstring), and forget the batch."""
        for key in list(self._staged):
            staged = self._staged.pop(key)
            if point == "before:sync":
                plain = _prefix(staged.plain, rng) if crash else staged.plain
                self._write(plain, {}, complete=False)
            elif point == "after:sync":
                self._write(staged.plain, _prefix(staged.late, rng), complete=False)

    def _write(
        self,
        plain: Mapping[str, Sequence[bytes]],
        late: Mapping[str, Sequence[bytes]],
        *,
        complete: bool,
    ) -> None:
        for schedule_id, lines in plain.items():
            self.schedules[schedule_id].history.extend(lines)
        for schedule_id, lines in late.items():
            self.schedules[schedule_id].runtime.extend(lines)
        if plain:
            for observer in self.observers:
                observer.history_durable(plain, complete=complete)

    # --- the lock ---------------------------------------------------------------------

    def release_lock_of(self, owner: str) -> None:
        """The kernel releases a dead process's lock."""
        if self.lock_holder is not None and self.lock_holder.get("owner") == owner:
            self.lock_holder = None

    # --- inspection ---------------------------------------------------------------------

    def dump(self) -> bytes:
        """Every durable byte, in a fixed order: two runs of one seed must
        produce the same dump."""
        parts: list[bytes] = []
        for schedule_id in sorted(self.schedules):
            files = self.schedules[schedule_id]
            for name, lines in (
                ("lifecycle.jsonl", files.lifecycle),
                ("definition.json", [files.snapshot] if files.snapshot is not None else []),
                ("runtime.jsonl", files.runtime),
                ("history.jsonl", files.history),
            ):
                parts.append(f"== schedules/{schedule_id}/{name}\n".encode())
                parts.extend(lines)
        parts.append(b"== runs\n")
        parts.extend(self.runs[run_id] for run_id in sorted(self.runs))
        parts.append(
            encode_json_line(
                {"run_counter": self.run_counter, "deployments": sorted(self.deployments)}
            )
        )
        return b"".join(parts)


def _prefix(files: Mapping[str, Sequence[bytes]], rng: random.Random) -> dict[str, Sequence[bytes]]:
    """What a crash part-way through writing `files` in order leaves: the
    first files whole, the next one cut after some whole lines, none after."""
    names = list(files)
    reached = rng.randint(0, len(names))
    kept: dict[str, Sequence[bytes]] = {name: files[name] for name in names[:reached]}
    if reached < len(names):
        name = names[reached]
        cut = rng.randint(0, len(files[name]))
        if cut:
            kept[name] = files[name][:cut]
    return kept
