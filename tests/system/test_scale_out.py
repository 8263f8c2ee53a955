"""Two workers on two hosts share one job, and one of them dies mid-job.

The hosts are the project's own: two network namespaces made by the test, each joined
by a veth pair to a bridge in the root namespace, where a dedicated PostgreSQL and
Temporal dev server listen on the bridge's address. Two real ``python worker.py``
processes, one per namespace, reach both servers over their veth link only. They share
a course of 10,000 pages chunk by chunk; while worker A runs a chunk it is killed with
SIGKILL. Its lease (the heartbeat timeout) runs out, worker B takes the chunk over from
the heartbeat cursor and finishes the job, and the job ends exact: every page tagged
once, one revision per page, and a read model that agrees.
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from temporalio.api.enums.v1 import (
    EventType,
    PendingActivityState,
    TaskQueueKind,
    TaskQueueType,
)
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory
from temporalio.service import RPCError

from activities.course_tagging import CourseTaggingActivities
from hubjobs.db.engine import async_engine
from hubjobs.db.migrate import upgrade
from hubjobs.devstack.demo_data import DemoCourse, seed_demo
from hubjobs.devstack.embedded import EmbeddedPostgres, EmbeddedTemporal, choose_port, wait_for_port
from hubjobs.settings import Settings
from hubjobs.temporal.client import data_converter
from starter.client import HubJobsClient
from tests.support.helpers import (
    all_runs_history,
    assert_every_page_tagged_once,
    attempt_endings,
    processed_of,
    wait_until_final,
    workflow_closed,
)
from tests.support.processes import REPO, WorkerProcess, hubjobs_env

PAGES = 10_000
TAG = "scale-out"
TASK_QUEUE = "scale-out"
CHUNK = CourseTaggingActivities.tag_course.__name__
# Worker A is killed before this many pages are done, so B has most of the job left.
KILL_BEFORE = 7_000


# --- the test network ------------------------------------------------------------


@dataclass(frozen=True)
class Host:
    name: str
    namespace: str
    address: str


@dataclass(frozen=True)
class HostNetwork:
    bridge: str
    gateway: str  # the bridge's address in the root namespace, where the servers listen
    cidr: str
    hosts: dict[str, Host]


def ip(*args: str) -> str:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, f"ip {' '.join(args)}: {result.stderr.strip()}"
    return result.stdout


def _free_subnet() -> int:
    """A 10.231.<n>.0/24 that no interface or route of the root namespace uses yet."""
    used = ip("-4", "addr") + ip("-4", "route")
    candidates = [n for n in range(1, 255) if f"10.231.{n}." not in used]
    assert candidates, "every 10.231.x.0/24 is in use"
    return random.choice(candidates)


@pytest.fixture(scope="module")
def network() -> Iterator[HostNetwork]:
    suffix = secrets.token_hex(3)
    n = _free_subnet()
    bridge = f"hjbr{suffix}"
    net = HostNetwork(
        bridge=bridge,
        gateway=f"10.231.{n}.1",
        cidr=f"10.231.{n}.0/24",
        hosts={
            name: Host(name, f"hj-{suffix}-{name}", f"10.231.{n}.{last}")
            for name, last in (("a", 2), ("b", 3))
        },
    )
    made_links: list[str] = []
    made_namespaces: list[str] = []
    try:
        ip("link", "add", bridge, "type", "bridge")
        made_links.append(bridge)
        ip("addr", "add", f"{net.gateway}/24", "dev", bridge)
        ip("link", "set", bridge, "up")
        for host in net.hosts.values():
            outer, inner = f"hjv{suffix}{host.name}", f"hjv{suffix}{host.name}i"
            ip("netns", "add", host.namespace)
            made_namespaces.append(host.namespace)
            ip("link", "add", outer, "type", "veth", "peer", "name", inner, "netns", host.namespace)
            made_links.append(outer)
            ip("link", "set", outer, "master", bridge)
            ip("link", "set", outer, "up")
            ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", inner)
            ip("-n", host.namespace, "link", "set", inner, "up")
            ip("-n", host.namespace, "link", "set", "lo", "up")
        yield net
    finally:
        for namespace in made_namespaces:
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30)
        for link in reversed(made_links):
            # A veth went with its namespace; the bridge is still there.
            subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=30)


# --- dedicated servers on the bridge ------------------------------------------------


@dataclass(frozen=True)
class Servers:
    home: Path
    local_database_url: str  # for this process: loopback
    bridge_database_url: str  # for the hosts: the bridge's address
    temporal_address: str  # on the bridge's address


@pytest.fixture(scope="module")
def servers(network: HostNetwork) -> Iterator[Servers]:
    # Not under pytest's tmp folder: as root, PostgreSQL runs as its own system user,
    # which must reach its data folder, and pytest's is private to root (0700).
    home = Path(tempfile.mkdtemp(prefix="hubjobs-scale-out-"))
    postgres = EmbeddedPostgres(
        home,
        durable=False,
        listen=f"127.0.0.1,{network.gateway}",
        trusted_network=network.cidr,
    )
    temporal = EmbeddedTemporal(home, persistent=False)
    relay: subprocess.Popen[bytes] | None = None
    try:
        pg_port = postgres.start(0)
        local_url = postgres.ensure_database(pg_port)
        assert local_url.startswith("postgresql://postgres:") and "@127.0.0.1:" in local_url
        upgrade(local_url)
        temporal_port = choose_port(0, {pg_port})
        # Without eager activity dispatch, which this dev server has on: with it, every
        # chunk goes back to the worker that ran the workflow task before it (that one
        # is sticky), so B would get no work while A lives; without it, each chunk goes
        # to whichever worker polls for it.
        # And with the task queue's default 4 write partitions, where each chunk lands in
        # one at random. With one (the dev server's, for exact fairness) every chunk goes
        # to the poll that has waited longest, so a lone job's chunks come in runs on one
        # worker (five in a row seen, or all 6 of the first 7,000 pages), and A may not
        # run one after B has before 7,000 pages are done (the kill below needs that).
        temporal.start(
            temporal_port,
            choose_port(0, {pg_port, temporal_port}),
            dynamic_config={
                "system.enableActivityEagerExecution": "false",
                "matching.numTaskqueueWritePartitions": "4",
            },
        )
        # The dev server serves only on loopback; the hosts reach it through a relay on
        # the bridge (tests/support/relay.py), so their traffic still crosses the veth link.
        relay_port = choose_port(0, {pg_port, temporal_port})
        relay = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.relay",
                network.gateway,
                str(relay_port),
                str(temporal_port),
            ],
            cwd=REPO,
        )
        wait_for_port(relay_port, 10, "the Temporal relay", network.gateway)
        yield Servers(
            home=home,
            local_database_url=local_url,
            bridge_database_url=postgres.url(pg_port, host=network.gateway),
            temporal_address=f"{network.gateway}:{relay_port}",
        )
    finally:
        if relay is not None:
            relay.kill()
            relay.wait()
        temporal.stop()
        postgres.stop()
        shutil.rmtree(home, ignore_errors=True)


# --- worker processes on the hosts -------------------------------------------------------


class HostWorker(WorkerProcess):
    """``ip netns exec <namespace> python worker.py``, its output in a file."""

    def __init__(self, host: Host, env: dict[str, str], logs: Path) -> None:
        self.host = host
        super().__init__(
            f"worker-{host.name}", env, logs, prefix=["ip", "netns", "exec", host.namespace]
        )

    @property
    def identity(self) -> str:
        """The Temporal identity the SDK gives the worker: ``<pid>@<host name>``. The
        namespaces share the UTS namespace, so the host name is this one's."""
        return f"{self.pid}@{os.uname().nodename}"


