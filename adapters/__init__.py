"""adapters layer of wf-scheduler: the workflow host, transports and tools."""

from .client import App
from .host import build_local_static_workflow_server

__all__ = ["App", "build_local_static_workflow_server"]
