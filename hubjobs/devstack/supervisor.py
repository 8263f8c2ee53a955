"""The embedded stack's supervisor: every second, a dead server of the stack
(PostgreSQL, the dev server, the stack's API) is started again on its recorded address,
as it was, under the stack's lock; failed tries back off up to
HUBJOBS_STACK_RESTART_MAX_SECONDS. ``hubjobs down`` is the way to stop the stack.

A process of its own, not the background worker: the stack runs without a worker, and a
worker's shutdown must not take the servers' care with it.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hubjobs.devstack.background_api import API, recorded_api, restart_api
from hubjobs.devstack.embedded import (
    Daemon,
    EmbeddedPostgres,
    EmbeddedTemporal,
    read_stack,
    stack_lock,
)
from hubjobs.observability.logs import setup_logging
from hubjobs.settings import Settings

log = logging.getLogger("hubjobs.devstack.supervisor")

SUPERVISOR = Daemon("supervisor.pid", "supervisor.log", marker="hubjobs.devstack.supervisor")
# How often each server is looked at.
CHECK_SECONDS = 1.0


def start_supervisor(home: Path) -> int:
    """Starts the stack's supervisor unless one runs; returns its pid."""
    command = [sys.executable, "-m", "hubjobs.devstack.supervisor", "--home", str(home.resolve())]
    return SUPERVISOR.start(home, command)


def stop_supervisor(home: Path) -> None:
    """Stops the supervisor (before the servers: it would start them again). A restart
    it has under way ends first: it stops at its next look."""
    SUPERVISOR.stop(home, timeout=90)


@dataclass
class Watched:
    """One server of the stack: how to tell it runs, how to start it, how its restart goes."""

    name: str
    alive: Callable[[], bool]
    start: Callable[[], None]
    retry_max_seconds: float
    down_since: float | None = None
    tries: int = 0
    next_try: float = 0.0

    def look(self, home: Path) -> None:
        now = time.monotonic()
        if self.alive():
            if self.down_since is not None:
                log.info("%s runs again (started by another command)", self.name)
                self.down_since = None
            return
        if self.down_since is None:
            log.warning("%s is not running: starting it again", self.name)
            self.down_since, self.tries, self.next_try = now, 0, now
        if now < self.next_try:
            return
        self.tries += 1
        try:
            with stack_lock(home):
                if self.alive():
                    return  # `up` started it meanwhile: the next look says so
                self.start()
        except Exception as err:
            wait = min(2.0 ** (self.tries - 1), self.retry_max_seconds)
            log.warning(
                "%s did not start (try %d: %s); trying again in %.0f s",
                self.name,
                self.tries,
                err,
                wait,
            )
            self.next_try = time.monotonic() + wait
            return
        log.info(
            "%s restarted, %.1f s after it was found dead (try %d)",
            self.name,
            time.monotonic() - self.down_since,
            self.tries,
        )
        self.down_since = None


def watched_servers(home: Path, retry_max_seconds: float) -> list[Watched]:
    """PostgreSQL, the Temporal dev server and the stack's API (once ``up`` started
    one: the job commands call it)."""
    postgres = EmbeddedPostgres(home)
    temporal = EmbeddedTemporal(home)

    def start_postgres() -> None:
        recorded = read_stack(home)
        if recorded is None:
            raise RuntimeError("the stack has no record of its ports: run `hubjobs up`")
        postgres.restart_on(recorded.postgres_port)

    return [
        Watched(
            "PostgreSQL",
            lambda: postgres.running_port() is not None,
            start_postgres,
            retry_max_seconds,
        ),
        Watched(
            "Temporal",
            lambda: temporal.running_pid() is not None,
            temporal.restart,
            retry_max_seconds,
        ),
        Watched(
            "API",
            lambda: API.running(home) is not None or not recorded_api(home),
            lambda: restart_api(home),
            retry_max_seconds,
        ),
    ]


def supervise(home: Path, retry_max_seconds: float, stop: threading.Event) -> None:
    servers = watched_servers(home, retry_max_seconds)
    log.info("supervising the stack in %s", home)
    while not stop.is_set():
        for server in servers:
            if stop.is_set():
                break
            server.look(home)
        stop.wait(CHECK_SECONDS)
    log.info("supervisor stopped")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m hubjobs.devstack.supervisor")
    parser.add_argument("--home", type=Path, required=True)
    home = parser.parse_args(argv).home
    settings = Settings()
    setup_logging(json_lines=settings.log_json, level=settings.log_level, stream=sys.stdout)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    supervise(home, settings.stack_restart_max_seconds, stop)


if __name__ == "__main__":
    main()
