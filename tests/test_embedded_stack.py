"""``hubjobs up`` / ``hubjobs down`` on a fresh state folder, with every preferred port
already taken (by the session's own stack), so the stack has to fall back to free ones.

The state folder is a fresh temporary folder outside pytest's ``/tmp/pytest-of-<user>``:
as root, PostgreSQL runs as another user that must traverse the folder's parents, and
every pytest process that starts (another run beside this one) resets that folder to
0700, which made ``pg_ctl start`` fail with "Permission denied" now and then.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
from alembic.script import ScriptDirectory
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client

from hubjobs.db.migrate import alembic_config
from hubjobs.devstack import embedded

HUBJOBS = str(Path(sys.executable).parent / "hubjobs")
SEARCH_ATTRIBUTES = ("JobKind", "WorkspaceId", "JobStatus", "JobActor", "JobId")


def cli(env: dict[str, str], *args: str, timeout: float = 120) -> tuple[dict[str, Any], float]:
    """Runs ``hubjobs <args> --json``; returns its JSON and how long it took."""
    started = time.monotonic()
    result = subprocess.run(
        [HUBJOBS, *args, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, (
        f"hubjobs {' '.join(args)} exited {result.returncode}\n"
        f"stdout: {result.stdout}\nstderr: {result.stderr}\n{_log_tails(env)}"
    )
    data: dict[str, Any] = json.loads(result.stdout)
    return data, elapsed


def _log_tails(env: dict[str, str]) -> str:
    home = Path(env["HUBJOBS_HOME"])
    parts = []
    for name in ("hubjobs.log", "postgres.log", "temporal.log"):
        path = home / name
        if path.exists():
            lines = path.read_text(errors="replace").splitlines()[-20:]
            parts.append(f"--- {name}\n" + "\n".join(lines))
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


def http_status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as response:
        status: int = response.status
        return status


def alembic_version(database_url: str) -> list[str]:
    with psycopg.connect(database_url, connect_timeout=10) as conn:
        return [row[0] for row in conn.execute("SELECT version_num FROM alembic_version")]


def server_pids(home: Path) -> tuple[int, int]:
    """(postmaster, temporal) pids as the state folder records them."""
    postmaster = int((home / "pgdata" / "postmaster.pid").read_text().splitlines()[0])
    temporal = int((home / "temporal.pid").read_text().strip())
    return postmaster, temporal


async def test_up_falls_back_to_free_ports_is_idempotent_and_down_stops_it(
    stack: embedded.StackInfo,
) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="hubjobs-up-test-"))
    home = scratch / "home"
    taken = {stack.postgres_port, stack.temporal_port, stack.ui_port}
    assert all(accepts(port) for port in taken), "the session stack holds the preferred ports"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUBJOBS_")}
    env.update(
        HUBJOBS_HOME=str(home),
        HUBJOBS_POSTGRES_PORT=str(stack.postgres_port),
        HUBJOBS_TEMPORAL_PORT=str(stack.temporal_port),
        HUBJOBS_TEMPORAL_UI_PORT=str(stack.ui_port),
    )
    try:
        first, first_took = await asyncio.to_thread(cli, env, "up")
        print(f"\nfirst up took {first_took:.1f} s: {first}")
        assert set(first) == {"database_url", "temporal_address", "ui_url", "metrics_url"}
        pg_port = urlsplit(first["database_url"]).port
        temporal_host, _, temporal_port_text = first["temporal_address"].rpartition(":")
        temporal_port = int(temporal_port_text)
        ui_port = urlsplit(first["ui_url"]).port
        assert pg_port is not None and ui_port is not None
        assert temporal_host == "127.0.0.1"
        chosen = {pg_port, temporal_port, ui_port}
        assert len(chosen) == 3, f"three distinct ports, got {first}"
        assert not chosen & taken, f"taken ports {taken} reused: {first}"
        pids = server_pids(home)
        assert all(embedded.pid_alive(pid) for pid in pids)

        # Idempotent: the same servers found again, nothing started twice.
        second, second_took = await asyncio.to_thread(cli, env, "up")
        print(f"second up took {second_took:.1f} s")
        assert second == first
        assert second_took < 15
        assert server_pids(home) == pids
        assert all(embedded.pid_alive(pid) for pid in pids)

        # PostgreSQL: reachable and migrated to the head revision.
        head = ScriptDirectory.from_config(alembic_config(first["database_url"])).get_current_head()
        assert head is not None
        assert await asyncio.to_thread(alembic_version, first["database_url"]) == [head]

        # Temporal: accepts a client, with the job search attributes registered.
        client = await Client.connect(first["temporal_address"])
        registered = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace="default")
        )
        for name in SEARCH_ATTRIBUTES:
            assert registered.custom_attributes.get(name) == (
                IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
            ), f"{name} missing from {dict(registered.custom_attributes)}"

        # The UI answers.
        assert await asyncio.to_thread(http_status, first["ui_url"]) == 200
    finally:
        stopped, down_took = await asyncio.to_thread(cli, env, "down")
        print(f"down took {down_took:.1f} s")
        stack_file_left = (home / "stack.json").exists()
        # Only once the servers are down: their data goes with the folder.
        shutil.rmtree(scratch, ignore_errors=True)

    assert stopped == {"stopped": True}
    for port in chosen:
        assert await asyncio.to_thread(refuses_soon, port), f"port {port} still accepts"
    assert not any(embedded.pid_alive(pid) for pid in pids)
    assert not stack_file_left
    # The session's stack is untouched.
    assert all(accepts(port) for port in taken)
