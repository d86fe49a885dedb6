"""The server's log lines: readable text (the default) or one JSON object a
line (`wf-rpc-server --log-format json`), and the optional access log.

Every line has a stable **event name**. A log call may give it itself
(`extra={"event": "console.schedule_paused", "schedule_id": ...}`); the
calls that do not are named by `EVENTS`, keyed by their logger and their
message template (the format string, which is stable where the message is
not), with the positions of the arguments that are a schedule id, a run id
or an instant. So every warning and error of recovery, corruption and
fencing has a name of its own without the stores and the scheduler loop
knowing about JSON. `tests/test_logs.py` walks the source and fails for a
log call of `shell` or `adapters` that has no name here.

A JSON line:

    {"ts": "2026-03-02T10:00:00.123456Z", "level": "error", "logger": "shell.service",
     "event": "schedule.blocked", "message": "schedule hourly is blocked: ...",
     "schedule_id": "hourly"}

plus `run_id` and `instant` where they apply, `exception` (the traceback)
when one was logged, and any other `extra` field given.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

__all__ = [
    "EVENTS",
    "JsonFormatter",
    "Named",
    "TextFormatter",
    "configure_logging",
    "event_of",
]

LogFormat = Literal["text", "json"]


@dataclass(frozen=True, slots=True)
class Named:
    """An event name and where its arguments hold the ids (argument positions)."""

    event: str
    schedule_id: int | None = None
    run_id: int | None = None
    instant: int | None = None


_SHELL_SERVICE: Final = "shell.service"

# (logger, message template) -> the event. Grouped by what they are about.
EVENTS: Final[Mapping[tuple[str, str], Named]] = {
    # The scheduler loop and its rounds.
    (_SHELL_SERVICE, "scheduler started on %s (%s)"): Named("scheduler.started"),
    (_SHELL_SERVICE, "scheduler stopped"): Named("scheduler.stopped"),
    (_SHELL_SERVICE, "scheduler stopped (standing by)"): Named("scheduler.stopped"),
    (
        _SHELL_SERVICE,
        "scheduler round failed: %s; retried after the poll interval, from the stores",
    ): Named("scheduler.round_failed_store"),
    (
        _SHELL_SERVICE,
        "scheduler round failed; its state is rebuilt from the stores before the next round,"
        " after the poll interval",
    ): Named("scheduler.round_failed"),
    (_SHELL_SERVICE, "scheduler state rebuilt from the stores %s"): Named(
        "scheduler.resynchronized"
    ),
    (_SHELL_SERVICE, "round of %s not prepared: %s"): Named(
        "scheduler.round_not_prepared", instant=0
    ),
    (
        _SHELL_SERVICE,
        "%d run(s) still executing after %.1fs of drain; they keep their executing marks and"
        " the next start fails them as abandoned (the drain ran out): %s",
    ): Named("scheduler.drain_expired"),
    (_SHELL_SERVICE, "%s"): Named("scheduler.core_warning"),
    # Fencing: this process no longer owns the store.
    (_SHELL_SERVICE, "%s: admissions are stopped; restart the scheduler"): Named(
        "fencing.admissions_stopped"
    ),
    (_SHELL_SERVICE, "%s: it stops without writing the store"): Named(
        "fencing.stopped_without_writing"
    ),
    (
        _SHELL_SERVICE,
        "%d run(s) still executing after %.1fs of drain on a fenced store: their records are"
        " not written any more; the next start fails them as abandoned: %s",
    ): Named("fencing.drain_expired"),
    (
        "shell.fence",
        "store %s fenced: scheduler lock %s was removed or replaced (or the store root renamed)"
        " under this process; writes to the store are stopped (refused: %s)",
    ): Named("fencing.lock_lost"),
    (
        "adapters.host.executor",
        "run %s stopped, but the store is fenced: its stop is not recorded (the next owner's"
        " recovery fails it as abandoned)",
    ): Named("fencing.run_stop_unrecorded", run_id=0),
    # Leadership of a store several servers share (shell.pg.ownership).
    ("shell.pg", "leading the %s at epoch %d"): Named("leadership.taken"),
    (
        "shell.pg",
        "the scheduler's leader (pid %s on %s, epoch %s) is dead: taking over before its"
        " lease lapses",
    ): Named("leadership.leader_dead"),
    ("shell.pg", "could not renew the scheduler's leadership: %s"): Named("fencing.renewal_failed"),
    ("shell.pg", "could not give up the scheduler's leadership: %s"): Named(
        "leadership.release_failed"
    ),
    (_SHELL_SERVICE, "%s: admissions are stopped; standing by to lead again"): Named(
        "fencing.leadership_lost"
    ),
    (_SHELL_SERVICE, "took over the leadership of %s at epoch %s"): Named("leadership.took_over"),
    # The servers of a shared store (shell.pg.servers, adapters.host.shared_store).
    ("shell.pg", "server %s registered on the %s"): Named("servers.registered"),
    ("shell.pg", "this server's heartbeat failed: %s"): Named("servers.heartbeat_failed"),
    ("shell.pg", "this server's heartbeat reaches the store again"): Named(
        "servers.heartbeat_restored"
    ),
    (
        "shell.pg",
        "this server (%s) was declared gone from the store %s: its executing runs were failed"
        " as abandoned; it goes on as a new server",
    ): Named("fencing.server_declared_gone"),
    ("shell.pg", "could not note this server stopped: %s"): Named("servers.stop_unrecorded"),
    ("shell.pg", "server %s declared gone from the store (%s)"): Named("servers.declared_gone"),
    (
        "adapters.host.shared",
        "stopped executing %s: server %s was declared gone, and its runs failed as abandoned",
    ): Named("fencing.run_stopped_server_gone", run_id=0),
    ("adapters.host.shared", "could not refresh what another server changed: %s"): Named(
        "servers.refresh_failed"
    ),
    ("adapters.host.shared", "ignored a change another server made: %s"): Named(
        "servers.change_ignored"
    ),
    (_SHELL_SERVICE, "could not sweep the runs of dead servers: %s"): Named("servers.sweep_failed"),
    ("adapters.host.runs", "run %s failed: %s"): Named("recovery.run_of_gone_server", run_id=0),
    (
        "adapters.host.persistence",
        "the store is unavailable, answering from this server's cache: %s",
    ): Named("store.read_from_cache"),
    ("adapters.host.deployments", "deployment %s is unreadable: %s"): Named(
        "corruption.deployment_unreadable"
    ),
    # The store's change notices (shell.pg.listener).
    ("shell.pg", "cannot listen to the store's changes: %s"): Named("notices.listen_failed"),
    ("shell.pg", "listening to the store's changes again"): Named("notices.listening"),
    ("shell.pg", "lost the store's change notices: %s"): Named("notices.lost"),
    ("shell.pg", "a reconnect callback of the store's listener failed"): Named(
        "notices.callback_failed"
    ),
    ("shell.pg", "a callback of the store's listener failed on %s"): Named(
        "notices.callback_failed"
    ),
    ("shell.pg", "ignored a notice on %s that is not JSON: %.100r"): Named("notices.malformed"),
    # Schedules blocked: records that fail closed (corruption, contradiction).
    (_SHELL_SERVICE, "schedule %s is blocked: %s"): Named("schedule.blocked", schedule_id=0),
    ("shell.stores", "schedule %s is blocked: %s"): Named("schedule.blocked", schedule_id=0),
    (_SHELL_SERVICE, "schedule %s is blocked and its store refused a write: %s"): Named(
        "schedule.blocked_write_refused", schedule_id=0
    ),
    (_SHELL_SERVICE, "could not persist the diagnostic of %s: %s"): Named(
        "schedule.diagnostic_unwritten", schedule_id=0
    ),
    (
        _SHELL_SERVICE,
        "schedule %s: its records are sound at this start; lifting its block (%s: %s: %s)",
    ): Named("recovery.block_lifted", schedule_id=0),
    (_SHELL_SERVICE, "could not clear the diagnostic of %s: %s"): Named(
        "recovery.diagnostic_not_cleared", schedule_id=0
    ),
    # Recovery at a start.
    (
        _SHELL_SERVICE,
        "the run-id counter was behind %s, which an admitted occurrence holds; reserving past it",
    ): Named("recovery.run_counter_behind", run_id=0),
    (_SHELL_SERVICE, "run %s claims schedule %r, which does not exist"): Named(
        "recovery.run_of_unknown_schedule", run_id=0, schedule_id=1
    ),
    (
        _SHELL_SERVICE,
        "schedule %s: its history log was rewritten since the last checkpoint (not only"
        " appended to); reading it whole",
    ): Named("recovery.history_rewritten", schedule_id=0),
    (
        _SHELL_SERVICE,
        "schedule %s: its startup checkpoint entry is unusable (%s); reading its files",
    ): Named("recovery.checkpoint_entry_unusable", schedule_id=0),
    (
        "shell.startup_checkpoint",
        "ignoring the startup checkpoint %s: %s; reading every schedule",
    ): Named("recovery.checkpoint_ignored"),
    (
        "adapters.host.run_log",
        "ignoring the run log's index %s: %s; scanning every segment",
    ): Named("recovery.run_log_index_ignored"),
    (
        "adapters.host.run_log",
        "could not write the run log's index %s (%s); the next start scans every segment",
    ): Named("store.run_log_index_failed"),
    ("adapters.host.runs", "run store recovery: %s"): Named("recovery.run_store"),
    ("adapters.host.runs", "run %s: its finished record, read again, is unusable: %s"): Named(
        "corruption.run_record_unreadable", run_id=0
    ),
    ("adapters.host.server", "run store recovery: %s"): Named("recovery.run_store"),
    ("adapters.rpc_server", "store recovery: %s"): Named("recovery.finding"),
    # Damage found in files (corruption) and its repair.
    ("shell.history_store", "history %s is damaged at %s: %s"): Named(
        "corruption.history_damaged", schedule_id=0
    ),
    ("shell.history_store", "history %s is damaged: %s"): Named(
        "corruption.history_damaged", schedule_id=0
    ),
    ("shell.history_store", "could not update %s (%s); it will be rebuilt"): Named(
        "corruption.history_index_stale"
    ),
    (
        _SHELL_SERVICE,
        "could not publish the history index checkpoints at the stop (%s);"
        " the next start replays the rows after them",
    ): Named("store.index_publish_failed"),
    (
        _SHELL_SERVICE,
        "could not empty the commit journal at the stop (%s); the next start replays it",
    ): Named("store.journal_checkpoint_failed"),
    (
        _SHELL_SERVICE,
        "could not checkpoint the commit journal (%s); tried again later",
    ): Named("store.journal_checkpoint_failed"),
    (
        "shell.definition_store",
        "%s was behind %s (seq %d < %d); rebuilt it from the log",
    ): Named("corruption.definition_snapshot_behind"),
    (
        "shell.definition_store",
        "%s holds an incomplete create (no lifecycle record): removing it to create %r",
    ): Named("corruption.incomplete_create", schedule_id=1),
    ("shell.definition_store", "could not remove %s after a failed create: %s"): Named(
        "corruption.incomplete_create_kept"
    ),
    ("shell.definition_store", "ignoring a torn final line of %s"): Named(
        "corruption.torn_line_ignored"
    ),
    ("shell.definition_store", "ignoring %s: not a schedule id"): Named(
        "corruption.stray_directory"
    ),
    (
        "shell.jsonlog",
        "dropped a torn final line of %s (%d bytes at offset %d): a crash interrupted an append"
        " that was never acknowledged",
    ): Named("corruption.torn_line_dropped"),
    (
        "shell.journal",
        "commit journal %s ends with %d bytes of a commit that never completed; they are"
        " dropped (nothing in them was acted on)",
    ): Named("corruption.journal_torn_tail"),
    ("shell.journal", "commit journal replay: %s"): Named("corruption.journal_replay_failed"),
    (
        "shell.journal",
        "commit journal replayed %d commit(s): %d append(s) and %d replace(s) written, %d"
        " already in place",
    ): Named("recovery.journal_replayed"),
    ("shell.journal", "could not cut %s back after a failed write: %s"): Named(
        "store.journal_cut_failed"
    ),
    ("shell.durable", "could not cut %s back after a failed append: %s"): Named(
        "store.append_cut_failed"
    ),
    ("shell.durable", "commit journal checkpoint failed (retried later): %s"): Named(
        "store.journal_checkpoint_failed"
    ),
    # Admission and runs.
    (
        _SHELL_SERVICE,
        "admitted occurrence %s@%s has no run id or snapshot to create its run from",
    ): Named("admission.run_unknown", schedule_id=0, instant=1),
    (_SHELL_SERVICE, "run %s for %s@%s could not be created: %s"): Named(
        "admission.run_not_created", run_id=0, schedule_id=1, instant=2
    ),
    (_SHELL_SERVICE, "run %s of %s could not be launched: %s"): Named(
        "admission.run_not_launched", run_id=0, schedule_id=1
    ),
    (
        "adapters.host.executor",
        "run %s: the store is unavailable; writing again until it answers: %s",
    ): Named("run.write_retried", run_id=0),
    ("adapters.host.executor", "run %s: host error while executing"): Named(
        "run.host_error", run_id=0
    ),
    ("adapters.host.executor", "run %s: could not record the host error"): Named(
        "run.host_error_unrecorded", run_id=0
    ),
    ("adapters.host.executor", "run listener %r failed for %s"): Named(
        "run.listener_failed", run_id=1
    ),
    # Housekeeping.
    (_SHELL_SERVICE, "could not write the startup checkpoint: %s"): Named(
        "store.checkpoint_failed"
    ),
    (_SHELL_SERVICE, "could not sweep temp files of interrupted writes: %s"): Named(
        "store.sweep_failed"
    ),
    (_SHELL_SERVICE, "removed temp files of interrupted writes in %s: %s"): Named(
        "store.temp_files_removed"
    ),
    ("shell.stores", "removed temp files of interrupted writes in %s: %s"): Named(
        "store.temp_files_removed"
    ),
    ("adapters.host.server", "removed temp files of interrupted writes in %s: %s"): Named(
        "store.temp_files_removed"
    ),
    ("adapters.host.server", "could not sweep temp files of interrupted writes: %s"): Named(
        "store.sweep_failed"
    ),
    # A database store.
    ("shell.pg", "store: PostgreSQL %s (pool of %d)"): Named("store.opened"),
    ("shell.pg", "%s"): Named("store.unavailable"),
    ("shell.pg", "the PostgreSQL store %s answers again"): Named("store.available"),
    # The server process.
    ("adapters.rpc_server", "cannot listen on %s:%s: %s"): Named("server.listen_failed"),
    (
        "adapters.rpc_server",
        "%s: stopping admission, then draining (up to %g s; Ctrl-C stops waiting)",
    ): Named("server.stopping"),
    ("adapters.rpc_server", "SIGINT while draining: not waiting for the drain"): Named(
        "server.drain_cut"
    ),
    ("adapters.rpc_server", "%s: already stopping (only a SIGINT cuts the drain)"): Named(
        "server.signal_ignored"
    ),
    (
        "adapters.rpc_server",
        "runs still executing at exit were stopped unfinished; the next start fails them as"
        " abandoned, saying so: %s",
    ): Named("server.runs_stopped_unfinished"),
    ("adapters.rpc_server", "drained: no run was executing at exit"): Named("server.drained"),
    ("adapters.rpc_server", "stopped"): Named("server.stopped"),
    ("adapters.rpc", "internal error in %s (incident %s)%s"): Named("rpc.internal_error"),
    ("adapters.rpc", "health reporter failed"): Named("rpc.health_failed"),
    ("adapters.console", "console: the health reporter failed"): Named("console.health_failed"),
    ("adapters.console", "console: a resumed run failed in the server"): Named(
        "console.resume_failed"
    ),
}

# Loggers of libraries, named as a whole.
_LIBRARY_EVENTS: Final[Mapping[str, str]] = {
    "uvicorn.access": "http.access",
    "uvicorn.error": "http.server",
    "uvicorn": "http.server",
}


def event_of(record: logging.LogRecord) -> tuple[str, dict[str, Any]]:
    """The event name of `record` and the id fields its arguments give."""
    fields: dict[str, Any] = {}
    given = getattr(record, "event", None)
    if isinstance(given, str):
        return given, fields
    named = EVENTS.get((record.name, str(record.msg)))
    if named is None:
        library = _LIBRARY_EVENTS.get(record.name)
        if library is not None:
            return library, _access_fields(record) if library == "http.access" else fields
        return f"{record.name}.{record.levelname.lower()}", fields
    # A lone mapping argument is kept by `LogRecord` as `args` itself.
    args = (
        record.args
        if isinstance(record.args, tuple)
        else (record.args,)
        if isinstance(record.args, Mapping)
        else ()
    )
    for key in ("schedule_id", "run_id", "instant"):
        position = getattr(named, key)
        if position is not None and position < len(args):
            value = args[position]
            fields[key] = value.isoformat() if isinstance(value, datetime) else str(value)
    # A finding logged as a whole (a dict) names its run or schedule itself.
    for arg in args:
        if isinstance(arg, Mapping):
            for key in ("schedule_id", "run_id", "instant"):
                if key not in fields and isinstance(arg.get(key), str):
                    fields[key] = arg[key]
    return named.event, fields


def _access_fields(record: logging.LogRecord) -> dict[str, Any]:
    # uvicorn's access line: (client, method, path, http version, status).
    args = record.args if isinstance(record.args, tuple) else ()
    if len(args) != 5:
        return {}
    client, method, path, version, status = args
    return {
        "client": str(client),
        "method": str(method),
        "path": str(path),
        "http_version": str(version),
        "status": int(status) if isinstance(status, int) else str(status),
    }


# LogRecord attributes that are not `extra` fields.
_STANDARD: Final = frozenset(
    vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None))
) | {"message", "asctime", "event", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object a line (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        event, fields = event_of(record)
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": event,
            "message": record.getMessage(),
        }
        line.update(fields)
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in line:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """The readable default: `time level logger: message`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")


def configure_logging(level: str, log_format: LogFormat, *, access_log: bool) -> None:
    """Send the process's log lines to stderr as text or JSON; with
    `access_log`, one line per HTTP request (`http.access`) too."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())
    access = logging.getLogger("uvicorn.access")
    # Its own level: the access log is asked for, whatever the verbosity.
    access.setLevel(logging.INFO if access_log else logging.WARNING)
    access.disabled = not access_log
