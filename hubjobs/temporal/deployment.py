"""Worker Deployment versioning: each worker serves one version of the deployment
(``HUBJOBS_DEPLOYMENT_NAME`` + ``HUBJOBS_BUILD_ID``); new workflows go to the current
version, and a pinned job workflow finishes on the build that started it. An operator
makes a version current, or the worker as it starts, as
``HUBJOBS_DEPLOYMENT_SET_CURRENT`` says (by default only when none is).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from temporalio.api.deployment.v1 import WorkerDeploymentVersion as VersionMessage
from temporalio.api.enums.v1 import VersionDrainageStatus, WorkerDeploymentVersionStatus
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    DescribeWorkerDeploymentVersionRequest,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import WorkerDeploymentConfig

from hubjobs.settings import Settings

log = logging.getLogger(__name__)

# Waiting for the server to register a version a worker just started polling with.
RETRY_SECONDS = 0.5

# A loaded server answers a deployment change CANCELLED or DEADLINE_EXCEEDED (its own
# workflow behind the change ran out of time) or UNAVAILABLE: asked again, it takes it.
TRANSIENT = (
    RPCStatusCode.CANCELLED,
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.RESOURCE_EXHAUSTED,
)
# Refusals of a change that pass once the server has registered the build or the
# deployment is read again.
NOT_YET = (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION, RPCStatusCode.ABORTED)


def worker_version(settings: Settings) -> WorkerDeploymentVersion:
    return WorkerDeploymentVersion(settings.deployment_name, settings.build_id)


def deployment_config(settings: Settings) -> WorkerDeploymentConfig | None:
    """The worker's versioning options; None when versioning is off (an unversioned
    worker, served the workflows no version claims)."""
    if not settings.worker_versioning:
        return None
    return WorkerDeploymentConfig(
        version=worker_version(settings),
        use_worker_versioning=True,
        # No default on purpose: every workflow states its own behaviour (kind_workflow,
        # the maintenance workflows), and the SDK refuses to start a worker with a
        # workflow that states none.
        default_versioning_behavior=VersioningBehavior.UNSPECIFIED,
    )


@dataclass(frozen=True)
class DeploymentState:
    """What the server says of the deployment: its current build (None: no current
    version, new workflows wait for one) and the token that guards a change to it."""

    current_build_id: str | None
    conflict_token: bytes


async def describe(client: Client, settings: Settings) -> DeploymentState | None:
    """None when the deployment does not exist (yet: the server creates it when a
    worker of it first polls)."""
    try:
        described = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(
                namespace=client.namespace, deployment_name=settings.deployment_name
            )
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    current = described.worker_deployment_info.routing_config.current_deployment_version
    return DeploymentState(current.build_id or None, described.conflict_token)


async def set_current(
    client: Client, settings: Settings, build_id: str, conflict_token: bytes = b""
) -> None:
    """Makes ``build_id`` the current version. The server refuses a build none of whose
    workers has polled yet (NOT_FOUND, FAILED_PRECONDITION) and, with a token, a
    deployment changed since it was read."""
    await client.workflow_service.set_worker_deployment_current_version(
        SetWorkerDeploymentCurrentVersionRequest(
            namespace=client.namespace,
            deployment_name=settings.deployment_name,
            build_id=build_id,
            conflict_token=conflict_token,
            identity=client.identity,
        )
    )


async def take_current(client: Client, settings: Settings, *, timeout: float = 60) -> str | None:
    """After the worker started (the server knows only a polled version): makes its build
    current as HUBJOBS_DEPLOYMENT_SET_CURRENT says; returns the current build id then.
    Workers starting at once agree: a change is guarded by the conflict token."""
    if not settings.worker_versioning:
        return None
    policy = settings.deployment_set_current
    ours = settings.build_id
    deadline = time.monotonic() + timeout
    while True:
        try:
            state = await describe(client, settings)
            if state is not None:
                if state.current_build_id == ours or policy == "never":
                    return state.current_build_id
                if state.current_build_id is not None and policy == "if_unset":
                    return state.current_build_id
                await set_current(client, settings, ours, state.conflict_token)
                log.info(
                    "build %s is now the current version of deployment %s",
                    ours,
                    settings.deployment_name,
                )
                return ours
        except RPCError as err:
            if err.status not in TRANSIENT + NOT_YET or time.monotonic() > deadline:
                raise
            log.debug("worker versioning, asking again: %s", err)
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the server did not register build {ours} of deployment "
                f"{settings.deployment_name} within {timeout:.0f} s"
            )
        await asyncio.sleep(RETRY_SECONDS)


def explain_current(settings: Settings, current: str | None) -> str:
    """One line for the log: what this worker's build gets."""
    ours, name = settings.build_id, settings.deployment_name
    if current == ours:
        return f"build {ours} is the current version of deployment {name}: it runs new jobs"
    how = (
        f"temporal worker deployment set-current-version --deployment-name {name} --build-id {ours}"
    )
    if current is None:
        return f"deployment {name} has no current version: new jobs wait until one is set ({how})"
    return (
        f"build {ours} is not current (build {current} is): it runs only the workflows "
        f"pinned to it; to send new jobs here: {how}"
    )


@dataclass(frozen=True)
class VersionState:
    """A version as the server describes it: its status (current, ramping, draining,
    drained, inactive) and, once neither current nor ramping, its drainage."""

    status: str
    drainage: str | None


async def describe_version(client: Client, settings: Settings, build_id: str) -> VersionState:
    described = await client.workflow_service.describe_worker_deployment_version(
        DescribeWorkerDeploymentVersionRequest(
            namespace=client.namespace,
            deployment_version=VersionMessage(
                deployment_name=settings.deployment_name, build_id=build_id
            ),
        )
    )
    info = described.worker_deployment_version_info
    status = WorkerDeploymentVersionStatus.Name(info.status)
    drainage = (
        VersionDrainageStatus.Name(info.drainage_info.status).removeprefix(
            "VERSION_DRAINAGE_STATUS_"
        )
        if info.HasField("drainage_info")
        else None
    )
    return VersionState(status.removeprefix("WORKER_DEPLOYMENT_VERSION_STATUS_"), drainage)


def pinned_query(settings: Settings, build_id: str, *, running: bool = True) -> str:
    """The visibility query for the workflows pinned to a build (still running ones by
    default): what must reach zero before that build's workers stop."""
    query = (
        f"TemporalWorkerDeploymentVersion = '{settings.deployment_name}:{build_id}' "
        "AND TemporalWorkflowVersioningBehavior = 'Pinned'"
    )
    return query + (" AND ExecutionStatus = 'Running'" if running else "")
