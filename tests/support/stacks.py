"""A stack of a test's own, for tests that kill servers (the session's stack is shared
and must live): ``hubjobs up`` and ``hubjobs down`` as real subprocesses in a fresh
``HUBJOBS_HOME``, listeners that hold ports, and ways to kill each server.

The state folder is a fresh temporary folder outside pytest's ``/tmp/pytest-of-<user>``:
as root, PostgreSQL runs as another user that must traverse the folder's parents, and
every pytest process that starts (another run beside this one) resets that folder to
0700, which made ``pg_ctl start`` fail with "Permission denied" now and then.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hubjobs.devstack import embedded

HUBJOBS = str(Path(sys.executable).parent / "hubjobs")


def stack_env(home: Path, preferred: embedded.StackPorts | None = None) -> dict[str, str]:
    """This process's environment without any ``HUBJOBS_*`` variable, plus the state
    folder and the ports ``hubjobs up`` should prefer (free ones when not given)."""
    preferred = preferred or embedded.StackPorts(0, 0, 0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUBJOBS_")}
    env.update(
        HUBJOBS_HOME=str(home),
        HUBJOBS_POSTGRES_PORT=str(preferred.postgres),
        HUBJOBS_TEMPORAL_PORT=str(preferred.temporal),
        HUBJOBS_TEMPORAL_UI_PORT=str(preferred.ui),
    )
    return env


def hubjobs(
    env: dict[str, str], *args: str, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Runs ``hubjobs <args>`` with ``env`` (in ``cwd``), whatever its exit code."""
    return subprocess.run(
        [HUBJOBS, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def healthy(env: dict[str, str], within: float = 60) -> dict[str, Any]:
    """``hubjobs health --json`` once it says ok: a stack just (re)started on a loaded
    machine may meet its first probe still finishing PostgreSQL's start."""
    deadline = time.monotonic() + within
    while (checked := hubjobs(env, "health", "--json")).returncode != 0:
        assert time.monotonic() < deadline, f"health: {checked.stdout}{checked.stderr}"
        time.sleep(0.2)
    report: dict[str, Any] = json.loads(checked.stdout)
    return report


def timed_json(env: dict[str, str], *args: str, timeout: float = 120) -> tuple[Any, float]:
    """Runs ``hubjobs <args> --json``, which must succeed; returns its JSON and how long
    it took."""
    started = time.monotonic()
    result = hubjobs(env, *args, "--json", timeout=timeout)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, (
        f"hubjobs {' '.join(args)} exited {result.returncode}\n"
        f"stdout: {result.stdout}\nstderr: {result.stderr}\n{log_tails(Path(env['HUBJOBS_HOME']))}"
    )
    return json.loads(result.stdout), elapsed


def log_tails(home: Path, lines: int = 20) -> str:
    parts = []
    for name in ("hubjobs.log", "postgres.log", "temporal.log", "supervisor.log"):
        path = home / name
        if path.exists():
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {name}\n" + "\n".join(tail))
    return "\n".join(parts)


def accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def refuses_soon(port: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while accepts(port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def server_pids(home: Path) -> tuple[int, int]:
    """(postmaster, temporal) pids as the state folder records them."""
    postmaster = int((home / "pgdata" / "postmaster.pid").read_text().splitlines()[0])
    temporal = int((home / "temporal.pid").read_text().strip())
    return postmaster, temporal


def wait_gone(pid: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while embedded.pid_alive(pid):
        assert time.monotonic() < deadline, f"pid {pid} still alive after {timeout:.0f} s"
        time.sleep(0.05)


def kill_postgres(home: Path) -> int:
    """SIGKILLs the postmaster, as a crash would; returns its pid once it is gone."""
    pid = server_pids(home)[0]
    os.kill(pid, signal.SIGKILL)
    wait_gone(pid)
    return pid


def kill_temporal(home: Path) -> int:
    """SIGKILLs the Temporal dev server; returns its pid once it is gone."""
    pid = server_pids(home)[1]
    os.kill(pid, signal.SIGKILL)
    wait_gone(pid)
    return pid


def _listening_socket(port: int = 0) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen()
    return listener


@contextmanager
def held_ports() -> Iterator[embedded.StackPorts]:
    """Three ports held by listeners of this process while the block runs: preferred
    ports that are taken, as another stack on the machine would hold them."""
    with ExitStack() as sockets:
        ports = [int(sockets.enter_context(_listening_socket()).getsockname()[1]) for _ in range(3)]
        yield embedded.StackPorts(*ports)


def _wait_until_free(port: int, timeout: float = 30) -> None:
    """A port a killed server held may take a moment to be free: waits until it binds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_server(("127.0.0.1", port)).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"port {port} still taken"
            time.sleep(0.1)


class ForeignListener:
    """Another program listening on ``port``: a Python process of its own, so the port's
    holder has a pid and a command line other than this one's."""

    # Short, so that its command line is named in full (create_server sets SO_REUSEADDR).
    SCRIPT = (
        "import socket, sys; s = socket.create_server(('127.0.0.1', int(sys.argv[1]))); "
        "print('listening', flush=True); sys.stdin.read()"
    )

    def __init__(self, port: int) -> None:
        self.port = port
        _wait_until_free(port)
        self.process = subprocess.Popen(
            [sys.executable, "-c", self.SCRIPT, str(port), "foreign-listener"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.strip() == "listening", f"the listener on {port} did not start: {line!r}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


@dataclass(frozen=True)
class OwnStack:
    home: Path
    env: dict[str, str]
    info: dict[str, Any]  # the addresses `hubjobs up --json` printed

    @property
    def record(self) -> Path:
        return self.home / "stack.json"

    @property
    def database_url(self) -> str:
        url: str = self.info["database_url"]
        return url

    @property
    def temporal_address(self) -> str:
        address: str = self.info["temporal_address"]
        return address

    def up(self) -> dict[str, Any]:
        """``hubjobs up`` again, which must succeed; returns the addresses it printed."""
        info, took = timed_json(self.env, "up")
        print(f"hubjobs up took {took:.1f} s")
        return addresses(info)


def addresses(printed: dict[str, Any]) -> dict[str, Any]:
    """What ``hubjobs up --json`` printed but its sign-in link, whose code is new each
    time: the stack's addresses, the same for as long as the stack keeps them."""
    return {name: value for name, value in printed.items() if name != "login_url"}


@contextmanager
def own_stack(
    preferred: embedded.StackPorts | None = None,
    extra_env: dict[str, str] | None = None,
    *,
    pgdata: Path | None = None,
) -> Iterator[OwnStack]:
    """A stack brought up by ``hubjobs up`` in a fresh state folder, preferring
    ``preferred`` (free ports when not given), with ``extra_env`` (``HUBJOBS_*``
    settings) in every command's environment; stopped and removed afterwards. With
    ``pgdata`` (an empty folder: a small disk of the test's), PostgreSQL's data
    directory is there, ``<home>/pgdata`` a link to it."""
    scratch = Path(tempfile.mkdtemp(prefix="hubjobs-own-stack-"))
    home = scratch / "home"
    env = stack_env(home, preferred) | (extra_env or {})
    if pgdata is not None:
        home.mkdir(parents=True)
        (home / "pgdata").symlink_to(pgdata, target_is_directory=True)
    try:
        info, took = timed_json(env, "up")
        print(f"\nfirst hubjobs up took {took:.1f} s: {info}")
        yield OwnStack(home, env, addresses(info))
    finally:
        hubjobs(env, "down")
        # Only once the servers are down: their data goes with the folder.
        shutil.rmtree(scratch, ignore_errors=True)
