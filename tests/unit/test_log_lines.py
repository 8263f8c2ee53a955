"""A JSON log line (HUBJOBS_LOG_JSON): one object, the context's fields typed (an
attempt is a number, an id its text), and the trace and span ids of the span it is
written in when tracing is on."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider

from hubjobs.observability.logs import log_context, setup_logging


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stream = io.StringIO()
    setup_logging(json_lines=True, stream=stream)
    try:
        yield stream
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def written(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_fields_keep_their_types(lines: io.StringIO) -> None:
    job_id = uuid.uuid4()
    with log_context(job_id=job_id, attempt=3, kind="backup"):
        logging.getLogger("hubjobs.test").info("working")
    (line,) = written(lines)
    assert line["attempt"] == 3 and line["job_id"] == str(job_id) and line["kind"] == "backup"
    assert "trace_id" not in line and "span_id" not in line


def test_a_line_in_a_span_carries_its_ids(lines: io.StringIO) -> None:
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("job") as span:
        logging.getLogger("hubjobs.test").info("traced")
    context = span.get_span_context()
    (line,) = written(lines)
    assert line["trace_id"] == f"{context.trace_id:032x}"
    assert line["span_id"] == f"{context.span_id:016x}"
