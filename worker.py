"""The hubjobs worker: every registered kind's workflow and activities, found from the
kind registry, and the shared workflows, on one task queue. Run as many as you like; a
dead worker's work goes to another after the heartbeat timeout.
``python worker.py`` or ``hubjobs worker``.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import signal
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.attempt import KindActivities
from activities.completion_delivery import CompletionDeliveryActivities
from activities.deps import Deps
from activities.job_steps import JobStepActivities
from activities.maintenance import MaintenanceActivities
from activities.schedule_firing import ScheduleActivities
from hubjobs.db.engine import async_engine
from hubjobs.db.limits import ConnectOptions, Purpose
from hubjobs.errors import ConfigurationError, InvalidInput
from hubjobs.kinds import REGISTRY, JobKind, load_kinds
from hubjobs.observability.activity_logs import LogContextInterceptor
from hubjobs.observability.logs import setup_logging
from hubjobs.observability.telemetry import (
    JobMetrics,
    metrics_runtime,
    refresh_queue_state,
    setup_tracing,
)
from hubjobs.secret_checks import refuse_weak_secrets
from hubjobs.settings import Settings
from hubjobs.temporal.client import connect
from hubjobs.temporal.deployment import deployment_config, explain_current, take_current
from hubjobs.temporal.maintenance import ensure_maintenance
from hubjobs.temporal.process import exit_within, run_and_exit
from hubjobs.temporal.sandbox import sandbox_runner
from workflows.completion_delivery import CompletionDelivery
from workflows.dispatch import NoEagerDispatch
from workflows.maintenance import MAINTENANCE_WORKFLOWS
from workflows.schedule_firing import ScheduledStartWorkflow
from workflows.versioning import is_declared, unversioned

log = logging.getLogger("hubjobs.worker")

# A pooled connection used this recently is handed out unpinged (a ping is a round trip).
POOL_PING_AFTER_IDLE_SECONDS = 5.0


@dataclass(frozen=True)
class KindImplementation:
    kind: JobKind[Any]
    workflow: type
    activities: type[KindActivities[Any]]


def _declared_in(module_name: str, wanted: Callable[[Any], bool], kind: JobKind[Any]) -> type:
    module = importlib.import_module(module_name)
    found = [obj for obj in vars(module).values() if isinstance(obj, type) and wanted(obj)]
    if len(found) != 1:
        raise ValueError(
            f"{module_name} must declare exactly one implementation of job kind "
            f"{kind.name!r}; found {len(found)}"
        )
    return found[0]


def implementations(kinds: Iterable[JobKind[Any]] = REGISTRY) -> list[KindImplementation]:
    """Each registered kind's workflow and activities, where the kind says they are."""
    found = []
    for kind in kinds:
        workflow = _declared_in(
            kind.workflow_module,
            lambda obj, kind=kind: (
                getattr(obj, "kind", None) is kind  # type: ignore[misc]
                and is_declared(obj)
            ),
            kind,
        )
        activities = _declared_in(
            kind.activities_module,
            lambda obj, kind=kind: (
                issubclass(obj, KindActivities)  # type: ignore[misc]
                and obj.__dict__.get("kind") is kind
            ),
            kind,
        )
        found.append(KindImplementation(kind, workflow, activities))
    return found


# Besides the kinds' own: maintenance, schedule firings and webhook deliveries.
SHARED_WORKFLOWS = (*MAINTENANCE_WORKFLOWS, ScheduledStartWorkflow, CompletionDelivery)


def workflows(*, versioned: bool = True) -> list[type]:
    """Every workflow the worker runs, as declared or as an unversioned worker runs them."""
    declared = [*(k.workflow for k in implementations()), *SHARED_WORKFLOWS]
    return declared if versioned else [unversioned(cls) for cls in declared]


def activity_classes(kinds: Iterable[KindImplementation]) -> list[type[Any]]:
    """Every class whose ``@activity.defn`` methods the worker serves."""
    return [
        *(k.activities for k in kinds),
        JobStepActivities,
        MaintenanceActivities,
        ScheduleActivities,
        CompletionDeliveryActivities,
    ]


def activity_methods(instance: object) -> list[Callable[..., Any]]:
    """The bound ``@activity.defn`` methods of an activities object."""
    return [
        getattr(instance, name)
        for name in dir(type(instance))
        if hasattr(getattr(type(instance), name), "__temporal_activity_definition")
    ]


