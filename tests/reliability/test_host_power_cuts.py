"""Power cuts at every durable write of the host's own records (artifacts,
deployments, the run-id counter), on the simulated disk
(`shell.sim.disk.SimDisk`), as `test_power_cuts.py` does for the schedule
stores.

A scripted scenario writes through the real file stores once with a
recording injector; every `(point, n-th time)` it passes becomes cases that
crash there and cut the power, losing all, none or some of the writes not
flushed. Then the stores are loaded again, as a start loads them. After each
cut: every file reads (none torn), nothing acknowledged is lost, and a record
is its acknowledged version or the one being written, never an older one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from adapters.host.file_persistence import FileArtifacts, FileDeployments, FileRunCounter
from adapters.host.persistence import complete as run
from shell.sim.disk import SIM_STORE_ROOT, PowerCut, SimDisk

from .figures import record
from .points import crash_and_cut, sync_points

ROOT = Path(SIM_STORE_ROOT)


class _Acks:
    """What the scenario was told is durable, and what it was writing when
    it crashed (a cut may keep either)."""

    def __init__(self) -> None:
        self.artifacts: dict[tuple[str, str], dict[str, Any]] = {}
        self.deployments: dict[str, dict[str, Any] | None] = {}
        self.counter = 0
        self.writing: tuple[str, Any, Any] | None = None


def _document(name: str, version: int) -> dict[str, Any]:
    return {"id": name, "version": version, "text": f"{name} v{version} " + "x" * 40}


def _scenario(disk: SimDisk, acks: _Acks) -> None:
    artifacts = FileArtifacts(ROOT, disk=disk)
    deployments = FileDeployments(ROOT, disk=disk)
    counter = FileRunCounter(ROOT / "counters" / "run_id", disk=disk)

    def artifact(name: str, version: int) -> None:
        document = _document(name, version)
        acks.writing = ("artifact", (name, str(version)), document)
        run(artifacts.write(name, version, document))
        acks.artifacts[(name, str(version))] = document

    def deployment(name: str, document: dict[str, Any] | None) -> None:
        acks.writing = ("deployment", name, document)
        if document is None:
            run(deployments.delete(name))
        else:
            run(deployments.write(name, document))
        acks.deployments[name] = document

    def advance(count: int) -> None:
        acks.writing = ("counter", acks.counter, acks.counter + count)
        run(counter.advance(acks.counter, count))
        acks.counter += count

    advance(1)  # the counter file and its directory are created
    artifact("greeter", 1)
    deployment("greeter.default", _document("greeter.default", 1))
    advance(2)
    artifact("greeter", 2)  # a second version beside the first
    artifact("mailer", 1)  # a second artifact's directory
    deployment("greeter.default", _document("greeter.default", 2))  # replaced whole
    deployment("mailer.default", _document("mailer.default", 1))
    advance(1)
    deployment("mailer.default", None)
    acks.writing = ("counter", acks.counter, acks.counter + 3)
    run(counter.repair(acks.counter + 3))  # what a start does for a counter behind
    acks.counter += 3
    acks.writing = None


POINTS = sync_points(lambda disk: _scenario(disk, _Acks()))
MODES: tuple[PowerCut, ...] = ("all", "none", "some")
CASES = [(point, n, mode) for point, n in POINTS for mode in MODES]


async def _loaded(load: Any) -> dict[Any, Any]:
    found: dict[Any, Any] = {}
    async for stored in load():
        assert stored.error is None, f"{stored.location}: {stored.error}"
        found[stored.key] = stored.document
    return found


def _check_recovered(disk: SimDisk, acks: _Acks) -> None:
    writing = acks.writing
    artifacts = run(_loaded(FileArtifacts(ROOT, disk=disk).load))
    for key, document in acks.artifacts.items():
        assert artifacts.get(key) == document, key
    unacknowledged = set(artifacts) - set(acks.artifacts)
    if writing is not None and writing[0] == "artifact":
        assert unacknowledged <= {writing[1]}
        if writing[1] in artifacts:
            assert artifacts[writing[1]] == writing[2]
    else:
        assert not unacknowledged

    deployments = run(_loaded(FileDeployments(ROOT, disk=disk).load))
    for name, document in acks.deployments.items():
        if writing is not None and writing[:2] == ("deployment", name):
            assert deployments.get(name) in (document, writing[2]), name
        else:
            assert deployments.get(name) == document, name
    named = {name for name, document in acks.deployments.items() if document is not None}
    in_flight = {writing[1]} if writing is not None and writing[0] == "deployment" else set()
    assert set(deployments) <= named | in_flight

    read = run(FileRunCounter(ROOT / "counters" / "run_id", disk=disk).read())
    if acks.counter == 0 and read.missing:
        return  # crashed before the first counter write finished
    assert read.problem is None, read.problem
    assert read.stored is not None
    if writing is not None and writing[0] == "counter":
        assert read.stored in (writing[1], writing[2])
    else:
        assert read.stored == acks.counter


@pytest.mark.parametrize(("point", "occurrence", "mode"), CASES)
def test_a_power_cut_at_any_host_write_loses_nothing_acknowledged(
    point: str, occurrence: int, mode: PowerCut
) -> None:
    acks = _Acks()
    disk = crash_and_cut(lambda disk: _scenario(disk, acks), point, occurrence, mode)
    _check_recovered(disk, acks)


def test_the_scenario_reaches_every_kind_of_host_write() -> None:
    names = {point.split(":", 2)[2] for point, _ in POINTS}
    assert {"run_id", "1.json", "2.json", "greeter.default.json", "mailer.default.json"} <= names
    record(
        "power cuts (simulated disk, the host's artifacts, deployments and run-id counter)",
        f"{len(POINTS)} crash points x {len(MODES)} power cuts = {len(CASES)} cases",
    )