def start_workers(net: HostNetwork, servers: Servers, settings: Settings) -> list[HostWorker]:
    """One worker per host, on the task queue of ``settings`` but reaching the servers
    at their bridge addresses."""
    workers = []
    for host in net.hosts.values():
        home = servers.home / f"worker-{host.name}"
        home.mkdir()
        env = hubjobs_env(
            settings,
            home,
            database_url=servers.bridge_database_url,
            temporal_address=servers.temporal_address,
            heartbeat_timeout_seconds=3,
            tagging_batch_size=50,
            work_slice_seconds=0.5,
            # Slow enough that A gets attempts before most of the course is done: two
            # lanes at 0.03 s do in a slice what one lane did at 0.01 s.
            tagging_batch_pause_seconds=0.03,
        )
        workers.append(HostWorker(host, env, servers.home))
    return workers


def network_namespace_of(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def check_on_its_host(worker: HostWorker) -> None:
    """The worker is the exec'd python process itself (its pid is the identity's), and
    it runs in its host's network namespace, not in this one."""
    wanted = [sys.executable.encode(), b"worker.py"]
    deadline = time.monotonic() + 10
    while True:  # until `ip netns exec` has exec'd the worker
        cmdline = Path(f"/proc/{worker.pid}/cmdline").read_bytes().split(b"\0")
        if cmdline[:2] == wanted or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert cmdline[:2] == wanted, cmdline
    named = os.stat(f"/run/netns/{worker.host.namespace}").st_ino
    assert network_namespace_of(worker.pid) == f"net:[{named}]"
    assert network_namespace_of(worker.pid) != os.readlink("/proc/self/ns/net")
    addresses = ip("-n", worker.host.namespace, "-4", "-o", "addr")
    assert f"inet {worker.host.address}/24" in addresses, addresses


def established_peers(host: Host) -> set[tuple[str, str]]:
    """(local address, peer address:port) of the host's established TCP connections."""
    result = subprocess.run(
        ["ip", "netns", "exec", host.namespace, "ss", "-Htn4", "state", "established"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    peers = set()
    for line in result.stdout.splitlines():
        parts = line.split()
        # Recv-Q Send-Q Local:Port Peer:Port (the state column is left out)
        local, peer = parts[2], parts[3]
        peers.add((local.rsplit(":", 1)[0], peer))
    return peers


# --- Temporal and read-model views ---------------------------------------------------------


async def pollers(client: Client) -> set[str]:
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=TASK_QUEUE, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        ),
        timeout=timedelta(seconds=5),
    )
    return {p.identity for p in response.pollers}


async def check_serving(client: Client, servers: Servers) -> None:
    """The frontend answers on the bridge, and so do the services behind it (a task
    queue lives in the matching service): a server that only half works fails here,
    with its log, rather than as workers that never get a task."""
    deadline = time.monotonic() + 20
    while True:
        try:
            await pollers(client)
            return
        except RPCError as err:
            if time.monotonic() > deadline:
                log = (servers.home / "temporal.log").read_text(errors="replace")
                raise AssertionError(
                    f"the Temporal server at {servers.temporal_address} does not serve "
                    f"task queues: {err}\n--- temporal.log (tail):\n"
                    + "\n".join(log.splitlines()[-15:])
                ) from None
        await asyncio.sleep(0.5)


@dataclass(frozen=True)
class ChunkAttempt:
    identity: str
    ending: str


async def chunk_attempts(client: Client, workflow_id: str) -> list[ChunkAttempt]:
    """Every attempt of the tagging work (an activity each), in order, with the worker
    that took it and how it ended."""
    attempts: list[ChunkAttempt] = []
    for events in await all_runs_history(client, workflow_id):
        endings = attempt_endings(WorkflowHistory(workflow_id, events), CHUNK)
        identities = [
            e.activity_task_started_event_attributes.identity
            for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
            and any(
                s.event_id == e.activity_task_started_event_attributes.scheduled_event_id
                and s.activity_task_scheduled_event_attributes.activity_type.name == CHUNK
                for s in events
                if s.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            )
        ]
        attempts += [ChunkAttempt(i, e) for i, e in zip(identities, endings, strict=False)]
    return attempts


async def running_chunk_worker(client: Client, workflow_id: str) -> str | None:
    """The identity of the worker running a chunk right now, if one is."""
    description = await client.get_workflow_handle(workflow_id).describe()
    for pending in description.raw_description.pending_activities:
        if (
            pending.activity_type.name == CHUNK
            and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        ):
            return pending.last_worker_identity
    return None


def database_clients(url: str) -> set[str]:
    """The addresses the database's sessions come from."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT DISTINCT host(client_addr) FROM pg_stat_activity "
            "WHERE datname = 'hubjobs' AND client_addr IS NOT NULL"
        ).fetchall()
    return {row[0] for row in rows}


def _tails(workers: list[HostWorker]) -> str:
    return "".join(f"\n--- worker {w.host.name} ({w.log_path}):\n{w.tail()}" for w in workers)


# --- the test ---------------------------------------------------------------------------


async def test_two_hosts_share_a_job_through_the_kill_of_one(
    network: HostNetwork, servers: Servers
) -> None:
    started_at = time.monotonic()
    engine = async_engine(servers.local_database_url, pool_size=5)
    client = await Client.connect(
        servers.temporal_address, data_converter=data_converter(Settings(payload_codec=False))
    )
    settings = Settings(
        home=servers.home / "starter",
        database_url=servers.local_database_url,
        temporal_address=servers.temporal_address,
        task_queue=TASK_QUEUE,
        heartbeat_timeout_seconds=3,
        max_activity_attempts=5,
        maintenance=False,
    )
    workers: list[HostWorker] = []
    try:
        await check_serving(client, servers)
        async with engine.begin() as conn:
            course: DemoCourse = await seed_demo(conn, PAGES)
        jobs = HubJobsClient(client, engine, settings).scope(course.workspace_id, course.actor_id)
        print(f"\n{PAGES} pages seeded after {time.monotonic() - started_at:.1f} s")

        workers = await asyncio.to_thread(start_workers, network, servers, settings)
        a, b = workers
        for w in workers:
            check_on_its_host(w)
        assert network_namespace_of(a.pid) != network_namespace_of(b.pid)

        # Both hosts poll the task queue over their link before the job starts.
        deadline = time.monotonic() + 60
        while {a.identity, b.identity} - await pollers(client):
            for w in workers:
                assert w.alive(), f"worker {w.host.name} exited:{_tails(workers)}"
            assert time.monotonic() < deadline, f"workers never polled:{_tails(workers)}"
            await asyncio.sleep(0.2)
        print(f"both workers polling after {time.monotonic() - started_at:.1f} s")

        # Both hosts talk to both servers over their veth link, from their own address.
        hosts = {a.host.address, b.host.address}
        deadline = time.monotonic() + 15
        while not hosts <= (
            clients := await asyncio.to_thread(database_clients, servers.local_database_url)
        ):
            assert time.monotonic() < deadline, f"database sessions come from {clients}"
            await asyncio.sleep(0.2)
        temporal_port = servers.temporal_address.rsplit(":", 1)[1]
        for w in workers:
            peers = await asyncio.to_thread(established_peers, w.host)
            assert (w.host.address, f"{network.gateway}:{temporal_port}") in peers, peers

        job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": TAG})
        job_started = time.monotonic()

        # Kill A while it runs an attempt, once it has done some work and most remains.
        deadline = time.monotonic() + 60
        while True:
            for w in workers:
                assert w.alive(), f"worker {w.host.name} exited:{_tails(workers)}"
            processed = await processed_of(engine, job.id)
            takers = {c.identity for c in await chunk_attempts(client, job.workflow_id)}
            running = await running_chunk_worker(client, job.workflow_id)
            assert processed < KILL_BEFORE, (
                f"{processed} pages done and the chunks went only to {takers}; "
                f"A is {a.identity}, B is {b.identity}{_tails(workers)}"
            )
            # A holds the running attempt and the job is under way: whether B took one
            # before does not matter (which worker polls first is the server's choice).
            if running == a.identity and processed > 500:
                break
            assert time.monotonic() < deadline, f"no moment to kill A:{_tails(workers)}"
            await asyncio.sleep(0.05)

        exit_code = await asyncio.to_thread(a.kill)
        assert exit_code == -signal.SIGKILL
        at_kill = await processed_of(engine, job.id)
        print(
            f"killed worker A {time.monotonic() - job_started:.1f} s into the job, "
            f"with {at_kill} of {PAGES} pages done"
        )
        assert at_kill < KILL_BEFORE
        # A died holding the chunk: Temporal still has it on A until the lease runs out.
        assert await running_chunk_worker(client, job.workflow_id) == a.identity

        kill_time = time.monotonic()
        done = await wait_until_final(jobs, job.id, timeout=120)
        print(
            f"job {done.status} {time.monotonic() - kill_time:.1f} s after the kill "
            f"({time.monotonic() - job_started:.1f} s in all)"
        )
        assert done.status == "succeeded", (
            f"job ended {done.status} ({done.error_code}: {done.error_message}), "
            f"{done.processed}/{done.total} done{_tails(workers)}"
        )
        assert b.alive(), f"worker B died:{_tails(workers)}"
        await workflow_closed(client, job.workflow_id)
        attempts = await chunk_attempts(client, job.workflow_id)
        description = await client.get_workflow_handle(job.workflow_id).describe()
    except BaseException:
        print(_tails(workers))
        await engine.dispose()
        raise
    finally:
        for w in workers:
            await asyncio.to_thread(w.kill)

    try:
        # Lost nothing, repeated nothing.
        await assert_every_page_tagged_once(engine, done, course.page_ids, TAG)

        # Temporal agrees: both hosts ran chunks, and the chunk A held at its death ran
        # out of lease and was finished by B.
        assert description.status == WorkflowExecutionStatus.COMPLETED
        takers = {c.identity for c in attempts}
        assert {a.identity, b.identity} <= takers, (takers, a.identity, b.identity)
        assert takers == {a.identity, b.identity}, takers
        # A's attempt at its death ran out of lease; the next attempt went to B.
        lost = [n for n, c in enumerate(attempts) if c.ending == "timed_out:heartbeat"]
        assert [attempts[n].identity for n in lost] == [a.identity], attempts
        assert attempts[lost[0] + 1].identity == b.identity, attempts
        assert all(c.identity == b.identity for c in attempts[lost[0] + 1 :]), attempts
        shares = {w.host.name: sum(c.identity == w.identity for c in attempts) for w in workers}
        print(f"chunk attempts per worker: {shares}; {time.monotonic() - started_at:.1f} s")
    finally:
        await engine.dispose()
