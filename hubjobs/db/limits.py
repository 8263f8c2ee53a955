"""How long a database call may take, by what it is for, and how every connection is
made so that a dead or unreachable server is noticed.

A purpose's unit of work runs under a client-side deadline of its budget
(HUBJOBS_DB_<PURPOSE>_TIMEOUT_SECONDS, ..._LOCK_TIMEOUT_SECONDS), and its connections
carry the same server-side timeouts, so that a statement the client gave up on does not
run on, nor a lost transaction hold its locks. Connecting is bounded, and TCP keepalives
and ``tcp_user_timeout`` notice a silent peer while no unit runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from hubjobs.settings import Settings


class Purpose(StrEnum):
    # What the CLI and the API wait on: a job's status, a listing, a health check.
    READ = "read"
    # A kind's unit of work: a tagging batch, an export file.
    BATCH = "batch"
    # Starting (the row and its snapshot), opening, finishing and cancelling a job.
    LIFECYCLE = "lifecycle"
    # A backup's snapshot stream and a restore's load: one statement may copy a table.
    BULK = "bulk"


@dataclass(frozen=True)
class Budget:
    """A purpose's bound on a unit of work (and each of its statements), and on each
    lock wait in it; 0 is none."""

    seconds: float
    lock_seconds: float


def budget(settings: Settings, purpose: Purpose) -> Budget:
    return Budget(
        seconds=float(getattr(settings, f"db_{purpose}_timeout_seconds")),
        lock_seconds=float(getattr(settings, f"db_{purpose}_lock_timeout_seconds")),
    )


@dataclass(frozen=True)
class ConnectOptions:
    """What every connection is opened with. The defaults are Settings' defaults,
    without statement or lock timeouts (an engine for tools and tests)."""

    connect_timeout: int = 5
    keepalive_seconds: int = 10
    tcp_user_timeout_seconds: float = 20.0
    statement_timeout_seconds: float = 0.0
    lock_timeout_seconds: float = 0.0

    @classmethod
    def of(cls, settings: Settings, *purposes: Purpose) -> ConnectOptions:
        """The settings' connecting and TCP options, and the server-side timeouts of the
        largest budget among ``purposes`` (none given: no server-side timeouts)."""
        budgets = [budget(settings, p) for p in purposes]
        return cls(
            connect_timeout=settings.db_connect_timeout_seconds,
            keepalive_seconds=settings.db_keepalive_seconds,
            tcp_user_timeout_seconds=settings.db_tcp_user_timeout_seconds,
            statement_timeout_seconds=_largest([b.seconds for b in budgets]),
            lock_timeout_seconds=_largest([b.lock_seconds for b in budgets]),
        )

    def params(self, url: str | None = None) -> dict[str, Any]:
        """libpq connection parameters; ``options`` already in ``url`` are kept."""
        params: dict[str, Any] = {
            "connect_timeout": self.connect_timeout,
            "keepalives": 1,
            "keepalives_idle": self.keepalive_seconds,
            "keepalives_interval": max(1, self.keepalive_seconds // 2),
            "keepalives_count": 3,
        }
        if self.tcp_user_timeout_seconds > 0:
            params["tcp_user_timeout"] = int(self.tcp_user_timeout_seconds * 1000)
        options = []
        if self.statement_timeout_seconds > 0:
            options.append(f"-c statement_timeout={int(self.statement_timeout_seconds * 1000)}")
        if self.lock_timeout_seconds > 0:
            options.append(f"-c lock_timeout={int(self.lock_timeout_seconds * 1000)}")
        if self.statement_timeout_seconds > 0:
            # A transaction left idle that long is one its client lost: its locks go with
            # it rather than block other workers' writes until the keepalives notice.
            idle = int(self.statement_timeout_seconds * 1000)
            options.append(f"-c idle_in_transaction_session_timeout={idle}")
        if options:
            given = conninfo_to_dict(url).get("options") if url else None
            params["options"] = " ".join([str(given), *options] if given else options)
        return params

    def conninfo(self, url: str) -> str:
        """``url`` (libpq's form, hubjobs.db.engine.plain_url) with these parameters."""
        return make_conninfo(url, **self.params(url))


def _largest(values: list[float]) -> float:
    """The largest bound; any unbounded one (0) makes it unbounded."""
    if not values or any(v <= 0 for v in values):
        return 0.0
    return max(values)
