"""Errors a caller sees: a stable code and a plain message, never a stack trace or SQL.

The detail of what went wrong goes to the log where it happens; these carry only
what a person or another service can act on.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

# The code of whatever failed unexpectedly: the detail is in the log, never here.
INTERNAL_ERROR = "internal_error"
# A HUBJOBS_* variable or profile entry the CLI could not read: its own, never the API's.
INVALID_SETTINGS = "invalid_settings"


class HubJobsError(Exception):
    """Base of every error the client raises. ``code`` is stable; ``message`` is plain."""

    code = INTERNAL_ERROR
    # The job the error is about, when it names one (``idempotency_key_reused``).
    job_id: uuid.UUID | None = None

    def __init__(
        self, message: str, *, code: str | None = None, job_id: uuid.UUID | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if job_id is not None:
            self.job_id = job_id

    def __str__(self) -> str:
        return self.message


class ConfigurationError(HubJobsError):
    code = "not_configured"


class MissingExtra(ConfigurationError):
    """What was asked for needs an optional part of the install (an extra) that this one
    left out: the message names the extra and how to install it."""

    code = "missing_extra"

    def __init__(self, what: str, extra: str) -> None:
        super().__init__(f"{what} needs the {extra} extra: pip install 'hubjobs[{extra}]'")


class NoStack(ConfigurationError):
    """A command needs the embedded stack's record (its addresses, its secrets) and
    found no stack where it looked (hubjobs/home.py says where)."""

    code = "no_stack"


class InvalidInput(HubJobsError):
    code = "invalid_input"


class InvalidPayload(InvalidInput):
    """A payload its kind does not take: refused at the start, or failing a job started
    straight through Temporal."""

    code = "invalid_payload"


class UnknownKind(InvalidInput):
    """No registered kind has this name. The name is the caller's text: not repeated."""

    code = "unknown_kind"

    def __init__(self) -> None:
        super().__init__("unknown job kind")


class NotFound(HubJobsError):
    code = "not_found"


class JobNotFound(NotFound):
    code = "job_not_found"


class Forbidden(HubJobsError):
    code = "forbidden"


class IdempotencyKeyReused(HubJobsError):
    """The idempotency key names a job another request started: nothing is started, and
    ``job_id`` names that job (the API answers 409)."""

    code = "idempotency_key_reused"

    def __init__(self, job_id: uuid.UUID) -> None:
        super().__init__(
            f"the idempotency key names job {job_id}, started by another request: "
            "a new job needs a new key",
            job_id=job_id,
        )


class Unavailable(HubJobsError):
    """A server hubjobs depends on (PostgreSQL, Temporal) did not answer."""

    code = "unavailable"


class DatabaseRefusesWrites(Unavailable):
    """PostgreSQL answers but refuses writes: full (its disk, memory or a configured limit:
    ``database_full``) or read-only (``database_read_only``). Nothing was written."""

    code = "database_full"


class PortTaken(HubJobsError):
    """A port the embedded stack is recorded on is held by another process. The stack is
    not moved elsewhere: running workers read its addresses once and would be stranded."""

    code = "port_taken"


class JobFailed(HubJobsError):
    code = "job_failed"


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
# Error types whose message is the caller's own wording (a validator of ours).
_OWN_WORDING = frozenset({"value_error", "assertion_error"})


def _where(loc: Iterable[Any]) -> str:
    """A field's location as ``a.b.0``, with any key that is not a plain name (an unknown
    key of the caller's choosing) as ``<key>``."""
    parts = []
    for part in loc:
        if isinstance(part, int) or (isinstance(part, str) and _NAME.fullmatch(part)):
            parts.append(str(part))
        else:
            parts.append("<key>")
    return ".".join(parts)


def describe_validation_errors(
    errors: Iterable[Mapping[str, Any]], *, default_loc: str = "payload", limit: int = 5
) -> str:
    """pydantic's validation errors as one plain line from ``loc`` and ``msg``, never the
    input; the piece of it a ``msg`` may quote (its context's ``error``) is cut unless the
    wording is our own validator's."""
    problems = []
    for error in errors:
        msg = str(error.get("msg", "invalid"))
        ctx = error.get("ctx") or {}
        detail = ctx.get("error") if isinstance(ctx, Mapping) else None
        if detail is not None and error.get("type") not in _OWN_WORDING:
            msg = msg.replace(str(detail), "").rstrip(" ,:;") or "invalid"
        problems.append(f"{_where(error.get('loc', ())) or default_loc}: {msg}")
    more = len(problems) - limit
    line = "; ".join(problems[:limit])
    return line + (f"; and {more} more" if more > 0 else "")
