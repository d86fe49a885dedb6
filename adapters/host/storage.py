"""Crash-safe file primitives for the host's stores, on the disk port
(`shell.disk`: the operating system's, or a simulated one whose power the
crash campaigns cut).

Every record the host keeps is one JSON file that is only ever replaced whole:
the new content goes to a temporary file in the same directory, is flushed and
fsynced, renamed over the old name, and the directory is fsynced so the rename
itself survives a power loss (`shell.durable.atomic_write_bytes`). A reader
therefore sees the old record or the new one, never a torn mix. Temporary
files left by a crash start with `.` and end in `.tmp`; readers ignore them.

Under a scheduler lock, every write first passes the store's write fence
(`shell.fence`): once the lock file was removed or replaced, a write raises
`core.errors.StoreFenced` before its first byte (a batch is checked once).
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

from shell.disk import OS_DISK, Disk, exists, is_directory
from shell.durable import atomic_write_bytes, fsync_directory
from shell.fence import check_fence
from shell.store_format import read_file

__all__ = [
    "TEMP_SUFFIX",
    "atomic_write_json",
    "atomic_write_text",
    "dump_json",
    "ensure_dir",
    "is_temp_file",
    "read_json",
]

TEMP_SUFFIX = ".tmp"


def dump_json(value: Any, *, compact: bool = False) -> str:
    """Canonical JSON text: sorted keys, no NaN, UTF-8 friendly, trailing newline.

    Indented for people by default; `compact` (no whitespace) is for records
    written on every step, where the indenting encoder costs several times
    the compact one.
    """
    if compact:
        text = json.dumps(
            value, sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ":")
        )
    else:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False, indent=1)
    return text + "\n"


def ensure_dir(path: Path, *, disk: Disk = OS_DISK) -> None:
    """Create `path` (and parents) durably on `disk` if it does not exist yet."""
    if is_directory(disk, str(path)):
        return
    missing: list[Path] = []
    probe = path
    while not exists(disk, str(probe)):
        missing.append(probe)
        probe = probe.parent
    disk.make_directory(str(path), parents=True)
    # The new entries live in their parents: fsync each parent, deepest last.
    for created in reversed(missing):
        fsync_directory(created.parent, disk=disk)


def atomic_write_text(path: Path, text: str, *, disk: Disk = OS_DISK) -> None:
    """Replace `path` with `text` atomically and durably (see module docstring)."""
    if not is_directory(disk, str(path.parent)):
        # Fenced before the directory is made: a fenced process creates
        # nothing (the write checks the fence again, as every write does).
        check_fence(path)
        ensure_dir(path.parent, disk=disk)
    atomic_write_bytes(path, text.encode(), disk=disk)


def atomic_write_json(
    path: Path, value: Any, *, compact: bool = False, disk: Disk = OS_DISK
) -> None:
    """Serialize `value` (canonical JSON) and replace `path` with it atomically."""
    atomic_write_text(path, dump_json(value, compact=compact), disk=disk)


def read_json(path: Path, *, disk: Disk = OS_DISK) -> Any:
    """Parse the JSON file at `path`. Raises OSError (FileNotFoundError when
    absent) or ValueError (bad JSON/UTF-8)."""
    data = read_file(str(path), disk=disk)
    if data is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
    return json.loads(data.decode("utf-8"))


def is_temp_file(path: Path) -> bool:
    """True for a temporary file of an interrupted atomic write."""
    return path.name.startswith(".") and path.name.endswith(TEMP_SUFFIX)
