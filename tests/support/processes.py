"""Real processes for the tests: the ``HUBJOBS_*`` environment a subprocess gets, the
``hubjobs`` command run as people run it, and ``python worker.py`` run as a process of
its own with its output in a log file."""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from hubjobs.devstack.embedded import choose_port, wait_for_port
from hubjobs.settings import Settings

REPO = Path(__file__).resolve().parents[2]
HUBJOBS = Path(sys.executable).parent / "hubjobs"

EnvValue = str | int | float | Path


def _env_text(value: EnvValue) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def hubjobs_env(settings: Settings, home: Path, **overrides: EnvValue) -> dict[str, str]:
    """This process's environment without any ``HUBJOBS_*`` variable, plus the servers and
    task queue of ``settings``, ``HUBJOBS_HOME=home``, no maintenance Schedules (they are
    global to the namespace; tests leave them alone), unversioned workers (as the
    ``settings`` fixture's), no metrics endpoint, unbuffered output; then each override
    as ``HUBJOBS_<NAME>`` (``heartbeat_timeout_seconds=3`` is
    ``HUBJOBS_HEARTBEAT_TIMEOUT_SECONDS=3``). ``database_url``, ``temporal_address`` and
    ``task_queue`` may be overridden too; ``settings`` is then not asked for them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUBJOBS_")}
    if "database_url" not in overrides:
        env["HUBJOBS_DATABASE_URL"] = settings.resolved_database_url()
    if "temporal_address" not in overrides:
        env["HUBJOBS_TEMPORAL_ADDRESS"] = settings.resolved_temporal_address()
    env["HUBJOBS_TASK_QUEUE"] = settings.task_queue
    env["HUBJOBS_HOME"] = str(home)
    env["HUBJOBS_MAINTENANCE"] = "false"
    env["HUBJOBS_WORKER_VERSIONING"] = "false"
    env["HUBJOBS_METRICS_PORT"] = "0"
    env["PYTHONUNBUFFERED"] = "1"
    for name, value in overrides.items():
        env[f"HUBJOBS_{name.upper()}"] = _env_text(value)
    return env


class WorkerProcess:
    """``[*prefix] python worker.py`` (or python ``args``) in its own process, run in the
    repository (or ``cwd``) with ``env``, by this interpreter (or ``python``, another
    venv's); its output (stdout and stderr) goes to ``<logs>/<name>.log``."""

    def __init__(
        self,
        name: str,
        env: dict[str, str],
        logs: Path,
        prefix: Sequence[str] = (),
        args: Sequence[str] = ("worker.py",),
        *,
        python: str = sys.executable,
        cwd: Path = REPO,
    ) -> None:
        self.name = name
        self.log_path = logs / f"{name}.log"
        self._log: IO[bytes] = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [*prefix, python, *args],
            cwd=cwd,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> int:
        """SIGKILL (unless it has exited), then reap and close the log; returns the exit
        code. Safe to call again."""
        if self.alive():
            os.kill(self.process.pid, signal.SIGKILL)
        code = self.process.wait(timeout=15)
        self._log.close()
        return code

    def terminate(self, timeout: float = 30) -> tuple[int, float]:
        """SIGTERM, then wait for the exit; returns the exit code and the seconds it took."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=timeout)
        return code, time.monotonic() - started

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


# The commands that call the HTTP API (starter/cli/remote.py): run_hubjobs gives them one.
API_COMMANDS = frozenset(
    {"tag-course", "backup", "export", "retry", "status", "list", "items", "cancel", "watch"}
    | {"audit"}
    | {"schedule"}
)
# The CLI signs its tokens with this, and the tests' APIs check them with it.
TEST_TOKEN_SECRET = "a-token-secret-for-the-tests-only-0123456789"
# What only the CLI reads: the same API serves commands that differ in these.
_CLIENT_ONLY = frozenset(
    {"HUBJOBS_API_URL", "HUBJOBS_API_TOKEN", "HUBJOBS_WORKSPACE", "HUBJOBS_ACTOR"}
)
_APIS: dict[tuple[tuple[str, str], ...], tuple[subprocess.Popen[bytes], str]] = {}


def api_url_for(env: dict[str, str]) -> str:
    """An API process for ``env`` (one for each distinct server-side environment, kept
    until the tests' process ends): its URL."""
    key = tuple(sorted((k, v) for k, v in env.items() if k.startswith("HUBJOBS_")))
    key = tuple((k, v) for k, v in key if k not in _CLIENT_ONLY)
    known = _APIS.get(key)
    if known is not None and known[0].poll() is None:
        return known[1]
    port = choose_port(0)
    home = Path(env["HUBJOBS_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    with open(home / f"api-{port}.log", "wb") as log:
        server = subprocess.Popen(
            [str(HUBJOBS), "api"],
            env=env | {"HUBJOBS_API_PORT": str(port)},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    atexit.register(_stop, server)
    wait_for_port(port, 60, "the tests' API")
    _APIS[key] = (server, f"http://127.0.0.1:{port}")
    return _APIS[key][1]


def _stop(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.kill()


def cli_env(
    settings: Settings, home: Path, args: Sequence[str], extra: dict[str, str]
) -> dict[str, str]:
    """The environment of ``hubjobs <args>``: a job command gets an API of its own
    servers (unless HUBJOBS_API_URL names one) and signs its tokens with the test secret
    (unless a key or token is configured)."""
    env = hubjobs_env(settings, home) | extra
    if not args or args[0] not in API_COMMANDS or "HUBJOBS_API_URL" in env:
        return env
    keys = ("HUBJOBS_API_JWT_SECRET", "HUBJOBS_API_JWT_PUBLIC_KEY", "HUBJOBS_API_JWKS_URL")
    if not any(k in env for k in keys):
        env["HUBJOBS_API_JWT_SECRET"] = TEST_TOKEN_SECRET
    env["HUBJOBS_API_URL"] = api_url_for(env)
    return env


async def run_hubjobs(
    settings: Settings,
    home: Path,
    *args: str,
    timeout: float = 60,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """The ``hubjobs`` command for the servers of ``settings`` (a job command through an
    API of theirs), run in a thread so that a worker on the test's event loop keeps
    working."""

    def go() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(HUBJOBS), *args],
            env=cli_env(settings, home, args, extra_env or {}),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return await asyncio.to_thread(go)


async def hubjobs_json(
    settings: Settings,
    home: Path,
    *args: str,
    timeout: float = 60,
    extra_env: dict[str, str] | None = None,
) -> Any:
    """The command's ``--json`` answer; it must have succeeded without a traceback."""
    done = await run_hubjobs(settings, home, *args, "--json", timeout=timeout, extra_env=extra_env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


@contextmanager
def api_process(env: dict[str, str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``hubjobs api`` as a process of its own with ``env``, serving on
    ``HUBJOBS_API_PORT`` once this enters; its output goes to ``log_path``."""

    port = int(env["HUBJOBS_API_PORT"])
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "hubjobs"), "api"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port, 30, "the API")
            yield server
        finally:
            server.terminate()
            server.wait(timeout=20)
