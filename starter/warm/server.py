"""The worker's side of the warm starter: makes the CLI's calls sent to
``<HUBJOBS_HOME>/starts.sock`` (its owner's only) with one ``HubJobsClient``, connected
before the first call comes, until the worker stops."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from typing import Any

from sqlalchemy import text

from hubjobs.errors import INTERNAL_ERROR, HubJobsError
from hubjobs.observability.logs import log_failure
from hubjobs.settings import Settings
from starter.client import HubJobsClient
from starter.warm.protocol import CALLS, MAX_LINE, decode, fingerprint, line, socket_path

log = logging.getLogger(__name__)


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    """Serves the socket until ``stop``; a socket it cannot bind (a path too long for
    one) leaves the CLI calling for itself, as without a worker."""
    path = socket_path(settings)
    async with HubJobsClient(settings=settings) as client:
        await _warm(client)
        path.unlink(missing_ok=True)  # left by a worker that was killed
        try:
            server = await asyncio.start_unix_server(
                functools.partial(_answer, client, fingerprint(settings)),
                path=str(path),
                limit=MAX_LINE,
            )
        except OSError as err:
            log.warning("not serving the CLI's starts on %s: %s", path, type(err).__name__)
            return
        # Whoever may connect may start jobs as anyone: the home's owner only (until
        # this, the umask's mode, which leaves others without the write a connect needs).
        path.chmod(0o600)
        log.info("serving the CLI's starts, cancels and reads on %s", path)
        try:
            async with server:
                await stop.wait()
        finally:
            path.unlink(missing_ok=True)


async def _warm(client: HubJobsClient) -> None:
    """Connects to Temporal and the database (the engine, the read pool) now, not in
    the first call."""
    try:
        await client.temporal_client()
        await client.db(lambda conn: conn.execute(text("SELECT 1")))
        await client.read(lambda conn: conn.execute("SELECT 1"))
    except HubJobsError as error:  # the first call tries again, and says why
        log.warning("warm starter not connected yet: %s", error.code)


async def _answer(
    client: HubJobsClient, mine: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        raw = await reader.readline()
        if raw:
            writer.write(line(await respond(client, mine, json.loads(raw))))
            await writer.drain()
    except (ConnectionError, ValueError) as err:  # a caller gone, a line too long or not JSON
        log.info("warm starter call dropped: %s", type(err).__name__)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def respond(client: HubJobsClient, mine: str, request: dict[str, Any]) -> dict[str, Any]:
    """The answer to one request: the job, the error its caller would have seen calling
    itself, or ``fallback`` (nothing done) for a caller with other settings or a call
    this worker does not make."""
    if request.get("fingerprint") != mine:
        return {"fallback": "settings"}
    call = request.get("call")
    if call not in CALLS:
        return {"fallback": "call"}
    try:
        jobs = client.scope(decode(request["workspace_id"]), decode(request["actor_id"]))
        done = await getattr(jobs, call)(*decode(request["args"]), **decode(request["kwargs"]))
    except HubJobsError as error:
        return {"error": {"code": error.code, "message": error.message}}
    except Exception as failure:
        log_failure(log, f"warm starter call {call} failed", failure)
        message = "internal error; the detail is in the worker's log (worker.log in HUBJOBS_HOME)"
        return {"error": {"code": INTERNAL_ERROR, "message": message}}
    if isinstance(done, list):
        return {"jobs": [job.model_dump(mode="json") for job in done]}
    return {"job": done.model_dump(mode="json")}
