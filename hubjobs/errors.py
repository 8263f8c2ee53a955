"""Errors a caller sees: a stable code and a plain message, never a stack trace or SQL.

The detail of what went wrong goes to the log where it happens; these carry only
what a person or another service can act on.
"""

from __future__ import annotations


class HubJobsError(Exception):
    """Base of every error the client raises. ``code`` is stable; ``message`` is plain."""

    code = "internal_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message


class ConfigurationError(HubJobsError):
    code = "not_configured"


class InvalidInput(HubJobsError):
    code = "invalid_input"


class NotFound(HubJobsError):
    code = "not_found"


class Forbidden(HubJobsError):
    code = "forbidden"


class Unavailable(HubJobsError):
    """A server hubjobs depends on (PostgreSQL, Temporal) did not answer."""

    code = "unavailable"


class PortTaken(HubJobsError):
    """A port the embedded stack is recorded on is held by another process. The stack is
    not moved elsewhere: running workers read its addresses once and would be stranded."""

    code = "port_taken"


class JobFailed(HubJobsError):
    code = "job_failed"
