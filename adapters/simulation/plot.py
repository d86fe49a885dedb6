"""Timeline plots of a simulation (`--plot FILE.svg|png`), with matplotlib.

matplotlib is an optional extra (`wf-scheduler[plot]`). `require_matplotlib`
checks for it before a simulation starts, so a missing extra is reported at
once instead of after a long run. The figure is drawn with the object API
(`matplotlib.figure.Figure`), so no pyplot state or GUI backend is involved.

One lane per schedule: runs are bars from start to end (to the horizon when
still active), coloured by final status; occurrences without a run are marks
(a row for several instants is a line from
the first to a mark at the last); paused and deleted spans are shaded on
the lane; downtime windows are shaded across every lane.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Final

from adapters.simulation.output import Row
from adapters.simulation.scenario import Scenario

__all__ = [
    "INSTALL_HINT",
    "PLOT_SUFFIXES",
    "PlotUnavailable",
    "operator_spans",
    "plot_timeline",
    "require_matplotlib",
]

PLOT_SUFFIXES: Final = (".svg", ".png")
INSTALL_HINT: Final = (
    "plotting needs matplotlib, an optional extra: run `uv sync --extra plot` "
    "in a checkout, or `pip install 'wf-scheduler[plot]'`"
)
_RUN_COLOURS: Final = {
    "completed": "#2e7d32",
    "failed": "#c62828",
    "exhausted": "#ef6c00",
    "running": "#1565c0",
    "interrupted": "#6a1b9a",
    "admitted": "#90a4ae",
}
_MARKS: Final = {
    "skipped-overlap": ("x", "#d84315"),
    "skipped-misfire": ("v", "#5d4037"),
    "coalesced": ("D", "#00838f"),
    "superseded": ("s", "#827717"),
    "preflight-rejected": ("X", "#b71c1c"),
    "pending": ("o", "#455a64"),
}


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed; the message says how to install it."""


def _matplotlib_installed() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def require_matplotlib() -> None:
    """Raise PlotUnavailable (with the install hint) when matplotlib is missing."""
    if not _matplotlib_installed():
        raise PlotUnavailable(INSTALL_HINT)


def operator_spans(scenario: Scenario) -> dict[str, list[tuple[datetime, datetime, str]]]:
    """Per schedule, the `(start, end, "paused"|"deleted")` spans of the horizon."""
    spans: dict[str, list[tuple[datetime, datetime, str]]] = {
        s.schedule_id: [] for s in scenario.schedules
    }
    paused_since: dict[str, datetime] = {}
    for event in scenario.events:
        sid = event.schedule_id
        if event.action == "pause":
            paused_since.setdefault(sid, event.at)
        elif event.action == "resume" and sid in paused_since:
            spans[sid].append((paused_since.pop(sid), event.at, "paused"))
        elif event.action == "delete":
            if sid in paused_since:
                spans[sid].append((paused_since.pop(sid), event.at, "paused"))
            spans[sid].append((event.at, scenario.end, "deleted"))
    for sid, since in paused_since.items():
        spans[sid].append((since, scenario.end, "paused"))
    return spans


def plot_timeline(path: Path, scenario: Scenario, rows: Iterable[Row]) -> None:
    """Draw the timeline of `rows` to `path` (format from its suffix: .svg or .png).

    Raises PlotUnavailable when matplotlib is missing and ValueError for
    another suffix.
    """
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise ValueError(f"plot file must end in .svg or .png, got {path.name!r}")
    require_matplotlib()
    # matplotlib is optional and ships no stubs mypy can rely on here.
    from matplotlib.dates import (  # type: ignore[import-not-found,unused-ignore]
        AutoDateLocator,
        ConciseDateFormatter,
        date2num,
    )
    from matplotlib.figure import Figure  # type: ignore[import-not-found,unused-ignore]
    from matplotlib.patches import Patch  # type: ignore[import-not-found,unused-ignore]

    lanes = [s.schedule_id for s in scenario.schedules]
    lane_of = {sid: index for index, sid in enumerate(lanes)}
    figure = Figure(figsize=(14, 1.2 + 0.9 * len(lanes)), layout="constrained")
    axes = figure.add_subplot()

    for window in scenario.downtime:
        axes.axvspan(date2num(window.start), date2num(window.end), color="#bdbdbd", alpha=0.5, lw=0)
    for sid, spans in operator_spans(scenario).items():
        lane = lane_of[sid]
        for start, end, kind in spans:
            axes.broken_barh(
                [(date2num(start), date2num(end) - date2num(start))],
                (lane - 0.45, 0.9),
                facecolors="#fff59d" if kind == "paused" else "#eeeeee",
                hatch="//" if kind == "deleted" else None,
                edgecolor="#9e9e9e",
                linewidth=0,
            )

    bars: dict[str, list[tuple[float, float]]] = {}
    bar_lanes: dict[str, list[int]] = {}
    marks: dict[str, tuple[list[float], list[int]]] = {}
    end_num = date2num(scenario.end)
    for row in rows:
        lane = lane_of[row.schedule_id]
        if row.run_start is not None:
            x0 = date2num(row.run_start)
            x1 = end_num if row.run_end is None else date2num(row.run_end)
            bars.setdefault(row.status, []).append((x0, max(x1 - x0, 1e-5)))
            bar_lanes.setdefault(row.status, []).append(lane)
        else:
            xs, ys = marks.setdefault(row.status, ([], []))
            xs.append(date2num(row.instant))
            ys.append(lane)
            if row.count > 1 and row.first_instant is not None:
                # A row standing for several instants spans them all.
                colour = _MARKS.get(row.status, ("o", "#455a64"))[1]
                axes.hlines(
                    lane, date2num(row.first_instant), date2num(row.instant), colors=colour, lw=2
                )

    handles: list[object] = []
    for status, colour in _RUN_COLOURS.items():
        if status not in bars:
            continue
        for (x0, width), lane in zip(bars[status], bar_lanes[status], strict=True):
            axes.broken_barh([(x0, width)], (lane - 0.3, 0.6), facecolors=colour)
        handles.append(Patch(facecolor=colour, label=f"run {status}"))
    for status, (marker, colour) in _MARKS.items():
        if status in marks:
            xs, ys = marks[status]
            handles.append(
                axes.scatter(xs, ys, marker=marker, color=colour, s=28, zorder=3, label=status)
            )
    if any(operator_spans(scenario).values()):
        handles.append(Patch(facecolor="#fff59d", label="paused"))
    if scenario.downtime:
        handles.append(Patch(facecolor="#bdbdbd", alpha=0.5, label="scheduler down"))

    axes.set_yticks(range(len(lanes)), labels=_labels(lanes))
    axes.set_ylim(len(lanes) - 0.5, -0.5)
    axes.set_xlim(date2num(scenario.start), end_num)
    locator = AutoDateLocator()
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    axes.set_xlabel("UTC")
    axes.grid(axis="x", alpha=0.3)
    axes.set_title(scenario.title or "simulation")
    if handles:
        axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    # No creation date in the file, so a plot is as reproducible as the data.
    metadata = {"Date": None} if path.suffix.lower() == ".svg" else {}
    figure.savefig(path, metadata=metadata)


def _labels(lanes: Sequence[str]) -> list[str]:
    return [lane if len(lane) <= 28 else lane[:27] + "…" for lane in lanes]
