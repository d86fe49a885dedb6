"""Bearer-token authentication and the loopback rule.

The server is open only on loopback. Any other bind address needs a token,
read from a file or an environment variable, and every request must present
it as `Authorization: Bearer <token>`; the comparison is constant-time.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from core.errors import InvalidInput, Problem

__all__ = [
    "MIN_TOKEN_LENGTH",
    "InsecureBind",
    "bearer_matches",
    "check_bind_security",
    "is_loopback_host",
    "load_token",
]

MIN_TOKEN_LENGTH: Final = 16
_LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost.", "ip6-localhost"})


class InsecureBind(Exception):
    """The server was asked to listen beyond loopback without a token."""


def is_loopback_host(host: str) -> bool:
    """True only for names and addresses that cannot be reached from another machine.

    Unknown host names count as non-loopback: we cannot know where they resolve."""
    candidate = host.strip().strip("[]").lower()
    if candidate in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(candidate).is_loopback
    except ValueError:
        return False


def check_bind_security(host: str, token: str | None) -> None:
    """Refuse (raise `InsecureBind` with the reason) to serve a non-loopback
    address without a bearer token."""
    if token is None and not is_loopback_host(host):
        raise InsecureBind(
            f"refusing to listen on {host!r} without a bearer token: any machine that can "
            "reach that address could create schedules and start runs. Configure "
            "server.auth.token_file or server.auth.token_env (or --token-file / --token-env), "
            "or listen on 127.0.0.1."
        )


def _validated(token: str, where: str) -> str:
    cleaned = token.strip()
    if len(cleaned) < MIN_TOKEN_LENGTH:
        raise InvalidInput.from_problems(
            "auth token",
            [Problem(field=where, reason=f"token must be at least {MIN_TOKEN_LENGTH} characters")],
        )
    if any(ch.isspace() or not ch.isprintable() for ch in cleaned):
        raise InvalidInput.from_problems(
            "auth token",
            [
                Problem(
                    field=where, reason="token must not contain whitespace or control characters"
                )
            ],
        )
    return cleaned


def load_token(
    *,
    token_file: Path | None = None,
    token_env: str | None = None,
    environ: Mapping[str, str],
    where: str = "server.auth",
) -> str | None:
    """The configured token, or None when neither source is configured.

    A configured source that is missing, unreadable or too short is an error
    (`InvalidInput` naming the setting), never a silent fallback to no auth."""
    if token_file is not None and token_env is not None:
        raise InvalidInput.from_problems(
            "auth settings",
            [Problem(field=where, reason="set token_file or token_env, not both")],
        )
    if token_file is not None:
        try:
            text = token_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidInput.from_problems(
                "auth settings",
                [
                    Problem(
                        field=f"{where}.token_file",
                        reason=f"cannot read {str(token_file)!r}: {exc.strerror or exc}",
                    )
                ],
            ) from None
        return _validated(text, f"{where}.token_file")
    if token_env is not None:
        value = environ.get(token_env)
        if value is None:
            raise InvalidInput.from_problems(
                "auth settings",
                [
                    Problem(
                        field=f"{where}.token_env",
                        reason=f"environment variable {token_env} is not set",
                    )
                ],
            )
        return _validated(value, f"{where}.token_env")
    return None


def bearer_matches(authorization: str | None, token: str) -> bool:
    """Does an `Authorization` header carry exactly this bearer token?

    Compared with `hmac.compare_digest` so timing does not reveal how much of
    a guess was right."""
    if authorization is None:
        return False
    scheme, _, presented = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(presented.strip().encode("utf-8"), token.encode("utf-8"))
