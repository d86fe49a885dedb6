"""Runs every ```bash block of the operator pages, in order, as a reader pasting them would.

Each page gets a fresh copy of the checkout's files (what `git ls-files` lists,
untracked files not ignored included) as its working directory, and a live
`wf-rpc-server` (the docs' premise: "with a server running"):

- A command that starts `wf-rpc-server` is the server itself, not a step: the
  test runs it in the background as the page's server (stopping the previous
  one with SIGTERM, which must end it with status 0) and waits until it
  answers. Before the first other command, if the page has started none, the
  test starts the documented one (`DEFAULT_SERVER`). The page's server is
  stopped the same way at the end.
- Every other run of lines goes, verbatim, to `bash -e -o pipefail`; a failing
  command fails the test, naming its line in the page.
- A trailing `# -> TEXT` states (part of) what the command prints: TEXT must
  appear in the output of its run of lines, after the text stated before it
  (whitespace is compared loosely). Other trailing comments are only comments.
- The docs use the default port 8765. The test's servers listen on a free port
  instead: `WF_RPC_PORT` moves the server, `WF_SCHEDULER_URL` points
  `wf-schedule` there, and a literal `127.0.0.1:8765` in a command (curl) is
  rewritten to it.
- `uv run NAME` runs NAME from this test's environment (`.venv/bin`), through
  a shell function: the copy is no uv project with a synced environment, and
  `uv run` per line would re-check the lock each time for nothing. That
  directory is taken off PATH, so a command written without `uv run` fails
  as it would in a fresh checkout (a bare `wf-rpc-server` is no server line
  either). That `uv run` resolves the documented entry points as written is
  checked once, in the repository, by
  `test_uv_run_resolves_the_documented_commands`.
- `wf-schedule` pays about 0.75 s of imports per process, most of a page's
  time. So `uv run wf-schedule` goes through a fork server (`doc_zygote.py`)
  that imports it once: each command is still its own process, with the
  shell's stdin/stdout/stderr, working directory and environment, running the
  real entry point. `WF_DOC_EXEC_EACH=1` runs `.venv/bin/wf-schedule` per
  command instead, to compare.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.rpc.live import free_port

REPO = Path(__file__).resolve().parents[2]
ZYGOTE = Path(__file__).with_name("doc_zygote.py")
BIN = Path(sys.executable).parent
PAGES = ("docs/cli.md", "docs/rpc.md", "docs/triggers.md", "docs/operations.md")
DEFAULT_SERVER = "uv run wf-rpc-server --store-root .wf_store --enable-scheduler"
DOC_ADDRESSES = ("127.0.0.1:8765", "localhost:8765")
SEGMENT_TIMEOUT_S = 180
SERVER_START_TIMEOUT_S = 30

_STATED_OUTPUT = re.compile(r"\s#\s*->\s*(?P<text>.*?)\s*$")
_TRACED_LINE = re.compile(r"^\+(?P<line>\d+): ", re.MULTILINE)

# `uv run NAME ARGS` as $WF_DOC_BIN/NAME ARGS (this environment); see the docstring.
# Commands are traced to fd 9 with their script line, to name a failing command's line.
_PRELUDE = """\
exec 9>>"$WF_DOC_TRACE"
BASH_XTRACEFD=9
PS4='+${LINENO}: '
uv() {
  if [ "${1-}" != run ]; then command uv "$@"; return; fi
  local name="$2"; shift 2
  if [ "$name" = wf-schedule ] && [ -n "${WF_DOC_ZYGOTE-}" ]; then
    "$WF_DOC_BIN/python" -I -S "$WF_DOC_CLIENT" "$@"
  else
    "$WF_DOC_BIN/$name" "$@"
  fi
}
set -x
"""


@dataclass(frozen=True)
class Command:
    """One logical command (backslash continuations joined) and where it is."""

    lines: tuple[str, ...]
    first_line: int  # 1-based line of the page

    @property
    def argv(self) -> list[str]:
        joined = " ".join(line.removesuffix("\\") for line in self.lines)
        try:
            return shlex.split(joined, comments=True)
        except ValueError:  # inside a heredoc, say: not a command this test looks into
            return []

    @property
    def starts_server(self) -> bool:
        argv = [word for word in self.argv if word != "&"]
        # `--version` and `--help` print and exit: ordinary commands, not a server.
        informational = {"--version", "--help", "-h"} & set(argv[3:])
        return argv[:3] == ["uv", "run", "wf-rpc-server"] and not informational

    @property
    def stated_output(self) -> str | None:
        match = _STATED_OUTPUT.search(self.lines[-1])
        return match.group("text") if match else None


@dataclass
class Segment:
    """Consecutive commands of one block that bash runs in one process."""

    block_line: int
    commands: list[Command] = field(default_factory=list)

    def script(self, port: int) -> tuple[str, list[int]]:
        """The bash script and, per script line, its page line (0 for the prelude)."""
        body: list[str] = []
        page_lines: list[int] = [0] * _PRELUDE.count("\n")
        for command in self.commands:
            for offset, line in enumerate(command.lines):
                for address in DOC_ADDRESSES:
                    line = line.replace(address, f"127.0.0.1:{port}")
                body.append(line)
                page_lines.append(command.first_line + offset)
        return _PRELUDE + "\n".join(body) + "\n", page_lines


def bash_blocks(page: str) -> list[tuple[int, list[Command]]]:
    """Every ```bash block of `page`: the line of its fence and its commands."""
    blocks: list[tuple[int, list[Command]]] = []
    lines = (REPO / page).read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        if lines[index].strip() != "```bash":
            index += 1
            continue
        fence = index + 1
        commands: list[Command] = []
        pending: list[str] = []
        index += 1
        while not lines[index].startswith("```"):
            line = lines[index]
            if pending or line.strip():
                pending.append(line)
                if not line.endswith("\\"):
                    commands.append(Command(tuple(pending), index + 2 - len(pending)))
                    pending = []
            index += 1
        blocks.append((fence, commands))
        index += 1
    return blocks


