"""Crash-safe file primitives for the host's stores.

Every record the host keeps is one JSON file that is only ever replaced whole:
the new content goes to a temporary file in the same directory, is flushed and
fsynced, renamed over the old name, and the directory is fsynced so the rename
itself survives a power loss. A reader therefore sees the old record or the
new one, never a torn mix. Temporary files left by a crash start with `.` and
end in `.tmp`; readers ignore them.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shell.durable import sync_paths

__all__ = [
    "TEMP_SUFFIX",
    "atomic_write_json",
    "atomic_write_many",
    "atomic_write_text",
    "dump_json",
    "ensure_dir",
    "fsync_dir",
    "is_temp_file",
    "read_json",
]

TEMP_SUFFIX = ".tmp"


def dump_json(value: Any) -> str:
    """Canonical JSON text: sorted keys, no NaN, UTF-8 friendly, trailing newline."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False, indent=1) + "\n"


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


def atomic_write_json(path: Path, value: Any) -> None:
    """Serialize `value` (canonical JSON) and replace `path` with it atomically."""
    atomic_write_text(path, dump_json(value))


def atomic_write_many(items: Sequence[tuple[Path, str]]) -> None:
    """Replace each `path` with its `text`, atomically per file and durably,
    with two flushes for the whole batch instead of two per file.

    Every temporary file is written, then one flush makes them all durable
    (`shell.durable.sync_paths`: fsync per file for a few, one `syncfs` for
    many), then each is renamed over its target and the directories are
    fsynced once each. A crash leaves every target wholly old or wholly new
    (any subset may be new); on an error we survive, temporaries are removed
    and the targets not yet renamed keep their old content.
    """
    temps: list[tuple[str, Path]] = []
    directories: dict[Path, None] = {}
    try:
        for path, text in items:
            directory = path.parent
            if directory not in directories:
                ensure_dir(directory)
                directories[directory] = None
            fd, temp_name = tempfile.mkstemp(
                prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=directory
            )
            temps.append((temp_name, path))
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
        sync_paths([temp for temp, _ in temps])
        while temps:
            temp_name, path = temps[0]
            os.replace(temp_name, path)
            del temps[0]
    except BaseException:
        for temp_name, _ in temps:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp_name)
        raise
    for directory in directories:
        fsync_dir(directory)


def read_json(path: Path) -> Any:
    """Parse the JSON file at `path`. Raises OSError or ValueError (bad JSON/UTF-8)."""
    with path.open("r", encoding="utf-8") as handle:
        return json.load(handle)


def is_temp_file(path: Path) -> bool:
    """True for a temporary file of an interrupted atomic write."""
    return path.name.startswith(".") and path.name.endswith(TEMP_SUFFIX)
