"""The embedded stack's HTTP API: ``hubjobs api`` in a process of its own, started by
``hubjobs up`` on a free port recorded in ``<home>/api.json`` for the CLI's job commands,
and started again there by the supervisor. Each start holds the stack's lock, so that
``up`` and the supervisor never start two."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

from hubjobs.devstack.embedded import (
    PORT_TRIES,
    Daemon,
    choose_port,
    describe_holder,
    port_holder,
    stack_lock,
    venv_binary,
    wait_for_port,
)
from hubjobs.errors import PortTaken, Unavailable
from hubjobs.home import API_FILE, recorded

API = Daemon("api.pid", "api.log", marker="api")
# The API's start: imports, its database pool and Temporal client.
START_SECONDS = 30.0


def api_port(home: Path, preferred: int) -> int:
    """The port the stack's API serves on: the one recorded, while it is ours or free."""
    port = recorded(home, API_FILE).get("port")
    if isinstance(port, int) and API.running(home) is not None:
        return port
    return choose_port(port if isinstance(port, int) else preferred)


def start_api(home: Path, host: str, port: int) -> str:
    """Starts the API unless it runs, waits until it listens; returns its URL. A port
    another process took meanwhile is given up for a free one."""
    client_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    with stack_lock(home):
        for _ in range(PORT_TRIES):
            url = f"http://{client_host}:{port}"
            (home / API_FILE).write_text(json.dumps({"url": url, "port": port}) + "\n")
            if _serves(home, client_host, port):
                return url
            port = choose_port(0)
    raise Unavailable(f"the API found no free port; its output is in {home / API.log_file}")


def restart_api(home: Path) -> None:
    """Starts the API again on its recorded address (the caller holds the stack's lock);
    ``PortTaken`` when another process holds it, ``Unavailable`` without a record."""
    record = recorded(home, API_FILE)
    port, url = record.get("port"), record.get("url")
    if not isinstance(port, int) or not isinstance(url, str):
        raise Unavailable(f"no record of the API's address in {home / API_FILE}")
    host = urlsplit(url).hostname or "127.0.0.1"
    if not _serves(home, host, port):
        raise PortTaken(f"the API's port {port} is held by {describe_holder(port)}")


def _serves(home: Path, host: str, port: int) -> bool:
    """Starts the API on ``port`` unless it runs, and waits until it listens: whether it
    is the API that holds the port (another process's port: ours is stopped)."""
    pid = API.start(home, [venv_binary("hubjobs"), "api"], env={"HUBJOBS_API_PORT": str(port)})
    wait_for_port(port, START_SECONDS, "the API", host=host)
    holder = port_holder(port)
    if holder is None or holder.pid == pid:
        return True
    API.stop(home)  # another process's port: ours cannot serve on it
    return False


def recorded_api(home: Path) -> bool:
    """Whether the stack has an API to keep running (``up`` started one here)."""
    return (home / API_FILE).is_file()


def stop_api(home: Path, timeout: float = 15) -> None:
    API.stop(home, timeout)
