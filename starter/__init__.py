"""What other services import to start and follow hubjobs jobs."""

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
