"""Turns at something a process has a fixed number of (its engine's connections, the
starts in flight): at most ``capacity`` holders, the others waiting in line for a
bounded time (then ``NoTurn``, nothing run), urgent waiters first.

SQLAlchemy waits for a pooled connection outside any deadline, and a burst of starts ran
the pool dry: a start that must withdraw its row found no connection and left the row
queued with no workflow. Its withdrawal is urgent here. A unit holding a turn of the same
``Turns`` takes no second one (it would wait on itself).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

# The Turns whose turn the running code holds (by id: one process may have several).
_held: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "hubjobs_turns_held", default=frozenset()
)


class NoTurn(Exception):
    """No turn came within the wait's bound: nothing was run."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no turn within {seconds:g} s")
        self.seconds = seconds


class Turns:
    """``capacity`` turns, handed out first come, first served (urgent ones first)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._free = self.capacity
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._normal: deque[asyncio.Future[None]] = deque()

    @asynccontextmanager
    async def turn(self, timeout: float, *, urgent: bool = False) -> AsyncIterator[None]:
        """Holds a turn for the block, waiting at most ``timeout`` seconds for it."""
        held = _held.get()
        if id(self) in held:
            yield
            return
        await self._take(timeout, urgent)
        token = _held.set(held | {id(self)})
        try:
            yield
        finally:
            _held.reset(token)
            self._give_back()

    async def _take(self, timeout: float, urgent: bool) -> None:
        if self._free > 0 and not self._urgent and not self._normal:
            self._free -= 1
            return
        line = self._urgent if urgent else self._normal
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except BaseException as err:
            if waiter.done() and not waiter.cancelled():
                self._give_back()  # handed a turn just as the wait ended: pass it on
            else:
                waiter.cancel()
                if waiter in line:
                    line.remove(waiter)
            if isinstance(err, TimeoutError):
                raise NoTurn(timeout) from None
            raise

    def _give_back(self) -> None:
        """The turn goes to the first waiter (urgent ones first), else back to the free."""
        for line in (self._urgent, self._normal):
            while line:
                waiter = line.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self._free += 1
