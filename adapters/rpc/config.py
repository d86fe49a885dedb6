"""The server's config file and how it combines with command-line flags.

File shape (every section optional, unknown keys rejected):

    {"server": {"store_root": ".wf_store",      (or "store_url": "postgresql://...")
                "store_pool_size": 10,
                "scheduler": {"enabled": true, "poll_interval_s": 1.0, ...},
                "rpc": {"host": "127.0.0.1", "port": 8765, "path": "/rpc",
                        "max_body_bytes": 1048576},
                "auth": {"token_file": "token.txt"} | {"token_env": "WF_RPC_TOKEN"}}}

Relative paths in the file resolve against the file's folder; relative paths
given as flags resolve against the working directory. Flags override the
file. Every problem is reported at once, each named by its dotted path.

The store is a directory (`store_root`, the embedded default) or a
PostgreSQL database (`store_url`), never both: given both at one level (two
flags, or two keys of the file) is an error; a flag (or `WF_STORE_URL`, which
stands in for `--store-url`) overrides what the file says, and an explicit
`--store-root` overrides `WF_STORE_URL`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from adapters.rpc.app import DEFAULT_MAX_BODY_BYTES, HEALTH_PATH
from adapters.rpc.auth import load_token
from core.errors import InvalidInput, Problem
from shell.config import SchedulerServiceConfig, parse_scheduler_config
from shell.pg.database import DEFAULT_POOL_SIZE, is_store_url

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEFAULT_RPC_PATH",
    "ENV_STORE_URL",
    "ConfigFile",
    "ServerSettings",
    "load_config_file",
    "resolve_settings",
]

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8765
DEFAULT_RPC_PATH: Final = "/rpc"
# Stands in for --store-url (as WF_RPC_HOST does for --host).
ENV_STORE_URL: Final = "WF_STORE_URL"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class RpcSection(_Section):
    host: str = Field(default=DEFAULT_HOST, min_length=1)
    port: int = Field(default=DEFAULT_PORT, ge=1, le=65535)
    path: str = Field(default=DEFAULT_RPC_PATH, pattern=r"^/[^\s?#]*$")
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024, le=64 * 1_048_576)


class AuthSection(_Section):
    token_file: str | None = Field(default=None, min_length=1)
    token_env: str | None = Field(default=None, min_length=1)


class ServerSection(_Section):
    store_root: str | None = Field(default=None, min_length=1)
    store_url: str | None = Field(default=None, min_length=1)
    store_pool_size: int = Field(default=DEFAULT_POOL_SIZE, ge=1, le=1000)
    scheduler: dict[str, Any] = Field(default_factory=dict)
    rpc: RpcSection = Field(default_factory=RpcSection)
    auth: AuthSection = Field(default_factory=AuthSection)


class ConfigFile(_Section):
    server: ServerSection = Field(default_factory=ServerSection)


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Everything `wf-rpc-server` needs, resolved and validated. Exactly one
    of `store_root` and `store_url` is set."""

    store_root: Path | None
    host: str
    port: int
    rpc_path: str
    max_body_bytes: int
    scheduler: SchedulerServiceConfig
    token: str | None
    config_path: Path | None = None
    # The PostgreSQL store (credentials included: never log it, show
    # `shell.pg.display_url` of it) and the most connections it may use.
    store_url: str | None = None
    store_pool_size: int = DEFAULT_POOL_SIZE


def _problems(exc: ValidationError) -> list[Problem]:
    return [
        Problem(
            field=".".join(str(part) for part in error["loc"]) or "config",
            reason="unknown setting" if error["type"] == "extra_forbidden" else error["msg"],
        )
        for error in exc.errors()
    ]


