"""The CLI's side of the warm starter: a call made by the stack's worker when one serves
``<HUBJOBS_HOME>/starts.sock`` for the same settings, else here. Imports nothing the
CLI has not loaded already: no SDK, no SQLAlchemy."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from hubjobs.errors import HubJobsError, Unavailable
from hubjobs.readmodel.views import JobView
from hubjobs.settings import Settings
from starter.client import WorkspaceJobs
from starter.warm.protocol import (
    CALLS,
    MAX_LINE,
    answer_within,
    encode,
    fingerprint,
    line,
    socket_path,
)

T = TypeVar("T")
# Once the call is sent, the worker may have made it: the caller is told so, and not
# called for a second time here.
UNANSWERED = (
    "the stack's worker did not answer in time; the call may have been made: "
    "look with `hubjobs list` before trying again"
)


class NotServed(Exception):
    """No worker serves the socket, or not for the caller's settings: nothing was done."""


async def call_warm(jobs: WorkspaceJobs, call: Callable[[WorkspaceJobs], Awaitable[T]]) -> T:
    """``call(jobs)`` (one method of ``CALLS``), made by the stack's worker when one
    serves this home, else by ``jobs`` here."""
    relay = Relay(jobs.client.settings, jobs.workspace_id, jobs.actor_id)
    try:
        return await call(cast(WorkspaceJobs, relay))
    except NotServed:
        return await call(jobs)


class Relay:
    """Stands in for a ``WorkspaceJobs``: each of its methods in ``CALLS`` is sent to
    the worker, which makes it on its own ``WorkspaceJobs`` of the same scope."""

    def __init__(self, settings: Settings, workspace_id: object, actor_id: object) -> None:
        self.settings = settings
        self.scope = {"workspace_id": encode(workspace_id), "actor_id": encode(actor_id)}

    def __getattr__(self, name: str) -> Callable[..., Awaitable[JobView]]:
        if name not in CALLS:
            raise AttributeError(name)

        async def send(*args: Any, **kwargs: Any) -> JobView:
            return await self._send(name, args, kwargs)

        return send

    async def _send(self, call: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> JobView:
        path = socket_path(self.settings)
        if not path.is_socket():
            raise NotServed
        try:
            mine = fingerprint(self.settings)
            reader, writer = await asyncio.open_unix_connection(str(path), limit=MAX_LINE)
        except (HubJobsError, OSError):  # settings calling itself refuses; a dead worker's
            raise NotServed from None
        request = {"call": call, "args": encode(args), "kwargs": encode(kwargs)}
        try:
            async with asyncio.timeout(answer_within(self.settings)):
                writer.write(line({**request, **self.scope, "fingerprint": mine}))
                await writer.drain()
                raw = await reader.readline()
        except (TimeoutError, OSError, ValueError):
            raise Unavailable(UNANSWERED) from None
        finally:
            writer.close()
        if not raw:  # the worker ended (killed, stopped) before it answered
            raise Unavailable(UNANSWERED)
        answer = json.loads(raw)
        if "fallback" in answer:
            raise NotServed
        if "error" in answer:
            raise HubJobsError(answer["error"]["message"], code=answer["error"]["code"])
        return JobView.model_validate(answer["job"])
