"""Crash-safe file primitives for the host's stores.

Every record the host keeps is one JSON file that is only ever replaced whole:
the new content goes to a temporary file in the same directory, is flushed and
fsynced, renamed over the old name, and the directory is fsynced so the rename
itself survives a power loss. A reader therefore sees the old record or the
new one, never a torn mix. Temporary files left by a crash start with `.` and
end in `.tmp`; readers ignore them.

Under a scheduler lock, every write first passes the store's write fence
(`shell.fence`): once the lock file was removed or replaced, a write raises
`core.errors.StoreFenced` before its first byte (a batch is checked once).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from shell.fence import check_fence

__all__ = [
    "TEMP_SUFFIX",
    "atomic_write_json",
    "atomic_write_text",
    "dump_json",
    "ensure_dir",
    "fsync_dir",
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


def fsync_dir(path: Path) -> None:
    """Make the directory entries of `path` (creations, renames) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dir(path: Path) -> None:
    """Create `path` (and parents) durably if it does not exist yet."""
    if path.is_dir():
        return
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    path.mkdir(parents=True, exist_ok=True)
    # The new entries live in their parents: fsync each parent, deepest last.
    for created in reversed(missing):
        fsync_dir(created.parent)


def atomic_write_text(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically and durably (see module docstring)."""
    directory = path.parent
    check_fence(path)
    ensure_dir(directory)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp_name, path)
    except BaseException:
        # Never leave a half-written temporary behind on an error we survive.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise
    fsync_dir(directory)


def atomic_write_json(path: Path, value: Any, *, compact: bool = False) -> None:
    """Serialize `value` (canonical JSON) and replace `path` with it atomically."""
    atomic_write_text(path, dump_json(value, compact=compact))


def read_json(path: Path) -> Any:
    """Parse the JSON file at `path`. Raises OSError or ValueError (bad JSON/UTF-8)."""
    with path.open("r", encoding="utf-8") as handle:
        return json.load(handle)


def is_temp_file(path: Path) -> bool:
    """True for a temporary file of an interrupted atomic write."""
    return path.name.startswith(".") and path.name.endswith(TEMP_SUFFIX)
