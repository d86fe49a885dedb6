"""The local static workflow host: artifacts, deployments and durable runs.

See docs/host.md (operations, statuses, recovery, the file and PostgreSQL
stores) and docs/plans.md (the plan language).
"""

from .api import WorkflowApi
from .server import (
    LocalStaticWorkflowServer,
    build_local_static_workflow_server,
    build_postgres_workflow_server,
)

__all__ = [
    "LocalStaticWorkflowServer",
    "WorkflowApi",
    "build_local_static_workflow_server",
    "build_postgres_workflow_server",
]