def load_config_file(path: Path) -> ConfigFile:
    """Read and validate a config file; `InvalidInput` names every problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput.from_problems(
            "server config",
            [Problem(field="config", reason=f"cannot read {str(path)!r}: {exc.strerror or exc}")],
        ) from None
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput.from_problems(
            "server config",
            [
                Problem(
                    field="config",
                    reason=f"{path.name} is not valid JSON: {exc.msg} "
                    f"(line {exc.lineno}, column {exc.colno})",
                )
            ],
        ) from None
    if not isinstance(payload, dict):
        raise InvalidInput.from_problems(
            "server config", [Problem(field="config", reason="must be a JSON object")]
        )
    problems: list[Problem] = []
    try:
        parsed: ConfigFile | None = ConfigFile.model_validate(payload)
    except ValidationError as exc:
        problems.extend(_problems(exc))
        parsed = None
    # Checked even when the rest is malformed, so one run reports everything.
    server = payload.get("server")
    scheduler = server.get("scheduler") if isinstance(server, dict) else None
    if isinstance(scheduler, dict):
        try:
            parse_scheduler_config(scheduler)
        except InvalidInput as exc:
            problems.extend(exc.problems)
    if parsed is not None:
        if parsed.server.rpc.path == HEALTH_PATH:
            problems.append(Problem(field="server.rpc.path", reason=f"{HEALTH_PATH} is reserved"))
        auth = parsed.server.auth
        if auth.token_file is not None and auth.token_env is not None:
            problems.append(
                Problem(field="server.auth", reason="set token_file or token_env, not both")
            )
    if problems or parsed is None:
        raise InvalidInput.from_problems(f"server config {str(path)!r}", problems)
    return parsed


def _anchored(raw: str | Path, base: Path) -> Path:
    candidate = Path(raw).expanduser()
    return candidate if candidate.is_absolute() else base / candidate


def _store(
    *,
    root_flag: Path | None,
    url_flag: str | None,
    section: ServerSection,
    file_dir: Path,
    cwd: Path,
    problems: list[Problem],
) -> tuple[Path | None, str | None]:
    """The store the flags, or else the file, name (see the module docstring)."""
    if root_flag is not None and url_flag is not None:
        problems.append(
            Problem(
                field="store_url",
                reason="--store-root and --store-url are mutually exclusive: give one",
            )
        )
        return None, None
    if root_flag is not None:
        return _anchored(root_flag, cwd), None
    url = url_flag
    if url is None:
        if section.store_root is not None and section.store_url is not None:
            problems.append(
                Problem(
                    field="server.store_url",
                    reason="server.store_root and server.store_url are mutually exclusive",
                )
            )
            return None, None
        if section.store_root is not None:
            return _anchored(section.store_root, file_dir), None
        url = section.store_url
    if url is None:
        problems.append(
            Problem(
                field="store_root",
                reason="required: pass --store-root (a directory) or --store-url (PostgreSQL),"
                " or set server.store_root or server.store_url",
            )
        )
        return None, None
    if not is_store_url(url):
        problems.append(
            Problem(
                field="store_url",
                reason="must be a PostgreSQL URL: postgresql://user[:password]@host[:port]/dbname",
            )
        )
        return None, None
    return None, url


def _store_root_problems(root: Path) -> list[Problem]:
    """A store root that exists must be a directory, and one that does not
    must be creatable under its nearest existing ancestor: said at once,
    rather than as the OSError of the first mkdir."""
    probe = root
    while not probe.exists() and probe.parent != probe:
        if probe.is_symlink():
            return [Problem(field="store_root", reason=f"{probe} is a dangling symbolic link")]
        probe = probe.parent
    if probe.is_dir():
        return []
    if probe == root:
        reason = f"{root} exists and is not a directory"
    else:
        reason = f"cannot create {root}: {probe} is not a directory"
    return [Problem(field="store_root", reason=reason)]


def resolve_settings(
    *,
    config_path: Path | None = None,
    store_root: Path | None = None,
    store_url: str | None = None,
    store_pool_size: int | None = None,
    host: str | None = None,
    port: int | None = None,
    enable_scheduler: bool = False,
    standby: bool = False,
    token_file: Path | None = None,
    token_env: str | None = None,
    environ: Mapping[str, str],
    cwd: Path,
) -> ServerSettings:
    """Combine the config file (if any) with flags; flags win.

    Raises `InvalidInput` naming each problem (unreadable file, bad values,
    no store or two, unreadable token)."""
    file_cfg = ConfigFile()
    file_dir = cwd
    resolved_config: Path | None = None
    if config_path is not None:
        resolved_config = _anchored(config_path, cwd).resolve()
        file_cfg = load_config_file(resolved_config)
        file_dir = resolved_config.parent
    section = file_cfg.server
    problems: list[Problem] = []

    root, url = _store(
        root_flag=store_root,
        url_flag=store_url,
        section=section,
        file_dir=file_dir,
        cwd=cwd,
        problems=problems,
    )
    if root is not None:
        problems += _store_root_problems(root)
    pool_size = section.store_pool_size if store_pool_size is None else store_pool_size
    if not 1 <= pool_size <= 1000:
        problems.append(Problem(field="store_pool_size", reason="must be between 1 and 1000"))

    scheduler = parse_scheduler_config(section.scheduler)
    if enable_scheduler or standby:
        scheduler = scheduler.model_copy(update={"enabled": True})
    if standby:
        scheduler = scheduler.model_copy(update={"standby": True})
    if scheduler.standby and url is None and root is not None:
        problems.append(
            Problem(
                field="standby",
                reason="a standby scheduler needs a store several servers share:"
                " give --store-url (PostgreSQL), not a store directory",
            )
        )

    final_port = section.rpc.port if port is None else port
    if not 1 <= final_port <= 65535:
        problems.append(Problem(field="port", reason="must be between 1 and 65535"))
    final_host = section.rpc.host if host is None else host.strip()
    if not final_host:
        problems.append(Problem(field="host", reason="must not be empty"))

    token: str | None = None
    try:
        if token_file is not None or token_env is not None:
            token = load_token(
                token_file=_anchored(token_file, cwd) if token_file is not None else None,
                token_env=token_env,
                environ=environ,
                where="flags",
            )
        else:
            auth = section.auth
            token = load_token(
                token_file=_anchored(auth.token_file, file_dir) if auth.token_file else None,
                token_env=auth.token_env,
                environ=environ,
            )
    except InvalidInput as exc:
        problems.extend(exc.problems)

    if problems or (root is None and url is None):
        raise InvalidInput.from_problems("server settings", problems)
    return ServerSettings(
        store_root=root.resolve() if root is not None else None,
        store_url=url,
        store_pool_size=pool_size,
        host=final_host,
        port=final_port,
        rpc_path=section.rpc.path,
        max_body_bytes=section.rpc.max_body_bytes,
        scheduler=scheduler,
        token=token,
        config_path=resolved_config,
    )
