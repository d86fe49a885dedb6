"""What the database sees of a server process that died, for tests that
simulate the death of a server inside the test's own process.

A real server that dies is known dead by the next one on the same machine
(`shell.pg.servers.surely_dead`: its pid runs no more, or runs a process
started at another time), or, from another machine, after its silence. A
server simulated in this process shares the test's pid, which is alive:
`die_on_the_database` makes its row say what a dead one's would.
"""

from __future__ import annotations

from typing import Literal

from shell.pg.database import Database

__all__ = ["die_on_the_database"]


async def die_on_the_database(
    database: Database, *, how: Literal["exited", "silent"] = "exited"
) -> None:
    """The server of `database` died: its leadership lease lapsed, and its
    row of `wf_servers` names a process that runs no more (`exited`: as if
    its pid were now another process's, the next start on this machine
    knows it dead at once) or has a heartbeat an hour old (`silent`: a
    server on another machine that stopped proving it is alive)."""
    change = (
        "process_start = coalesce(process_start, 0) + 1"
        if how == "exited"
        else "heartbeat_at = now() - interval '1 hour'"
    )
    async with database.transaction("die") as conn:
        await conn.execute(
            f"UPDATE wf_servers SET {change} WHERE server_id = %s", (database.server_id,)
        )
        await conn.execute(
            "UPDATE wf_scheduler_owner SET lease_until = now() - interval '1 second'"
            " WHERE holder->>'server_id' = %s",
            (database.server_id,),
        )
