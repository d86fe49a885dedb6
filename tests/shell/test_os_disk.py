"""The real disk's kept descriptors (`open(..., keep=True)`): a kept file is
written where the path points now, after a rename over it, a removal or a
closed store, and never past the process's descriptor budget; past it, the
files written again keep their places and those not written for a while
give theirs up. Its reads leave a file's access time alone."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Protocol, cast

import pytest

from shell.disk import OsDisk, write_kept


class _Write(Protocol):
    def __call__(self, disk: OsDisk, path: Path, data: bytes, offset: int = 0) -> None: ...


def _open_write_close(disk: OsDisk, path: Path, data: bytes, offset: int = 0) -> None:
    file = disk.open(str(path), write=True, create=True, keep=True)
    try:
        file.write_at(data, offset)
    finally:
        file.close()


def _write_kept(disk: OsDisk, path: Path, data: bytes, offset: int = 0) -> None:
    write_kept(disk, str(path), data, offset)


@pytest.fixture(params=[_open_write_close, _write_kept], ids=["open-write-close", "write_kept"])
def write(request: pytest.FixtureRequest) -> _Write:
    """Each test twice: a kept file written through `open`, `write_at` and
    `close`, and through `write_kept` (the stores' path, which skips them
    for a descriptor already kept)."""
    return cast(_Write, request.param)


def _open_descriptors(directory: Path) -> int:
    """The process's descriptors of files in `directory` (not all of its
    descriptors: the collector may close another test's meanwhile)."""
    inside = os.path.join(directory, "")
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(inside)
    return count


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts /proc/self/fd")
def test_a_kept_file_is_opened_once_and_closed_with_its_store(
    tmp_path: Path, write: _Write
) -> None:
    disk = OsDisk()
    for index in range(5):
        write(disk, tmp_path / "history", b"%d" % index, index)
    assert (tmp_path / "history").read_bytes() == b"01234"
    assert _open_descriptors(tmp_path) == 1
    disk.release_kept(str(tmp_path))
    assert _open_descriptors(tmp_path) == 0


def test_a_rename_over_a_kept_path_sends_the_next_writes_to_the_new_file(
    tmp_path: Path, write: _Write
) -> None:
    disk = OsDisk()
    path = tmp_path / "index"
    write(disk, path, b"old")
    (tmp_path / "index.tmp").write_bytes(b"new")
    disk.rename(str(tmp_path / "index.tmp"), str(path))
    write(disk, path, b"N")
    assert path.read_bytes() == b"New"
    # A kept source renamed elsewhere is dropped too.
    write(disk, tmp_path / "moved", b"a")
    disk.rename(str(tmp_path / "moved"), str(tmp_path / "target"))
    write(disk, tmp_path / "moved", b"b")
    assert (tmp_path / "moved").read_bytes() == b"b"
    assert (tmp_path / "target").read_bytes() == b"a"
    disk.release_kept(str(tmp_path))


def test_a_removed_kept_path_is_created_again_by_the_next_write(
    tmp_path: Path, write: _Write
) -> None:
    disk = OsDisk()
    directory = tmp_path / "schedule"
    disk.make_directory(str(directory))
    path = directory / "history"
    write(disk, path, b"first")
    disk.remove(str(path))
    write(disk, path, b"again")
    assert path.read_bytes() == b"again"
    write(disk, directory / "index", b"x")
    disk.remove(str(path))
    disk.remove(str(directory / "index"))
    disk.remove_directory(str(directory))
    assert not directory.exists()


