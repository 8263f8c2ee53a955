"""Riding out database outages: each unit of work retried whole with capped backoff, the
outage measured across attempts and hosts; a worker that cannot reach the database
hands over (``OutOfReach``) to one that can."""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from temporalio.exceptions import ApplicationError

from activities import pauses
from activities.clock import OneClock
from activities.deps import Reach
from hubjobs.db.deadline import deadline
from hubjobs.db.errors import is_outage, server_answered, sqlstate_of
from hubjobs.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")


class OutageTooLong(Exception):
    pass


class OutOfReach(Exception):
    """Waited HUBJOBS_OUTAGE_HANDOVER_SECONDS: the slot goes back at no cost; ``since``
    is when the outage began, for the next attempt to carry on measuring."""

    def __init__(self, since: datetime) -> None:
        super().__init__("the database does not answer this worker")
        self.since = since


@dataclass
class OutageClock:
    """Since when the database has not answered a job (carried across attempts), and how
    long this attempt waited: past the handover wait, ``OutOfReach`` (``hand_over``); past
    the maximum, ``OutageTooLong`` (``gives_up``; lifecycle writes must land)."""

    since: datetime | None = None
    clock: OneClock = field(default_factory=OneClock.here)
    hand_over: bool = True
    gives_up: bool = True
    # The worker's own knowledge of whether it reaches the database.
    reach: Reach | None = None
    _waiting: float | None = None

    def answered(self) -> None:
        self.since = None
        self._waiting = None
        if self.reach is not None:
            self.reach.found()

    def should_hand_over(self, waited: float, bound: float) -> bool:
        """After this attempt's ``waited`` seconds: hand over now? (At once when its
        worker already knows it is cut off.)"""
        if not self.hand_over:
            return False
        return waited >= bound or (self.reach is not None and self.reach.cut_off)

    def failed(self, *, answered: bool = False) -> tuple[float, float]:
        """Returns (outage seconds, seconds waited out of reach). ``answered``: the
        server ended the call itself, so the worker reaches it and handing over won't help."""
        now = time.monotonic()
        if self.since is None:
            self.since = self.clock.now()
        if answered:
            self._waiting = None
            if self.reach is not None:
                self.reach.found()
            return self.clock.seconds_since(self.since), 0.0
        if self._waiting is None:
            self._waiting = now
        return self.clock.seconds_since(self.since), now - self._waiting


# The running attempt's (or lifecycle step's) outage clock; None outside them.
outage_clock: contextvars.ContextVar[OutageClock | None] = contextvars.ContextVar(
    "hubjobs_outage", default=None
)

# A lifecycle step out of the database's reach: retried on any worker.
OUT_OF_REACH = "database_out_of_reach"


@contextmanager
def handing_over(reach: Reach | None = None) -> Iterator[None]:
    """A lifecycle step: its database waits end after the handover wait in a retryable
    failure, so it does not hold the workflow on a cut-off worker."""
    token = outage_clock.set(OutageClock(gives_up=False, reach=reach))
    try:
        yield
    except OutOfReach:
        raise ApplicationError(
            "the database does not answer this worker", type=OUT_OF_REACH
        ) from None
    finally:
        outage_clock.reset(token)


def unobserved() -> None:
    """A wait nobody needs told of (a step without a heartbeat timeout)."""


async def ride_out_outages(
    settings: Settings,
    work: Callable[[], Awaitable[T]],
    *,
    on_wait: Callable[[], None] | None = None,
    before_retry: Callable[[], Awaitable[None]] | None = None,
) -> T:
    """Runs ``work`` again whole after each outage (hubjobs.db.errors) with capped
    backoff, calling ``on_wait`` through the wait and ``before_retry`` (which may raise)
    before each try, as the outage clock allows. Any other error goes straight up."""
    clock = outage_clock.get() or OutageClock(hand_over=False)
    reach = clock.reach
    bound = settings.outage_handover_seconds
    if clock.hand_over and reach is not None and reach.tried_lately(bound):
        # This worker found it cannot reach the database moments ago: over at once.
        log.info("database out of reach from this worker: handing the work over untried")
        clock.failed()
        assert clock.since is not None
        raise OutOfReach(clock.since)
    delay = 1.0
    while True:
        try:
            result = await work()
            if clock.since is not None:
                outage = clock.clock.seconds_since(clock.since)
                log.info("database answers again after %.1f s", outage)
            clock.answered()
            return result
        except Exception as err:
            if not is_outage(err):
                raise
            outage, waited = clock.failed(answered=server_answered(err))
            if clock.gives_up and outage > settings.max_outage_seconds:
                raise OutageTooLong() from err
            if clock.should_hand_over(waited, settings.outage_handover_seconds):
                log.warning(
                    "database unavailable from this worker for %.1f s: handing the work over",
                    waited,
                )
                if clock.reach is not None:
                    clock.reach.lost()
                assert clock.since is not None
                raise OutOfReach(clock.since) from err
            log.warning(
                "database unavailable (%s, SQLSTATE %s); trying again in %.0f s",
                type(err).__name__,
                sqlstate_of(err),
                delay,
            )
            pause = delay
            if clock.hand_over:
                pause = min(pause, max(0.0, settings.outage_handover_seconds - waited))
            await pauses.pause(pause, on_wait or unobserved)
            delay = min(delay * 2, settings.outage_retry_max_seconds)
            if before_retry is not None:
                await before_retry()


async def with_outage_retry(
    engine: AsyncEngine,
    settings: Settings,
    work: Callable[[AsyncConnection], Awaitable[T]],
    *,
    transaction: bool = False,
    on_wait: Callable[[], None] | None = None,
    before_retry: Callable[[], Awaitable[None]] | None = None,
    budget: float | None = None,
) -> T:
    """``work`` on a fresh connection, in autocommit or one transaction, riding out
    outages; each try under ``budget`` seconds (default: the lifecycle's), past which it
    is an outage."""
    seconds = settings.db_lifecycle_timeout_seconds if budget is None else budget

    async def on_connection() -> T:
        with deadline(seconds):
            if transaction:
                async with engine.begin() as conn:
                    return await work(conn)
            async with engine.connect() as conn:
                conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                return await work(conn)

    return await ride_out_outages(
        settings, on_connection, on_wait=on_wait, before_retry=before_retry
    )
