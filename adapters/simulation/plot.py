"""Timeline plots of a simulation (`--plot FILE.svg|png`), with matplotlib.

matplotlib is an optional extra (`wf-scheduler[plot]`). `require_matplotlib`
checks for it before a simulation starts, so a missing extra is reported at
once instead of after a long run; `check_plot_size` refuses a scenario too
large to draw legibly, also before the run. The figure is drawn with the
object API (`matplotlib.figure.Figure`), so no pyplot state or GUI backend is
involved, and with one collection per kind of mark, never one artist per
run, so a month of 200 schedules draws in seconds.

Detailed view (up to `PLOT_DETAIL_SCHEDULES` schedules and `PLOT_DETAIL_RUNS`
runs): one band per schedule, split into as many lanes as the schedule ever
had runs at once, so parallel runs never hide each other. Runs are bars from
admission to end (to the horizon when still active), coloured by final
status; the spans a run spent interrupted (waiting for input) are hatched on
its bar, and a run an operator started (a trigger, a backfill) is outlined.
Occurrences without a run are marks (a row for several instants is a line
from the first to a mark at the last). Instants that fell in a DST gap
or fold are marked on the band's upper edge. Paused and deleted spans are
shaded on the band; downtime windows across every band.

Aggregated view (larger scenarios, up to `PLOT_MAX_SCHEDULES` schedules): one
lane per schedule, the horizon cut into `AGGREGATE_BUCKETS` cells, each cell
coloured by the mean number of runs active in it; marks show in which cell
an occurrence without a run fell, DST marks and shading are as above.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from adapters.simulation.output import Row
from adapters.simulation.scenario import Scenario
from core.occurrences import RunStatus

__all__ = [
    "AGGREGATE_BUCKETS",
    "INSTALL_HINT",
    "PLOT_DETAIL_RUNS",
    "PLOT_DETAIL_SCHEDULES",
    "PLOT_MAX_SCHEDULES",
    "PLOT_SUFFIXES",
    "PlotTooLarge",
    "PlotUnavailable",
    "RunTrace",
    "build_figure",
    "check_plot_size",
    "operator_spans",
    "plot_timeline",
    "require_matplotlib",
]

PLOT_SUFFIXES: Final = (".svg", ".png")
INSTALL_HINT: Final = (
    "plotting needs matplotlib, an optional extra: run `uv sync --extra plot` "
    "in a checkout, or `pip install 'wf-scheduler[plot]'`"
)
# Beyond either bound a bar per run is unreadable (and a large SVG): aggregate.
PLOT_DETAIL_SCHEDULES: Final = 40
PLOT_DETAIL_RUNS: Final = 20_000
# Beyond this even one thin lane per schedule is not a readable figure.
PLOT_MAX_SCHEDULES: Final = 400
AGGREGATE_BUCKETS: Final = 480

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
_DST_MARKS: Final = {
    "gap": ("*", "#f9a825", "DST gap (local time skipped)"),
    "fold": ("h", "#4e342e", "DST fold (local time repeated)"),
}
_INTERRUPTED_LABEL: Final = "interrupted span (waiting for input)"
# Outlines of the runs an operator started: (edge colour, line style, label).
_OPERATOR_OUTLINES: Final = {
    "trigger": ("#000000", "solid", "run started by a trigger"),
    "backfill": ("#000000", "dashed", "run started by a backfill"),
}
_BAR_HEIGHT: Final = 0.7


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed; the message says how to install it."""


class PlotTooLarge(ValueError):
    """The scenario has more schedules than a plot can show; the message names the limit."""


def _matplotlib_installed() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def require_matplotlib() -> None:
    """Raise PlotUnavailable (with the install hint) when matplotlib is missing."""
    if not _matplotlib_installed():
        raise PlotUnavailable(INSTALL_HINT)


