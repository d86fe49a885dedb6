"""Moving a store: a filesystem store copied into an empty PostgreSQL database.

`copy_store(store_root, store_url)` copies everything a server keeps
(artifacts, deployments, runs and the run-id counter, schedule definitions
with their lifecycle logs, runtime records and occurrence histories) and
verifies the copy before it reports success:

1. It takes the source's scheduler lock for the whole copy: a store a live
   scheduler owns is refused, naming the holder, and no scheduler can start
   on it while it is copied. What a scheduler that died left in its commit
   journal is replayed into the files first (the files then hold every
   durable write).
2. It reads the source whole and checks every record by the stores' own
   rules; a damaged or contradictory record refuses the copy, naming it
   (repair the source first: a copy carries no damage).
3. The target must be empty (a new database: every table empty, the run-id
   sequence unused); its schema is created. Everything is written in one
   transaction, with COPY.
4. It reads the target back: per table the row count and a SHA-256 digest of
   the rows in key order, each row a canonical JSON text of its key and
   document, computed on both sides; any difference fails the copy.

Nothing is written to the source. Runs that were executing when the source
was last used are copied as they are: the server that opens the copy fails
them as abandoned at its start, as the file server would have. The copy
ends owned by no one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import psycopg
from psycopg.types.json import Jsonb

from adapters.host.artifacts import ArtifactStore
from adapters.host.deployments import DeploymentStore
from adapters.host.file_persistence import FileArtifacts, FileDeployments, FileRunCounter
from adapters.host.identifiers import parse_run_id
from adapters.host.records import schedule_id_of
from adapters.host.run_log import FileRunLog
from adapters.host.runs import RunStore
from core.errors import InvalidState, SchedulingError, StoreUnavailable
from shell.definition_store import DefinitionStore
from shell.history_store import HistoryStore
from shell.journal import replay_journal
from shell.lock import SchedulerLock
from shell.pg.database import Database
from shell.runtime_store import RuntimeStore
from shell.store_format import parse_instant

__all__ = ["TABLES", "CopyRefused", "CopyReport", "TableFigures", "copy_store"]

# The tables a copy fills, with the key that orders their rows.
TABLES: Final = (
    "wf_artifacts",
    "wf_deployments",
    "wf_runs",
    "wf_schedules",
    "wf_schedule_lifecycle",
    "wf_schedule_runtime",
    "wf_occurrences",
)


class CopyRefused(InvalidState):
    """The copy was not made (or not verified): `message` says why."""

    code = "copy_refused"


@dataclass(frozen=True, slots=True)
class TableFigures:
    rows: int
    sha256: str


@dataclass(slots=True)
class CopyReport:
    """What was copied, table by table, as read back from the target."""

    tables: dict[str, TableFigures] = field(default_factory=dict)
    run_id_last_issued: int = 0


@dataclass(slots=True)
class _Source:
    """Every row a copy writes, by table, in key order: (key..., document)."""

    rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)
    last_run: int = 0


def _utc_now_text() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _canonical(values: Sequence[Any]) -> bytes:
    return json.dumps(list(values), sort_keys=True, separators=(",", ":")).encode()


def _digest(rows: Iterable[Sequence[Any]]) -> TableFigures:
    digest = hashlib.sha256()
    count = 0
    for row in rows:
        digest.update(_canonical(row))
        digest.update(b"\n")
        count += 1
    return TableFigures(count, digest.hexdigest())


async def _read_source(root: Path) -> _Source:
    """The source, checked by the stores' rules; `CopyRefused` names damage."""
    source = _Source()
    artifacts = ArtifactStore(FileArtifacts(root))
    deployments = DeploymentStore(FileDeployments(root))
    runs = RunStore(FileRunLog(root))
    found_in_runs = await runs.load(_utc_now_text, recover=False)
    # A finished run's record is read and checked here, not by the load (the
    # run log's index may have spared the load its frame): one damaged in
    # place is among the broken ones then.
    records = runs.records()
    findings = [
        *await artifacts.load(),
        *await deployments.load(),
        *found_in_runs,
        *(entry for entry in runs.broken() if entry not in found_in_runs),
    ]
    # The unfinished last write of a run log is no damage: nothing relied on it.
    findings = [f for f in findings if f.get("finding") != "torn-tail"]
    if findings:
        listed = "; ".join(f"{f.get('file')}: {f.get('reason')}" for f in findings[:5])
        more = f" (and {len(findings) - 5} more)" if len(findings) > 5 else ""
        raise CopyRefused(
            f"the source store has records it cannot use: {listed}{more}; repair or remove"
            " them first",
            data={"findings": findings},
        )
    source.rows["wf_artifacts"] = [
        (a["artifact_id"], a["version"], {"format": 1, **a}) for a in artifacts.list()
    ]
    source.rows["wf_deployments"] = [
        (d["deployment_id"], {"format": 1, **d}) for d in deployments.list()
    ]
    source.rows["wf_runs"] = [
        (parse_run_id(r.run_id), r.status, schedule_id_of(r), r.to_json()) for r in records
    ]
    counter = await FileRunCounter(root / "counters" / "run_id").read()
    if counter.problem is not None:
        raise CopyRefused(f"the source's run-id counter is damaged: {counter.problem}")
    source.last_run = max(counter.stored or 0, runs.highest_number())
    _read_schedules(root, source)
    return source


