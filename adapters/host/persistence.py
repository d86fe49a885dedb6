"""Where the host's stores keep their records: the persistence ports.

Each host store (artifacts.py, deployments.py, runs.py, counter.py) is split
in two. The store class holds the rules: validation, the in-memory cache (the
cache answers every read), the findings of a load, the fault points around
each write, per-run locks, the group commit of run records and paging. Its
persistence only moves documents: it lists what is stored at load, and
writes (or deletes) what the store decided. Two implementations:

- files under a store root (`file_persistence.py`): one JSON file per record,
  atomic and fsynced, as the host always kept them (docs/host.md,
  "Durability");
- PostgreSQL (`pg_persistence.py`): one row per record in the tables of
  `shell/pg/migrations`, every write one transaction. Several servers may
  share the database: its runs are then `SharedRunPersistence`, read
  through from the database where another server may have written, and
  changed only from the version read (`RunChanged` otherwise). A read
  through that finds the database unavailable answers from this server's
  cache (`answer_from_cache`): what it wrote and last read, possibly behind
  other servers' writes, rather than no answer while the scheduler waits
  for the database too.

The documents are the same on both: `{"format": 1, ...}` for artifacts and
deployments, `RunRecord.to_json()` for runs.

Writes are coroutines so that the database can be awaited. The file
persistence does its I/O synchronously inside them and never suspends: where
the host relies on nothing interleaving between a check and a write, it still
holds on files, and a load on files runs to completion without an event loop
(`complete`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from core.errors import InvalidState, Problem, StoreUnavailable

from .records import RunRecord

__all__ = [
    "ArtifactPersistence",
    "CounterPersistence",
    "CounterRead",
    "DeploymentPersistence",
    "RunChanged",
    "RunPersistence",
    "SharedArtifactPersistence",
    "SharedDeploymentPersistence",
    "SharedRunPersistence",
    "Stored",
    "answer_from_cache",
    "complete",
]

K = TypeVar("K")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Stored(Generic[K]):
    """One record as a load finds it.

    `location` names it in findings and errors (a file path, or "table
    wf_runs, run_id 'run-000003'"). `key` is what the location says the
    record is (`(artifact_id, version)` as text, a deployment id, a run
    number; None when the location cannot hold a record at all, `error` then
    says why). `document` is the JSON read, unless `error` says why it could
    not be read. `columns` are the values a table keeps beside the document
    (PostgreSQL's `wf_runs.status` and `schedule_id`), for the store to check
    against it; None where there are none. `finding` names what a location
    holding no record is: "unreadable" (damage), or "torn-tail" (the
    unfinished last write of a log, which nothing relied on). `raw`: the
    record's JSON as bytes, instead of `document`, where the persistence
    keeps it so (a run log's frame: parsed and validated in one pass).
    """

    location: str
    key: K
    document: Any = None
    error: str | None = None
    columns: dict[str, Any] | None = field(default=None)
    finding: str = "unreadable"
    raw: bytes | None = None


class ArtifactPersistence(Protocol):
    @property
    def key_name(self) -> str:
        """How the reason of an unreadable record names what its key comes from."""
        ...

    def load(self) -> AsyncIterator[Stored[tuple[str, str]]]:
        """Every stored version; the key is (artifact_id, version as text)."""
        ...

    def unstorable(self, field: str, value: Any) -> list[Problem]:
        """What in the JSON `value` at `field` this persistence cannot store
        (see `RunPersistence.unstorable`)."""
        ...

    async def write(self, artifact_id: str, version: int, document: dict[str, Any]) -> None:
        """Store the version's document durably (replacing an unreadable one)."""
        ...


class DeploymentPersistence(Protocol):
    @property
    def key_name(self) -> str: ...

    def load(self) -> AsyncIterator[Stored[str]]:
        """Every stored deployment; the key is its deployment id."""
        ...

    def unstorable(self, field: str, value: Any) -> list[Problem]:
        """What in the JSON `value` at `field` this persistence cannot store
        (see `RunPersistence.unstorable`)."""
        ...

    async def write(self, deployment_id: str, document: dict[str, Any]) -> None:
        """Create or replace the deployment's document durably."""
        ...

    async def delete(self, deployment_id: str) -> None:
        """Remove the deployment durably."""
        ...


class RunPersistence(Protocol):
    @property
    def key_name(self) -> str:
        """ "file" or "row": what a record naming another run disagrees with."""
        ...

    def load(self) -> AsyncIterator[Stored[int | None]]:
        """Every stored run record, by run number (None: not a run record at
        all, `error` says why)."""
        ...

    def unstorable(self, field: str, value: Any) -> list[Problem]:
        """What in the JSON `value` (a run's inputs, origin or resume payload,
        at `field`) this persistence cannot store, checked before anything
        is written or reserved: nothing on files; a NUL character in a string
        on PostgreSQL (`jsonb` holds no U+0000)."""
        ...

    def exists(self, run_id: str) -> bool:
        """Whether a record of `run_id` exists that the store did not load
        (a file written behind its back). The store's cache answers for
        everything it loaded or wrote; a database answers with its primary
        key instead, at the write."""
        ...

    async def write(self, record: RunRecord, *, created: bool) -> bytes | None:
        """Store one record durably. `created`: the store holds no record of
        this run yet (a new one: never an overwrite where the database can
        refuse it). Answers its JSON as stored, as `write_many` does."""
        ...

    async def write_many(
        self, records: Sequence[RunRecord], *, created: AbstractSet[str]
    ) -> Sequence[bytes] | None:
        """Store several records durably, all with one flush or transaction
        (group commit). `created`: the run ids among them that are new.
        Answers each record's JSON as stored, in order, when the store wrote
        them as JSON text (the cache keeps a finished run's that way), or
        None."""
        ...

    def stages_into(self, batch: object) -> bool:
        """Whether new records can be staged into `batch`, a scheduler round's
        batch, to commit with it (a batch of the same store)."""
        ...

    def rereads(self, number: int) -> bool:
        """Whether run `number`'s record can be read again at once, without
        waiting (`reread`): then the store's cache keeps no copy of a
        finished run's record (a log on local files); else it keeps its JSON
        (a database, an older store's file)."""
        ...

    def reread(self, number: int) -> Stored[int | None]:
        """Run `number`'s record as stored, read again now (`rereads` said it
        can be): its JSON (`raw`), or `error` saying why it is unreadable."""
        ...

    def reread_origins(self, numbers: Sequence[int]) -> list[Any]:
        """For runs `rereads` answers yes for, keeping only what a listing of
        claims needs: each run's origin as its record holds it, or
        `run_claims.UNKNOWN_ORIGIN` where it is not at hand (a record
        unreadable now, which `reread` says why). A start with no checkpoint
        to go by lists every run kept."""
        ...

    def close(self) -> None:
        """Close what the persistence holds open (a log's index is written
        then); a later write opens what it needs again."""
        ...

    def finished_codes(self) -> bytes:
        """After `load`: by run number, the finished status's code
        (`records.FINISHED_CODES`) of each finished run it did not yield,
        which the persistence reads again when asked (`rereads`); empty
        when it yields every run."""
        ...

    def position(self) -> str | None:
        """Where the records stand now, as a token `written_since` takes back
        (None: this persistence cannot say)."""
        ...

    def written_since(self, position: str) -> list[int] | None:
        """The numbers of the runs whose record was written after `position`
        (None: a token this persistence does not know)."""
        ...

    def stage_created(
        self, batch: object, records: Sequence[RunRecord], written: Callable[[], None]
    ) -> None:
        """Stage new records into `batch` (`stages_into` said it can);
        `written` runs once they are durable and can be read back, as early
        as the batch allows (on files, before the batch's other files are
        written, so that the runs can be launched first)."""
        ...


@runtime_checkable
class SharedArtifactPersistence(ArtifactPersistence, Protocol):
    """Artifacts that several servers write (a database they share)."""

    async def read_versions(self, artifact_id: str) -> list[Stored[tuple[str, str]]]:
        """Every stored version of `artifact_id`, as stored now."""
        ...


@runtime_checkable
class SharedDeploymentPersistence(DeploymentPersistence, Protocol):
    """Deployments that several servers write (a database they share)."""

    async def read(self, deployment_id: str) -> Stored[str] | None:
        """The deployment as stored now; None once deleted (or never saved)."""
        ...


class RunChanged(InvalidState):
    """A run record changed in the store since this server read it: another
    server wrote it (resumed it, launched it, or failed it as abandoned).
    Nothing was written; read it again."""


@runtime_checkable
class SharedRunPersistence(RunPersistence, Protocol):
    """Run records that several servers write (a database they share)."""

    @property
    def server_id(self) -> str:
        """This server's id on the store: its executing marks name it."""
        ...

    async def read(self, number: int) -> Stored[int | None] | None:
        """The record of run `number` as stored now; None if there is none."""
        ...

    async def read_page(
        self, *, status: str | None, after: int | None, before: int | None, limit: int
    ) -> list[Stored[int | None]]:
        """Up to `limit` records by run number, of one `status` or all: after
        `after` ascending, or before `before` (None: from the newest)
        descending."""
        ...

    async def read_executing(self) -> list[Stored[int | None]]:
        """Every record whose status is `running` (the sweep's candidates)."""
        ...


@dataclass(frozen=True, slots=True)
class CounterRead:
    """What the counter's persistence holds: the last number issued
    (`stored`), or why it cannot say (`problem`; `missing` when nothing was
    ever stored)."""

    stored: int | None = None
    problem: str | None = None
    missing: bool = False


class CounterPersistence(Protocol):
    @property
    def location(self) -> str:
        """Names the counter in findings (the `file` of a counter-repaired one)."""
        ...

    @property
    def name(self) -> str:
        """How a reason names the counter ("counter", "sequence wf_run_number")."""
        ...

    @property
    def runs_where(self) -> str:
        """Where the runs it is compared with live ("on disk", "in table wf_runs")."""
        ...

    async def read(self) -> CounterRead: ...

    async def repair(self, last: int) -> None:
        """Make `last` the last number issued (never lowering what a
        database's sequence handed out)."""
        ...

    async def advance(self, last: int, count: int) -> list[int]:
        """Durably issue `count` new numbers after `last` (the store's last
        issued) and return them, ascending. Never a number issued before."""
        ...


def complete(coroutine: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that never suspends (a load on files),
    without an event loop: a file store's load can run inside a synchronous
    builder, whether or not a loop is running. RuntimeError if it suspends."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coroutine.close()
    raise RuntimeError("a store suspended while loading synchronously (files never do)")


_log = logging.getLogger("adapters.host.persistence")


def answer_from_cache(exc: StoreUnavailable) -> None:
    """Note that a read through a shared store is answered from the cache
    because the database is unavailable (`exc`); the caller then answers it."""
    _log.info("the store is unavailable, answering from this server's cache: %s", exc.message)
