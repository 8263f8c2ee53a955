"""The completion webhook's delivery, one try an activity attempt: the body comes from
the job's row, so every try sends the same, and each is recorded there. A delivery the
row records final is not sent again; the receiver deduplicates the rest on the key."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable
from typing import TypeVar

import httpx
from sqlalchemy.ext.asyncio import AsyncConnection
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.clock import OneClock
from activities.deps import Deps
from activities.outages import with_outage_retry
from hubjobs import job_rows
from hubjobs.readmodel.status import JobStatus, NotifyState
from hubjobs.readmodel.views import JobView
from hubjobs.temporal.messages import CompletionRequest, DeliveryGaveUp, DeliveryReport
from hubjobs.webhooks.delivery import Completion, DeliveryFailed, DeliveryRefused, deliver
from hubjobs.webhooks.policy import WebhooksNotConfigured, signing_secret

log = logging.getLogger(__name__)
T = TypeVar("T")
# A worker that dies mid-delivery is noticed within the heartbeat timeout.
HEARTBEAT_SECONDS = 1.0


async def heartbeating(work: Awaitable[T]) -> T:
    """``work``, heartbeating every second until it is done."""
    task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=HEARTBEAT_SECONDS)
        if done:
            return task.result()
        activity.heartbeat()


def completion_of(job: JobView) -> Completion:
    """What the receiver is told: the result of a success, the error code otherwise."""
    return Completion(
        job_id=job.id,
        kind=job.kind,
        workspace_id=job.workspace_id,
        status=job.status,
        result=job.result if job.status == JobStatus.succeeded else None,
        error_code=job.error_code,
    )


def described(err: DeliveryFailed | DeliveryRefused | WebhooksNotConfigured) -> str:
    """The row's ``notify_last_error``: our code and message, never the receiver's body."""
    return f"{err.code}: {err.message}"


class CompletionDeliveryActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    async def _record(
        self, job_id: uuid.UUID, state: NotifyState, attempt: int, error: str | None = None
    ) -> None:
        async def write(conn: AsyncConnection) -> bool:
            return await job_rows.record_notify(
                conn, job_id, state=state, attempt=attempt, error=error
            )

        await with_outage_retry(self.deps.engine, self.deps.settings, write)

    @activity.defn
    async def deliver_completion(self, request: CompletionRequest) -> DeliveryReport:
        """One signed POST; ``notify_failed`` (retried) when not taken, ``notify_refused``
        (not retried) for a redirect or a destination no longer allowed."""
        attempt = activity.info().attempt
        # Signed on Temporal's clock: a receiver refuses a timestamp minutes off.
        clock = OneClock.temporal()

        async def claim(conn: AsyncConnection) -> JobView | None:
            # Counted before it is sent: every POST a receiver sees, the row counts.
            await job_rows.record_notify(
                conn, request.job_id, state=NotifyState.pending, attempt=attempt
            )
            return await job_rows.get_job(conn, request.job_id)

        job = await with_outage_retry(self.deps.engine, self.deps.settings, claim, transaction=True)
        if job is None or job.notify_url is None or job.notify_state is None:
            # Expired and removed (or never had one): nothing left to tell.
            return DeliveryReport(job_id=request.job_id, state="gone")
        if job.notify_state != NotifyState.pending:
            return DeliveryReport(
                job_id=job.id, state=job.notify_state, attempts=job.notify_attempts
            )
        secret = signing_secret(self.deps.settings)
        try:
            if secret is None:
                raise WebhooksNotConfigured()
            async with httpx.AsyncClient(trust_env=False) as client:
                await heartbeating(
                    deliver(
                        client,
                        job.notify_url,
                        completion_of(job),
                        secret=secret,
                        allowed=self.deps.settings.webhook_allowed_hosts,
                        now=lambda: clock.now().timestamp(),
                    )
                )
        except (DeliveryFailed, WebhooksNotConfigured) as failed:
            # A worker without the secret is a deployment to fix: tried again.
            log.info("completion webhook not taken (try %d): %s", attempt, failed.message)
            await self._record(job.id, NotifyState.pending, attempt, described(failed))
            raise ApplicationError(failed.message, type=DeliveryFailed.code) from None
        except DeliveryRefused as refused:
            log.warning("completion webhook refused: %s", refused.message)
            await self._record(job.id, NotifyState.refused, attempt, described(refused))
            raise ApplicationError(
                refused.message, type=DeliveryRefused.code, non_retryable=True
            ) from None
        await self._record(job.id, NotifyState.delivered, attempt)
        log.info("completion webhook delivered (try %d)", attempt)
        return DeliveryReport(job_id=job.id, state=NotifyState.delivered, attempts=attempt)

    @activity.defn
    async def record_delivery_failed(self, gave_up: DeliveryGaveUp) -> None:
        """The retries ran out (HUBJOBS_WEBHOOK_DEADLINE_HOURS): the delivery is failed."""
        await self._record(gave_up.job_id, NotifyState.failed, 0, gave_up.error)
