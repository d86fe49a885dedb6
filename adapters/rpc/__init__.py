"""JSON-RPC 2.0 over HTTP: the `workflow.*` methods served by `wf-rpc-server`."""

from adapters.rpc.app import DEFAULT_MAX_BODY_BYTES, HEALTH_PATH, create_app
from adapters.rpc.auth import InsecureBind, bearer_matches, check_bind_security, is_loopback_host
from adapters.rpc.config import ServerSettings, load_config_file, resolve_settings
from adapters.rpc.methods import METHODS, RpcContext
from adapters.rpc.protocol import DOMAIN_ERROR_CODES, InvalidParams, RpcError, Unauthorized

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
