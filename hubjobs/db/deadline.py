"""A deadline on a unit of database work, kept by the client: past it the unit fails at
once as ``DeadlineExceeded`` (an outage, hubjobs.db.errors), whatever the server does.

A hung server answers nothing (``statement_timeout`` needs one that runs, keepalives
miss a peer whose kernel still acknowledges), and cancelling the task makes psycopg wait
on a cancel request. So the deadline shuts the sockets of the unit's connections down:
every wait wakes with an error at once and the pool drops the connection. ``with
deadline(5): …`` bounds what runs inside (a context variable); nested ones keep the earlier.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import socket
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg

from hubjobs.db.errors import DeadlineExceeded

log = logging.getLogger(__name__)
T = TypeVar("T")

_current: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "hubjobs_db_deadline", default=None
)


class Deadline:
    """The moment a unit of work must be done by, and the connections it holds."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.fired = False
        self._connections: set[psycopg.AsyncConnection[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def arm(self) -> None:
        self._timer = asyncio.get_running_loop().call_at(
            asyncio.get_running_loop().time() + max(0.0, self.remaining()), self._fire
        )

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._connections.clear()

    def extend(self, seconds: float) -> None:
        """Moves the deadline to ``seconds`` from now (a long stream that keeps moving,
        such as a backup, is bounded by how long it may stall)."""
        self.at = time.monotonic() + seconds
        if self._timer is not None and not self.fired:
            self._timer.cancel()
            self.arm()

    def watch(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if self.fired:
            _shut(conn)
        else:
            self._connections.add(conn)

    def unwatch(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._connections.discard(conn)

    def _fire(self) -> None:
        self.fired = True
        self._timer = None
        for conn in list(self._connections):
            _shut(conn)


def _shut(conn: psycopg.AsyncConnection[Any]) -> None:
    """Shuts the connection's socket down (a duplicate of it: the connection still owns
    its descriptor and closes it), so that whatever waits on it fails now."""
    if conn.closed:
        return
    try:
        fd = conn.pgconn.socket
        with socket.socket(fileno=socket.dup(fd)) as dup:
            dup.shutdown(socket.SHUT_RDWR)
    except (OSError, psycopg.Error) as err:  # closed meanwhile: nothing left to stop
        log.debug("shutting a connection down: %s", err)


def current() -> Deadline | None:
    """The deadline the running code is under, if any."""
    return _current.get()


def watch(conn: psycopg.AsyncConnection[Any]) -> Deadline | None:
    """Puts ``conn`` under the current deadline (if any) and returns it."""
    bound = _current.get()
    if bound is not None:
        bound.watch(conn)
    return bound


async def within(step: Awaitable[T]) -> T:
    """``step`` within what is left of the current deadline, for waits no socket can cut
    short (connecting, a free slot in a pool): cancelled then, as ``DeadlineExceeded``."""
    bound = _current.get()
    if bound is None:
        return await step
    try:
        async with asyncio.timeout(max(0.0, bound.remaining())):
            return await step
    except TimeoutError:
        raise DeadlineExceeded(bound.seconds) from None


@contextmanager
def deadline(seconds: float | None) -> Iterator[Deadline | None]:
    """Bounds the block: past ``seconds`` its connections are shut down and what fails
    because of it is raised as ``DeadlineExceeded``. None or 0: no bound of its own
    (an outer one still holds)."""
    outer = _current.get()
    if not seconds or seconds <= 0 or (outer is not None and outer.remaining() <= seconds):
        yield outer
        return
    bound = Deadline(seconds)
    bound.arm()
    token = _current.set(bound)
    try:
        yield bound
    except Exception as err:
        if bound.fired and not isinstance(err, DeadlineExceeded):
            raise DeadlineExceeded(seconds) from err
        raise
    finally:
        _current.reset(token)
        bound.disarm()
