"""One read per change of a job, shared by every follower in the process: a pump per job
reads its row when woken (at most once per ``coalesce_seconds``), and each follower
keeps the newest (a slow one skips states, never the final one). Followers are
authorised before they follow; a failed read ends the feed with its error.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable

from hubjobs.readmodel.changes import JobChanges
from hubjobs.readmodel.views import JobView

# Reads a job by id (None: no such row); errors as the caller's reads raise them.
ReadJob = Callable[[uuid.UUID], Awaitable[JobView | None]]


class _Latest:
    """The newest row handed to one follower; None: the row is gone; an exception: the
    read failed."""

    def __init__(self) -> None:
        self.value: JobView | Exception | None = None
        self.ready = asyncio.Event()

    def put(self, value: JobView | Exception | None) -> None:
        self.value = value
        self.ready.set()

    async def take(self) -> JobView | None:
        await self.ready.wait()
        self.ready.clear()
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


class _Feed:
    def __init__(self) -> None:
        self.followers: set[_Latest] = set()
        self.last: JobView | Exception | None = None
        self.read_once = False
        self.task: asyncio.Task[None] | None = None


class JobFeeds:
    """The process's feeds, one per job followed."""

    def __init__(
        self, changes: JobChanges, read: ReadJob, *, coalesce_seconds: float = 0.2
    ) -> None:
        self._changes = changes
        self._read_job = read
        self._coalesce = coalesce_seconds
        self._feeds: dict[uuid.UUID, _Feed] = {}
        # Rows read by the pumps: what a bench compares with polling.
        self.reads = 0

    @property
    def changes(self) -> JobChanges:
        return self._changes

    async def follow(self, job_id: uuid.UUID) -> AsyncGenerator[JobView]:
        """The job's row now, then each time it changes, until it is final (or gone)."""
        feed = self._feeds.get(job_id)
        if feed is None:
            feed = self._feeds[job_id] = _Feed()
            feed.task = asyncio.get_running_loop().create_task(self._pump(job_id, feed))
        latest = _Latest()
        feed.followers.add(latest)
        if feed.read_once:
            latest.put(feed.last)
        try:
            while True:
                job = await latest.take()
                if job is None:
                    return
                yield job
                if job.is_final:
                    return
        finally:
            feed.followers.discard(latest)
            if not feed.followers and self._feeds.get(job_id) is feed:
                del self._feeds[job_id]
                if feed.task is not None:
                    feed.task.cancel()

    async def _read(self, job_id: uuid.UUID) -> JobView | Exception | None:
        self.reads += 1
        try:
            return await self._read_job(job_id)
        except Exception as err:
            return err

    async def _pump(self, job_id: uuid.UUID, feed: _Feed) -> None:
        loop = asyncio.get_running_loop()
        with self._changes.subscribe(job_id) as changed:
            while True:
                changed.clear()
                last_read = loop.time()
                job = await self._read(job_id)
                if isinstance(job, Exception) and self._feeds.get(job_id) is feed:
                    del self._feeds[job_id]  # the next follower starts afresh
                if not feed.read_once or job != feed.last:
                    feed.read_once, feed.last = True, job
                    for latest in feed.followers:
                        latest.put(job)
                if not isinstance(job, JobView) or job.is_final:
                    return
                await changed.wait()
                # At most one read per ``coalesce_seconds``: a change after a quiet spell
                # is read at once, a burst of them once.
                await asyncio.sleep(max(0.0, last_read + self._coalesce - loop.time()))

    async def close(self) -> None:
        for feed in list(self._feeds.values()):
            if feed.task is not None:
                feed.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await feed.task
        self._feeds.clear()
        await self._changes.close()
