"""`wf-schedule simulate SCENARIO.json`: dry-run schedules through the real core.

The command reads a scenario (see `adapters.simulation.scenario`), runs it on
a virtual clock (`adapters.simulation.engine`) and writes every occurrence and
a per-schedule summary as a table, JSON, JSON lines or CSV. It needs no
server and writes nothing but its `--output` and `--plot` files.

Exit status: 0 on success, 2 for a scenario that cannot be read or is invalid
(each problem is printed with the path of the field), too large to plot, or an
output file that cannot be created, 1 when a plot was asked for and matplotlib is missing or a
file could not be written (also, quietly, when the reader of standard output
closed the pipe).
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TextIO

import typer

# The simulation engine pulls in the core and pydantic: imported by the
# command when it runs, so that `wf-schedule --help` stays fast.
if TYPE_CHECKING:
    from adapters.simulation.scenario import Scenario

__all__ = ["OutputFormat", "register_simulate_command"]

# A progress bar is worth showing from about this much simulated work
# (schedules x days); smaller runs finish before it would be drawn.
_PROGRESS_WORK = 200.0


class OutputFormat(enum.StrEnum):
    table = "table"
    json = "json"
    jsonl = "jsonl"
    csv = "csv"


_SUFFIX_FORMATS = {
    ".json": OutputFormat.json,
    ".jsonl": OutputFormat.jsonl,
    ".csv": OutputFormat.csv,
}


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"wf-schedule simulate: {message}", err=True)
    return typer.Exit(code)


def _read_scenario(path: Path) -> Scenario:
    from adapters.simulation.scenario import parse_scenario
    from core.errors import InvalidInput

    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except OSError as exc:
        raise _fail(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise _fail(f"{path} is not UTF-8 text: {exc.reason}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise _fail(f"{path} is not JSON: {exc.msg} at {where}") from None
    try:
        return parse_scenario(data)
    except InvalidInput as exc:
        lines = [f"invalid scenario {path}:"]
        lines += [f"  {problem.field}: {problem.reason}" for problem in exc.problems]
        raise _fail("\n".join(lines)) from None


def _choose_format(explicit: OutputFormat | None, output: Path | None) -> OutputFormat:
    if explicit is not None:
        return explicit
    if output is not None:
        return _SUFFIX_FORMATS.get(output.suffix.lower(), OutputFormat.json)
    return OutputFormat.table if sys.stdout.isatty() else OutputFormat.json


def _output_mode(output: Path) -> int:
    """The permissions `--output` gets: those of the file it replaces, else
    what any tool's new file gets (0o666 less the umask)."""
    try:
        existing = output.stat()
    except OSError:
        existing = None
    if existing is not None and stat.S_ISREG(existing.st_mode):
        return stat.S_IMODE(existing.st_mode)
    # The umask can only be read by setting it; a CLI has one thread here.
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def _destination(output: Path | None) -> Iterator[TextIO]:
    """stdout, or `output` written atomically: a temporary file in the same
    directory, flushed and fsynced, renamed over the target, then the
    directory fsynced. A failed simulation leaves no partial file behind."""
    if output is None:
        yield sys.stdout
        return
    directory = output.resolve().parent
    try:
        handle, temporary = tempfile.mkstemp(
            dir=directory, prefix=f".{output.name}.", suffix=".tmp"
        )
    except OSError as exc:
        raise _fail(f"cannot write {output}: {exc.strerror or exc}") from None
    try:
        # mkstemp makes a private 0o600 file; the output is an ordinary file.
        os.fchmod(handle, _output_mode(output))
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, output)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def _progress(scenario: Scenario) -> Iterator[Callable[[float], None] | None]:
    """A rich progress bar on stderr, only on a terminal and for long runs."""
    days = (scenario.end - scenario.start).total_seconds() / 86400
    if not sys.stderr.isatty() or days * len(scenario.schedules) < _PROGRESS_WORK:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("simulating"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}% of the horizon"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task("simulate", total=1.0)

        def update(done: float) -> None:
            progress.update(task, completed=done)

        yield update


