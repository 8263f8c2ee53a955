"""One delivery of a completion webhook: the body signed anew and POSTed once, never
following a redirect; the caller's retries try again on ``DeliveryFailed`` and give up on
``DeliveryRefused``. Every try carries the job's idempotency key: delivery is at least
once. The destination is checked again on what its name resolves to now (the connection
resolves it once more: a network allow-list is the guard for names one does not control)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from hubjobs.errors import HubJobsError
from hubjobs.webhooks.destinations import check_notify_url
from hubjobs.webhooks.signing import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, signature_header

TIMEOUT_SECONDS = 10.0


class DeliveryFailed(HubJobsError):
    """The receiver did not take it (no answer, or not a 2xx): try again later."""

    code = "notify_failed"


class DeliveryRefused(HubJobsError):
    """Trying again changes nothing (a redirect, a destination no longer allowed)."""

    code = "notify_refused"


@dataclass(frozen=True)
class Completion:
    """What the receiver is told of a finished job."""

    job_id: uuid.UUID
    kind: str
    workspace_id: uuid.UUID
    status: str
    result: dict[str, Any] | None = None
    error_code: str | None = None

    def body(self) -> bytes:
        fields = {
            **asdict(self),
            "job_id": str(self.job_id),
            "workspace_id": str(self.workspace_id),
        }
        return json.dumps(fields, separators=(",", ":"), sort_keys=True).encode()


def idempotency_key(job_id: uuid.UUID) -> str:
    """One per job: every try of its delivery carries it."""
    return f"hubjobs-completion-{job_id}"


async def deliver(
    client: httpx.AsyncClient,
    url: str,
    completion: Completion,
    *,
    secret: bytes,
    allowed: Sequence[str],
    now: Callable[[], float] = time.time,
) -> int:
    """POSTs the completion to ``url`` once: the receiver's status (2xx)."""
    try:
        await asyncio.to_thread(check_notify_url, url, allowed)
    except HubJobsError as refused:
        raise DeliveryRefused(refused.message) from None
    body = completion.body()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "hubjobs-webhook/1",
        SIGNATURE_HEADER: signature_header(secret, int(now()), body),
        IDEMPOTENCY_HEADER: idempotency_key(completion.job_id),
    }
    try:
        answer = await client.post(
            url, content=body, headers=headers, follow_redirects=False, timeout=TIMEOUT_SECONDS
        )
    except httpx.HTTPError as err:
        raise DeliveryFailed(f"the receiver did not answer ({type(err).__name__})") from None
    if answer.is_redirect:
        raise DeliveryRefused(f"the receiver redirected ({answer.status_code}); not followed")
    if not answer.is_success:
        raise DeliveryFailed(f"the receiver answered {answer.status_code}")
    return answer.status_code