def _read_schedules(root: Path, source: _Source) -> None:
    definitions = DefinitionStore(root)
    runtime = RuntimeStore(root)
    history = HistoryStore(root)
    schedules: list[tuple[Any, ...]] = []
    lifecycle: list[tuple[Any, ...]] = []
    runtimes: list[tuple[Any, ...]] = []
    occurrences: list[tuple[Any, ...]] = []
    for schedule_id in definitions.list_ids():
        try:
            records, loaded = definitions.read_for_recovery(schedule_id)
            if loaded is None or loaded.snapshot is None:
                continue  # an incomplete create: no schedule
            if loaded.problems:
                raise CopyRefused(
                    f"schedule {schedule_id!r} is damaged: {loaded.problems[0].describe()}"
                )
            kept = runtime.load(schedule_id)
            if kept.problem is not None:
                raise CopyRefused(f"schedule {schedule_id!r} is damaged: {kept.problem.describe()}")
            rows = history.rows(schedule_id)
        except CopyRefused:
            raise
        except SchedulingError as exc:
            raise CopyRefused(f"schedule {schedule_id!r} cannot be read: {exc.message}") from None
        schedules.append((schedule_id, loaded.lifecycle_seq, loaded.snapshot))
        lifecycle.extend((schedule_id, record["seq"], record) for record in records)
        if kept.record is not None:
            runtimes.append((schedule_id, kept.record))
        for seq, decision, latest in rows:
            status = (latest or decision)["status"]
            # Who opened it: a trigger's or a backfill's row names its origin,
            # a calendar row none (the column's 'schedule').
            origin = decision.get("origin") or "schedule"
            occurrences.append(
                (schedule_id, seq, decision["instant"], status, origin, decision, latest)
            )
    source.rows["wf_schedules"] = schedules
    source.rows["wf_schedule_lifecycle"] = lifecycle
    source.rows["wf_schedule_runtime"] = runtimes
    source.rows["wf_occurrences"] = occurrences


# What each table's COPY writes, and what reading it back selects, in the
# order of the source rows (documents last).
_COPY: Final = {
    "wf_artifacts": "COPY wf_artifacts (artifact_id, version, record) FROM STDIN",
    "wf_deployments": "COPY wf_deployments (deployment_id, record) FROM STDIN",
    "wf_runs": "COPY wf_runs (run_number, status, schedule_id, record) FROM STDIN",
    "wf_schedules": "COPY wf_schedules (schedule_id, lifecycle_seq, snapshot) FROM STDIN",
    "wf_schedule_lifecycle": "COPY wf_schedule_lifecycle (schedule_id, seq, record) FROM STDIN",
    "wf_schedule_runtime": "COPY wf_schedule_runtime (schedule_id, record) FROM STDIN",
    "wf_occurrences": (
        "COPY wf_occurrences (schedule_id, seq, instant, status, origin, decision, latest)"
        " FROM STDIN"
    ),
}
_READ_BACK: Final = {
    "wf_artifacts": "SELECT artifact_id, version, record FROM wf_artifacts"
    " ORDER BY artifact_id, version",
    "wf_deployments": "SELECT deployment_id, record FROM wf_deployments ORDER BY deployment_id",
    "wf_runs": "SELECT run_number, status, schedule_id, record FROM wf_runs ORDER BY run_number",
    "wf_schedules": "SELECT schedule_id, lifecycle_seq, snapshot FROM wf_schedules"
    " ORDER BY schedule_id",
    "wf_schedule_lifecycle": "SELECT schedule_id, seq, record FROM wf_schedule_lifecycle"
    " ORDER BY schedule_id, seq",
    "wf_schedule_runtime": "SELECT schedule_id, record FROM wf_schedule_runtime"
    " ORDER BY schedule_id",
    "wf_occurrences": "SELECT schedule_id, seq, to_char(instant AT TIME ZONE 'UTC',"
    ' \'YYYY-MM-DD"T"HH24:MI:SS.US"Z"\'), status, origin, decision, latest FROM wf_occurrences'
    " ORDER BY schedule_id, seq",
}


