"""Server-Sent Events in tests: the API app served by uvicorn in this process (httpx's
ASGI transport holds a response until it ends, a stream must be read as it comes) and
the events of a response, parsed as an EventSource parses them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.types import ASGIApp


@dataclass
class Event:
    event: str = "message"
    id: str | None = None
    data: str = ""

    @property
    def job(self) -> dict[str, Any]:
        return dict(json.loads(self.data))


@dataclass
class Stream:
    """The events of one response, and how many heartbeat comments came between."""

    response: httpx.Response
    comments: int = 0
    _lines: AsyncIterator[str] | None = field(default=None, repr=False)

    async def comment(self) -> str:
        """The next line, which must be a comment (a heartbeat)."""
        if self._lines is None:
            self._lines = self.response.aiter_lines()
        line = await anext(self._lines)
        while line == "":
            line = await anext(self._lines)
        assert line.startswith(":"), f"not a comment: {line!r}"
        self.comments += 1
        return line

    async def next(self) -> Event | None:
        """The next event; None when the stream has ended."""
        if self._lines is None:
            self._lines = self.response.aiter_lines()
        event = Event()
        seen = False
        async for line in self._lines:
            if line == "":
                if seen:
                    return event
                continue
            if line.startswith(":"):
                self.comments += 1
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            seen = True
            if name == "event":
                event.event = value
            elif name == "id":
                event.id = value
            elif name == "data":
                event.data = value if not event.data else f"{event.data}\n{value}"
        return None


@contextlib.asynccontextmanager
async def serving(app: ASGIApp) -> AsyncIterator[str]:
    """The app (the API, or a test's webhook receiver) on a free loopback port, for as
    long as the block runs: its base URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@contextlib.asynccontextmanager
async def opened(
    client: httpx.AsyncClient, url: str, headers: dict[str, str]
) -> AsyncIterator[Stream]:
    async with client.stream("GET", url, headers=headers) as response:
        yield Stream(response)
