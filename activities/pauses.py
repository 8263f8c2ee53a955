"""Every pause an activity makes sleeps in steps shorter than the heartbeat timeout and
beats between them, so no pause, however long, costs an attempt its lease."""

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
    """A quarter of the attempt's heartbeat timeout, at most a second."""
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
    """Beats while the body runs: one long statement still shows its attempt alive."""

    async def keep_beating() -> None:
        while True:
            await pause(every, beat, step=min(every, step_seconds()))

    task = asyncio.create_task(keep_beating())
    try:
        yield
    finally:
        task.cancel()
