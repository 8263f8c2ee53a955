"""The HTTP API for services in other languages: FHIR bulk data's asynchronous request
pattern over the starter client; its OpenAPI document is the contract. Every call but the
public ones carries a bearer JWT naming the actor, scoped to the workspace in its path (one
the actor is not an enabled member of is 404 ``workspace_not_found``, as a missing one).
Errors are ``{"error": {"code", "message"}}``; the log gets the route's template and an
error's code or type, never what the caller sent. Each request has a budget
(HUBJOBS_API_REQUEST_TIMEOUT_SECONDS) to the start of its answer, then 503 ``unavailable``."""

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
