"""`wf-store`: operations on a store itself, with no server running.

    wf-store copy --store-root .wf_store --store-url postgresql://wf@db/wf

`copy` moves a filesystem store into an empty PostgreSQL database and
verifies it (`adapters.store_copy`): it prints, per table, the rows copied
and their SHA-256 digest as read back from the database, and exits 0 only
once the copy matches the source. `WF_STORE_URL` stands in for --store-url.

Exit status: 0 copied and verified; 1 refused or failed (a live scheduler
owns the source, damage in the source, a target that is not empty, a copy
that does not match, a database that does not answer); 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from adapters.rpc.config import ENV_STORE_URL
from adapters.store_copy import copy_store
from core.errors import SchedulingError

__all__ = ["main"]

EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wf-store", description="Operations on a wf-scheduler store, with no server running."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    copy = commands.add_parser(
        "copy",
        help="copy a filesystem store into an empty PostgreSQL database, and verify it",
        description="Copy a filesystem store (artifacts, deployments, runs and the run-id"
        " counter, schedules with their lifecycle logs, runtime records and histories) into"
        " an empty PostgreSQL database, then read it back and compare every table.",
    )
    copy.add_argument("--store-root", type=Path, required=True, help="the store directory")
    copy.add_argument(
        "--store-url",
        help=f"the empty PostgreSQL database: postgresql://user[:password]@host[:port]/dbname"
        f" (env {ENV_STORE_URL})",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point of `wf-store`."""
    args = _parser().parse_args(argv)
    url = args.store_url or os.environ.get(ENV_STORE_URL)
    if not url:
        print(f"wf-store: copy needs --store-url (or {ENV_STORE_URL})", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    try:
        report = asyncio.run(copy_store(args.store_root, url))
    except SchedulingError as exc:
        print(f"wf-store: copy not made: {exc.message}", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    print(f"copied {args.store_root} and verified it, table by table:")
    for table, figures in report.tables.items():
        print(f"  {table:24} {figures.rows:>10} rows  sha256 {figures.sha256}")
    print(f"  {'wf_run_number':24} last issued run-{report.run_id_last_issued:06d}")


if __name__ == "__main__":
    main()
