"""Every pause an activity makes (a backup's throttle, a tagging batch's breath, the
wait out of a database outage, the beat of a long step) goes through ``pause``: it
sleeps in steps shorter than the attempt's heartbeat timeout and beats between them,
so no pause, however long, costs an attempt its lease. A pause that slept whole would
end the attempt in a heartbeat timeout once it outlasted that timeout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from temporalio import activity

# The longest step between two beats. Temporal sends heartbeats at most every 0.8 x the
# heartbeat timeout (the SDK's throttle): a quarter keeps every interval served.
MAX_STEP_SECONDS = 1.0
STEP_SHARE = 0.25


def step_seconds() -> float:
    """The longest sleep between two beats in the current attempt: a quarter of its
    heartbeat timeout, at most a second (outside an activity: a second)."""
    try:
        timeout = activity.info().heartbeat_timeout
    except RuntimeError:  # not in an activity
        timeout = None
    if timeout is None or timeout.total_seconds() <= 0:
        return MAX_STEP_SECONDS
    return min(MAX_STEP_SECONDS, STEP_SHARE * timeout.total_seconds())


async def pause(seconds: float, beat: Callable[[], None], *, step: float | None = None) -> None:
    """Waits ``seconds``, calling ``beat`` at once, then after every step of at most
    ``step`` seconds (default ``step_seconds()``), the last one included."""
    step = step_seconds() if step is None else step
    end = time.monotonic() + max(0.0, seconds)
    beat()
    while (left := end - time.monotonic()) > 0:
        await asyncio.sleep(min(step, left))
        beat()


@asynccontextmanager
async def beating(beat: Callable[[], None], every: float = 1.0) -> AsyncIterator[None]:
    """Beats at least every ``every`` seconds while the body runs: a step that may take
    long in one statement (a snapshot of a million pages) still shows its attempt alive."""

    async def keep_beating() -> None:
        while True:
            await pause(every, beat, step=min(every, step_seconds()))

    task = asyncio.create_task(keep_beating())
    try:
        yield
    finally:
        task.cancel()
