"""A real, throwaway PostgreSQL server for tests and benchmarks.

`PostgresServer` runs `initdb` into a fresh temporary directory and starts a
postmaster on 127.0.0.1, then offers the faults a store must survive: a clean
restart, a SIGKILL of the postmaster, terminated backends, a frozen server.
Standard library and psycopg only, so benchmarks can import it too.

Why each choice:

- **Real binaries, no mocks, no Docker.** The stores' correctness depends on
  PostgreSQL's own behaviour (locking, isolation, crash recovery, what a killed
  backend does to a client); only the server itself exhibits it. Docker is not
  available everywhere CI runs; the distribution package is.
- **Where the binaries come from.** PATH first, so a PostgreSQL the developer
  chose (Homebrew, a source build, `WF_PG_BINDIR`) wins; then the newest
  `/usr/lib/postgresql/<version>/bin`, because Debian and Ubuntu keep the server
  binaries off PATH (only the client wrappers are on it).
- **One cluster per test session, one database per test.** `initdb` costs about
  a second, `CREATE DATABASE` about 15 ms (on tmpfs, with the FILE_COPY strategy
  when not durable: its two checkpoints cost nothing with fsync off, and it is a
  little faster than PostgreSQL 15's default WAL_LOG), so isolation per test is
  bought at the database level.
- **`initdb --auth=trust -U wf_test -E UTF8 --locale=C --no-sync`.** Trust
  because the server listens only on loopback and a unix socket inside a
  private directory, and a password would only be noise in every URL. An
  explicit superuser name so URLs do not depend on which OS user ran the tests
  (root runs initdb as `postgres`). UTF8 and the C locale so sorting and
  encoding are the same on every machine, whatever LANG says. `--no-sync`
  because the cluster is thrown away: fsyncing its freshly written files
  protects nothing.
- **The cluster lives in /dev/shm unless durable** (and when that tmpfs has 1 GiB
  free; a container's default 64 MB would not do, PostgreSQL's own dynamic
  shared memory lives there too). With fsync off a disk buys nothing, and an
  ext4 disk shared with other jobs made `CREATE DATABASE` take 25-340 ms where
  tmpfs takes 10-20 ms. A durable cluster goes to the temp directory: its
  figures must include the disk.
- **127.0.0.1 on a free port, unix socket in the temp directory.** Never the
  default 5432 or `/var/run/postgresql`, which a system PostgreSQL (or a
  concurrent test session) may own; the port is picked by binding port 0, and if
  another process grabs it before the postmaster binds, start-up is retried on a
  new port. A restart keeps the port, so URLs handed out stay valid across
  faults, as they would for a real database.
- **`durable=False` (tests): `fsync=off`, `full_page_writes=off`,
  `synchronous_commit=on`.** fsync and full-page writes only protect against an
  operating-system crash or power loss, which a test never causes; without them
  commits and checkpoints cost no disk flush. `synchronous_commit` stays on
  (explicitly): a commit still reaches the kernel before the client hears
  "COMMIT", so a SIGKILL of the server, the fault tests do cause, loses nothing
  committed, exactly as in production. `durable=True` keeps PostgreSQL's
  defaults, for benchmarks whose figures must mean something.
- **Settings on the command line (`-c`).** Command-line settings outrank
  `postgresql.conf` and `ALTER SYSTEM`, so the harness's settings are the ones in
  force whatever a test does; a test can still `SET` per session.
- **`max_connections=200`.** Tests open connection pools per database; the
  default 100 can run out when several pools are alive at once. The extra slots
  cost a few MB of shared memory.
- **The postmaster is started directly, as a child of this process, not through
  `pg_ctl start`.** `pg_ctl` daemonizes the postmaster, which is then reparented
  to PID 1; in a container PID 1 may never reap it, so a killed postmaster would
  linger as a zombie and "is it gone?" could not be answered. As our child it is
  reaped by `Popen.wait`, its early death (port taken, bad setting) is seen at
  once with the log, and stopping it is a signal plus a wait (SIGTERM, SIGINT,
  SIGQUIT are exactly what `pg_ctl stop -m smart|fast|immediate` sends) without
  pg_ctl's 100 ms polling. `pg_ctl` is still located (`bin_dir`), as it ships
  with the others. The postmaster gets its own session so a Ctrl-C in the
  terminal does not shut the database down under the tests still tearing down.
- **Root.** PostgreSQL refuses to run as root. As root, `initdb` and `postgres`
  run as the `postgres` system user (the Debian package creates it), else as
  `nobody`, with supplementary groups dropped; the temp directory is chowned to
  that user. Otherwise they run as the current user.
- **`kill()` waits for the children too.** After a SIGKILL of the postmaster its
  backends live on until they notice; a new postmaster refuses to start while
  any of them is still attached to the old shared memory. The children are
  listed while the postmaster is stopped (SIGSTOP), so none is forked unseen.
- **Cleanup.** `close()` stops the server and deletes the directory; `atexit`
  closes whatever a crashed session left open. A session killed outright
  (SIGKILL, OOM) runs no atexit, so each directory also holds a lock file its
  owner keeps locked (`flock`, released by the kernel however the owner dies):
  the next `start()` stops the servers of unlocked directories and removes them.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import fcntl
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal, LiteralString
from urllib.parse import quote

import psycopg
from psycopg import sql
from psycopg.abc import Params

__all__ = ["BINARIES", "SUPERUSER", "PostgresServer", "find_bin_dir"]

BINARIES = ("initdb", "pg_ctl", "postgres")
SUPERUSER = "wf_test"
DIR_PREFIX = "wf-pg-"
LOCK_NAME = "owner.lock"
POLL_S = 0.01

StopMode = Literal["smart", "fast", "immediate"]
Query = LiteralString | bytes | sql.SQL | sql.Composed
_STOP_SIGNALS: dict[str, signal.Signals] = {
    "smart": signal.SIGTERM,
    "fast": signal.SIGINT,
    "immediate": signal.SIGQUIT,
}
_BIND_FAILURE = re.compile(r"could not bind|could not create any TCP/IP sockets")


def find_bin_dir() -> Path | None:
    """The directory holding initdb, pg_ctl and postgres, or None."""
    candidates: list[Path] = []
    override = os.environ.get("WF_PG_BINDIR")
    if override:
        candidates.append(Path(override))
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).parent)
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():
        versions = [p for p in debian.iterdir() if re.fullmatch(r"\d+(\.\d+)?", p.name)]
        versions.sort(key=lambda p: tuple(int(x) for x in p.name.split(".")), reverse=True)
        candidates.extend(p / "bin" for p in versions)
    for directory in candidates:
        if all(os.access(directory / name, os.X_OK) for name in BINARIES):
            return directory
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _proc_state(pid: int) -> str | None:
    """The process state letter (R, S, T, Z...), None when there is no process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return "?"
    return stat.rsplit(")", 1)[1].split()[0]


