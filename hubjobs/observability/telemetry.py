"""Metrics and traces. Metrics go through the SDK's runtime: one Prometheus endpoint on
the worker serves the SDK's and ours (job durations and outcomes, items, the queue state
refreshed from the read model). Traces link a start, its workflow and activities, and
need the otel extra: without it, settings that ask for them are refused.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.common import MetricMeter
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from hubjobs.db.deadline import deadline
from hubjobs.db.errors import is_outage
from hubjobs.extras import installed, require
from hubjobs.observability.core_logs import core_logging, forwarding_runtime
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import QueueState
from hubjobs.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)
QUEUE_REFRESH_SECONDS = 10.0
_tracing_configured = False


# A job's duration, seconds to hours (jobs run minutes; the SDK's default buckets stop
# at 10 s): the le values of hubjobs_job_duration_seconds.
DURATION_BUCKETS: tuple[float, ...] = (
    1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 86400,
)  # fmt: skip
DURATION_METRIC = "hubjobs_job_duration_seconds"


def metrics_runtime(settings: Settings) -> Runtime:
    """The worker's runtime: the core's log lines forwarded into Python logging, and a
    Prometheus endpoint unless turned off or its port is taken (then none: logged), its
    workers' heartbeats every HUBJOBS_WORKER_HEARTBEAT_SECONDS. No ``service_name`` label
    on every series: the scrape target names the process."""
    if settings.metrics_port:
        metrics = PrometheusConfig(
            bind_address=f"{settings.metrics_host}:{settings.metrics_port}",
            counters_total_suffix=True,
            durations_as_seconds=True,
            histogram_bucket_overrides={DURATION_METRIC: DURATION_BUCKETS},
        )
        try:
            return Runtime(
                telemetry=TelemetryConfig(
                    logging=core_logging(), metrics=metrics, attach_service_name=False
                ),
                worker_heartbeat_interval=timedelta(seconds=settings.worker_heartbeat_seconds),
            )
        except Exception as err:  # the SDK reports a taken port as a generic error
            log.warning("metrics endpoint not started on port %s: %s", settings.metrics_port, err)
    return forwarding_runtime(settings.worker_heartbeat_seconds)


class JobMetrics:
    """hubjobs' own instruments on a meter (the SDK's, or a no-op one)."""

    def __init__(self, meter: MetricMeter) -> None:
        self.duration = meter.create_histogram_float(
            DURATION_METRIC, "Time from a job's start to its end", "s"
        )
        self.finished = meter.create_counter("hubjobs_jobs_finished", "Jobs finished, by outcome")
        self.items = meter.create_counter("hubjobs_items_processed", "Items processed, by outcome")
        self.queue = meter.create_gauge(
            "hubjobs_queue_jobs", "Jobs queued and running now, and failed in the last hour"
        )
        self.oldest = meter.create_gauge_float(
            "hubjobs_queue_oldest_queued_age_seconds", "Age of the oldest queued job", "s"
        )
        # What to alert on: above zero, some job is not moving whatever its status says.
        self.stuck = meter.create_gauge(
            "hubjobs_jobs_stuck", "Unfinished jobs whose workflow tasks keep failing"
        )

    def job_finished(self, kind: str, status: str, seconds: float | None) -> None:
        self.finished.add(1, {"kind": kind, "status": status})
        if seconds is not None:
            self.duration.record(seconds, {"kind": kind, "status": status})

    def items_processed(self, kind: str, outcomes: dict[str, int]) -> None:
        for outcome, count in outcomes.items():
            if count:
                self.items.add(count, {"kind": kind, "outcome": outcome})

    def queue_state(self, state: QueueState) -> None:
        for status in (JobStatus.queued, JobStatus.running, JobStatus.failed):
            self.queue.set(getattr(state, status), {"status": status})
        self.oldest.set(state.oldest_queued_age_seconds or 0.0)
        self.stuck.set(state.stuck)


async def refresh_queue_state(
    engine: AsyncEngine, metrics: JobMetrics, stop: asyncio.Event, *, timeout: float = 5.0
) -> None:
    """Keeps the queue gauges current until ``stop``; an outage is logged once as it
    starts and once as it ends. Each read has ``timeout`` seconds: a database gone silent
    must not hold the worker's shutdown."""
    from hubjobs import job_rows  # the worker's only: SQLAlchemy, not a CLI's

    outage = False
    while not stop.is_set():
        try:
            with deadline(timeout):
                # Ended by COMMIT: the ROLLBACK that ends connect()'s transaction makes
                # psycopg drop the connection's prepared statements, which the next job
                # on it (the pool's warmest) would prepare again.
                async with engine.begin() as conn:
                    metrics.queue_state(await job_rows.queue_state(conn))
            if outage:
                log.info("queue state refresh: database answering again")
                outage = False
        except Exception as err:
            if not is_outage(err):
                log.warning("queue state refresh failed", exc_info=True)
            elif not outage:
                log.warning("queue state refresh: database unavailable (%s)", type(err).__name__)
                outage = True
        try:
            await asyncio.wait_for(stop.wait(), QUEUE_REFRESH_SECONDS)
        except TimeoutError:
            pass


# What a refusal names when tracing is asked for without the otel extra.
TRACING = "tracing (HUBJOBS_TRACING, HUBJOBS_OTLP_ENDPOINT)"


def require_tracing(settings: Settings) -> None:
    """Refuses settings that ask for traces when the otel extra is not installed."""
    if settings.tracing_on:
        require("otel", TRACING)


def setup_tracing(settings: Settings) -> None:
    """With an OTLP endpoint, spans are exported there; without, the tracer is a no-op."""
    global _tracing_configured
    require_tracing(settings)
    if _tracing_configured or not settings.otlp_endpoint or not installed("otel"):
        return
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otlp_endpoint))
    )
    trace.set_tracer_provider(provider)
    _tracing_configured = True


def interceptors(*, tracing: bool = True) -> list[Any]:
    """The client's (and its workers') interceptors: the tracing one when on, imported
    only then (a CLI start would pay for it and SQLAlchemy otherwise)."""
    if not tracing:
        return []
    require("otel", TRACING)
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor()]


@contextmanager
def job_span(name: str, **attributes: str) -> Iterator[None]:
    """A span around a client call, the correlation id in the baggage the tracing
    interceptor carries to the workflow; nothing without the otel extra."""
    if not installed("otel"):
        yield
        return
    from opentelemetry import baggage, context, trace

    ctx = baggage.set_baggage("hubjobs.correlation_id", attributes.get("correlation_id", ""))
    token = context.attach(ctx)
    try:
        tracer = trace.get_tracer("hubjobs")
        with tracer.start_as_current_span(
            name, attributes={f"hubjobs.{k}": v for k, v in attributes.items()}
        ):
            yield
    finally:
        context.detach(token)
