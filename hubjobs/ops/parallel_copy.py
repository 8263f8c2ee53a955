"""One stream of COPY text per table, loaded through several connections at once.

Each stream is cut into chunks of whole rows that go to whichever connection is free, so
one large table is loaded by all of them. Each connection keeps its transaction open for
the caller to commit or roll back; any error stops every connection's COPY.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import psycopg

log = logging.getLogger(__name__)

# Rows go out in chunks of about this size: small enough that a table of a few MB is
# spread over every connection, large enough that handing one over costs nothing.
CHUNK = 1 << 20
# Chunks waiting for a free connection, per connection.
WAITING = 2
_POLL = 0.05


class Stopped(Exception):
    """Another part of the load failed: this one stops without an error of its own."""


Buffer = bytes | memoryview


@dataclass(frozen=True, slots=True)
class Chunk:
    table: str
    pieces: list[Buffer]


def whole_rows(blocks: Iterable[bytes], size: int = CHUNK) -> Iterator[list[Buffer]]:
    """``blocks`` of COPY text regrouped into chunks of ``size`` bytes or more that end
    at a row's end; a chunk is views of the blocks it spans (nothing is copied), and only
    the block that fills it is searched for a newline."""
    pending: list[Buffer] = []
    held = 0
    for block in blocks:
        cut = block.rfind(b"\n") + 1 if held + len(block) >= size else 0
        if not cut:
            pending.append(block)
            held += len(block)
            continue
        view = memoryview(block)
        pending.append(view[:cut])
        yield pending
        pending = [view[cut:]] if cut < len(block) else []
        held = len(block) - cut
    if held:
        yield pending


class ParallelCopy:
    """Loaders, one per connection (each in a transaction the caller ends), fed chunks
    of whole rows from one thread: ``load``."""

    def __init__(self, connections: Sequence[psycopg.Connection]) -> None:
        self.connections = list(connections)
        self.rows: Counter[str] = Counter()
        self._work: queue.Queue[Chunk | None] = queue.Queue(WAITING * len(connections))
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._errors: list[BaseException] = []

    def load(
        self,
        tables: Iterable[tuple[str, Iterator[bytes]]],
        check: Callable[[], None],
        dispatched: Callable[[str, int], None] | None = None,
    ) -> Counter[str]:
        """Loads each (table, blocks) in turn; returns the rows each table received.
        ``check`` runs before each chunk goes out (it raises to stop the load);
        ``dispatched(table, n)`` after the n-th chunk of a table went out."""
        threads = [
            threading.Thread(target=self._loader, args=(conn,), name=f"restore-copy-{i}")
            for i, conn in enumerate(self.connections)
        ]
        for thread in threads:
            thread.start()
        try:
            for table, blocks in tables:
                try:
                    for n, pieces in enumerate(whole_rows(blocks), 1):
                        check()
                        self._put(Chunk(table, pieces))
                        if dispatched is not None:
                            dispatched(table, n)
                finally:
                    close = getattr(blocks, "close", None)
                    if close is not None:
                        close()  # its reading thread, at once
            for _ in threads:
                self._put(None)
        except BaseException:
            self._stop.set()
            raise
        finally:
            for thread in threads:
                thread.join()
        if self._errors:
            raise self._errors[0]
        return self.rows

    def _put(self, item: Chunk | None) -> None:
        while True:
            if self._stop.is_set():
                self._raise_first()
            try:
                self._work.put(item, timeout=_POLL)
                return
            except queue.Full:
                continue

    def _get(self) -> Chunk | None:
        while True:
            if self._stop.is_set():
                raise Stopped
            try:
                return self._work.get(timeout=_POLL)
            except queue.Empty:
                continue

    def _raise_first(self) -> None:
        raise self._errors[0] if self._errors else Stopped

    def _loader(self, conn: psycopg.Connection) -> None:
        """Chunks into COPY statements, one open at a time: a chunk of another table
        ends the COPY at hand. Leaving a COPY by an exception aborts it (CopyFail)."""
        try:
            item = self._get()
            with conn.cursor() as cursor:
                while item is not None:
                    table = item.table
                    with cursor.copy(f"COPY {table} FROM STDIN") as copy:
                        while item is not None and item.table == table:
                            for piece in item.pieces:
                                copy.write(piece)
                            item = self._get()
                    with self._lock:
                        self.rows[table] += cursor.rowcount
        except Stopped:
            pass
        except BaseException as err:
            with self._lock:
                self._errors.append(err)
            self._stop.set()