def _alive(pid: int) -> bool:
    """Whether `pid` runs; a zombie counts as gone (it holds no resources)."""
    if Path("/proc").is_dir():
        return _proc_state(pid) not in (None, "Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _children(pid: int) -> list[int]:
    """The live child processes of `pid`."""
    found: list[int] = []
    if Path("/proc").is_dir():
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
                found.append(int(entry))
        return found
    out = subprocess.run(["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        child, parent = line.split()
        if int(parent) == pid:
            found.append(int(child))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""
    except OSError:
        out = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True)
        return out.stdout.decode(errors="replace")


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    """Poll until none of `pids` runs; return those still running at the deadline."""
    deadline = time.monotonic() + timeout_s
    left = [p for p in pids if _alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(POLL_S)
        left = [p for p in left if _alive(p)]
    return left


def _read_pid_file(data_dir: Path) -> tuple[int, tuple[int, int] | None] | None:
    """(postmaster pid, (SysV shared memory key, id)) from postmaster.pid, or None."""
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not lines or not lines[0].strip().isdigit():
        return None
    shm: tuple[int, int] | None = None
    if len(lines) >= 7 and len(lines[6].split()) == 2:
        key, shm_id = lines[6].split()
        shm = int(key), int(shm_id)
    return int(lines[0]), shm


def _remove_shm(shm: tuple[int, int] | None) -> None:
    """Remove the SysV segment a killed postmaster left (a restart would have reused
    it), only if /proc/sysvipc/shm still lists that key and id, with nobody attached."""
    if shm is None or not sys.platform.startswith("linux"):
        return
    key, shm_id = shm
    try:
        table = Path("/proc/sysvipc/shm").read_text().splitlines()
    except OSError:
        return
    header = table[0].split()
    unused = False
    for line in table[1:]:
        row = dict(zip(header, line.split(), strict=False))
        if row.get("key") == str(key) and row.get("shmid") == str(shm_id):
            unused = row.get("nattch") == "0"
    if not unused:
        return
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return
    libc = ctypes.CDLL(libc_name, use_errno=True)
    ipc_rmid = 0
    libc.shmctl(ctypes.c_int(shm_id), ctypes.c_int(ipc_rmid), None)


def _stop_orphan(root: Path) -> None:
    """Stop the postmaster of a directory whose owner died, then let it be removed."""
    data_dir = root / "data"
    found = _read_pid_file(data_dir)
    if found is None:
        return
    pid, shm = found
    if _alive(pid) and str(data_dir) in _cmdline(pid):
        for process in (*_children(pid), pid):  # it may have been paused
            _signal(process, signal.SIGCONT)
        _signal(pid, signal.SIGQUIT)
        if _wait_gone([pid], 5.0):
            _signal(pid, signal.SIGKILL)
            _wait_gone([pid], 5.0)
    _remove_shm(shm)


SHM_DIR = Path("/dev/shm")
SHM_MIN_FREE = 1 << 30


def _default_base_dir(durable: bool) -> Path:
    """tmpfs for a throwaway cluster when there is room, else the temp directory."""
    if not durable and SHM_DIR.is_dir() and os.access(SHM_DIR, os.W_OK | os.X_OK):
        st = os.statvfs(SHM_DIR)
        if st.f_bavail * st.f_frsize >= SHM_MIN_FREE:
            return SHM_DIR
    return Path(tempfile.gettempdir())


def _sweep_orphans(base: Path) -> None:
    """Remove the directories (and stop the servers) of sessions that died unclean."""
    for root in base.glob(f"{DIR_PREFIX}*"):
        try:
            fd = os.open(root / LOCK_NAME, os.O_RDWR)
        except OSError:
            continue  # not ours to judge, or being created right now
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its owner is alive
            _stop_orphan(root)
            shutil.rmtree(root, ignore_errors=True)
        finally:
            os.close(fd)


_LIVE: set[PostgresServer] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _close_all() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        with contextlib.suppress(Exception):
            server.close()


class PostgresServer:
    """A throwaway PostgreSQL cluster in a temp directory, listening on 127.0.0.1."""

    def __init__(
        self,
        *,
        durable: bool = False,
        max_connections: int = 200,
        settings: dict[str, str | int | float | bool] | None = None,
        bin_dir: Path | str | None = None,
        base_dir: Path | str | None = None,
        start_timeout_s: float = 30.0,
    ) -> None:
        found = Path(bin_dir) if bin_dir is not None else find_bin_dir()
        if found is None:
            raise RuntimeError(self.unavailable_reason())
        self.bin_dir: Path = found
        self.durable = durable
        self.max_connections = max_connections
        self.extra_settings: dict[str, str | int | float | bool] = dict(settings or {})
        self.base_dir = Path(base_dir) if base_dir is not None else _default_base_dir(durable)
        self.start_timeout_s = start_timeout_s
        self.user = SUPERUSER
        self.root: Path | None = None
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._lock_fd: int | None = None
        self._paused: list[int] = []
        self._version: str | None = None
        self._version_num = 0
        self._run_as: tuple[int, int, str] | None = self._pick_run_as()

    # -- discovery -------------------------------------------------------------

    @classmethod
    def available(cls) -> bool:
        """Whether initdb, pg_ctl and postgres can be found."""
        return find_bin_dir() is not None

    @staticmethod
    def unavailable_reason() -> str:
        return (
            "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found on PATH, in "
            "$WF_PG_BINDIR or in /usr/lib/postgresql/<version>/bin; install the Debian "
            "'postgresql' package (.ci/run does)"
        )

    @staticmethod
    def _pick_run_as() -> tuple[int, int, str] | None:
        if os.geteuid() != 0:
            return None
        for name in ("postgres", "nobody"):
            try:
                entry = pwd.getpwnam(name)
            except KeyError:
                continue
            return entry.pw_uid, entry.pw_gid, name
        raise RuntimeError("running as root, and neither a 'postgres' nor a 'nobody' user exists")

    # -- paths and URLs --------------------------------------------------------

    def _root(self) -> Path:
        if self.root is None:
            raise RuntimeError("the server was never started")
        return self.root

    @property
    def data_dir(self) -> Path:
        return self._root() / "data"

    @property
    def socket_dir(self) -> Path:
        return self._root() / "socket"

    @property
    def log_path(self) -> Path:
        return self._root() / "postgres.log"

    @property
    def run_as(self) -> str:
        """The OS user the server processes run as."""
        if self._run_as is not None:
            return self._run_as[2]
        return pwd.getpwuid(os.geteuid()).pw_name

    @property
    def url(self) -> str:
        """The superuser's URL for the `postgres` database."""
        return self.url_for("postgres")

    def url_for(self, dbname: str) -> str:
        if self.port is None:
            raise RuntimeError("the server was never started")
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{quote(dbname, safe='')}"

    @property
    def version(self) -> str:
        """The server_version string, e.g. '15.8 (Debian 15.8-0+deb12u1)'."""
        if self._version is None:
            raise RuntimeError("the server was never started")
        return self._version

    @property
    def pid(self) -> int | None:
        """The postmaster's pid, from postmaster.pid; None when it is not running."""
        if self.root is None:
            return None
        found = _read_pid_file(self.data_dir)
        if found is None or not _alive(found[0]):
            return None
        return found[0]

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except (OSError, RuntimeError):
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- life cycle ------------------------------------------------------------

    def __enter__(self) -> PostgresServer:
        if not self.is_running():
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """initdb on first use, then start the postmaster and wait until it accepts
        connections. Again after stop() or kill(): same data, same port."""
        if self.is_running():
            raise RuntimeError("the server is already running")
        first = self.root is None
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            if first:
                self._create_cluster()
            attempts = 5 if first else 1
            for attempt in range(attempts):
                if first:
                    self.port = _free_port()
                try:
                    self._spawn_and_wait()
                    return
                except _PortTaken:
                    if attempt == attempts - 1:
                        raise RuntimeError(
                            f"the postmaster could not bind 127.0.0.1:{self.port}:\n"
                            f"{self.log_tail()}"
                        ) from None
        except BaseException:
            if first:  # nothing worth keeping: the next start() begins afresh
                self.close()
            raise

    def _create_cluster(self) -> None:
        base = self.base_dir
        for place in {base, _default_base_dir(False), _default_base_dir(True)}:
            _sweep_orphans(place)
        root = Path(tempfile.mkdtemp(prefix=DIR_PREFIX, dir=base))
        self.root = root
        self._lock_fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.socket_dir.mkdir(mode=0o700)
        if self._run_as is not None:
            uid, gid, name = self._run_as
            self._check_reachable(root, uid, gid, name)
            for path in (root, self.socket_dir):
                os.chown(path, uid, gid)
        command = [
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            self.user,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            cwd=root,
            env=self._child_env(),
            **self._user_kwargs(),
        )
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")
            raise RuntimeError(f"initdb failed ({done.returncode}):\n{output}")

    @staticmethod
    def _check_reachable(root: Path, uid: int, gid: int, name: str) -> None:
        # The unprivileged user must be able to traverse every parent directory.
        for parent in root.parents:
            st = parent.stat()
            bit = 0o001
            if st.st_uid == uid:
                bit = 0o100
            elif st.st_gid == gid:
                bit = 0o010
            if not st.st_mode & bit:
                raise RuntimeError(
                    f"{parent} is not searchable by the '{name}' user the server runs as "
                    f"(root may not run PostgreSQL); pass base_dir= or set TMPDIR elsewhere"
                )

    def _child_env(self) -> dict[str, str]:
        # PG* variables (PGDATA, PGPORT...) must not steer initdb or the postmaster;
        # LC_ALL=C keeps the server's messages in English, which _PortTaken reads.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        env["LANG"] = "C"
        return env

    def _user_kwargs(self) -> dict[str, Any]:
        if self._run_as is None:
            return {}
        uid, gid, _ = self._run_as
        return {"user": uid, "group": gid, "extra_groups": []}

    def _settings(self) -> dict[str, str]:
        settings: dict[str, str | int | float | bool] = {
            "listen_addresses": "127.0.0.1",
            "port": self.port or 0,
            "unix_socket_directories": str(self.socket_dir),
            "max_connections": self.max_connections,
        }
        if not self.durable:
            settings |= {"fsync": False, "full_page_writes": False, "synchronous_commit": True}
        settings |= self.extra_settings
        return {
            k: ("on" if v else "off") if isinstance(v, bool) else str(v)
            for k, v in settings.items()
        }

    def _spawn_and_wait(self) -> None:
        command = [str(self.bin_dir / "postgres"), "-D", str(self.data_dir)]
        for key, value in self._settings().items():
            command += ["-c", f"{key}={value}"]
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (kept open for the child)
        self._proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self._root(),
            env=self._child_env(),
            start_new_session=True,
            **self._user_kwargs(),
        )
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self._proc.poll() is not None:
                self._proc = None
                self._close_log()
                log = self.log_path.read_bytes()[log_offset:].decode(errors="replace")
                if _BIND_FAILURE.search(log):
                    raise _PortTaken()
                raise RuntimeError(f"the postmaster exited during start-up:\n{log[-4000:]}")
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=2) as conn:
                    row = conn.execute(
                        "SELECT current_setting('server_version'),"
                        " current_setting('server_version_num')::int"
                    ).fetchone()
                    assert row is not None
                    self._version, self._version_num = str(row[0]), int(row[1])
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    self._halt(signal.SIGQUIT)
                    raise TimeoutError(
                        f"PostgreSQL did not accept connections within {self.start_timeout_s} s:"
                        f"\n{self.log_tail()}"
                    ) from None
                time.sleep(POLL_S)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def _halt(self, sig: int, timeout_s: float = 30.0) -> None:
        """Signal our postmaster child and reap it."""
        proc = self._proc
        if proc is None:
            return
        self.resume()
        _signal(proc.pid, sig)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _signal(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        finally:
            self._proc = None
            self._close_log()

    def stop(self, mode: StopMode = "fast", timeout_s: float = 30.0) -> None:
        """Shut down as `pg_ctl stop -m <mode>` would; a no-op when not running.
        fast: roll back open transactions, disconnect clients, checkpoint.
        immediate: no checkpoint, the next start runs crash recovery."""
        if mode not in _STOP_SIGNALS:
            raise ValueError(f"mode must be one of {sorted(_STOP_SIGNALS)}, not {mode!r}")
        if self.is_running():
            self._halt(_STOP_SIGNALS[mode], timeout_s)

    def restart(self, mode: StopMode = "fast") -> None:
        """stop() then start(): same data directory, same port."""
        self.stop(mode)
        self.start()

    def kill(self, sig: int = signal.SIGKILL, timeout_s: float = 10.0) -> None:
        """Send `sig` to the postmaster (its pid read from postmaster.pid), then wait
        until it and every process it had forked are gone."""
        found = _read_pid_file(self.data_dir) if self.root is not None else None
        if found is None or not _alive(found[0]):
            raise RuntimeError("the server is not running")
        pid = found[0]
        _signal(pid, signal.SIGSTOP)  # no fork between listing the children and `sig`
        children = _children(pid)
        _signal(pid, sig)
        _signal(pid, signal.SIGCONT)
        for child in children:  # a paused child could not notice its parent's death
            _signal(child, signal.SIGCONT)
        self._paused = []
        if self._proc is not None and self._proc.pid == pid:
            try:
                self._proc.wait(timeout_s)
            finally:
                if self._proc.poll() is not None:
                    self._proc = None
                    self._close_log()
        elif _wait_gone([pid], timeout_s):
            raise TimeoutError(f"the postmaster {pid} outlived {signal.Signals(sig).name}")
        left = _wait_gone(children, timeout_s)
        for child in left:
            _signal(child, signal.SIGKILL)
        if _wait_gone(left, timeout_s):
            raise TimeoutError(f"server processes {left} outlived SIGKILL")

    def pause(self) -> None:
        """Freeze the server (SIGSTOP the postmaster, then each child) and return once
        they are all stopped: connections stay open and new ones complete the TCP
        handshake, but nothing answers."""
        pid = self.pid
        if pid is None:
            raise RuntimeError("the server is not running")
        _signal(pid, signal.SIGSTOP)
        children = _children(pid)
        for child in children:
            _signal(child, signal.SIGSTOP)
        self._paused = [pid, *children]
        # SIGSTOP is asynchronous: a process on another CPU runs on for a moment.
        deadline = time.monotonic() + 5.0
        while Path("/proc").is_dir() and time.monotonic() < deadline:
            if all(_proc_state(p) in (None, "T", "Z", "X") for p in self._paused):
                break
            time.sleep(POLL_S / 10)

    def resume(self) -> None:
        """Undo pause(): SIGCONT the children, then the postmaster."""
        paused, self._paused = self._paused, []
        if not paused:
            return
        postmaster, children = paused[0], paused[1:]
        for child in {*children, *_children(postmaster)}:
            _signal(child, signal.SIGCONT)
        _signal(postmaster, signal.SIGCONT)

    @property
    def paused(self) -> bool:
        return bool(self._paused)

    def close(self) -> None:
        """Stop the server (fast, else immediate) and delete its directory."""
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if self.root is None:
            return
        try:
            self.stop("fast", timeout_s=10.0)
        except Exception:
            with contextlib.suppress(Exception):
                self._halt(signal.SIGQUIT, timeout_s=10.0)
        # A killed, never restarted server leaves its SysV segment and maybe a postmaster
        # that is not our child (kill() raced a restart); neither may outlive the directory.
        _stop_orphan(self.root)
        shutil.rmtree(self.root, ignore_errors=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        self.root = None

    # -- SQL helpers -----------------------------------------------------------

    def connect(self, dbname: str = "postgres", **kwargs: Any) -> psycopg.Connection[Any]:
        """A psycopg connection as the superuser (autocommit unless told otherwise)."""
        kwargs.setdefault("autocommit", True)
        kwargs.setdefault("connect_timeout", 5)
        return psycopg.connect(self.url_for(dbname), **kwargs)

    def execute(
        self, query: Query, params: Params | None = None, *, dbname: str = "postgres"
    ) -> None:
        with self.connect(dbname) as conn:
            conn.execute(query, params)

    def query(
        self, query: Query, params: Params | None = None, *, dbname: str = "postgres"
    ) -> list[tuple[Any, ...]]:
        with self.connect(dbname) as conn:
            return conn.execute(query, params).fetchall()

    def create_database(self, name: str, template: str | None = None) -> str:
        """CREATE DATABASE `name` (from `template`, else the server's default, template1);
        return its URL. Cloning a template that holds a migrated schema saves
        re-running the migrations in every test."""
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        if not self.durable and self._version_num >= 150000:
            # WAL_LOG (15's default) writes the template's every page to WAL; FILE_COPY
            # copies the files between two checkpoints, which cost nothing with fsync
            # off (median 13 ms against 18 ms from template0 on tmpfs).
            statement += sql.SQL(" STRATEGY FILE_COPY")
        self.execute(statement)
        return self.url_for(name)

    def drop_database(self, name: str) -> None:
        """Terminate the database's connections, then drop it (if it exists)."""
        if self._version_num >= 130000:
            self.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            return
        self.terminate_backends(dbname=name)
        self.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))

    def terminate_backends(
        self, dbname: str | None = None, application_name: str | None = None
    ) -> int:
        """pg_terminate_backend every client backend (of `dbname`, with
        `application_name`, when given) but the one asking; wait until they have
        exited; return how many there were."""
        # Not pg_terminate_backend(pid, timeout) (14+): it checks every 100 ms. The
        # backends are our local processes; waiting here for them to exit is 10x faster.
        rows = self.query(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
            " AND (%(db)s::text IS NULL OR datname = %(db)s)"
            " AND (%(app)s::text IS NULL OR application_name = %(app)s)",
            {"db": dbname, "app": application_name},
        )
        left = _wait_gone([int(row[0]) for row in rows], 5.0)
        if left:
            raise TimeoutError(f"backends {left} survived pg_terminate_backend for 5 s")
        return len(rows)


class _PortTaken(Exception):
    """The postmaster could not bind its port (someone took it after we picked it)."""
