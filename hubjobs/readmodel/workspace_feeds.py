"""Every change of a workspace's jobs, for its followers: one pump per process reads the
notified ids of followed workspaces in one statement (at most once per
``coalesce_seconds``), each follower keeping the newest row of each job. A ``reset``
(read the list again) comes first, and after each reconnection or failed read.
Followers are authorised before they follow.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from hubjobs.readmodel.changes import ChangeLog, JobChanges
from hubjobs.readmodel.views import JobView

log = logging.getLogger(__name__)

# Reads the jobs among ``job ids`` that belong to one of ``workspace ids``.
ReadJobs = Callable[[Sequence[uuid.UUID], Sequence[uuid.UUID]], Awaitable[list[JobView]]]


@dataclass
class WorkspaceChange:
    """What a follower is told: read the whole list again (``reset``), and/or these
    jobs changed (the newest row of each)."""

    reset: bool = False
    jobs: list[JobView] = field(default_factory=list)


class _Inbox:
    """What one follower has not taken yet."""

    def __init__(self) -> None:
        self.reset = False
        self.jobs: dict[uuid.UUID, JobView] = {}
        self.ready = asyncio.Event()

    def put_reset(self) -> None:
        self.reset = True
        self.jobs.clear()  # a reset reads them all anyway
        self.ready.set()

    def put(self, job: JobView) -> None:
        self.jobs[job.id] = job
        self.ready.set()

    async def take(self) -> WorkspaceChange:
        await self.ready.wait()
        self.ready.clear()
        change = WorkspaceChange(reset=self.reset, jobs=list(self.jobs.values()))
        self.reset, self.jobs = False, {}
        return change


class WorkspaceFeeds:
    """The process's workspace feeds: one pump for all of them."""

    def __init__(
        self, changes: JobChanges, read: ReadJobs, *, coalesce_seconds: float = 0.25
    ) -> None:
        self._changes = changes
        self._read = read
        self._coalesce = coalesce_seconds
        self._followers: dict[uuid.UUID, set[_Inbox]] = {}
        self._pump: asyncio.Task[None] | None = None
        self._log: ChangeLog | None = None
        # Statements the pump ran: what a bench compares with polling.
        self.reads = 0

    async def follow(self, workspace_id: uuid.UUID) -> AsyncGenerator[WorkspaceChange]:
        """The workspace's changes, until the caller stops: a reset first."""
        if self._pump is None or self._pump.done():
            self._log = self._changes.watch_all()
            self._pump = asyncio.get_running_loop().create_task(self._run(self._log))
        inbox = _Inbox()
        self._followers.setdefault(workspace_id, set()).add(inbox)
        if self._changes.connected:
            inbox.put_reset()  # else the connection, when made, resets everyone
        try:
            while True:
                yield await inbox.take()
        finally:
            following = self._followers.get(workspace_id, set())
            following.discard(inbox)
            if not following:
                self._followers.pop(workspace_id, None)
            if not self._followers:
                self._stop()

    async def _run(self, changes: ChangeLog) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await changes.ready.wait()
            started = loop.time()
            ids, reconnected = changes.take()
            if reconnected:
                self._reset_all()
            workspaces = list(self._followers)
            if ids and workspaces:
                self.reads += 1
                try:
                    jobs = await self._read(workspaces, list(ids))
                except Exception as err:
                    # The type only (a database error's message may quote values).
                    log.warning("workspace feed read failed: %s", type(err).__name__)
                    self._reset_all()
                else:
                    for job in jobs:
                        for inbox in self._followers.get(job.workspace_id, ()):
                            inbox.put(job)
            # At most one read per ``coalesce_seconds``: a burst of changes is one read.
            await asyncio.sleep(max(0.0, started + self._coalesce - loop.time()))

    def _reset_all(self) -> None:
        for following in self._followers.values():
            for inbox in following:
                inbox.put_reset()

    def _stop(self) -> asyncio.Task[None] | None:
        """Stops the pump (its task returned, cancelled); no await: a follower's
        ``finally`` calls it, possibly while being cancelled."""
        pump, changes = self._pump, self._log
        self._pump, self._log = None, None
        if changes is not None:
            self._changes.unwatch_all(changes)
        if pump is not None:
            pump.cancel()
        return pump

    async def close(self) -> None:
        self._followers.clear()
        pump = self._stop()
        if pump is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await pump
