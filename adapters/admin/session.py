"""What every admin command shares: its options, its call to the server, and
how a failure ends it (the message once, then the documented exit status).

Every command takes `--url` (env `WF_SCHEDULER_URL`, default
http://127.0.0.1:8765/rpc), `--token` (env `WF_SCHEDULER_TOKEN`) and
`--json`. The exit statuses are declared by the error classes themselves
(`exit_status` beside `code` in `core.errors`, and on the client's
`RpcError`s); `adapters.schedule_admin` lists them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Final, NoReturn

import typer

from adapters.admin.output import print_error
from adapters.client import App, ServerUnreachable, endpoint_url
from adapters.rpc.protocol import RpcError, Unauthorized
from core.errors import ERROR_CLASSES, InvalidInput, NotFound, SchedulingError, StoreUnavailable

__all__ = [
    "ENV_TOKEN",
    "ENV_URL",
    "EXIT_CODES",
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_STORE_UNAVAILABLE",
    "EXIT_USAGE",
    "JsonOption",
    "TokenOption",
    "UrlOption",
    "call_server",
    "exit_code_for",
    "fail",
    "json_object_option",
    "read_json_file",
]

ENV_URL: Final = "WF_SCHEDULER_URL"
ENV_TOKEN: Final = "WF_SCHEDULER_TOKEN"

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
EXIT_STORE_UNAVAILABLE: Final = StoreUnavailable.exit_status

# The error classes that declare an exit status of their own (other errors
# exit EXIT_FAILURE): a view of the classes' `exit_status`, for docs and tests.
_FAILURES: Final[tuple[type[SchedulingError] | type[RpcError], ...]] = (
    *ERROR_CLASSES,
    ServerUnreachable,
    Unauthorized,
)
EXIT_CODES: Final[tuple[tuple[type[Exception], int], ...]] = tuple(
    (cls, cls.exit_status)
    for cls in _FAILURES
    if "exit_status" in vars(cls) and cls.exit_status != EXIT_FAILURE
)


def exit_code_for(exc: BaseException) -> int:
    """The documented exit status for an error."""
    if isinstance(exc, InvalidInput) and exc.data.get("not_found"):
        # A definition naming a deployment that does not exist.
        return NotFound.exit_status
    if isinstance(exc, SchedulingError | RpcError):
        return exc.exit_status
    return EXIT_FAILURE


UrlOption = Annotated[
    str,
    typer.Option(
        "--url",
        envvar=ENV_URL,
        help="Server JSON-RPC endpoint (a bare http://host:port gets /rpc).",
        show_default=True,
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar=ENV_TOKEN,
        help=f"Bearer token (prefer the {ENV_TOKEN} environment variable).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]


def fail(exc: BaseException, as_json: bool) -> NoReturn:
    """Report `exc` once and end the command with its exit status."""
    code = exit_code_for(exc)
    print_error(exc, as_json)
    raise typer.Exit(code)


def call_server(
    url: str,
    token: str | None,
    as_json: bool,
    action: Callable[[App], Awaitable[Any]],
) -> Any:
    """`action`'s result, run against the server at `url`; a domain or
    JSON-RPC error ends the command (`fail`)."""
    try:
        endpoint = endpoint_url(url)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--url") from None

    async def go() -> Any:
        async with App(endpoint, token=token) as app:
            return await action(app)

    try:
        return asyncio.run(go())
    except (SchedulingError, RpcError) as exc:
        fail(exc, as_json)


def read_json_file(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in `path`; anything else is a usage error."""
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(
            f"{path} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    if not isinstance(payload, dict):
        raise typer.BadParameter(f"{path} must hold a JSON object ({what})")
    return payload


def json_object_option(raw: str | None, flag: str) -> dict[str, Any] | None:
    """The JSON object given to `flag`, or None when it was not given."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not valid JSON: {exc.msg}", param_hint=flag) from None
    if not isinstance(value, dict):
        raise typer.BadParameter("must be a JSON object", param_hint=flag)
    return value
