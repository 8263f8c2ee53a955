"""What the CLI and the worker say over the warm starter's socket: one JSON line each
way. The request names a ``WorkspaceJobs`` method (one of ``CALLS``), its arguments, the
workspace and actor, and the fingerprint of the caller's settings; the answer is the
job (``{"job": …}``), the error a caller would have seen (``{"error": {"code",
"message"}}``), or ``{"fallback": why}``: the worker did nothing, the caller calls
itself. A quick read (starter/warm/quick.py) names a command line instead (``quick``:
``status …`` or ``list …``) and is answered with what it prints (``{"stdout": …}``).
The stdlib and the read model's enums only: the CLI imports this at start."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hubjobs.readmodel.status import JobStatus

if TYPE_CHECKING:
    from hubjobs.settings import Settings

SOCKET_FILE = "starts.sock"
# The calls the worker makes for the CLI: the starts and the cancel (which need the SDK
# and SQLAlchemy: half a second of imports), and the one-shot reads of `status` and
# `list` (which need psycopg: a fifth of such a command's time).
READS = frozenset({"get", "list"})
CALLS = READS | {"start_course_tagging", "start_backup", "start_page_export", "retry", "cancel"}
# A read the worker has not answered by then is made by the caller instead (it changes
# nothing: made twice, it is the same read).
READ_PATIENCE = 1.0
# The commands a quick read answers (starter/warm/quick.py).
QUICK = frozenset({"status", "list"})
# A line longer than this is refused (a request is a few hundred bytes; a job a few KiB).
MAX_LINE = 1 << 20
# The CLI's defaults of whom it acts as: they do not change what a call does (the
# request names its workspace and actor).
CALLER_ONLY = frozenset({"workspace", "actor"})


def socket_path(settings: Settings) -> Path:
    return settings.home / SOCKET_FILE


def settings_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables ``Settings`` may read (pydantic-settings matches ``HUBJOBS_`` names
    in any case; it reads no file of its own): two processes with these equal, in the
    same working directory, read the same settings from the same files."""
    return {name: value for name, value in environ.items() if name.lower().startswith("hubjobs_")}


def fingerprint(settings: Settings) -> str:
    """A digest of every setting that could change what a call does (the servers, the
    codec keys, the deadlines, …), so that a worker started with other settings than the
    caller's never acts for it."""
    values = settings.model_dump(exclude=set(CALLER_ONLY))
    values["home"] = str(settings.home.resolve())
    values["resolved"] = [settings.resolved_database_url(), settings.resolved_temporal_address()]
    text = json.dumps(values, sort_keys=True, default=_reveal)
    return hashlib.sha256(text.encode()).hexdigest()


def _reveal(value: object) -> str:
    secret = getattr(value, "get_secret_value", None)
    return str(secret() if callable(secret) else value)


def answer_within(settings: Settings) -> float:
    """How long the CLI waits for the worker's answer: a start's whole budget (connect
    to Temporal, record, start the workflow, take the row back when it did not start)."""
    return (
        settings.temporal_connect_timeout_seconds
        + settings.db_lifecycle_timeout_seconds
        + 2 * settings.temporal_rpc_timeout_seconds
        + settings.db_read_timeout_seconds
    )


def encode(value: Any) -> Any:
    """JSON for an argument: a ``uuid.UUID`` stays one (``{"$uuid": …}``), and a
    ``JobStatus`` one (``{"$status": …}``), so that the method's own checks see what the
    caller passed."""
    if isinstance(value, uuid.UUID):
        return {"$uuid": str(value)}
    if isinstance(value, JobStatus):
        return {"$status": value.value}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        if value.keys() == {"$uuid"}:
            return uuid.UUID(value["$uuid"])
        if value.keys() == {"$status"}:
            return JobStatus(value["$status"])
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"
