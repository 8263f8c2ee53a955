"""Change notifications: every write of a job's status, counters or message sends
``pg_notify(CHANNEL, <job id>)`` from its own statement (delivered at commit).

``JobChanges`` holds ONE listening connection per process and wakes a job's waiters.
A notification sent while it was down is lost, so each (re)connection wakes every
waiter once. It is checked every ``check_seconds``, and closed once no one waits, so
a client never closed keeps no connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterator

import psycopg

log = logging.getLogger(__name__)
CHANNEL = "hubjobs_job_changed"


def notify_column(job_id: str) -> str:
    """A ``RETURNING`` column that notifies the job ``job_id`` names, once a row."""
    return f"(SELECT 1 FROM pg_notify('{CHANNEL}', CAST({job_id} AS text))) AS notified"


class ChangeLog:
    """The job ids notified since last taken, and whether the connection was remade."""

    def __init__(self) -> None:
        self.ids: set[uuid.UUID] = set()
        self.reconnected = False
        self.ready = asyncio.Event()

    def take(self) -> tuple[set[uuid.UUID], bool]:
        taken, reconnected = self.ids, self.reconnected
        self.ids, self.reconnected = set(), False
        self.ready.clear()
        return taken, reconnected


class JobChanges:
    """Wakes the waiters of a job when the read model notifies a change of it."""

    def __init__(self, url: str, *, check_seconds: float = 10, retry_seconds: float = 0.5) -> None:
        self._url = url
        self._check = check_seconds
        self._retry = retry_seconds
        self._waiters: dict[uuid.UUID, set[asyncio.Event]] = {}
        self._logs: set[ChangeLog] = set()
        self._task: asyncio.Task[None] | None = None
        # The listening connection's backend (tests end it to lose notifications) and
        # how many times it has connected.
        self.backend_pid: int | None = None
        self.connections = 0

    @contextlib.contextmanager
    def subscribe(self, job_id: uuid.UUID) -> Iterator[asyncio.Event]:
        """Set at each change of the job and each (re)connection."""
        self._start()
        event = asyncio.Event()
        self._waiters.setdefault(job_id, set()).add(event)
        try:
            yield event
        finally:
            waiting = self._waiters.get(job_id, set())
            waiting.discard(event)
            if not waiting:
                self._waiters.pop(job_id, None)

    def watch_all(self) -> ChangeLog:
        """A log of every change from now on, until ``unwatch_all``."""
        self._start()
        log = ChangeLog()
        self._logs.add(log)
        return log

    def unwatch_all(self, log: ChangeLog) -> None:
        self._logs.discard(log)

    @property
    def connected(self) -> bool:
        """Whether LISTEN is done: a change from now on is seen."""
        return self.backend_pid is not None

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=CHANNEL)

    def _idle(self) -> bool:
        return not self._waiters and not self._logs

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _wake(self, payload: str) -> None:
        try:
            job_id = uuid.UUID(payload)
        except ValueError:
            return
        for event in self._waiters.get(job_id, ()):
            event.set()
        for log in self._logs:
            log.ids.add(job_id)
            log.ready.set()

    def _wake_all(self) -> None:
        for waiting in self._waiters.values():
            for event in waiting:
                event.set()
        for log in self._logs:
            log.reconnected = True
            log.ready.set()

    @property
    def listening(self) -> bool:
        """Whether the listener runs (from the first subscriber to after the last)."""
        return self._task is not None and not self._task.done()

    async def _run(self) -> None:
        while True:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                # The type only: a database error's message may quote values.
                log.warning("change listener lost its connection: %s", type(err).__name__)
            self.backend_pid = None
            # No await between this check and the end: a subscriber either came before
            # it (and is served) or finds the task done (and starts another).
            if self._idle():
                return
            await asyncio.sleep(self._retry)

    async def _listen(self) -> None:
        async with await psycopg.AsyncConnection.connect(self._url, autocommit=True) as conn:
            await conn.execute(f"LISTEN {CHANNEL}")
            self.backend_pid = conn.info.backend_pid
            self.connections += 1
            # Whatever changed while nobody listened: every waiter reads once.
            self._wake_all()
            while True:
                async for note in conn.notifies(timeout=self._check):
                    self._wake(note.payload)
                if self._idle():
                    return
                await conn.execute("SELECT 1")