def test_past_its_capacity_the_disk_opens_and_closes_each_time(
    tmp_path: Path, write: _Write, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("shell.disk._kept_capacity", lambda: 2)
    disk = OsDisk()
    for name in ("a", "b", "c", "d"):
        write(disk, tmp_path / name, name.encode())
    assert [(tmp_path / n).read_bytes() for n in "abcd"] == [b"a", b"b", b"c", b"d"]
    assert _open_descriptors(tmp_path) <= 2
    disk.release_kept(str(tmp_path))
    assert _open_descriptors(tmp_path) == 0


def _kept_names(tmp_path: Path) -> set[str]:
    names = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if os.path.dirname(target) == str(tmp_path):
                names.add(os.path.basename(target))
    return names


class _Seconds:
    """The disk's clock of sweeps, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _disk_of_capacity(monkeypatch: pytest.MonkeyPatch, capacity: int) -> tuple[OsDisk, _Seconds]:
    """A disk that keeps `capacity` descriptors, on a clock of sweeps the test moves."""
    monkeypatch.setattr("shell.disk._kept_capacity", lambda: capacity)
    seconds = _Seconds()
    return OsDisk(monotonic=seconds), seconds


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="reads /proc/self/fd")
def test_files_written_once_give_their_places_to_files_written_again(
    tmp_path: Path, write: _Write, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk, seconds = _disk_of_capacity(monkeypatch, 2)
    # Written at a schedule's first firing and not since: kept first.
    write(disk, tmp_path / "once-a", b"a")
    write(disk, tmp_path / "once-b", b"b")
    assert _kept_names(tmp_path) == {"once-a", "once-b"}
    write(disk, tmp_path / "hot-1", b"0")
    # No sweep before `_SWEEP_EVERY_S` has passed: the places stay taken.
    assert _kept_names(tmp_path) == {"once-a", "once-b"}
    for round_ in range(1, 4):
        seconds.now += 60
        for name in ("hot-1", "hot-2"):
            write(disk, tmp_path / name, b"%d" % round_, round_)
    # The sweep closed the two files not opened again, and the files written
    # in turn took their places.
    assert _kept_names(tmp_path) == {"hot-1", "hot-2"}
    assert (tmp_path / "hot-1").read_bytes() == b"0123"
    assert (tmp_path / "once-a").read_bytes() == b"a"
    disk.release_kept(str(tmp_path))
    assert _kept_names(tmp_path) == set()


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="reads /proc/self/fd")
def test_more_files_written_in_turn_than_the_capacity_keep_a_capacitys_worth(
    tmp_path: Path, write: _Write, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk, seconds = _disk_of_capacity(monkeypatch, 3)
    names = [f"history-{i}" for i in range(5)]
    kept_after_each_round: list[set[str]] = []
    for round_ in range(10):
        seconds.now += 60
        for name in names:
            write(disk, tmp_path / name, name[-1].encode(), round_)
            assert len(_kept_names(tmp_path)) <= 3
        kept_after_each_round.append(_kept_names(tmp_path))
    # Every kept file is written again between two sweeps: none is closed,
    # so the same three stay kept (no file opened and closed in turn).
    assert kept_after_each_round[-1] == kept_after_each_round[1]
    assert len(kept_after_each_round[-1]) == 3
    assert [(tmp_path / n).read_bytes() for n in names] == [b"%d" % i * 10 for i in range(5)]
    disk.release_kept(str(tmp_path))


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="reads /proc/self/fd")
def test_a_sweep_never_closes_a_kept_file_in_use(
    tmp_path: Path, write: _Write, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk, seconds = _disk_of_capacity(monkeypatch, 1)
    in_use = disk.open(str(tmp_path / "in-use"), write=True, create=True, keep=True)
    seconds.now += 600
    # A miss with the kept files full sweeps; the file in use stays open.
    write(disk, tmp_path / "other", b"x")
    in_use.write_at(b"still open", 0)
    in_use.close()
    assert (tmp_path / "in-use").read_bytes() == b"still open"
    assert _kept_names(tmp_path) == {"in-use"}
    disk.release_kept(str(tmp_path))


def test_only_a_write_that_creates_can_be_kept(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kept descriptor"):
        OsDisk().open(str(tmp_path / "x"), append=True, keep=True)


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts /proc/self/fd")
def test_a_kept_file_dropped_while_in_use_is_closed_once_its_user_closes_it(
    tmp_path: Path,
) -> None:
    disk = OsDisk()
    path = tmp_path / "history"
    file = disk.open(str(path), write=True, create=True, keep=True)
    # Against the contract (no change of the path while it is open), and yet
    # the descriptor is not closed under its user.
    disk.release_kept(str(tmp_path))
    file.write_at(b"still open", 0)
    file.close()
    assert path.read_bytes() == b"still open"
    assert _open_descriptors(tmp_path) == 0


def _age_access_time(path: Path) -> int:
    """Set `path`'s access time before its modification time, which a read
    under `relatime` (Linux's default) then updates; returns it."""
    modified = path.stat().st_mtime_ns
    os.utime(path, ns=(modified - 3_600_000_000_000, modified))
    return path.stat().st_atime_ns


@pytest.mark.skipif(not hasattr(os, "O_NOATIME"), reason="O_NOATIME is Linux's")
def test_a_read_leaves_the_files_access_time_alone(tmp_path: Path) -> None:
    path = tmp_path / "runtime.jsonl"
    path.write_bytes(b"{}\n")
    aged = _age_access_time(path)
    with path.open("rb") as plain:
        plain.read()
    if path.stat().st_atime_ns == aged:
        pytest.skip("this filesystem updates no access time on a read (mounted noatime)")
    aged = _age_access_time(path)
    file = OsDisk().open(str(path))
    try:
        assert file.read_at(3, 0) == b"{}\n"
    finally:
        file.close()
    assert path.stat().st_atime_ns == aged


def _read_twice(path: str) -> bytes:
    disk = OsDisk()
    chunks = []
    for _ in range(2):
        file = disk.open(path)
        try:
            chunks.append(file.read_at(64, 0))
        finally:
            file.close()
    return b"".join(chunks)


def _read_as_another_user(path: str) -> bytes:
    """What `OsDisk` reads of `path` (a file this process's user does not
    own), twice; run as `nobody` in a child process when this one is root,
    whom O_NOATIME never refuses."""
    if os.geteuid() != 0:
        return _read_twice(path)
    import pwd

    nobody = pwd.getpwnam("nobody").pw_uid
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        code = 1
        try:
            os.close(reader)
            os.setresuid(nobody, nobody, nobody)
            os.write(writer, _read_twice(path))
            code = 0
        finally:
            os._exit(code)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child could not read the file"
    return data


@pytest.mark.skipif(not hasattr(os, "O_NOATIME"), reason="O_NOATIME is Linux's")
def test_a_file_of_another_user_is_read_all_the_same() -> None:
    # O_NOATIME is refused (EPERM) on a file whose owner is another user.
    path = "/etc/passwd"
    if not os.path.exists(path):
        pytest.skip("needs a readable file of another user")
    if os.geteuid() != 0 and os.stat(path).st_uid == os.geteuid():
        pytest.skip("needs a readable file of another user")
    with open(path, "rb") as plain:
        expected = plain.read(64)
    assert _read_as_another_user(path) == expected * 2
