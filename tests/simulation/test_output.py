"""Rows, summaries and the streamed formats."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta

from adapters.simulation.output import (
    ROW_FIELDS,
    CsvSink,
    JsonlSink,
    Row,
    SummaryBuilder,
    iso,
    render_json,
    render_table,
    sorted_rows,
)

T0 = datetime(2026, 3, 2, 10, tzinfo=UTC)

RUN = Row(
    schedule_id="b",
    instant=T0,
    local_instant="2026-03-02T11:00:00+01:00",
    status="completed",
    run_id="run-000001",
    run_start=T0 + timedelta(seconds=1.5),
    run_end=T0 + timedelta(minutes=5),
)
MISSED = Row(
    schedule_id="a",
    instant=T0 + timedelta(hours=3),
    local_instant="2026-03-02T13:00:00Z",
    status="skipped-misfire",
    count=4,
    first_instant=T0,
    last_instant=T0 + timedelta(hours=3),
    dst="gap",
)


def test_row_as_dict_has_every_field_in_order() -> None:
    assert tuple(RUN.as_dict()) == ROW_FIELDS
    assert RUN.as_dict() == {
        "schedule_id": "b",
        "instant": "2026-03-02T10:00:00Z",
        "local_instant": "2026-03-02T11:00:00+01:00",
        "status": "completed",
        "run_id": "run-000001",
        "run_start": "2026-03-02T10:00:01.500000Z",
        "run_end": "2026-03-02T10:05:00Z",
        "lateness_s": 1.5,
        "count": 1,
        "first_instant": None,
        "last_instant": None,
        "dst": None,
        "reason": None,
        "origin": "schedule",
    }
    assert MISSED.lateness_s is None


def test_iso_is_utc_with_z() -> None:
    berlin = datetime.fromisoformat("2026-03-29T03:00:00+02:00")
    assert iso(berlin) == "2026-03-29T01:00:00Z"
    assert iso(None) is None


def test_summary_counts_instants_runs_activity_and_lateness() -> None:
    builder = SummaryBuilder(["b", "a"])
    builder.note_active("b", 1, 1)
    builder.note_active("b", 2, 3)
    builder.note_active("a", 1, 2)
    builder.add_row(RUN)
    builder.add_row(MISSED)
    late = Row(
        schedule_id="b",
        instant=T0 + timedelta(hours=1),
        local_instant="x",
        status="running",
        run_id="run-000002",
        run_start=T0 + timedelta(hours=1, seconds=10.5),
    )
    builder.add_row(late)
    summary = builder.as_dict()
    assert list(summary["schedules"]) == ["a", "b"]
    assert summary["schedules"]["b"] == {
        "counts": {"running": 1, "completed": 1},
        "instants": 2,
        "rows": 2,
        "runs": 2,
        "runs_by_origin": {"schedule": 2, "trigger": 0, "backfill": 0},
        "max_active": 2,
        "lateness_s": {"mean": 6.0, "max": 10.5},
    }
    assert summary["schedules"]["a"]["counts"] == {"skipped-misfire": 4}
    assert summary["schedules"]["a"]["lateness_s"] == {"mean": None, "max": None}
    assert summary["totals"] == {
        "counts": {"skipped-misfire": 4, "running": 1, "completed": 1},
        "instants": 6,
        "rows": 3,
        "runs": 2,
        "runs_by_origin": {"schedule": 2, "trigger": 0, "backfill": 0},
        "max_active": 3,
    }


def test_jsonl_streams_each_row_then_the_summary() -> None:
    stream = io.StringIO()
    sink = JsonlSink(stream)
    sink.row(RUN)
    assert stream.getvalue().count("\n") == 1  # written at once, not at the end
    sink.row(MISSED)
    sink.finish({"totals": {"rows": 2}})
    lines = stream.getvalue().splitlines()
    assert [json.loads(line) for line in lines] == [
        RUN.as_dict(),
        MISSED.as_dict(),
        {"summary": {"totals": {"rows": 2}}},
    ]
    assert lines[0].startswith('{"count":1,"dst":null,')  # sorted keys, compact


def test_csv_streams_rows_with_empty_nulls() -> None:
    stream = io.StringIO()
    sink = CsvSink(stream)
    sink.row(MISSED)
    assert stream.getvalue().count("\n") == 2
    sink.finish({})
    header, row = list(csv.reader(io.StringIO(stream.getvalue())))
    assert tuple(header) == ROW_FIELDS
    assert dict(zip(header, row, strict=True)) == {
        "schedule_id": "a",
        "instant": "2026-03-02T13:00:00Z",
        "local_instant": "2026-03-02T13:00:00Z",
        "status": "skipped-misfire",
        "run_id": "",
        "run_start": "",
        "run_end": "",
        "lateness_s": "",
        "count": "4",
        "first_instant": "2026-03-02T10:00:00Z",
        "last_instant": "2026-03-02T13:00:00Z",
        "dst": "gap",
        "reason": "",
        "origin": "schedule",
    }


def test_json_document_sorts_rows_and_keys() -> None:
    text = render_json({"start": "s", "end": "e"}, [MISSED, RUN], {"totals": {}})
    document = json.loads(text)
    assert list(document) == ["rows", "scenario", "summary"]
    assert [r["schedule_id"] for r in document["rows"]] == ["b", "a"]
    assert text.endswith("}\n")
    assert sorted_rows([MISSED, RUN]) == [RUN, MISSED]


def test_table_lists_rows_and_summary() -> None:
    builder = SummaryBuilder(["a", "b"])
    builder.add_row(RUN)
    builder.add_row(MISSED)
    stream = io.StringIO()
    render_table(
        stream,
        {"title": "demo", "start": "S", "end": "E"},
        [RUN, MISSED],
        builder.as_dict(),
        terminal=False,
        width=250,
    )
    text = stream.getvalue()
    assert "demo" in text and "S → E" in text
    assert "run-000001" in text
    assert "4 instants 2026-03-02 10:00:00 .. 2026-03-02 13:00:00; dst gap" in text
    assert "│ 10:05:00 " in text  # the run ends the day of its instant: time only
    assert "skipped-misfire 4" in text
    assert "5 instants, 1 runs, at most 0 active at once" in text
