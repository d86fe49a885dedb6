"""`python -m shell.sim`: one seed, or a range of seeds one after another."""

from __future__ import annotations

import pytest

from shell.sim.__main__ import main

from .planted import drop_completed_rows

pytestmark = pytest.mark.expected_errors  # injected faults make the service log errors


def test_a_range_of_seeds_reports_each_seed_and_the_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["5-6", "--minutes", "30"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out if line.startswith("seed ")] == ["seed 5", "seed 6"]
    assert sum(line.startswith("disk digest ") for line in out) == 2
    assert out[-1] == "2 of 2 seeds passed"


def test_a_failing_seed_stops_the_range_unless_told_to_keep_going(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    drop_completed_rows(monkeypatch)
    assert main(["3-4", "--fault-rate", "0"]) == 1
    captured = capsys.readouterr()
    assert "replay: WF_SIM_SEED=3" in captured.err and "WF_SIM_SEED=4" not in captured.err
    assert captured.out.splitlines()[-1] == "0 of 1 seeds passed: failed 3"
    assert main(["3-4", "--fault-rate", "0", "--keep-going"]) == 1
    captured = capsys.readouterr()
    assert "replay: WF_SIM_SEED=4" in captured.err
    assert captured.out.splitlines()[-1] == "0 of 2 seeds passed: failed 3, 4"


@pytest.mark.parametrize(("argument", "reason"), [("x", "is not a seed"), ("9-3", "holds no seed")])
def test_a_bad_seed_range_is_refused_with_the_reason(
    argument: str, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([argument])
    assert exited.value.code == 2
    assert reason in capsys.readouterr().err
