"""A completion-webhook receiver for tests: a FastAPI app (served on loopback with
tests.support.sse.serving) that answers each delivery as its plan says, in order (a
status, or a redirect), keeps every request it got, and can hold the first one open
until the test lets it go (a worker killed mid-delivery)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from hubjobs.webhooks.signing import IDEMPOTENCY_HEADER, SIGNATURE_HEADER

# The secret the tests' deployments sign with.
WEBHOOK_SECRET = "webhook-test-secret-" + "y" * 32


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes
    # The status it was answered (None while held, or when its sender went away).
    answered: int | None = None
    # When it arrived, by the receiver's clock (a signature's timestamp is checked
    # against it).
    received_at: float = field(default_factory=time.time)

    @property
    def signature(self) -> str:
        return self.headers[SIGNATURE_HEADER.lower()]

    @property
    def key(self) -> str:
        return self.headers[IDEMPOTENCY_HEADER.lower()]

    @property
    def completion(self) -> dict[str, Any]:
        return dict(json.loads(self.body))


@dataclass
class Receiver:
    # What each delivery is answered, in order (an int status, or "redirect"); once
    # the plan is used up, 204.
    plan: list[int | str] = field(default_factory=list)
    hold_first: bool = False
    received: list[Delivery] = field(default_factory=list)
    # Set when the held first request arrived; the test sets ``release`` to answer it.
    holding: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    # Requests to where a redirect points (never followed: stays empty).
    followed: list[Delivery] = field(default_factory=list)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/hook")
        async def hook(request: Request) -> Response:
            delivery = Delivery(dict(request.headers), await request.body())
            self.received.append(delivery)
            number = len(self.received)
            if number == 1 and self.hold_first:
                self.holding.set()
                await self.release.wait()
                return Response(status_code=500)
            answer = self.plan[number - 1] if number <= len(self.plan) else 204
            if answer == "redirect":
                delivery.answered = 302
                return RedirectResponse("/elsewhere", status_code=302)
            assert isinstance(answer, int)
            delivery.answered = answer
            return Response(status_code=answer)

        @app.post("/elsewhere")
        async def elsewhere(request: Request) -> Response:
            self.followed.append(Delivery(dict(request.headers), await request.body()))
            return Response(status_code=204)

        return app

    def accepted(self) -> list[Delivery]:
        """The deliveries it answered with a 2xx."""
        return [d for d in self.received if d.answered is not None and d.answered < 300]
