"""The outermost layer of every request (RequestGuard)."""

from __future__ import annotations

import asyncio
import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hubjobs.errors import INTERNAL_ERROR, Unavailable
from hubjobs.observability.logs import log_failure
from starter.api.errors import INTERNAL_MESSAGE, MAX_BODY_BYTES, error

log = logging.getLogger("starter.api")
access_log = logging.getLogger("hubjobs.api.access")


class RequestGuard:
    """Below Starlette's error middleware: a body over MAX_BODY_BYTES is 413 unread; an answer
    not started within ``budget`` seconds is 503 at once (0: no budget); an exception nothing
    handled is a 500 logged without its message (the server would log it with it); one
    access line a request, with the route's template."""

    def __init__(self, app: ASGIApp, budget: float = 0.0) -> None:
        self.app = app
        self.budget = budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            replay = await self._read_body(scope, receive)
            if replay is None:
                too_large = error(413, "payload_too_large", "the request body is too large")
                await too_large(scope, receive, sending)
            else:
                await self._within_budget(scope, replay, sending)
        except Exception as err:
            log_failure(log, "API call failed", err)
            if status == 0:
                await error(500, INTERNAL_ERROR, INTERNAL_MESSAGE)(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None) or "(no route)"
            access_log.info(
                "%s %s %s %.1fms",
                scope.get("method", "-"),
                route,
                status,
                (time.monotonic() - started) * 1000,
            )

    async def _within_budget(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Runs the request; past the budget with no answer started, answers 503 and
        leaves the request to its cancellation (what it sends then goes nowhere). Once
        the answer has started (a file streaming, an event stream) the budget is over."""
        if self.budget <= 0:
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        # One future woken by whichever comes first: the answer starting, the request
        # ending, the budget running out (cheaper per request than asyncio.wait's).
        woken: asyncio.Future[None] = loop.create_future()
        answered = False
        cut = False

        def wake(_: object = None) -> None:
            if not woken.done():
                woken.set_result(None)

        async def sending(message: Message) -> None:
            nonlocal answered
            if cut:
                return
            if not answered and message["type"] == "http.response.start":
                answered = True
                wake()
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receive, sending))
        task.add_done_callback(wake)
        timer = loop.call_later(self.budget, wake)
        try:
            await woken
        except asyncio.CancelledError:  # the server is going away: so is the request
            task.cancel()
            raise
        finally:
            timer.cancel()
        if task.done() or answered:
            await task
            return
        cut = True
        task.cancel()
        task.add_done_callback(_consume_outcome)
        log.warning("API call past its budget of %.1f s: answered 503", self.budget)
        unavailable = error(503, Unavailable.code, "the service did not answer in time; try again")
        await unavailable(scope, receive, send)

    @staticmethod
    async def _read_body(scope: Scope, receive: Receive) -> Receive | None:
        """The body read up front (at most ``MAX_BODY_BYTES``, else None), handed on."""
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    if int(value) > MAX_BODY_BYTES:
                        return None
                except ValueError:
                    pass
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                return None
            chunks.append(chunk)
            more = bool(message.get("more_body", False))
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        return replay


def _consume_outcome(task: asyncio.Future[None]) -> None:
    """A request cut at its budget ends in the background: its outcome is not news."""
    if not task.cancelled() and task.exception() is not None:
        log.info("API call ended after its budget: %s", type(task.exception()).__name__)
