"""``hubjobs up`` / ``hubjobs down`` as a person runs them, each test on a state folder
of its own (tests/support/stacks.py):

- a first ``up`` with every preferred port taken falls back to free ones (the dev
  server's SQLite file in WAL mode), a second finds the same servers, ``down`` stops
  them and keeps the record;
- after a crash, ``up`` brings each dead server back on its recorded port, although the
  preferred ports are still taken (it would have moved the stack before), and so does
  ``up`` after ``down``;
- a recorded port held by another program: ``up`` refuses (``port_taken``), naming the
  port and its holder, and starts nothing anywhere else;
- two first ``up``s at once in two fresh homes, preferring the same free ports: both
  come up, each on ports of its own (before, both chose the same port and the loser
  failed ``unavailable``);
- the background worker's metrics on a free port, printed only once it serves them;
- a dev server whose store lacks a search attribute this build sets (started by an older
  build: its flags register attributes only in a new store) gets it from the next ``up``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from alembic.script import ScriptDirectory
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    ListSearchAttributesRequest,
    RemoveSearchAttributesRequest,
)
from temporalio.client import Client

from hubjobs.db.migrate import alembic_config
from hubjobs.devstack import embedded
from tests.support.stacks import (
    HUBJOBS,
    ForeignListener,
    accepts,
    addresses,
    healthy,
    held_ports,
    hubjobs,
    kill_postgres,
    kill_temporal,
    log_tails,
    own_stack,
    refuses_soon,
    server_pids,
    stack_env,
    timed_json,
    wait_gone,
)

# The tests of `up` bringing a dead server back run without the stack's supervisor, which
# would have brought it back first (tests/system/test_database_disk.py shows that one).
UNSUPERVISED = {"HUBJOBS_STACK_SUPERVISOR": "false"}
KEYWORD = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
SEARCH_ATTRIBUTES = {
    "JobKind": KEYWORD,
    "WorkspaceId": KEYWORD,
    "JobStatus": KEYWORD,
    "JobActor": KEYWORD,
    "JobId": KEYWORD,
    "JobScheduleId": KEYWORD,
    "JobFailedItems": IndexedValueType.INDEXED_VALUE_TYPE_INT,
}


def http_status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as response:
        status: int = response.status
        return status


def alembic_version(database_url: str) -> list[str]:
    with psycopg.connect(database_url, connect_timeout=10) as conn:
        return [row[0] for row in conn.execute("SELECT version_num FROM alembic_version")]


async def test_up_falls_back_to_free_ports_is_idempotent_and_down_stops_it(
    stack: embedded.StackInfo,
) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="hubjobs-up-test-"))
    home = scratch / "home"
    taken = {stack.postgres_port, stack.temporal_port, stack.ui_port}
    assert all(accepts(port) for port in taken), "the session stack holds the preferred ports"
    env = stack_env(home, embedded.StackPorts.of(stack))
    try:
        first, first_took = await asyncio.to_thread(timed_json, env, "up")
        print(f"\nfirst up took {first_took:.1f} s: {first}")
        assert set(first) == {
            "database_url",
            "temporal_address",
            "ui_url",
            "api_url",
            "page_url",
            "login_url",
            "metrics_url",
            "ui_codec_endpoint",
        }
        assert first["page_url"] == f"{first['api_url']}/operator/"
        # A sign-in link to it, its code in the fragment (the embedded stack's secret).
        assert first["login_url"].startswith(f"{first['api_url']}/operator/#/?login=")
        assert first["ui_codec_endpoint"] is None  # the payload codec is off by default
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
        second, second_took = await asyncio.to_thread(timed_json, env, "up")
        print(f"second up took {second_took:.1f} s")
        assert addresses(second) == addresses(first)
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
        for name, indexed in SEARCH_ATTRIBUTES.items():
            assert registered.custom_attributes.get(name) == indexed, (
                f"{name} missing from {dict(registered.custom_attributes)}"
            )

        # Task-queue fairness on, every task in one partition's order (embedded.py).
        temporal_command = embedded.command_line(pids[1], limit=100_000) or ""
        assert "--dynamic-config-value matching.enableFairness=true" in temporal_command
        assert "--dynamic-config-value matching.numTaskqueueWritePartitions=1" in temporal_command
        # Its SQLite file in WAL mode with synchronous=NORMAL (embedded.py says why): the
        # file's header says WAL (its read and write versions are 2 once in WAL mode).
        assert "--sqlite-pragma journal_mode=WAL" in temporal_command
        assert "--sqlite-pragma synchronous=NORMAL" in temporal_command
        assert (home / "temporal.db").read_bytes()[18:20] == b"\x02\x02"

        # The UI answers.
        assert await asyncio.to_thread(http_status, first["ui_url"]) == 200
    finally:
        stopped, down_took = await asyncio.to_thread(timed_json, env, "down")
        print(f"down took {down_took:.1f} s")
        stack_file_left = (home / "stack.json").exists()
        # Only once the servers are down: their data goes with the folder.
        shutil.rmtree(scratch, ignore_errors=True)

    assert stopped == {"stopped": True}
    for port in chosen:
        assert await asyncio.to_thread(refuses_soon, port), f"port {port} still accepts"
    assert not any(embedded.pid_alive(pid) for pid in pids)
    # The record stays: the next `up` comes back on the same ports.
    assert stack_file_left
    # The session's stack is untouched.
    assert all(accepts(port) for port in taken)


def test_up_after_a_crash_comes_back_on_the_recorded_ports() -> None:
    """The preferred ports stay taken throughout, so a first `up` falls back to free ones;
    each server killed in turn comes back on exactly the port it had (before, `up` chose
    new free ones, stranding the workers that had read the old addresses)."""
    with held_ports() as preferred, own_stack(preferred, UNSUPERVISED) as own:
        record = own.record.read_text()
        pg_port = urlsplit(own.database_url).port
        temporal_port = int(own.temporal_address.rpartition(":")[2])
        ui_port = urlsplit(own.info["ui_url"]).port
        assert {pg_port, temporal_port, ui_port}.isdisjoint(
            {preferred.postgres, preferred.temporal, preferred.ui}
        ), f"the preferred ports {preferred} are taken: {own.info}"

        killed_postgres = kill_postgres(own.home)
        assert own.up() == own.info
        assert own.record.read_text() == record
        postgres_pid, temporal_pid = server_pids(own.home)
        assert postgres_pid != killed_postgres and embedded.pid_alive(postgres_pid)
        with psycopg.connect(own.database_url, connect_timeout=10) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)

        killed_temporal = kill_temporal(own.home)
        assert killed_temporal == temporal_pid
        assert own.up() == own.info
        assert own.record.read_text() == record
        postgres_after, temporal_after = server_pids(own.home)
        assert postgres_after == postgres_pid, "the running PostgreSQL was left alone"
        assert temporal_after != killed_temporal and embedded.pid_alive(temporal_after)
        assert accepts(temporal_port) and accepts(ui_port)

        # `down` keeps the record: the next `up` comes back on the same ports.
        stopped, _ = timed_json(own.env, "down")
        assert stopped == {"stopped": True}
        assert own.record.read_text() == record
        assert own.up() == own.info
        assert own.record.read_text() == record


def test_a_killed_server_comes_back_by_itself_and_down_stops_its_supervisor() -> None:
    """`up` leaves a supervisor running: each server SIGKILLed (as an OOM kill would end
    it) is back by itself on its recorded port, the dev server with the command it had,
    each restart logged; `down` stops the supervisor with the servers. Before: a killed
    server stayed down until the next `up`."""
    with own_stack(extra_env={"HUBJOBS_STACK_RESTART_MAX_SECONDS": "1"}) as own:
        pg_port = urlsplit(own.database_url).port
        temporal_port = int(own.temporal_address.rpartition(":")[2])
        ui_port = urlsplit(own.info["ui_url"]).port
        assert pg_port is not None and ui_port is not None
        command = embedded.command_line(server_pids(own.home)[1], limit=100_000)

        killed_postgres = kill_postgres(own.home)
        killed_temporal = kill_temporal(own.home)
        killed = time.monotonic()
        deadline = killed + 60
        log_file = own.home / "supervisor.log"
        while not (
            accepts(pg_port)
            and accepts(temporal_port)
            and accepts(ui_port)
            and log_file.exists()
            and "Temporal restarted" in log_file.read_text()
        ):
            assert time.monotonic() < deadline, f"not back within 60 s\n{log_tails(own.home)}"
            time.sleep(0.2)
        back = time.monotonic() - killed
        supervisor = int((own.home / "supervisor.pid").read_text())
        postgres_pid, temporal_pid = server_pids(own.home)
        with psycopg.connect(own.database_url, connect_timeout=10) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        log = log_file.read_text()
        print(f"\nboth servers back {back:.1f} s after their kill:\n{log}")
        assert postgres_pid != killed_postgres and temporal_pid != killed_temporal
        assert embedded.command_line(temporal_pid, limit=100_000) == command
        assert "PostgreSQL restarted" in log and "Temporal restarted" in log
        assert own.record.read_text()
        assert healthy(own.env)["status"] == "ok"

        stopped, _ = timed_json(own.env, "down")
        assert stopped == {"stopped": True}
        assert not embedded.pid_alive(supervisor)
        assert not (own.home / "supervisor.pid").exists()
        for port in (pg_port, temporal_port, ui_port):
            assert refuses_soon(port), f"port {port} still accepts after down"


def test_a_killed_api_comes_back_by_itself() -> None:
    """The stack's API SIGKILLed: the supervisor starts it again on its recorded port,
    and the CLI's job commands answer again without `hubjobs up`. Before: they answered
    `unavailable` until the next `up`."""
    with own_stack(extra_env={"HUBJOBS_STACK_RESTART_MAX_SECONDS": "1"}) as own:
        seeded, _ = timed_json(own.env, "seed-demo", "--pages", "3")
        started, _ = timed_json(own.env, "backup")
        record = json.loads((own.home / "api.json").read_text())
        killed = int((own.home / "api.pid").read_text())
        os.kill(killed, signal.SIGKILL)
        wait_gone(killed)
        gone = time.monotonic()
        while (listed := hubjobs(own.env, "list", "--json")).returncode != 0:
            assert time.monotonic() < gone + 60, f"no API within 60 s\n{log_tails(own.home)}"
            time.sleep(0.5)
        print(f"\nthe CLI answered again {time.monotonic() - gone:.1f} s after the API's kill")
        assert [job["id"] for job in json.loads(listed.stdout)] == [started["id"]]
        assert json.loads((own.home / "api.json").read_text()) == record
        back = int((own.home / "api.pid").read_text())
        assert back != killed and embedded.port_holder(record["port"]) == embedded.PortHolder(
            back, embedded.command_line(back) or "?"
        )
        # The supervisor says so once it has seen the API answer, maybe after the CLI did.
        supervisor = own.home / "supervisor.log"
        deadline = time.monotonic() + 30
        while "API restarted" not in supervisor.read_text():
            assert time.monotonic() < deadline, supervisor.read_text()
            time.sleep(0.2)
        assert seeded["workspace_id"] == json.loads(listed.stdout)[0]["workspace_id"]


def test_up_refuses_a_recorded_port_held_by_another_program() -> None:
    """Both servers dead, another program listening on the recorded Temporal port: `up`
    says which port and who holds it, exits 1 with `port_taken`, and starts nothing (not
    even PostgreSQL, whose port is free), anywhere."""
    with own_stack(extra_env=UNSUPERVISED) as own:
        record = own.record.read_bytes()
        pg_port = urlsplit(own.database_url).port
        assert pg_port is not None
        temporal_port = int(own.temporal_address.rpartition(":")[2])
        kill_postgres(own.home)
        killed_temporal = kill_temporal(own.home)
        foreign = ForeignListener(temporal_port)
        try:
            refused = hubjobs(own.env, "up")
        finally:
            foreign.stop()
        print(f"\n{refused.stderr.strip()}")
        assert refused.returncode == 1, refused
        assert refused.stdout == ""
        [line] = refused.stderr.strip().splitlines()
        assert line.startswith(
            f"error: the Temporal port {temporal_port} is held by pid {foreign.pid} ("
        ), line
        assert "foreign-listener" in line, "the holder's command line is named"
        assert line.endswith("[port_taken]"), line

        # Nothing moved, nothing started.
        assert own.record.read_bytes() == record
        assert not accepts(pg_port)
        assert int((own.home / "temporal.pid").read_text()) == killed_temporal
        assert embedded.EmbeddedPostgres(own.home).running_port() is None

        # Once the port is free, the stack comes back where it was.
        assert own.up() == own.info
        assert own.record.read_bytes() == record


def test_a_reused_pid_is_not_taken_for_the_dev_server(tmp_path: Path) -> None:
    """A killed dev server leaves its pid file; should the pid be reused by another
    process, that process is neither taken as the running server (`up` restarts the
    server) nor stopped by `down`."""
    (tmp_path / "temporal.pid").write_text(str(os.getpid()))
    temporal = embedded.EmbeddedTemporal(tmp_path)
    assert temporal.running_pid() is None
    temporal.stop()  # nothing to stop: this process lives on


def test_a_dev_server_that_exits_before_it_listens_is_started_again(tmp_path: Path) -> None:
    """The dev server binds ports it picks itself (its HTTP API, its services); one taken
    by another process between its pick and its bind makes it exit before it listens.
    Here its HTTP port is held until the server has exited once for it: the start tries
    again and the server comes up, its pid file naming the live one."""
    port, ui_port, http_port = (embedded.choose_port(0) for _ in range(3))
    holder = ForeignListener(http_port)
    temporal = embedded.EmbeddedTemporal(tmp_path, persistent=False)

    def free_once_refused() -> None:
        while "address already in use" not in _text(temporal.logfile):
            time.sleep(0.05)
        holder.stop()

    watcher = threading.Thread(target=free_once_refused, daemon=True)
    watcher.start()
    try:
        temporal.start(port, ui_port, ["--http-port", str(http_port)])
        assert _text(temporal.logfile).count("address already in use") >= 1
        assert accepts(port) and accepts(ui_port)
        assert temporal.running_pid() == embedded.port_holder(port).pid  # type: ignore[union-attr]
    finally:
        holder.stop()
        temporal.stop()


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def test_two_first_ups_at_once_each_take_ports_of_their_own() -> None:
    """Two `hubjobs up` started together in two fresh homes, both preferring the same
    three free ports: the one that loses a port as its server binds it takes another
    free one. Both stacks come up, on six different ports, each server the process of
    its own home (the one listening on its recorded port), and each answers `health`."""
    preferred = embedded.StackPorts(*(embedded.choose_port(0) for _ in range(3)))
    scratch = Path(tempfile.mkdtemp(prefix="hubjobs-race-"))
    envs = [stack_env(scratch / name / "home", preferred) for name in ("one", "two")]
    try:
        started = time.monotonic()
        ups = [
            subprocess.Popen(
                [HUBJOBS, "up", "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            for env in envs
        ]
        outcomes = [up.communicate(timeout=180) for up in ups]
        took = time.monotonic() - started
        for up, (_, err), env in zip(ups, outcomes, envs, strict=True):
            assert up.returncode == 0, f"{err.decode()}\n{log_tails(Path(env['HUBJOBS_HOME']))}"
        infos = [json.loads(out) for out, _ in outcomes]
        ports = [
            {
                urlsplit(info["database_url"]).port,
                int(info["temporal_address"].rpartition(":")[2]),
                urlsplit(info["ui_url"]).port,
            }
            for info in infos
        ]
        print(f"\ntwo first ups at once, preferring {preferred}: {ports} in {took:.1f} s")
        assert len(ports[0] | ports[1]) == 6, ports
        assert ports[0] | ports[1] >= {preferred.postgres, preferred.temporal}, (
            "each preferred port went to one of them"
        )
        for info, env in zip(infos, envs, strict=True):
            home = Path(env["HUBJOBS_HOME"])
            postmaster, temporal = server_pids(home)
            pg = embedded.port_holder(urlsplit(info["database_url"]).port or 0)
            frontend = embedded.port_holder(int(info["temporal_address"].rpartition(":")[2]))
            assert pg is not None and pg.pid == postmaster, (pg, postmaster)
            assert frontend is not None and frontend.pid == temporal, (frontend, temporal)
            assert healthy(env)["status"] == "ok"
    finally:
        for env in envs:
            hubjobs(env, "down")
        shutil.rmtree(scratch, ignore_errors=True)


def test_the_workers_metrics_take_a_free_port_and_are_printed_as_they_are() -> None:
    """Another program holds the preferred metrics port (HUBJOBS_METRICS_PORT): `up`
    with no worker running says nothing serves the metrics; `up --worker` gives the
    worker a free port and prints it once the worker holds it, and it answers. Before:
    the taken port printed as served, nothing answering there (only the worker's log
    said otherwise)."""
    foreign = ForeignListener(embedded.choose_port(0))
    extra = {"HUBJOBS_METRICS_PORT": str(foreign.port), "HUBJOBS_MAINTENANCE": "false"}
    try:
        with own_stack(extra_env=extra) as own:
            assert own.info["metrics_url"] is None, own.info
            text = hubjobs(own.env, "up")
            assert text.returncode == 0, text.stderr
            assert "Metrics      not served: no background worker runs" in text.stdout

            served, _ = timed_json(own.env, "up", "--worker")
            url = served["metrics_url"]
            assert url is not None and f":{foreign.port}/" not in url, served
            assert http_status(url) == 200
            text = hubjobs(own.env, "up")
            assert f"Metrics      {url}  (served by the background worker)" in text.stdout
    finally:
        foreign.stop()


async def registered_attributes(address: str) -> dict[str, int]:
    client = await Client.connect(address)
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace="default")
    )
    return dict(listed.custom_attributes)


def test_up_registers_a_search_attribute_the_servers_store_lacks() -> None:
    """Before, a dev server started again on a store an older build made kept that
    build's attributes: every run of the new build failed its task setting
    ``JobFailedItems`` (``BadSearchAttributes``), with nothing in `up`'s output."""
    with own_stack(extra_env=UNSUPERVISED) as own:

        async def remove() -> None:
            client = await Client.connect(own.temporal_address)
            await client.operator_service.remove_search_attributes(
                RemoveSearchAttributesRequest(
                    search_attributes=["JobFailedItems"], namespace="default"
                )
            )

        asyncio.run(remove())
        assert "JobFailedItems" not in asyncio.run(registered_attributes(own.temporal_address))
        assert own.up() == own.info
        registered = asyncio.run(registered_attributes(own.temporal_address))
        for name, indexed in SEARCH_ATTRIBUTES.items():
            assert registered.get(name) == indexed, f"{name} missing from {registered}"
