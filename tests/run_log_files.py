"""Reading and changing a file store's run log behind the server's back, as
the tests that damage, rewrite or inspect run records do
(`adapters/host/run_log.py` holds the format)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from adapters.host.identifiers import format_run_id, parse_run_id
from adapters.host.run_log import (
    LOG_DIR,
    decode_frame,
    encode_frame,
    frame_payload,
    scan_segment,
)
from shell.disk import OS_DISK, Disk, is_directory

__all__ = [
    "append_document",
    "append_payload",
    "damage_last_frame",
    "last_frame",
    "read_record",
    "records",
    "remove_run",
    "segment_paths",
    "truncate_last_frame",
]

# Where a frame's payload starts: after the magic, run number, length and crc.
_HEADER_SIZE = 20


def segment_paths(root: Path) -> list[Path]:
    directory = root / LOG_DIR
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("*.seg"))


def last_frame(root: Path, run_id: str) -> tuple[Path, int, int] | None:
    """Where the run's last frame lies (intact or damaged): path, offset, size."""
    number = parse_run_id(run_id)
    found: tuple[Path, int, int] | None = None
    for path in segment_paths(root):
        scan = scan_segment(path.read_bytes())
        for frame_number, offset, size in sorted(scan.frames + scan.damaged, key=lambda f: f[1]):
            if frame_number == number:
                found = (path, offset, size)
    return found


def read_record(root: Path, run_id: str) -> Any:
    """The run's record as JSON (its last frame; an older store's file when
    the log has none), or None."""
    place = last_frame(root, run_id)
    if place is None:
        legacy = root / "runs" / f"{run_id}.json"
        return json.loads(legacy.read_text()) if legacy.exists() else None
    path, offset, size = place
    data = path.read_bytes()
    return json.loads(frame_payload(data, offset, size))


def append_payload(root: Path, run_id: str, payload: bytes) -> None:
    """Append a frame holding `payload` to the last segment (a new one if
    there is none): the run's record is now whatever `payload` says."""
    number = parse_run_id(run_id)
    assert number is not None
    paths = segment_paths(root)
    path = paths[-1] if paths else root / LOG_DIR / f"{1:08d}.seg"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as handle:
        handle.write(encode_frame(number, payload))


def append_document(root: Path, run_id: str, document: Any) -> None:
    append_payload(root, run_id, json.dumps(document).encode())


def damage_last_frame(root: Path, run_id: str, *, at: int = 0) -> Path:
    """Flip a byte of the payload of the run's last frame in place (`at`:
    which byte of the payload); the segment's path."""
    place = last_frame(root, run_id)
    assert place is not None, f"no frame of {run_id}"
    path, offset, _ = place
    data = bytearray(path.read_bytes())
    data[offset + _HEADER_SIZE + at] ^= 0xFF
    path.write_bytes(bytes(data))
    found = decode_frame(bytes(data), offset)
    assert found is not None and not found[2]
    return path


def records(root: Path, disk: Disk = OS_DISK) -> dict[str, Any]:
    """Every run's record as JSON (its last intact frame), read raw from the
    log on `disk`: what a dead process left, before any recovery."""
    directory = str(root / LOG_DIR)
    found: dict[str, Any] = {}
    if not is_directory(disk, directory):
        return found
    for name in sorted(n for n in disk.list(directory) if n.endswith(".seg")):
        file = disk.open(f"{directory}/{name}")
        try:
            data = file.read_at(file.size(), 0)
        finally:
            file.close()
        for number, offset, size in scan_segment(data).frames:
            found[format_run_id(number)] = json.loads(frame_payload(data, offset, size))
    return found


def truncate_last_frame(root: Path, run_id: str) -> None:
    """Zero the second half of the run's last frame, in place (the bytes a
    lost write-back leaves): its run is still named by nothing but the
    header; the checksum fails."""
    place = last_frame(root, run_id)
    assert place is not None, f"no frame of {run_id}"
    path, offset, size = place
    data = bytearray(path.read_bytes())
    half = offset + size // 2
    data[half : offset + size] = b"\0" * (offset + size - half)
    path.write_bytes(bytes(data))


def remove_run(root: Path, run_id: str) -> None:
    """Every frame of the run cut out of the log (the other frames stay)."""
    number = parse_run_id(run_id)
    for path in segment_paths(root):
        data = path.read_bytes()
        kept = [
            data[offset : offset + size]
            for frame_number, offset, size in scan_segment(data).frames
            if frame_number != number
        ]
        path.write_bytes(b"".join(kept))