def build_worker(
    client: Client,
    engine: AsyncEngine,
    settings: Settings,
    *,
    task_queue: str | None = None,
    hooks: Mapping[str, Any] | None = None,
    workflow_classes: Sequence[type] | None = None,
) -> Worker:
    """``hooks`` reach activities through their dependencies (tests' ``before_write``);
    ``workflow_classes`` replaces ``workflows()`` (a test's build of its own)."""
    load_kinds(settings.kind_modules)
    deps = Deps(
        engine=engine,
        settings=settings,
        metrics=metrics_of(client),
        client=client,
        hooks=dict(hooks or {}),
    )
    kinds = implementations()
    activities: list[Callable[..., Any]] = []
    for cls in activity_classes(kinds):
        activities += activity_methods(cls(deps))
    versioning = deployment_config(settings)
    return Worker(
        client,
        task_queue=task_queue or settings.task_queue,
        # Versioned, its identity names its build (task-started events carry it).
        deployment_config=versioning,
        identity=(
            f"{client.identity} {settings.deployment_name}:{settings.build_id}"
            if versioning is not None
            else None
        ),
        workflows=list(workflow_classes or workflows(versioned=versioning is not None)),
        activities=activities,
        workflow_runner=sandbox_runner(),
        max_concurrent_activities=settings.max_concurrent_activities,
        max_concurrent_workflow_tasks=settings.max_concurrent_workflow_tasks,
        sticky_queue_schedule_to_start_timeout=timedelta(
            seconds=settings.sticky_queue_timeout_seconds
        ),
        # Heartbeats reach the server within a second, whatever the heartbeat timeout.
        max_heartbeat_throttle_interval=timedelta(seconds=1),
        default_heartbeat_throttle_interval=timedelta(seconds=1),
        # SIGTERM: attempts hand over at their next step; this bounds the wait.
        graceful_shutdown_timeout=timedelta(seconds=GRACEFUL_SHUTDOWN_SECONDS),
        # The next attempt after a handover is never dispatched eagerly to this worker.
        interceptors=[LogContextInterceptor(), NoEagerDispatch()],
    )


# SIGTERM: attempts get this long to hand over; the process exits within the bound
# whatever holds it.
GRACEFUL_SHUTDOWN_SECONDS = 10
STOP_BOUND_SECONDS = 13


async def announce_version(client: Client, settings: Settings) -> str | None:
    """Makes the build current as HUBJOBS_DEPLOYMENT_SET_CURRENT says, logs it, and returns
    the current build id (None when versioning is off or unknown)."""
    if not settings.worker_versioning:
        return None
    try:
        current = await take_current(client, settings)
    except (TimeoutError, RPCError) as err:
        log.warning("worker versioning: %s", err)
        return None
    line = explain_current(settings, current)
    if current == settings.build_id:
        log.info(line)
    else:
        log.warning(line)
    return current


def connections_per_attempt(settings: Settings) -> int:
    """The most connections one attempt holds; a bad kind setting stops the worker here."""
    load_kinds(settings.kind_modules)
    for kind in REGISTRY:
        kind.own_settings(settings)
    return max(kind.connections_per_attempt(settings) for kind in REGISTRY)


def metrics_of(client: Client) -> JobMetrics:
    """Our instruments on the client's runtime: on its endpoint when it serves metrics."""
    runtime = client.service_client.config.runtime or Runtime.default()
    return JobMetrics(runtime.metric_meter)


async def run(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Runs until SIGINT/SIGTERM (or ``stop``), then drains."""
    stop = stop or asyncio.Event()
    refuse_weak_secrets(settings)
    # A connection for each one an attempt holds at every activity slot, plus the local
    # activities' and the queue gauges'.
    pool_size = max(5, settings.max_concurrent_activities * connections_per_attempt(settings) + 2)
    setup_tracing(settings)
    client = await connect(settings, runtime=metrics_runtime(settings))
    engine = async_engine(
        settings.resolved_database_url(),
        pool_size=pool_size,
        options=ConnectOptions.of(settings, Purpose.BATCH, Purpose.LIFECYCLE),
        ping_after_idle=POOL_PING_AFTER_IDLE_SECONDS,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if settings.maintenance:
        await ensure_maintenance(client, settings)
    worker = build_worker(client, engine, settings)
    queue = asyncio.create_task(
        refresh_queue_state(
            engine, metrics_of(client), stop, timeout=settings.db_read_timeout_seconds
        )
    )
    log.info("worker started on task queue %s", worker.task_queue)
    versioning: asyncio.Task[str | None] | None = None
    try:
        async with worker:
            versioning = asyncio.create_task(announce_version(client, settings))
            await stop.wait()
            # Kept until the process ends: the pool's and the refresher's ends count too.
            exit_within(STOP_BOUND_SECONDS, "the worker's shutdown")
        log.info("worker stopped")
    finally:
        # However it ended: an SDK's fatal error must end the process, not leave it
        # waiting on the queue refresher without pollers.
        stop.set()
        if versioning is not None:
            versioning.cancel()
        await queue
        await engine.dispose()


def main() -> None:
    settings = Settings()
    setup_logging(json_lines=settings.log_json, level=settings.log_level)

    def serve() -> None:
        try:
            asyncio.run(run(settings))
        # One line, as `hubjobs worker` says it (a kind's setting that does not parse too).
        except (ConfigurationError, InvalidInput) as error:
            raise SystemExit(f"error: {error.message} [{error.code}]") from None

    run_and_exit(serve)


if __name__ == "__main__":
    main()
