"""The embedded stack's HTTP API: ``hubjobs api`` in a process of its own, started by
``hubjobs up`` on a free port (the one it had, else HUBJOBS_API_PORT, else any), which
it records in ``<home>/api.json`` for the CLI's job commands; its pid in
``<home>/api.pid``, its output in ``<home>/api.log``, stopped by ``hubjobs down``."""

from __future__ import annotations

import json
from pathlib import Path

from hubjobs.devstack.daemons import Daemon
from hubjobs.devstack.embedded import (
    PORT_TRIES,
    choose_port,
    port_holder,
    venv_binary,
    wait_for_port,
)
from hubjobs.errors import Unavailable
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
    another process took meanwhile (two stacks starting at once) is given up for a
    free one: the address recorded is always the one this stack's API holds."""
    client_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    for _ in range(PORT_TRIES):
        pid = API.start(home, [venv_binary("hubjobs"), "api"], env={"HUBJOBS_API_PORT": str(port)})
        url = f"http://{client_host}:{port}"
        (home / API_FILE).write_text(json.dumps({"url": url, "port": port}) + "\n")
        wait_for_port(port, START_SECONDS, "the API", host=client_host)
        holder = port_holder(port)
        if holder is None or holder.pid == pid:
            return url
        API.stop(home)  # another process's port: ours cannot serve on it
        port = choose_port(0)
    raise Unavailable(f"the API found no free port; its output is in {home / API.log_file}")


def stop_api(home: Path, timeout: float = 15) -> None:
    API.stop(home, timeout)