def _to_copy(table: str, row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A source row as COPY takes it: documents as jsonb, instants as times."""
    values = list(row)
    if table == "wf_occurrences":
        values[2] = parse_instant(values[2])
    return tuple(Jsonb(v) if isinstance(v, dict) else v for v in values)


def _comparable(table: str, row: Sequence[Any]) -> tuple[Any, ...]:
    """A row as both sides digest it: an occurrence's instant as the UTC
    instant it is (text with microseconds), documents as decoded JSON."""
    values = list(row)
    if table == "wf_occurrences" and isinstance(values[2], str):
        values[2] = parse_instant(values[2]).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return tuple(values)


async def _check_empty(database: Database) -> None:
    counts = await database.fetch_all(
        "check the target is empty",
        " UNION ALL ".join(f"SELECT '{t}', count(*) FROM {t}" for t in TABLES)
        + " UNION ALL SELECT 'wf_scheduler_owner', count(*) FROM wf_scheduler_owner"
        " UNION ALL SELECT 'wf_run_number', CASE WHEN is_called THEN 1 ELSE 0 END"
        " FROM wf_run_number",
    )
    used = [f"{table} ({count} rows)" for table, count in counts if count]
    if used:
        raise CopyRefused(
            f"the target database {database.display} is not empty: {', '.join(used)};"
            " copy into a new, empty database",
            data={"store": database.display},
        )


async def _write(database: Database, source: _Source) -> None:
    async with database.transaction("copy the store", fenced=False) as conn:
        for table in TABLES:
            rows = source.rows[table]
            if not rows:
                continue
            async with conn.cursor().copy(_COPY[table]) as copy:
                for row in rows:
                    await copy.write_row(_to_copy(table, row))
        if source.last_run:
            await conn.execute("SELECT setval('wf_run_number', %s)", (source.last_run,))


async def _verify(database: Database, source: _Source) -> CopyReport:
    report = CopyReport(run_id_last_issued=source.last_run)
    mismatches: list[str] = []
    for table in TABLES:
        expected = _digest(_comparable(table, row) for row in source.rows[table])
        stored = await database.fetch_all("read the copy back", _READ_BACK[table])
        found = _digest(_comparable(table, row) for row in stored)
        report.tables[table] = found
        if found != expected:
            mismatches.append(
                f"{table}: {found.rows} rows (sha256 {found.sha256[:12]}) where the source has"
                f" {expected.rows} (sha256 {expected.sha256[:12]})"
            )
    [(last, called)] = await database.fetch_all(
        "read the copy back", "SELECT last_value, is_called FROM wf_run_number"
    )
    if (int(last) if called else 0) != source.last_run:
        mismatches.append(f"wf_run_number is at {last} where the source issued {source.last_run}")
    if mismatches:
        raise CopyRefused(
            f"the copy in {database.display} does not match the source: {'; '.join(mismatches)}",
            data={"store": database.display},
        )
    return report


async def copy_store(store_root: str | Path, store_url: str) -> CopyReport:
    """Copy the filesystem store at `store_root` into the empty PostgreSQL
    database at `store_url` and verify it (see the module docstring).

    Raises `SchedulerUnavailable` naming the holder when a scheduler owns the
    source, `CopyRefused` for damage in the source, a target that is not
    empty or a copy that does not match, `StoreUnavailable` when the
    database does not answer."""
    root = Path(store_root)
    if not root.is_dir():
        raise CopyRefused(f"{root} is not a store directory")
    lock = SchedulerLock(root)
    lock.acquire()
    try:
        # A scheduler that died may have left durable writes in its journal only.
        replay_journal(root)
        source = await _read_source(root)
        database = Database(store_url, pool_size=2)
        await database.open()
        try:
            await _check_empty(database)
            try:
                await _write(database, source)
            except psycopg.Error as exc:
                raise StoreUnavailable(
                    f"the copy into {database.display} failed: {str(exc).splitlines()[0]}",
                    data={"store": database.display, "operation": "copy the store"},
                ) from None
            return await _verify(database, source)
        finally:
            await database.close()
    finally:
        lock.release()
