"""The HTTP API for services in other languages: the asynchronous request pattern of
FHIR bulk data over the starter client.

    POST   /workspaces/{ws}/jobs/{kind}   202 Accepted, Content-Location: the status URL
    GET    /workspaces/{ws}/jobs/{id}     202 + X-Progress + Retry-After while it runs,
                                          200 + the result (its own content type) when done,
                                          422 + {"error": {code, message}} when it failed,
                                          404 once it is cancelled or gone
    DELETE /workspaces/{ws}/jobs/{id}     202: cancellation signalled (a no-op once finished)
    GET    /workspaces/{ws}/jobs          the workspace's jobs, newest first
    GET    /workspaces/{ws}/jobs/{id}/items        the job's items, keyset-paged (``next``)
    POST   /workspaces/{ws}/jobs/{id}/retry        202: a new job over its failed items
    GET    /workspaces/{ws}/jobs/{id}/files/{name} a finished export's file, streamed NDJSON
    GET    /health                        database and Temporal reachability
    POST   /codec/encode, /codec/decode   Temporal's codec endpoint (with the codec on)

Recurring jobs (each a Temporal Schedule whose every firing is a job):

    POST   /workspaces/{ws}/schedules                   201 + Location: create one
    GET    /workspaces/{ws}/schedules                   the workspace's schedules
    GET    /workspaces/{ws}/schedules/{id}              one, with its next and recent runs
    POST   /workspaces/{ws}/schedules/{id}/pause        200 (and /unpause)
    POST   /workspaces/{ws}/schedules/{id}/trigger      202: fires now (422 during a run)
    DELETE /workspaces/{ws}/schedules/{id}              204: gone from Temporal; jobs stay

Every call but /health carries ``Authorization: Bearer <JWT naming the actor>`` and is
scoped to the workspace in its path. Errors are ``{"error": {"code", "message"}}``
with a stable code; details go to the log. The OpenAPI document is the contract.

What the log gets: one access line a request with the route's template (never the
path as sent, its query or its headers), and for a failure its code, or the error's
type and frames (``describe_failure``): never a payload, a key or a message that could
quote one. A workspace the actor is not an enabled member of answers exactly as one
that does not exist (404 ``workspace_not_found``).

Every request has a budget (HUBJOBS_API_REQUEST_TIMEOUT_SECONDS) to the start of its
answer: past it, 503 ``unavailable`` at once, whatever it waits on. Each call inside has
a shorter deadline of its own (the database's by purpose, Temporal's), which normally
answers first.

The package: the app factory (app.py), one router module per resource (jobs.py,
items.py, schedules.py, health.py, contract.py, codec.py), the health check itself
(health_check.py: no FastAPI, for `hubjobs health`), the callers' identity
(auth.py, tokens.py), the answers' shapes (resources.py), the errors (errors.py) and
the outermost request layer (guard.py)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starter.api.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    # The app on first use: the CLI reads the API's resources without FastAPI.
    if name == "create_app":
        return importlib.import_module("starter.api.app").create_app
    raise AttributeError(f"module 'starter.api' has no attribute {name!r}")
