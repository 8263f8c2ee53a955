"""Connecting to Temporal with the pydantic data converter, as worker and starter both do."""

from __future__ import annotations

import logging

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime
from temporalio.service import RPCError

from hubjobs.errors import Unavailable
from hubjobs.observability.telemetry import interceptors
from hubjobs.settings import Settings

log = logging.getLogger(__name__)


async def connect(settings: Settings, runtime: Runtime | None = None) -> Client:
    """``runtime`` carries the worker's metrics endpoint; traces always go through the
    OpenTelemetry interceptor (a no-op until a tracer provider is set)."""
    address = settings.resolved_temporal_address()
    try:
        return await Client.connect(
            address,
            namespace=settings.temporal_namespace,
            data_converter=pydantic_data_converter,
            interceptors=interceptors(),
            runtime=runtime,
        )
    except (RPCError, RuntimeError, OSError) as err:
        log.warning("cannot reach Temporal at %s: %s", address, err)
        raise Unavailable(f"the Temporal server at {address} does not answer") from None
