"""The API's whole-request budget (issue 19), on the ASGI layer alone: a request that
has not started its answer within the budget is answered 503 ``unavailable`` at once,
and what it waited on is cancelled; an answer started in time (a file streaming) is
not cut; a request within the budget is untouched."""

from __future__ import annotations

import asyncio
import time

import httpx
from starlette.types import Receive, Scope, Send

from starter.api.guard import RequestGuard

BUDGET = 0.3


class Hanging:
    """An app that waits for ever before answering (a call without a deadline)."""

    def __init__(self) -> None:
        self.cancelled = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


async def streaming(scope: Scope, receive: Receive, send: Send) -> None:
    """Starts its answer at once, then takes longer than the budget to finish it."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    for _ in range(3):
        await asyncio.sleep(BUDGET)
        await send({"type": "http.response.body", "body": b"chunk\n", "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def client(app: object) -> httpx.AsyncClient:
    guarded = RequestGuard(app, budget=BUDGET)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=guarded), base_url="http://api")


async def test_a_request_past_its_budget_is_unavailable_at_once() -> None:
    app = Hanging()
    async with client(app) as http:
        started = time.monotonic()
        answer = await http.get("/workspaces/x/jobs")
        took = time.monotonic() - started
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "unavailable"
    assert BUDGET <= took < BUDGET + 1.0, took
    await asyncio.wait_for(app.cancelled.wait(), 1.0)


async def test_an_answer_started_in_time_is_not_cut() -> None:
    async with client(streaming) as http:
        answer = await http.get("/files/x")
    assert answer.status_code == 200 and answer.text == "chunk\n" * 3
