"""Groups of statements on several autocommit connections at once: a group's statements
in order on one connection, the groups in the order given (the caller puts the longest
first). The first error stops the groups not yet begun and is raised at the end."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import psycopg


def run_groups(
    connections: Sequence[psycopg.Connection],
    groups: Sequence[Sequence[str]],
    after_first: Callable[[], None] | None = None,
) -> None:
    """Runs ``groups``; ``after_first`` once, after the first statement has run."""
    free: queue.SimpleQueue[psycopg.Connection] = queue.SimpleQueue()
    for conn in connections:
        free.put(conn)
    failed = threading.Event()
    first = threading.Lock()
    pending = [after_first]

    def run(statements: Sequence[str]) -> None:
        if failed.is_set():
            return
        conn = free.get()
        try:
            for statement in statements:
                conn.execute(statement.encode())
                with first:
                    hook, pending[0] = pending[0], None
                if hook is not None:
                    hook()
        except BaseException:
            failed.set()
            raise
        finally:
            free.put(conn)

    with ThreadPoolExecutor(len(connections), thread_name_prefix="restore-build") as pool:
        futures = [pool.submit(run, group) for group in groups if group]
    for future in futures:
        future.result()
