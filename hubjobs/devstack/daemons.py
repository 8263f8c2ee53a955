"""The embedded stack's background processes (its worker, its supervisor): each started
detached from the command that started it, its pid in a file of the state folder, its
output in a log there, found again by that pid (a reused pid whose command line is not
its own is not it), and stopped with SIGTERM, then SIGKILL after a bound."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hubjobs.devstack.embedded import command_line, pid_alive


@dataclass(frozen=True)
class Daemon:
    pid_file: str
    log_file: str
    # A word of its command line, which a process reusing its pid would not have.
    marker: str

    def running(self, home: Path) -> int | None:
        """Its pid, if it runs."""
        path = home / self.pid_file
        if not path.exists():
            return None
        pid = int(path.read_text().strip() or 0)
        if not pid or not pid_alive(pid):
            return None
        command = command_line(pid, limit=1000) or ""
        return pid if self.marker in command else None

    def start(
        self, home: Path, command: Sequence[str], env: Mapping[str, str] | None = None
    ) -> int:
        """Starts ``command`` unless it runs already; returns its pid. It inherits this
        process's environment (and ``env``), so it reads the same settings."""
        pid = self.running(home)
        if pid is not None:
            return pid
        home.mkdir(parents=True, exist_ok=True)
        with open(home / self.log_file, "ab") as out:
            process = subprocess.Popen(
                list(command),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=None if env is None else {**os.environ, **env},
                start_new_session=True,  # outlives the command that started it
            )
        (home / self.pid_file).write_text(str(process.pid))
        return process.pid

    def stop(self, home: Path, timeout: float = 30) -> None:
        """SIGTERM, then SIGKILL after ``timeout``."""
        pid = self.running(home)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        (home / self.pid_file).unlink(missing_ok=True)
