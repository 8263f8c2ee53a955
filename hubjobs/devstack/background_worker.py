"""The embedded stack's worker: ``hubjobs worker`` in a process of its own, started by
``hubjobs demo`` (or ``hubjobs up --worker``) so that the next job does not sit queued
and the metrics URL answers;
its pid in ``<home>/worker.pid``, its output in ``<home>/worker.log``, stopped by
``hubjobs down``. It inherits the environment of the command that started it, so it
reads the same settings."""

from __future__ import annotations

from pathlib import Path

from hubjobs.devstack.daemons import Daemon
from hubjobs.devstack.embedded import venv_binary

PID_FILE = "worker.pid"
LOG_FILE = "worker.log"
WORKER = Daemon(PID_FILE, LOG_FILE, marker="worker")


def running_worker(home: Path) -> int | None:
    """The background worker's pid, if it runs."""
    return WORKER.running(home)


def start_worker(home: Path) -> int:
    """Starts the background worker unless one runs; returns its pid."""
    return WORKER.start(home, [venv_binary("hubjobs"), "worker"])


def stop_worker(home: Path, timeout: float = 30) -> None:
    """SIGTERM (the worker hands its jobs over), then SIGKILL after ``timeout``."""
    WORKER.stop(home, timeout)
