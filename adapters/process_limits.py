"""The open-file limit of a long-running server process.

The file store keeps the descriptors of the files it writes after every
commit open between writes (`shell.disk.OsDisk`), as many as the process's
soft limit on open files leaves room for. Many systems start a process with
a soft limit of 1,024 and a hard limit far above it; the soft limit is the
process's own to raise up to the hard one (Go's runtime does so at every
start). The server's entry point raises it, and so do the benchmarks, so
that they measure what runs.
"""

from __future__ import annotations

from typing import Final

__all__ = ["OPEN_FILES_WANTED", "raise_open_file_limit"]

# Two files per schedule at a hundred thousand schedules, and room beside them.
OPEN_FILES_WANTED: Final = 1 << 18


def raise_open_file_limit() -> int:
    """Raise the soft limit on open files towards the hard limit (up to
    `OPEN_FILES_WANTED`); the soft limit now (-1 where the platform has no
    such limit: not POSIX). Call once, at process start, before the stores
    open any file. Where the system refuses, the limit stays as it was."""
    try:
        import resource
    except ImportError:
        return -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_WANTED)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            return soft
        return wanted
    return soft
