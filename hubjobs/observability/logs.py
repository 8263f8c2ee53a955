"""Structured logs: a line written while an activity works on a job carries the job's
ids and attempt (and, with tracing, its span's); with HUBJOBS_LOG_JSON each is one JSON
object. Ids and codes only: never payloads, page text or secrets. Free of the SDK: the
activity interceptor lives in ``activity_logs``."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import traceback
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import PurePath
from typing import Any, TextIO

_fields: ContextVar[dict[str, Any]] = ContextVar("hubjobs_log_fields", default={})  # noqa: B039

CONTEXT_KEYS = ("job_id", "kind", "workspace_id", "correlation_id", "attempt", "activity")
# With tracing on, the ids of the span a line is written in (W3C's hex forms), so that a
# log line and its trace are found from each other.
TRACE_KEYS = ("trace_id", "span_id")


def _typed(value: Any) -> Any:
    """Numbers and booleans stay themselves (``attempt`` is an int in JSON); anything
    else (ids, enums) is its text."""
    return value if isinstance(value, int | float | bool) else str(value)


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Adds fields to every log line written inside (this task and what it awaits)."""
    token = _fields.set(
        {**_fields.get(), **{k: _typed(v) for k, v in fields.items() if v is not None}}
    )
    try:
        yield
    finally:
        _fields.reset(token)


def bind(**fields: Any) -> None:
    """Adds fields for the rest of the current context (an activity's task)."""
    _fields.set({**_fields.get(), **{k: _typed(v) for k, v in fields.items() if v is not None}})


def _trace_ids() -> dict[str, str]:
    """The current span's trace and span ids, none outside a recorded span. Not imported
    for this: a process that never imported OpenTelemetry has no span."""
    trace: Any = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return {}
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


class ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in {**_fields.get(), **_trace_ids()}.items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in (*CONTEXT_KEYS, *TRACE_KEYS):
            if hasattr(record, key):
                line[key] = getattr(record, key)
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        context = " ".join(f"{k}={getattr(record, k)}" for k in CONTEXT_KEYS if hasattr(record, k))
        return f"{text} [{context}]" if context else text


def lean_records() -> None:
    """Log records skip what no format of ours shows: the caller's frame (found by
    walking the stack on every line), the thread and the process (the logging HOWTO's
    "Optimization"). The API writes a line a request; this is part of its CPU."""
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def handler_for(handler: logging.Handler, *, json_lines: bool) -> logging.Handler:
    """``handler`` with the context filter and the format of HUBJOBS_LOG_JSON."""
    lean_records()
    handler.addFilter(ContextFilter())
    handler.setFormatter(
        JsonFormatter()
        if json_lines
        else TextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    )
    return handler


def setup_logging(*, json_lines: bool, level: str = "INFO", stream: TextIO | None = None) -> None:
    handler = handler_for(logging.StreamHandler(stream or sys.stderr), json_lines=json_lines)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The SDK's own activity/workflow loggers add their context in `extra`; ours above.
    logging.getLogger("temporalio").setLevel(max(root.level, logging.INFO))


def bind_job(job: Any) -> None:
    """Adds a job's identity (a JobView, a JobInput or a row alike) to the log context."""
    bind(
        job_id=getattr(job, "job_id", None) or getattr(job, "id", None),
        kind=getattr(job, "kind", None),
        workspace_id=getattr(job, "workspace_id", None),
        correlation_id=getattr(job, "correlation_id", None),
    )


def describe_failure(err: BaseException) -> str:
    """An exception for the log without its message (a database error quotes the
    statement's values): each type of its chain, with its SQLSTATE, and its frames."""
    chain: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen and len(chain) < 5:
        seen.add(id(current))
        kind = type(current)
        orig = getattr(current, "orig", None)
        sqlstate = getattr(current, "sqlstate", None) or getattr(orig, "sqlstate", None)
        name = f"{kind.__module__}.{kind.__qualname__}"
        chain.append(f"{name} (SQLSTATE {sqlstate})" if isinstance(sqlstate, str) else name)
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    frames = traceback.extract_tb(err.__traceback__)[-10:]
    where = " > ".join(f"{PurePath(f.filename).name}:{f.lineno} {f.name}" for f in frames)
    return " <- ".join(chain) + (f" at {where}" if where else "")


def log_failure(
    logger: logging.Logger, what: str, err: BaseException, *, level: int = logging.ERROR
) -> None:
    """Logs ``what`` failed, with ``describe_failure(err)``: ids and codes, no payload."""
    logger.log(level, "%s: %s", what, describe_failure(err))
