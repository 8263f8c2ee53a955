"""The embedded stack's worker: ``hubjobs worker --serve-starts`` in a process of its
own, started by ``hubjobs demo`` (or ``hubjobs up --worker``) so that the next job does
not sit queued, the metrics URL answers and the CLI's starts are quick (starter/warm);
its pid in ``<home>/worker.pid``, its output in ``<home>/worker.log``, stopped by
``hubjobs down``. It inherits the environment of the command that started it, so it
reads the same settings."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from hubjobs.devstack.embedded import command_line, pid_alive, venv_binary

PID_FILE = "worker.pid"
LOG_FILE = "worker.log"


def running_worker(home: Path) -> int | None:
    """The background worker's pid, if it runs (a reused pid that is not a ``hubjobs
    worker`` is not ours)."""
    path = home / PID_FILE
    if not path.exists():
        return None
    pid = int(path.read_text().strip() or 0)
    if not pid or not pid_alive(pid):
        return None
    command = command_line(pid, limit=1000) or ""
    return pid if "worker" in command else None


def start_worker(home: Path) -> int:
    """Starts the background worker unless one runs; returns its pid."""
    pid = running_worker(home)
    if pid is not None:
        return pid
    home.mkdir(parents=True, exist_ok=True)
    with open(home / LOG_FILE, "ab") as out:
        process = subprocess.Popen(
            # It makes the CLI's starts and cancels too (starter/warm): warm, they are quick.
            [venv_binary("hubjobs"), "worker", "--serve-starts"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # outlives the command that started it
        )
    (home / PID_FILE).write_text(str(process.pid))
    return process.pid


def stop_worker(home: Path, timeout: float = 30) -> None:
    """SIGTERM (the worker hands its jobs over), then SIGKILL after ``timeout``."""
    pid = running_worker(home)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
    (home / PID_FILE).unlink(missing_ok=True)
