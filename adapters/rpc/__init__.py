"""JSON-RPC 2.0 over HTTP: the `workflow.*` methods served by `wf-rpc-server`.

Modules: `protocol` (envelopes, error codes), `methods` (the registry),
`app` (the Starlette app), `auth`, `config` (server settings), `server`
(uvicorn embedding). Names are re-exported lazily so that the client and the
CLI, which need only `protocol`, do not import the server stack.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DOMAIN_ERROR_CODES",
    "HEALTH_PATH",
    "METHODS",
    "InsecureBind",
    "InvalidParams",
    "RpcContext",
    "RpcError",
    "ServerSettings",
    "Unauthorized",
    "bearer_matches",
    "check_bind_security",
    "create_app",
    "is_loopback_host",
    "load_config_file",
    "resolve_settings",
]

_HOME = {
    "DEFAULT_MAX_BODY_BYTES": "app",
    "HEALTH_PATH": "app",
    "create_app": "app",
    "InsecureBind": "auth",
    "bearer_matches": "auth",
    "check_bind_security": "auth",
    "is_loopback_host": "auth",
    "ServerSettings": "config",
    "load_config_file": "config",
    "resolve_settings": "config",
    "METHODS": "methods",
    "RpcContext": "methods",
    "DOMAIN_ERROR_CODES": "protocol",
    "InvalidParams": "protocol",
    "RpcError": "protocol",
    "Unauthorized": "protocol",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'adapters.rpc' has no attribute {name!r}")
    return getattr(importlib.import_module(f"adapters.rpc.{home}"), name)
