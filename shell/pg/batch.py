"""One round's writes on PostgreSQL: a group commit is one transaction.

The stores stage statements (history rows, runtime records, run records) in
a `PgBatch`; `commit` runs them in one transaction, each kind of statement
batched, in a fixed order of phases: new rows as one `COPY ... FROM STDIN`
(a herd's ten thousand rows cost 0.3 s there against 0.5 s as pipelined
INSERTs, `bench/pg_insert.py`), the others as one `executemany` (which
psycopg sends as one pipeline), after checking the ownership fence. Everything in it is
durable when COMMIT returns (synchronous commit), all or nothing: a round
acts on nothing before that. The commit passes the fault points
`before:commit` and `after:commit`, as a file batch does, so crash tests
kill a process on either side of it, and `commit:in-transaction` between
its last statement and its COMMIT. If the commit fails its outcome is unknown
(the connection may have broken after the server committed): the stores
drop what they staged and read the database again before their next use.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final, Literal

from shell.durable import fault_point
from shell.pg.database import Database

__all__ = [
    "PHASE_HISTORY_DECISIONS",
    "PHASE_HISTORY_TRANSITIONS",
    "PHASE_RUNS",
    "PHASE_RUNTIME",
    "PgBatch",
]

_log = logging.getLogger("shell.pg")

# The order statements run in within the transaction: a transition updates
# the row its decision inserts, possibly in the same batch.
PHASE_HISTORY_DECISIONS: Final = 10
PHASE_HISTORY_TRANSITIONS: Final = 20
PHASE_RUNTIME: Final = 30
PHASE_RUNS: Final = 40


class PgBatch:
    """Statements for one transaction (see the module docstring)."""

    def __init__(self, database: Database) -> None:
        # The store the batch commits to: a store of another can tell it is
        # not its own (the host stages run records only into its database's).
        self.database = database
        self._state: Literal["open", "committed", "aborted"] = "open"
        # (phase, statement) -> parameter rows, in staging order.
        self._statements: dict[tuple[int, str], list[tuple[Any, ...]]] = {}
        self._on_commit: list[Callable[[], None]] = []
        self._on_abort: list[Callable[[], None]] = []

    @property
    def state(self) -> str:
        return self._state

    def __len__(self) -> int:
        return sum(len(rows) for rows in self._statements.values())

    def _check_open(self) -> None:
        if self._state != "open":
            raise RuntimeError(f"this batch is {self._state}; start a new one")

    def add(self, phase: int, statement: str, params: tuple[Any, ...]) -> None:
        """Stage one row of `statement` (an INSERT or UPDATE with `%s`
        parameters, or a `COPY ... FROM STDIN` whose row `params` is)."""
        self._check_open()
        self._statements.setdefault((phase, statement), []).append(params)

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Run `callback` once the transaction committed."""
        self._check_open()
        self._on_commit.append(callback)

    def on_abort(self, callback: Callable[[], None]) -> None:
        """Run `callback` if the batch is dropped or its commit fails."""
        self._check_open()
        self._on_abort.append(callback)

    def abort(self) -> None:
        if self._state != "open":
            return
        self._state = "aborted"
        self._statements.clear()
        for callback in self._on_abort:
            callback()

    async def commit(self, *, operation: str = "commit a round") -> None:
        """Run every statement in one fenced transaction; raises
        `StoreUnavailable` (or `StoreFenced`) after dropping the batch."""
        self._check_open()
        fault_point("before:commit")
        try:
            if self._statements:
                async with (
                    self.database.transaction(operation, fenced=True) as conn,
                    conn.cursor() as cursor,
                ):
                    for (_, statement), rows in sorted(
                        self._statements.items(), key=lambda item: item[0][0]
                    ):
                        if statement.startswith("COPY "):
                            async with cursor.copy(statement) as copy:
                                for row in rows:
                                    await copy.write_row(row)
                        else:
                            await cursor.executemany(statement, rows)
                    # Everything sent, the COMMIT not yet: where a session
                    # lost mid-commit loses the whole round.
                    fault_point("commit:in-transaction")
        except BaseException:
            self.abort()
            raise
        self._state = "committed"
        self._statements.clear()
        fault_point("after:commit")
        for callback in self._on_commit:
            callback()
