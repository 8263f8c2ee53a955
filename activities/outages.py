"""Riding out database outages: each unit of work retried whole with capped backoff while
the database does not answer (or refuses writes), the outage measured on one clock across
attempts and hosts; an attempt or a lifecycle step whose worker cannot reach the database
hands over (``OutOfReach``) so that one that can takes the job on."""

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
    """This worker has waited HUBJOBS_OUTAGE_HANDOVER_SECONDS for a database that does
    not answer it: the attempt gives its slot back (at no cost), so that a worker that
    reaches the database takes the job on. ``since`` is when the outage began, for the
    next attempt to carry on measuring it."""

    def __init__(self, since: datetime) -> None:
        super().__init__("the database does not answer this worker")
        self.since = since


@dataclass
class OutageClock:
    """How long the database has not answered a job: since ``since`` (a time on
    ``clock``: Temporal's in an attempt, carried from attempt to attempt in the work
    request, so that HUBJOBS_MAX_OUTAGE_SECONDS holds across handovers and hosts), and
    how long this attempt has waited for it. With ``hand_over``, a wait longer than
    HUBJOBS_OUTAGE_HANDOVER_SECONDS ends in ``OutOfReach``; with ``gives_up``, an outage
    longer than the maximum ends in ``OutageTooLong`` (a lifecycle write never gives up:
    it must land)."""

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
        """Notes a failure; returns (seconds of outage, seconds this attempt waited for
        a database out of its reach). ``answered``: the server itself ended the call at
        its own timeout: it counts as outage, but the worker reaches the database, and
        handing over would not help."""
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


# The outage clock of the attempt (or lifecycle step) running in this context: every
# unit of database work it runs hands over on it. None outside them (maintenance rides
# outages out in place).
outage_clock: contextvars.ContextVar[OutageClock | None] = contextvars.ContextVar(
    "hubjobs_outage", default=None
)

# A lifecycle step's worker could not reach the database: retried, by Temporal, on any
# worker (see workflows/job_lifecycle.py).
OUT_OF_REACH = "database_out_of_reach"


@contextmanager
def handing_over(reach: Reach | None = None) -> Iterator[None]:
    """A lifecycle step (the workflow's local activity, or the same step handed to any
    worker): its database waits end after HUBJOBS_OUTAGE_HANDOVER_SECONDS in a retryable
    failure, so that the step does not hold the workflow on a worker that is cut off."""
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
    """Runs ``work`` until it gets through a database outage: each failure that is an
    outage (by the error's class, see hubjobs.db.errors; a deadline passed included)
    waits 1 s, 2 s, 4 s… (at most HUBJOBS_OUTAGE_RETRY_MAX_SECONDS, calling ``on_wait``
    every second, e.g. to heartbeat), calls ``before_retry`` (which may raise to stop
    trying) and runs it again whole; past
    HUBJOBS_MAX_OUTAGE_SECONDS of outage (measured across attempts and hosts, on
    Temporal's clock: activities/clock.py) it gives up with OutageTooLong. In an attempt
    (or a lifecycle step), a wait longer than HUBJOBS_OUTAGE_HANDOVER_SECONDS ends in
    OutOfReach: the job goes to a worker that reaches the database. Any other error
    goes straight up."""
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
    """``work`` on a fresh connection, riding out outages: in autocommit (each statement
    its own transaction), or with ``transaction`` in one transaction, committed when
    ``work`` returns. Each try runs under a deadline of ``budget`` seconds (by default
    HUBJOBS_DB_LIFECYCLE_TIMEOUT_SECONDS): past it, it is an outage."""
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