def check_plot_size(scenario: Scenario) -> None:
    """Raise PlotTooLarge when `scenario` has more than PLOT_MAX_SCHEDULES schedules."""
    count = len(scenario.schedules)
    if count > PLOT_MAX_SCHEDULES:
        raise PlotTooLarge(
            f"--plot draws at most {PLOT_MAX_SCHEDULES} schedules (one lane each) and this "
            f"scenario has {count}; plot a scenario with fewer schedules, or drop --plot "
            "(the rows and summary have no such limit)"
        )


@dataclass(slots=True)
class RunTrace:
    """Collects, from the engine's run changes, the spans each run spent
    interrupted: `(schedule_id, instant) -> [(from, to or None)]`."""

    interrupted: dict[tuple[str, datetime], list[tuple[datetime, datetime | None]]] = field(
        default_factory=dict
    )

    def __call__(
        self, schedule_id: str, instant: datetime, status: RunStatus, at: datetime
    ) -> None:
        spans = self.interrupted.get((schedule_id, instant))
        if status == "interrupted":
            if spans is None:
                spans = self.interrupted[(schedule_id, instant)] = []
            spans.append((at, None))
        elif spans and spans[-1][1] is None:
            spans[-1] = (spans[-1][0], at)


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


def _assign_lanes(runs: Sequence[Row], end: datetime) -> tuple[list[int], int]:
    """Each run's lane within its schedule's band (the lowest lane free at its
    start) and how many lanes the band needs."""
    lanes = [0] * len(runs)
    busy_until: list[datetime] = []
    order = sorted(range(len(runs)), key=lambda i: (runs[i].run_start, runs[i].instant))
    for index in order:
        run = runs[index]
        assert run.run_start is not None
        finish = run.run_end or end
        free = [lane for lane, until in enumerate(busy_until) if until <= run.run_start]
        if free:
            lane = free[0]
        else:
            lane = len(busy_until)
            busy_until.append(finish)
        busy_until[lane] = max(finish, run.run_start)
        lanes[index] = lane
    return lanes, max(1, len(busy_until))


def _rectangle(x0: float, x1: float, y: float, height: float) -> list[tuple[float, float]]:
    half = height / 2
    return [(x0, y - half), (x1, y - half), (x1, y + half), (x0, y + half)]


def build_figure(scenario: Scenario, rows: Iterable[Row], trace: RunTrace | None = None) -> Any:
    """The timeline as a matplotlib `Figure` (detailed or aggregated, see the
    module docstring). Raises PlotTooLarge and PlotUnavailable."""
    check_plot_size(scenario)
    require_matplotlib()
    rows = list(rows)
    runs = sum(1 for row in rows if row.run_start is not None)
    if len(scenario.schedules) <= PLOT_DETAIL_SCHEDULES and runs <= PLOT_DETAIL_RUNS:
        return _Drawing(scenario, trace).detailed(rows)
    return _Drawing(scenario, trace).aggregated(rows, runs)


def plot_timeline(
    path: Path, scenario: Scenario, rows: Iterable[Row], trace: RunTrace | None = None
) -> None:
    """Draw the timeline of `rows` to `path` (format from its suffix: .svg or .png).

    `trace` (filled by the engine's `on_run_change`) adds interrupted spans.
    Raises PlotUnavailable when matplotlib is missing, PlotTooLarge beyond
    PLOT_MAX_SCHEDULES schedules and ValueError for another suffix.
    """
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise ValueError(f"plot file must end in .svg or .png, got {path.name!r}")
    figure = build_figure(scenario, rows, trace)
    # No creation date in the file, so a plot is as reproducible as the data.
    metadata = {"Date": None} if path.suffix.lower() == ".svg" else {}
    figure.savefig(path, metadata=metadata)