def segments(page: str) -> Iterator[Segment | Command]:
    """The page in run order: runs of ordinary commands, and server commands on their own."""
    for fence, commands in bash_blocks(page):
        segment = Segment(fence)
        for command in commands:
            if command.starts_server:
                if segment.commands:
                    yield segment
                segment = Segment(fence)
                yield command
            else:
                segment.commands.append(command)
        if segment.commands:
            yield segment


def copy_checkout(destination: Path) -> Path:
    """The files a fresh checkout of this working tree would have."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            check=True,
            capture_output=True,
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        # Not a git working tree (an unpacked archive): what the docs' commands read.
        shutil.copytree(REPO / "docs", destination / "docs")
        return destination
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


class PageServer:
    """The one `wf-rpc-server` a page's commands talk to."""

    def __init__(self, cwd: Path, env: dict[str, str], port: int, log: Path) -> None:
        self.cwd, self.env, self.port, self.log = cwd, env, port, log
        self.process: subprocess.Popen[bytes] | None = None
        self.command: str = ""

    def start(self, command: str, where: str) -> None:
        self.stop()
        argv = [word for word in shlex.split(command, comments=True) if word != "&"]
        assert argv[:2] == ["uv", "run"], command
        argv = argv[2:]
        self.command = f"{where}: {command}"
        with self.log.open("ab") as log:
            log.write(f"== {self.command}\n".encode())
            self.process = subprocess.Popen(
                [str(BIN / argv[0]), *argv[1:]],
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                pytest.fail(f"{self.command}\nexited {self.process.returncode}\n{self.tail()}")
            try:
                # Any HTTP answer means it listens (a token-guarded one answers 401).
                httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1.0)
                return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    pytest.fail(f"{self.command}\nnot listening on {self.port}\n{self.tail()}")
                time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM, as Ctrl-C or `kill` would; a clean stop is status 0."""
        if self.process is None:
            return
        process, self.process = self.process, None
        process.send_signal(signal.SIGTERM)
        try:
            status = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
            pytest.fail(f"{self.command}\ndid not stop on SIGTERM\n{self.tail()}")
        assert status == 0, f"{self.command}\nexited {status} on SIGTERM\n{self.tail()}"

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def tail(self) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return "server log (tail):\n" + "\n".join(text.splitlines()[-30:])


def _loose(text: str) -> str:
    return " ".join(text.split())


def run_segment(page: str, segment: Segment, cwd: Path, env: dict[str, str], port: int) -> None:
    script, page_lines = segment.script(port)
    trace = cwd.parent / "trace.log"
    trace.write_text("", encoding="utf-8")
    result = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=cwd,
        env={**env, "WF_DOC_TRACE": str(trace)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=SEGMENT_TIMEOUT_S,
    )
    output = result.stdout.decode(errors="replace")
    if result.returncode != 0:
        traced = [int(m.group("line")) for m in _TRACED_LINE.finditer(trace.read_text())]
        lines = [
            page_lines[n - 1] for n in traced if 0 < n <= len(page_lines) and page_lines[n - 1]
        ]
        where = f"{page}:{lines[-1]}" if lines else f"{page}: block at line {segment.block_line}"
        pytest.fail(f"{where}: exit status {result.returncode}\n--- output:\n{output}")
    found = 0
    loose = _loose(output)
    for command in segment.commands:
        stated = command.stated_output
        if stated is None:
            continue
        at = loose.find(_loose(stated), found)
        assert at >= 0, (
            f"{page}:{command.first_line}: the output does not show {stated!r}"
            f"\n--- output:\n{output}"
        )
        found = at + len(_loose(stated))


@pytest.fixture(scope="module")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment that routes `uv run wf-schedule` through the fork server."""
    if os.environ.get("WF_DOC_EXEC_EACH"):
        yield {}
        return
    where = tmp_path_factory.mktemp("zygote")
    sock = where / "sock"
    with (where / "zygote.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, str(ZYGOTE), "serve", str(sock)],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
        )
    try:
        assert process.stdout is not None
        ready = process.stdout.readline()
        assert ready == b"ready\n", (where / "zygote.log").read_text()
        yield {"WF_DOC_ZYGOTE": str(sock), "WF_DOC_CLIENT": str(ZYGOTE)}
    finally:
        process.kill()
        process.wait(timeout=10)


