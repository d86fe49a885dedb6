"""adapters layer of wf-scheduler: the workflow host, transports and tools."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Resolved on first use: the CLIs import `adapters.*` submodules and must not
# pay for the host and the HTTP client unless a command needs them.
if TYPE_CHECKING:
    from .client import App
    from .host import build_local_static_workflow_server

__all__ = ["App", "build_local_static_workflow_server"]

_HOME = {"App": "adapters.client", "build_local_static_workflow_server": "adapters.host"}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'adapters' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
