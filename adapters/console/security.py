"""Who may read the console and how its forms are protected.

- **Tokenless server** (it listens on loopback only): anyone who can reach
  it reads, as JSON-RPC; a foreign `Host` is refused (HTTP 403), so a page
  that rebinds its DNS name to 127.0.0.1 reads nothing.
- **Server with a token**: every console page, reading included, needs the
  token: a bearer header (scripts), or a session cookie that the login form
  sets after checking the token (constant-time). The cookie holds an HMAC of
  the token, never the token, and is `HttpOnly` and `SameSite=Strict`. A
  server listening beyond loopback always has a token (`check_bind_security`).
- **Write actions** (POST) need, besides the above: an `Origin` (or, without
  one, a `Referer`) naming this very host, and a form field equal to the
  `wf_console_csrf` cookie (double submit; the cookie is random per browser,
  `SameSite=Strict`). A cross-site form can set neither.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Final
from urllib.parse import urlsplit

from starlette.requests import Request

from adapters.rpc.auth import bearer_matches, is_loopback_host

__all__ = [
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "SESSION_COOKIE",
    "ConsoleGuard",
    "host_name",
    "safe_next",
]

SESSION_COOKIE: Final = "wf_console_session"
CSRF_COOKIE: Final = "wf_console_csrf"
CSRF_FIELD: Final = "csrf"


def host_name(host_header: str) -> str:
    """The host of a `Host` header, without its port."""
    if host_header.startswith("["):
        return host_header[1 : host_header.find("]")] if "]" in host_header else host_header
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def safe_next(target: str | None) -> str:
    """A path on this server to go back to after logging in (never another site)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


class ConsoleGuard:
    """The checks of the module docstring for one server (`token` None: no token)."""

    def __init__(self, token: str | None) -> None:
        self.token = token
        self._session = (
            hmac.new(token.encode(), b"wf-console-session-v1", hashlib.sha256).hexdigest()
            if token is not None
            else None
        )

    @property
    def needs_login(self) -> bool:
        return self._session is not None

    def session_value(self) -> str:
        """The session cookie's value (only with a token)."""
        assert self._session is not None
        return self._session

    def token_matches(self, presented: str) -> bool:
        if self.token is None:
            return False
        return hmac.compare_digest(presented.strip().encode(), self.token.encode())

    def foreign_host(self, request: Request) -> bool:
        """A tokenless server answers loopback `Host` names only."""
        if self.token is not None:
            return False
        host = request.headers.get("host")
        return host is not None and not is_loopback_host(host_name(host))

    def signed_in(self, request: Request) -> bool:
        """May this request read? Always without a token; with one, a bearer
        header or the session cookie."""
        if self._session is None:
            return True
        assert self.token is not None
        if bearer_matches(request.headers.get("authorization"), self.token):
            return True
        cookie = request.cookies.get(SESSION_COOKIE, "")
        return hmac.compare_digest(cookie.encode(), self._session.encode())

    def same_origin(self, request: Request) -> bool:
        """Does the request come from a page of this very host?"""
        host = request.headers.get("host")
        source = request.headers.get("origin") or request.headers.get("referer")
        if not host or not source or source == "null":
            return False
        parts = urlsplit(source)
        return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()

    @staticmethod
    def csrf_cookie(request: Request) -> str | None:
        value = request.cookies.get(CSRF_COOKIE)
        return value if value and len(value) >= 32 else None

    @staticmethod
    def new_csrf() -> str:
        return secrets.token_urlsafe(32)

    def csrf_matches(self, request: Request, presented: str | None) -> bool:
        cookie = self.csrf_cookie(request)
        if cookie is None or not presented:
            return False
        return hmac.compare_digest(cookie.encode(), presented.encode())
