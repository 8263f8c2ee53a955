"""A stream's blocks read ahead on a thread of their own."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

# Blocks read ahead of the consumer.
PREFETCH = 4
_END = object()


def prefetched(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """``blocks`` read (inflated, hashed) on a thread of its own, up to PREFETCH ahead,
    while the caller sends the ones before to the database; its error comes out here."""
    handoff: queue.Queue[object] = queue.Queue(PREFETCH)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for block in blocks:
                if not put(block):
                    return
            put(_END)
        except BaseException as err:
            put(err)
        finally:
            close = getattr(blocks, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=produce, name="restore-read", daemon=True)
    worker.start()
    try:
        while (item := handoff.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, bytes)
            yield item
    finally:
        stop.set()
        worker.join()
