"""What other services import to start and follow hubjobs jobs."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hubjobs.errors import Forbidden, HubJobsError, InvalidInput, NotFound, Unavailable
from hubjobs.readmodel.views import JobView

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    """The client on first use, not with the package: the CLI (``starter.cli``) loads
    psycopg only for the calls it makes itself (starter/warm)."""
    if name in {"HubJobsClient", "WorkspaceJobs"}:
        return getattr(importlib.import_module("starter.client"), name)
    raise AttributeError(f"module 'starter' has no attribute {name!r}")
