"""The CLI's side of the warm starter: a call made by the stack's worker when one serves
``<HUBJOBS_HOME>/starts.sock`` for the same settings (``NotServed``: make it here).
Imports nothing a command has not loaded already: no SDK, no SQLAlchemy, no psycopg."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from hubjobs.errors import HubJobsError, Unavailable
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from starter.warm.protocol import (
    CALLS,
    MAX_LINE,
    READ_PATIENCE,
    READS,
    answer_within,
    encode,
    fingerprint,
    line,
    socket_path,
)

# Once a start or a cancel is sent, the worker may have made it: the caller is told so,
# and it is not made a second time here.
UNANSWERED = (
    "the stack's worker did not answer in time; the call may have been made: "
    "look with `hubjobs list` before trying again"
)


class NotServed(Exception):
    """No worker serves the socket, or not for the caller's settings, or not this read
    in time: nothing was done, the caller makes the call itself."""


class Relay:
    """Stands in for a ``WorkspaceJobs``: each of its methods in ``CALLS`` is sent to
    the worker, which makes it on its own ``WorkspaceJobs`` of the same scope."""

    def __init__(self, settings: Settings, workspace_id: object, actor_id: object) -> None:
        self.settings = settings
        self.scope = {"workspace_id": encode(workspace_id), "actor_id": encode(actor_id)}

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name not in CALLS:
            raise AttributeError(name)

        async def send(*args: Any, **kwargs: Any) -> JobView | list[JobView]:
            return await self._send(name, args, kwargs)

        return send

    async def _send(
        self, call: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> JobView | list[JobView]:
        path = socket_path(self.settings)
        if not path.is_socket():
            raise NotServed
        try:
            mine = fingerprint(self.settings)
            reader, writer = await asyncio.open_unix_connection(str(path), limit=MAX_LINE)
        except (HubJobsError, OSError):  # settings calling itself refuses; a dead worker's
            raise NotServed from None
        request = {"call": call, "args": encode(args), "kwargs": encode(kwargs)}
        unanswered = NotServed() if call in READS else Unavailable(UNANSWERED)
        patience = READ_PATIENCE if call in READS else answer_within(self.settings)
        try:
            async with asyncio.timeout(patience):
                writer.write(line({**request, **self.scope, "fingerprint": mine}))
                await writer.drain()
                raw = await reader.readline()
        except (TimeoutError, OSError, ValueError):
            raise unanswered from None
        finally:
            writer.close()
        if not raw:  # the worker ended (killed, stopped) before it answered
            raise unanswered
        return received(json.loads(raw))


def received(answer: dict[str, Any]) -> JobView | list[JobView]:
    """What the caller gets from the worker's answer: the job or jobs it made or read,
    else the error raised (``NotServed``: the worker did nothing)."""
    if "fallback" in answer:
        raise NotServed
    if "error" in answer:
        raise HubJobsError(answer["error"]["message"], code=answer["error"]["code"])
    if "jobs" in answer:
        return [JobView.model_validate(job) for job in answer["jobs"]]
    return JobView.model_validate(answer["job"])
