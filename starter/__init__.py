"""What other services import to start and follow hubjobs jobs."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hubjobs.errors import Forbidden, HubJobsError, InvalidInput, NotFound, Unavailable
    from hubjobs.readmodel.views import JobView
    from starter.client import HubJobsClient, WorkspaceJobs

__all__ = [
    "Forbidden",
    "HubJobsClient",
    "HubJobsError",
    "InvalidInput",
    "JobView",
    "NotFound",
    "Unavailable",
    "WorkspaceJobs",
]

# Where each name lives. Loaded on first use, not with the package: the CLI's job
# commands (starter/cli, clients of the HTTP API) run inside it and load none of them.
_HOMES = {
    "Forbidden": "hubjobs.errors",
    "HubJobsError": "hubjobs.errors",
    "InvalidInput": "hubjobs.errors",
    "NotFound": "hubjobs.errors",
    "Unavailable": "hubjobs.errors",
    "JobView": "hubjobs.readmodel.views",
    "HubJobsClient": "starter.client",
    "WorkspaceJobs": "starter.client",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'starter' has no attribute {name!r}")
