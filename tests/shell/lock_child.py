"""Run as a child process: take the scheduler lock, say so, wait for stdin to close."""

from __future__ import annotations

import sys

from shell.lock import SchedulerLock


def main() -> None:
    lock = SchedulerLock(sys.argv[1])
    holder = lock.acquire()
    print(f"locked {holder['pid']}", flush=True)
    sys.stdin.read()
    lock.release()


if __name__ == "__main__":
    main()
