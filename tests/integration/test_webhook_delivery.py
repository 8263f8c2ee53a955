"""One delivery of a completion webhook against a real receiver on loopback (uvicorn in
process): a receiver that fails three times then accepts gets four signed tries with
one idempotency key; a redirect is not followed; a destination not allowed is refused
before anything is sent."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from hubjobs.webhooks.delivery import Completion, DeliveryFailed, DeliveryRefused, deliver
from hubjobs.webhooks.destinations import DEFAULT_ALLOWED
from hubjobs.webhooks.signing import verify
from tests.support.sse import serving

SECRET = b"per-deployment secret"


def receiver(failures: int) -> tuple[FastAPI, list[tuple[dict[str, str], bytes]]]:
    app = FastAPI()
    received: list[tuple[dict[str, str], bytes]] = []

    @app.post("/hook")
    async def hook(request: Request) -> Response:
        received.append((dict(request.headers), await request.body()))
        return Response(status_code=500 if len(received) <= failures else 204)

    @app.post("/moved")
    async def moved() -> Response:
        return RedirectResponse("/hook", status_code=307)

    return app, received


COMPLETION = Completion(
    job_id=uuid.uuid4(),
    kind="backup",
    workspace_id=uuid.uuid4(),
    status="succeeded",
    result={"files": 1},
)


async def test_three_failures_then_one_delivery_with_one_key_and_valid_signatures() -> None:
    app, received = receiver(failures=3)
    async with serving(app) as base, httpx.AsyncClient() as client:
        for _ in range(3):
            with pytest.raises(DeliveryFailed):
                await deliver(
                    client, f"{base}/hook", COMPLETION, secret=SECRET, allowed=DEFAULT_ALLOWED
                )
        status = await deliver(
            client, f"{base}/hook", COMPLETION, secret=SECRET, allowed=DEFAULT_ALLOWED
        )
    assert status == 204 and len(received) == 4
    keys = {headers["idempotency-key"] for headers, _ in received}
    assert keys == {f"hubjobs-completion-{COMPLETION.job_id}"}
    for headers, body in received:
        assert verify(SECRET, headers["x-hubjobs-signature"], body, now=int(time.time()))
        assert body == COMPLETION.body()


async def test_a_redirect_is_not_followed_and_a_host_not_allowed_gets_nothing() -> None:
    app, received = receiver(failures=0)
    async with serving(app) as base, httpx.AsyncClient() as client:
        with pytest.raises(DeliveryRefused):
            await deliver(
                client, f"{base}/moved", COMPLETION, secret=SECRET, allowed=DEFAULT_ALLOWED
            )
        assert received == []
        # Loopback, but the allow-list no longer names it.
        with pytest.raises(DeliveryRefused):
            await deliver(client, f"{base}/hook", COMPLETION, secret=SECRET, allowed=["10.0.0.0/8"])
        with pytest.raises(DeliveryRefused):
            await deliver(
                client,
                "http://169.254.169.254/hook",
                COMPLETION,
                secret=SECRET,
                allowed=["0.0.0.0/0"],
            )
    assert received == []