class _Drawing:
    """One figure being drawn; matplotlib is imported only here."""

    def __init__(self, scenario: Scenario, trace: RunTrace | None) -> None:
        # matplotlib is optional and ships no stubs mypy can rely on here.
        from matplotlib import collections, dates, figure, patches

        self.mpl_collections = collections
        self.mpl_dates = dates
        self.mpl_patches = patches
        self.figure_class = figure.Figure
        self.scenario = scenario
        self.trace = trace or RunTrace()
        self.handles: list[Any] = []
        self.start = self.num(scenario.start)
        self.end = self.num(scenario.end)

    def num(self, instant: datetime) -> float:
        return float(self.mpl_dates.date2num(instant))

    # --- shared parts -----------------------------------------------------

    def new_axes(self, height: float) -> Any:
        figure = self.figure_class(figsize=(14, height), layout="constrained")
        return figure, figure.add_subplot()

    def shading(
        self, axes: Any, bands: dict[str, tuple[float, float]], *, over: bool = False
    ) -> None:
        """Downtime across every band, paused and deleted spans on theirs
        (`over`: downtime above the data, which would hide it otherwise)."""
        for window in self.scenario.downtime:
            axes.axvspan(
                self.num(window.start),
                self.num(window.end),
                color="#bdbdbd",
                alpha=0.6,
                lw=0,
                zorder=3 if over else 0,
            )
        any_span = False
        for sid, spans in operator_spans(self.scenario).items():
            low, high = bands[sid]
            for start, end, kind in spans:
                any_span = True
                axes.broken_barh(
                    [(self.num(start), self.num(end) - self.num(start))],
                    (low, high - low),
                    facecolors="#fff59d" if kind == "paused" else "#eeeeee",
                    hatch="//" if kind == "deleted" else None,
                    edgecolor="#9e9e9e",
                    linewidth=0,
                    zorder=0,
                )
        if any_span:
            self.handles.append(self.mpl_patches.Patch(facecolor="#fff59d", label="paused"))
        if self.scenario.downtime:
            self.handles.append(
                self.mpl_patches.Patch(facecolor="#bdbdbd", alpha=0.5, label="scheduler down")
            )

    def dst_marks(self, axes: Any, rows: Sequence[Row], edge: dict[str, float]) -> None:
        seen: dict[str, set[tuple[float, float]]] = {kind: set() for kind in _DST_MARKS}
        for row in rows:
            if row.dst in seen:
                seen[row.dst].add((self.num(row.instant), edge[row.schedule_id]))
        for kind, (marker, colour, label) in _DST_MARKS.items():
            if seen[kind]:
                xs, ys = zip(*sorted(seen[kind]), strict=True)
                self.handles.append(
                    axes.scatter(
                        xs,
                        ys,
                        marker=marker,
                        color=colour,
                        s=70,
                        zorder=5,
                        label=label,
                        gid=f"dst-{kind}",
                    )
                )

    def marks(
        self, axes: Any, points: dict[str, list[tuple[float, float]]], *, rasterized: bool = False
    ) -> None:
        for status, (marker, colour) in _MARKS.items():
            if points.get(status):
                xs, ys = zip(*points[status], strict=True)
                self.handles.append(
                    axes.scatter(
                        xs,
                        ys,
                        marker=marker,
                        color=colour,
                        s=28,
                        zorder=3,
                        label=status,
                        rasterized=rasterized,
                    )
                )

    def finish(
        self,
        figure: Any,
        axes: Any,
        centres: list[float],
        labels: list[str],
        top: float,
        title: str,
    ) -> Any:
        axes.set_yticks(centres, labels=labels)
        axes.set_ylim(top, -0.5)
        axes.set_xlim(self.start, self.end)
        locator = self.mpl_dates.AutoDateLocator()
        axes.xaxis.set_major_locator(locator)
        axes.xaxis.set_major_formatter(self.mpl_dates.ConciseDateFormatter(locator))
        axes.set_xlabel("UTC")
        axes.grid(axis="x", alpha=0.3)
        axes.set_title(title)
        if self.handles:
            axes.legend(
                handles=self.handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8
            )
        return figure

    # --- detailed -----------------------------------------------------------

    def detailed(self, rows: list[Row]) -> Any:
        scenario = self.scenario
        by_schedule: dict[str, list[Row]] = {s.schedule_id: [] for s in scenario.schedules}
        for row in rows:
            if row.run_start is not None:
                by_schedule[row.schedule_id].append(row)
        # Band layout: a schedule's lanes are consecutive y positions.
        y_of_run: dict[tuple[str, datetime], float] = {}
        bands: dict[str, tuple[float, float]] = {}
        centres: list[float] = []
        position = 0.0
        for sid, runs in by_schedule.items():
            lanes, count = _assign_lanes(runs, scenario.end)
            for run, lane in zip(runs, lanes, strict=True):
                y_of_run[(sid, run.instant)] = position + lane
            bands[sid] = (position - 0.5, position + count - 0.5)
            centres.append(position + (count - 1) / 2)
            position += count
        figure, axes = self.new_axes(1.4 + 0.5 * position)
        self.shading(axes, bands)
        for low, _ in list(bands.values())[1:]:
            axes.axhline(low, color="#9e9e9e", lw=0.6, zorder=1)

        bars: dict[str, list[list[tuple[float, float]]]] = {}
        pauses: list[list[tuple[float, float]]] = []
        outlined: dict[str, list[list[tuple[float, float]]]] = {}
        points: dict[str, list[tuple[float, float]]] = {}
        spans: dict[str, list[list[tuple[float, float]]]] = {}
        centre_of = dict(zip(by_schedule, centres, strict=True))
        for row in rows:
            if row.run_start is not None:
                y = y_of_run[(row.schedule_id, row.instant)]
                x0 = self.num(row.run_start)
                x1 = self.end if row.run_end is None else self.num(row.run_end)
                bar = _rectangle(x0, max(x1, x0 + 1e-5), y, _BAR_HEIGHT)
                bars.setdefault(row.status, []).append(bar)
                if row.origin in _OPERATOR_OUTLINES:
                    outlined.setdefault(row.origin, []).append(bar)
                for since, until in self.trace.interrupted.get((row.schedule_id, row.instant), ()):
                    u = self.end if until is None else self.num(until)
                    s0 = self.num(since)
                    pauses.append(_rectangle(s0, max(u, s0 + 1e-5), y, _BAR_HEIGHT))
                continue
            y = centre_of[row.schedule_id]
            points.setdefault(row.status, []).append((self.num(row.instant), y))
            if row.count > 1 and row.first_instant is not None:
                # A row standing for several instants spans them all.
                line = [(self.num(row.first_instant), y), (self.num(row.instant), y)]
                spans.setdefault(row.status, []).append(line)

        for status, colour in _RUN_COLOURS.items():
            if status in bars:
                collection = self.mpl_collections.PolyCollection(
                    bars[status],
                    facecolors=colour,
                    edgecolors="none",
                    zorder=2,
                    label=f"run {status}",
                )
                axes.add_collection(collection)
                self.handles.append(self.mpl_patches.Patch(facecolor=colour, label=f"run {status}"))
        if pauses:
            axes.add_collection(
                self.mpl_collections.PolyCollection(
                    pauses,
                    facecolors="#f3e5f5",
                    edgecolors=_RUN_COLOURS["interrupted"],
                    hatch="xxx",
                    linewidths=0.5,
                    zorder=2.5,
                    label=_INTERRUPTED_LABEL,
                )
            )
            self.handles.append(
                self.mpl_patches.Patch(
                    facecolor="#f3e5f5",
                    edgecolor=_RUN_COLOURS["interrupted"],
                    hatch="xxx",
                    label=_INTERRUPTED_LABEL,
                )
            )
        for origin, (edge, style, label) in _OPERATOR_OUTLINES.items():
            if origin in outlined:
                axes.add_collection(
                    self.mpl_collections.PolyCollection(
                        outlined[origin],
                        facecolors="none",
                        edgecolors=edge,
                        linestyles=style,
                        linewidths=1.2,
                        zorder=2.6,
                        label=label,
                    )
                )
                self.handles.append(
                    self.mpl_patches.Patch(
                        facecolor="none", edgecolor=edge, linestyle=style, label=label
                    )
                )
        for status, lines in spans.items():
            colour = _MARKS.get(status, ("o", "#455a64"))[1]
            axes.add_collection(
                self.mpl_collections.LineCollection(lines, colors=colour, linewidths=2)
            )
        self.marks(axes, points)
        self.dst_marks(axes, rows, {sid: low + 0.12 for sid, (low, _) in bands.items()})
        return self.finish(
            figure,
            axes,
            centres,
            [_short(sid) for sid in by_schedule],
            position - 0.5,
            scenario.title or "simulation",
        )

    # --- aggregated ---------------------------------------------------------

    def aggregated(self, rows: list[Row], runs: int) -> Any:
        import numpy

        scenario = self.scenario
        ids = [s.schedule_id for s in scenario.schedules]
        lane_of = {sid: index for index, sid in enumerate(ids)}
        horizon = (scenario.end - scenario.start).total_seconds()
        width = horizon / AGGREGATE_BUCKETS
        active = numpy.zeros((len(ids), AGGREGATE_BUCKETS))
        # Occurrences without a run are too many to mark one by one: counted.
        outcomes: dict[str, dict[str, int]] = {sid: {} for sid in ids}
        runs_of = dict.fromkeys(ids, 0)
        for row in rows:
            lane = lane_of[row.schedule_id]
            if row.run_start is None:
                tally = outcomes[row.schedule_id]
                tally[row.status] = tally.get(row.status, 0) + row.count
                continue
            runs_of[row.schedule_id] += 1
            begin = (row.run_start - scenario.start).total_seconds()
            finish = (
                horizon if row.run_end is None else (row.run_end - scenario.start).total_seconds()
            )
            first = int(begin // width)
            last = min(int(finish // width), AGGREGATE_BUCKETS - 1)
            for bucket in range(first, last + 1):
                low, high = bucket * width, (bucket + 1) * width
                active[lane, bucket] += max(0.0, min(finish, high) - max(begin, low)) / width
        height = 1.8 + 0.18 * len(ids)
        figure, axes = self.new_axes(height)
        # A mesh, rasterized: imshow's resampling of a small image onto a tall
        # figure takes hundreds of MB, and unrasterized cells bloat an SVG.
        image = axes.pcolormesh(
            numpy.linspace(self.start, self.end, AGGREGATE_BUCKETS + 1),
            numpy.arange(len(ids) + 1) - 0.5,
            numpy.ma.masked_equal(active, 0.0),
            cmap="viridis_r",
            rasterized=True,
            zorder=1,
        )
        colourbar = figure.colorbar(image, ax=axes, location="bottom", shrink=0.5, pad=0.01)
        colourbar.set_label(f"runs active (mean over each {_duration(width)} cell)")
        bands = {sid: (lane - 0.5, lane + 0.5) for sid, lane in lane_of.items()}
        self.shading(axes, bands, over=True)
        self.dst_marks(axes, rows, {sid: lane - 0.3 for sid, lane in lane_of.items()})
        title = (
            f"{scenario.title or 'simulation'}: {len(ids)} schedules, {runs} runs, aggregated "
            f"(a bar per run is drawn up to {PLOT_DETAIL_SCHEDULES} schedules and "
            f"{PLOT_DETAIL_RUNS} runs)"
        )
        axes.tick_params(axis="y", labelsize=6)
        labels = [
            " · ".join(
                [_short(sid), f"{runs_of[sid]} runs"]
                + [
                    f"{outcomes[sid][status]} {status}"
                    for status in _MARKS
                    if status in outcomes[sid]
                ]
            )
            for sid in ids
        ]
        return self.finish(
            figure, axes, [float(i) for i in range(len(ids))], labels, len(ids) - 0.5, title
        )


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:.3g} s"


def _short(lane: str) -> str:
    return lane if len(lane) <= 28 else lane[:27] + "…"
