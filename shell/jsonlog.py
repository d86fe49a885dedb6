"""Reading append-only JSON-lines logs, and dropping a torn final line.

A record is exactly one line ending in `\\n` (see `encode_json_line`). A final
piece without the newline is what a crash in the middle of an append leaves:
it was never acknowledged, so it is a crash artifact and not corruption.
The owner drops it (`repair_torn_tail`) with a logged warning before
appending again; readers that do not own the store just ignore it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Final

from shell.disk import OS_DISK, Disk, DiskFile
from shell.durable import fault_point
from shell.fence import check_fence
from shell.store_format import read_file

__all__ = [
    "complete_end",
    "iter_lines",
    "read_last_line",
    "read_lines",
    "repair_torn_tail",
]

_log = logging.getLogger(__name__)

_CHUNK: Final = 1 << 20
# Bytes `read_last_line` reads at once from the end of a log: a runtime
# record and the end of the one before it fit many times over, so one read
# serves a start's load of each schedule (every read is a system call).
_LAST_LINE_WINDOW: Final = 4096


def iter_lines(file: DiskFile, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """Yield `(offset, line)` for the bytes `[start, end)` of an open file.

    Every line but possibly the last ends in `\\n`; a last line without it is
    torn. Reads in large chunks, so the cost is proportional to `end - start`.
    """
    pending = b""
    pending_at = start
    position = start
    while position < end:
        chunk = file.read_at(min(_CHUNK, end - position), position)
        if not chunk:
            break
        position += len(chunk)
        buffer = pending + chunk if pending else chunk
        cut = 0
        while True:
            newline = buffer.find(b"\n", cut)
            if newline < 0:
                break
            yield pending_at + cut, buffer[cut : newline + 1]
            cut = newline + 1
        pending_at += cut
        pending = buffer[cut:]
    if pending:
        yield pending_at, pending


def complete_end(file: DiskFile, size: int, floor: int = 0) -> int:
    """The offset just past the last `\\n` in `[floor, size)`, or `floor` if none.

    Reads backwards from the end, so finding a torn final line costs only the
    length of that line.
    """
    position = size
    while position > floor:
        start = max(floor, position - 65536)
        chunk = file.read_at(position - start, start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        position = start
    return floor


def repair_torn_tail(path: str | os.PathLike[str], *, floor: int = 0, disk: Disk = OS_DISK) -> int:
    """Drop a torn final line of the log at `path`; returns the bytes dropped.

    The truncation is fsynced, so new records are never appended to a torn
    line's bytes. Never cuts below `floor` (an offset known to end a record).
    Only the store's owner may call this.
    """
    target = os.fspath(path)
    name = os.path.basename(target)
    try:
        file = disk.open(target, write=True)
    except FileNotFoundError:
        return 0
    try:
        size = file.size()
        if size <= floor or file.read_at(1, size - 1) == b"\n":
            return 0
        end = complete_end(file, size, floor)
        # Only when there is a torn line to cut: reading stays fenced-free.
        check_fence(target)
        fault_point(f"before:truncate:{name}")
        file.truncate(end)
        file.fsync()
        fault_point(f"after:truncate:{name}")
    finally:
        file.close()
    dropped = size - end
    _log.warning(
        "dropped a torn final line of %s (%d bytes at offset %d): a crash interrupted"
        " an append that was never acknowledged",
        target,
        dropped,
        end,
    )
    return dropped


def read_lines(
    path: str | os.PathLike[str], *, disk: Disk = OS_DISK
) -> tuple[list[bytes], bytes] | None:
    """All complete lines of a small log and its torn remainder (b"" if none).

    Returns None when the file does not exist.
    """
    data = read_file(os.fspath(path), disk=disk)
    if data is None:
        return None
    end = data.rfind(b"\n") + 1
    # Split on b"\n" only: bytes.splitlines would also split on a stray b"\r".
    lines = [line + b"\n" for line in data[: end - 1].split(b"\n")] if end else []
    return lines, data[end:]


def read_last_line(
    path: str | os.PathLike[str], *, disk: Disk = OS_DISK
) -> tuple[bytes | None, int] | None:
    """The last complete line of a log (None if it has none) and the log's
    size; None when the file does not exist. A torn final piece is ignored.

    Reads backwards from the end: the cost is the length of the last lines,
    not of the log.
    """
    try:
        file = disk.open(os.fspath(path))
    except FileNotFoundError:
        return None
    try:
        size = file.size()
        # The last line and the end of the one before it are usually in the
        # last few kilobytes: one read, and the slow path only when not.
        window = max(0, size - _LAST_LINE_WINDOW)
        tail = file.read_at(size - window, window) if size > 0 else b""
        if len(tail) == size - window:
            end = tail.rfind(b"\n") + 1
            if end == 0 and window == 0:
                return None, size
            start = tail.rfind(b"\n", 0, end - 1) + 1 if end else 0
            if end and (start or window == 0):
                return tail[start:end], size
        end = size
        if size and file.read_at(1, size - 1) != b"\n":
            end = complete_end(file, size)
        if end == 0:
            return None, size
        start = complete_end(file, end - 1)
        return file.read_at(end - start, start), size
    finally:
        file.close()
