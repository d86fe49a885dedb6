"""Reading the last line of an append-only log (`shell.jsonlog.read_last_line`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shell import jsonlog
from shell.jsonlog import read_last_line

LONG = b"x" * 10_000


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (b"", None),
        (b"\n", b"\n"),
        (b"torn", None),
        (b"a\n", b"a\n"),
        (b"a\nb\n", b"b\n"),
        (b"a\nb\ntorn", b"b\n"),
        (b"a\n\n", b"\n"),
        # Lines longer than the window read at once from the end.
        (LONG + b"\n", LONG + b"\n"),
        (b"a\n" + LONG + b"\n", LONG + b"\n"),
        (b"a\n" + LONG, b"a\n"),
        (LONG + b"\nb\n", b"b\n"),
        (LONG + b"\nb\n" + LONG, b"b\n"),
        (b"a\nb\n" + b"c" * 4094 + b"\n", b"c" * 4094 + b"\n"),
        (b"a\nb\n" + b"c" * 4095 + b"\n", b"c" * 4095 + b"\n"),
        (b"a\nb\n" + b"c" * 4096 + b"\n", b"c" * 4096 + b"\n"),
    ],
)
def test_the_last_complete_line_and_the_size(tmp_path: Path, data: bytes, line: bytes) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(data)
    assert read_last_line(path) == (line, len(data))


def test_a_missing_log_has_no_line(tmp_path: Path) -> None:
    assert read_last_line(tmp_path / "absent.jsonl") is None


def test_the_window_changes_no_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every split of a few short lines around the window's edge reads the
    same line as the backward search alone (a window wider than the log)."""
    path = tmp_path / "log.jsonl"
    logs = [
        b"",
        b"ab\n",
        b"ab\ncd\n",
        b"ab\ncd\nef",
        b"\n\nab\n",
        b"abc\nd\n\nef\ng",
        b"a\nbcdef\ng\n",
    ]
    for data in logs:
        path.write_bytes(data)
        monkeypatch.setattr(jsonlog, "_LAST_LINE_WINDOW", 1 << 20)
        expected = read_last_line(path)
        for window in range(1, len(data) + 2):
            monkeypatch.setattr(jsonlog, "_LAST_LINE_WINDOW", window)
            assert read_last_line(path) == expected, (data, window)
