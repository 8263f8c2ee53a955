"""Connecting to Temporal with the one data converter every hubjobs client uses:
pydantic models as JSON, encrypted when ``HUBJOBS_PAYLOAD_CODEC`` is on. Connecting is
bounded, and so is every call the client makes (hubjobs.temporal.deadlines)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from temporalio.client import Client
from temporalio.common import HeaderCodecBehavior
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes
from temporalio.runtime import Runtime
from temporalio.service import RPCError

from hubjobs.errors import Unavailable
from hubjobs.observability.core_logs import forwarding_runtime
from hubjobs.observability.telemetry import interceptors
from hubjobs.settings import Settings
from hubjobs.temporal.codec import AesGcmCodec, CodecKeys
from hubjobs.temporal.deadlines import RpcDeadlines

log = logging.getLogger(__name__)


def data_converter(settings: Settings) -> DataConverter:
    """Pydantic JSON payloads; with the codec on, each encrypted (AES-GCM), and failure
    messages and stack traces moved into an encrypted payload too (a library's error
    message may quote a value). Raises ConfigurationError for missing or bad keys."""
    if not settings.payload_codec:
        return pydantic_data_converter
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=AesGcmCodec(CodecKeys.of(settings)),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


def header_codec(settings: Settings) -> HeaderCodecBehavior:
    """Headers carry the trace context and its baggage (the caller's correlation id):
    encrypted with the rest when the codec is on."""
    return HeaderCodecBehavior.CODEC if settings.payload_codec else HeaderCodecBehavior.NO_CODEC


async def connect(settings: Settings, runtime: Runtime | None = None) -> Client:
    """``runtime`` carries the worker's metrics endpoint; traces go through the
    OpenTelemetry interceptor when tracing is on (HUBJOBS_TRACING, or an OTLP endpoint)."""
    address = settings.resolved_temporal_address()
    converter = data_converter(settings)
    try:
        return await asyncio.wait_for(
            Client.connect(
                address,
                namespace=settings.temporal_namespace,
                data_converter=converter,
                header_codec_behavior=header_codec(settings),
                interceptors=[
                    RpcDeadlines(settings.temporal_rpc_timeout_seconds),
                    *interceptors(tracing=settings.tracing_on),
                ],
                # The core's log lines go through Python logging (core_logs.py) either way.
                runtime=runtime or forwarding_runtime(),
            ),
            settings.temporal_connect_timeout_seconds,
        )
    except (RPCError, RuntimeError, OSError, TimeoutError) as err:
        log.warning("cannot reach Temporal at %s: %s", address, type(err).__name__)
        raise Unavailable(f"the Temporal server at {address} does not answer") from None