def run_simulation(
    scenario: Scenario,
    chosen: OutputFormat,
    stream: TextIO,
    *,
    plot: Path | None = None,
    terminal: bool = False,
    on_progress: Callable[[float], None] | None = None,
) -> None:
    """Simulate `scenario` and write it to `stream` in `chosen` format (and plot
    it to `plot`). `jsonl` and `csv` rows are written as they settle."""
    from adapters.simulation.engine import header, simulate
    from adapters.simulation.output import (
        CollectingSink,
        CsvSink,
        JsonlSink,
        RowSink,
        TeeSink,
        render_json,
        render_table,
    )
    from adapters.simulation.plot import RunTrace, plot_timeline

    collected = CollectingSink()
    streamed: RowSink | None = None
    if chosen is OutputFormat.jsonl:
        streamed = JsonlSink(stream)
    elif chosen is OutputFormat.csv:
        streamed = CsvSink(stream)
    if streamed is None:
        sink: RowSink = collected
    elif plot is not None:
        sink = TeeSink(streamed, collected)
    else:
        sink = streamed
    trace = RunTrace() if plot is not None else None
    simulate(scenario, sink, on_progress=on_progress, on_run_change=trace)
    if chosen is OutputFormat.json:
        stream.write(render_json(header(scenario), collected.rows, collected.summary))
    elif chosen is OutputFormat.table:
        render_table(stream, header(scenario), collected.rows, collected.summary, terminal=terminal)
    if plot is not None:
        plot_timeline(plot, scenario, collected.rows, trace)


def _silence_stdout() -> None:
    """Point standard output at /dev/null, so the interpreter's final flush
    of what is still buffered does not fail on the closed pipe again."""
    try:
        descriptor = sys.stdout.fileno()
    except (OSError, ValueError):
        return  # not a real file (a test runner's capture): nothing to flush
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, descriptor)
    finally:
        os.close(devnull)


def register_simulate_command(app: typer.Typer) -> None:
    """Add the `simulate` command to the `wf-schedule` Typer app."""

    @app.command("simulate")
    def simulate_command(
        scenario_path: Annotated[
            Path,
            typer.Argument(
                metavar="SCENARIO.json",
                help="Scenario file (JSON); '-' reads standard input.",
            ),
        ],
        output_format: Annotated[
            OutputFormat | None,
            typer.Option(
                "--format",
                "-f",
                help="table (default on a terminal), json (default otherwise), jsonl or csv.",
                case_sensitive=False,
            ),
        ] = None,
        plot: Annotated[
            Path | None,
            typer.Option(
                "--plot",
                metavar="FILE.svg|png",
                help="Also draw a timeline (needs the 'plot' extra: matplotlib).",
            ),
        ] = None,
        output: Annotated[
            Path | None,
            typer.Option(
                "--output",
                "-o",
                metavar="FILE",
                help="Write here instead of standard output (format from .json/.jsonl/.csv).",
            ),
        ] = None,
    ) -> None:
        """Dry-run a scenario of schedules through the scheduler's real decisions.

        Runs the same decide() as the service on a virtual clock, with run
        durations and outcomes, operator pauses/updates/deletes, triggers and
        backfills, scheduler downtime and DST, and prints every occurrence
        (with its origin) and a summary.
        """
        from adapters.simulation.plot import (
            PLOT_SUFFIXES,
            PlotTooLarge,
            PlotUnavailable,
            check_plot_size,
            require_matplotlib,
        )

        if plot is not None:
            if plot.suffix.lower() not in PLOT_SUFFIXES:
                raise _fail(f"--plot file must end in .svg or .png, got {plot.name!r}")
            try:
                require_matplotlib()
            except PlotUnavailable as exc:
                raise _fail(str(exc), code=1) from None
        scenario = _read_scenario(scenario_path)
        if plot is not None:
            try:
                check_plot_size(scenario)
            except PlotTooLarge as exc:
                raise _fail(str(exc)) from None
        chosen = _choose_format(output_format, output)
        terminal = output is None and sys.stdout.isatty()
        try:
            with _destination(output) as stream, _progress(scenario) as on_progress:
                run_simulation(
                    scenario, chosen, stream, plot=plot, terminal=terminal, on_progress=on_progress
                )
        except BrokenPipeError:
            if output is not None:
                raise
            # The reader went away (`| head`): stop quietly, as any filter does.
            _silence_stdout()
            raise typer.Exit(1) from None
        except OSError as exc:
            where = exc.filename or output or plot or "output"
            raise _fail(f"cannot write {where}: {exc.strerror or exc}", code=1) from None
        if plot is not None:
            typer.echo(f"timeline written to {plot}", err=True)
