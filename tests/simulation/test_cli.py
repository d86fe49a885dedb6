"""`wf-schedule simulate` through Typer's CliRunner, on the real `wf-schedule` app."""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from adapters.schedule_cli import app as APP
from adapters.simulation import plot as plot_module
from tests.simulation.regenerate_examples import EXAMPLES, output_path, render

SCENARIO = EXAMPLES / "downtime-catch-up.json"


def _invoke(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(APP, ["simulate", *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_json_is_the_default_off_a_terminal() -> None:
    code, out, _ = _invoke(str(SCENARIO))
    assert code == 0
    assert out == output_path(SCENARIO).read_text(encoding="utf-8")


def test_jsonl_rows_then_summary() -> None:
    code, out, _ = _invoke(str(SCENARIO), "--format", "jsonl")
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert all("schedule_id" in line for line in lines[:-1])
    expected = json.loads(render(SCENARIO))
    assert lines[-1] == {"summary": expected["summary"]}
    by_key = {(r["schedule_id"], r["instant"]) for r in lines[:-1]}
    assert by_key == {(r["schedule_id"], r["instant"]) for r in expected["rows"]}


def test_csv_has_a_header_and_every_row() -> None:
    code, out, _ = _invoke(str(SCENARIO), "-f", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    expected = json.loads(render(SCENARIO))["rows"]
    assert len(rows) == len(expected)
    assert {r["status"] for r in rows} == {r["status"] for r in expected}


def test_table() -> None:
    code, out, _ = _invoke(str(SCENARIO), "-f", "table")
    assert code == 0
    assert "misfire-latest" in out and "summary" in out and "coalesced" in out


def test_output_file_takes_its_format_from_the_suffix(tmp_path: Path) -> None:
    target = tmp_path / "rows.jsonl"
    code, out, _ = _invoke(str(SCENARIO), "--output", str(target))
    assert code == 0 and out == ""
    lines = target.read_text(encoding="utf-8").splitlines()
    assert "summary" in json.loads(lines[-1])
    assert [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]  # no temporary left


def test_stdin() -> None:
    code, out, _ = _invoke("-", stdin=SCENARIO.read_text(encoding="utf-8"))
    assert code == 0
    assert out == output_path(SCENARIO).read_text(encoding="utf-8")


def test_invalid_scenario_lists_each_field(tmp_path: Path) -> None:
    bad = json.loads(SCENARIO.read_text(encoding="utf-8"))
    bad["schedules"][0]["misfire"] = "sometimes"
    bad["downtime"][0]["to"] = "2026-03-02T08:00:00Z"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad), encoding="utf-8")
    code, out, err = _invoke(str(path))
    assert code == 2 and out == ""
    assert f"invalid scenario {path}:" in err
    assert "  schedules[0].misfire: must be 'skip' or 'latest'" in err
    assert "  downtime[0].to: must be after from" in err


def test_unreadable_inputs(tmp_path: Path) -> None:
    code, _, err = _invoke(str(tmp_path / "absent.json"))
    assert code == 2 and "cannot read" in err
    broken = tmp_path / "broken.json"
    broken.write_text('{"start": ', encoding="utf-8")
    code, _, err = _invoke(str(broken))
    assert code == 2 and "is not JSON" in err and "line 1 column 11" in err


def test_unwritable_output(tmp_path: Path) -> None:
    code, out, err = _invoke(str(SCENARIO), "-o", str(tmp_path / "missing-dir" / "x.json"))
    assert code == 2 and out == ""
    assert "cannot write" in err and "missing-dir" in err


def test_unknown_format_is_a_usage_error() -> None:
    code, _, _ = _invoke(str(SCENARIO), "-f", "xml")
    assert code == 2


def test_plot_needs_an_image_suffix(tmp_path: Path) -> None:
    code, _, err = _invoke(str(SCENARIO), "--plot", str(tmp_path / "x.pdf"))
    assert code == 2 and ".svg or .png" in err


def test_plot_without_matplotlib_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plot_module, "_matplotlib_installed", lambda: False)
    code, out, err = _invoke(str(SCENARIO), "--plot", str(tmp_path / "x.svg"))
    assert code == 1 and out == ""
    assert "uv sync --extra plot" in err
    assert "pip install 'wf-scheduler[plot]'" in err
    assert not (tmp_path / "x.svg").exists()


@pytest.mark.parametrize("suffix", [".svg", ".png"])
def test_plot_draws_a_timeline(tmp_path: Path, suffix: str) -> None:
    pytest.importorskip("matplotlib")
    target = tmp_path / f"timeline{suffix}"
    code, out, err = _invoke(
        str(EXAMPLES / "illustrative-week.json"), "--plot", str(target), "-f", "csv"
    )
    assert code == 0, err
    assert out.startswith("schedule_id,instant,")
    data = target.read_bytes()
    if suffix == ".svg":
        text = data.decode("utf-8")
        assert "<svg" in text and "hourly-report" in text and "paused" in text
    else:
        assert data.startswith(b"\x89PNG")


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_a_new_output_file_gets_the_usual_permissions(tmp_path: Path, umask: int) -> None:
    target = tmp_path / "rows.json"
    previous = os.umask(umask)
    try:
        code, _, err = _invoke(str(SCENARIO), "-o", str(target))
    finally:
        os.umask(previous)
    assert code == 0, err
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask


def test_a_replaced_output_file_keeps_its_permissions(tmp_path: Path) -> None:
    target = tmp_path / "rows.json"
    target.write_text("old", encoding="utf-8")
    target.chmod(0o640)
    code, _, err = _invoke(str(SCENARIO), "-o", str(target))
    assert code == 0, err
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert target.read_text(encoding="utf-8") == output_path(SCENARIO).read_text(encoding="utf-8")


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    # `wf-schedule simulate big.json | head -1`: far more output than a pipe
    # buffers, and a reader that leaves after the first line.
    scenario = {
        "start": "2026-03-02T00:00:00Z",
        "end": "2026-03-03T00:00:00Z",
        "max_concurrent_runs": 20,
        "schedules": [
            {
                "schedule_id": f"minutely-{n}",
                "deployment_id": "report.default",
                "trigger": {"kind": "cron", "expression": "* * * * *"},
                "run": {"duration": 1},
            }
            for n in range(10)
        ],
    }
    path = tmp_path / "big.json"
    path.write_text(json.dumps(scenario), encoding="utf-8")
    command = Path(sys.executable).with_name("wf-schedule")
    child = subprocess.Popen(
        [str(command), "simulate", str(path), "-f", "jsonl"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    first = child.stdout.readline()
    child.stdout.close()
    err = child.stderr.read().decode()
    code = child.wait(timeout=60)
    assert json.loads(first)["schedule_id"].startswith("minutely-")
    assert err == ""
    assert code == 1
