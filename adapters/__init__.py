"""adapters layer of wf-scheduler: the workflow host, transports and tools."""

from .host import build_local_static_workflow_server

__all__ = ["build_local_static_workflow_server"]
