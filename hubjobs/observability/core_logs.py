"""The Temporal SDK core's own log lines, forwarded into Python logging under
``temporalio.core``, so that they leave as every other line does (JSON with
HUBJOBS_LOG_JSON) rather than as coloured text on stderr."""

from __future__ import annotations

import functools
import logging
from datetime import timedelta

from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)

CORE_LOGGER = "temporalio.core"


def core_logging() -> LoggingConfig:
    """Warnings and errors of the core, forwarded (its default level, not its debug)."""
    return LoggingConfig(
        filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
        forwarding=LogForwardingConfig(logger=logging.getLogger(CORE_LOGGER)),
    )


@functools.cache
def forwarding_runtime(worker_heartbeat_seconds: float = 60.0) -> Runtime:
    """The runtime of a client without a metrics endpoint (the CLI, the API): one per
    process, as the SDK's default runtime would be. No ``service_name`` label: the
    process is known by its scrape target. Its workers tell the server their state and
    slots every ``worker_heartbeat_seconds`` (the workers view)."""
    return Runtime(
        telemetry=TelemetryConfig(logging=core_logging(), attach_service_name=False),
        worker_heartbeat_interval=timedelta(seconds=worker_heartbeat_seconds),
    )
