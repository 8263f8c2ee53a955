"""The embedded stack's background processes: each started detached, its pid and log in
the state folder, found again by that pid (a reused pid without its marker is not it),
stopped with SIGTERM, then SIGKILL after a bound."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hubjobs.devstack.embedded import command_line, pid_alive, terminate


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
            terminate(pid, timeout)
        (home / self.pid_file).unlink(missing_ok=True)