@pytest.mark.parametrize("page", PAGES)
def test_doc_page_commands_run_as_written(
    page: str, tmp_path: Path, zygote: dict[str, str]
) -> None:
    plan = list(segments(page))
    assert plan, f"{page} has no ```bash block"
    checkout = copy_checkout(tmp_path / "checkout")
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("WF_")},
        "PATH": os.pathsep.join(
            entry
            for entry in os.environ.get("PATH", "").split(os.pathsep)
            if entry and Path(entry).resolve() != BIN.resolve()
        ),
        "WF_DOC_BIN": str(BIN),
        **zygote,
        "WF_RPC_PORT": str(port),
        "WF_SCHEDULER_URL": f"http://127.0.0.1:{port}/rpc",
    }
    server = PageServer(checkout, env, port, tmp_path / "server.log")
    try:
        for step in plan:
            if isinstance(step, Command):
                server.start(" ".join(step.lines), f"{page}:{step.first_line}")
                continue
            if server.process is None:
                server.start(DEFAULT_SERVER, f"{page} (the page's premise)")
            run_segment(page, step, checkout, env, port)
        server.stop()
    finally:
        server.kill()


def test_uv_run_resolves_the_documented_commands() -> None:
    # The page test runs `uv run NAME` as .venv/bin/NAME; this is
    # the check that uv itself, in the repository, resolves NAME the same way.
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed here; the docs' `uv run` lines need it")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WF_")}
    for name in ("wf-schedule", "wf-rpc-server"):
        result = subprocess.run(
            [uv, "run", name, "--help"], cwd=REPO, env=env, capture_output=True, timeout=120
        )
        assert result.returncode == 0, result.stderr.decode(errors="replace")
        assert b"usage" in result.stdout.lower(), result.stdout
