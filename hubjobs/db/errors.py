"""Telling a database outage from a real error, by SQLSTATE and class, never by message.

An outage says nothing about the work: it is waited out and retried whole (bounded by
HUBJOBS_MAX_OUTAGE_SECONDS), never costs an attempt, and reaches a client only as
``unavailable``. A deadline that passed is one too, the client's or the server's
(statement_timeout, lock_timeout): a server too slow to answer must end as one that does
not answer, or a slow server would fail jobs that a stopped one lets ride out. A server
that answers but lacks a resource (classes 53, 58) or is read-only (25006) is an outage
not handed over to another worker, which would hear the same.

SQLAlchemy is not imported here: a process that never imported it cannot hold one of its
errors, and importing it slows every command.
"""

from __future__ import annotations

import sys
from types import ModuleType

import psycopg
from psycopg import errors as pg

# The connection's own class: an outage whatever its code.
_CONNECTION_CLASS = "08"
# SQLSTATEs of a server that is going away or coming back.
_OUTAGE_STATES = frozenset(
    {
        pg.AdminShutdown.sqlstate,  # 57P01: pg_ctl stop, a restart
        pg.CrashShutdown.sqlstate,  # 57P02
        pg.CannotConnectNow.sqlstate,  # 57P03: starting up, in recovery
    }
)
# SQLSTATE classes and codes of a server that answers but cannot do the work now (see
# the module's docstring).
_RESOURCE_CLASSES = frozenset({"53", "58"})
_READ_ONLY = pg.ReadOnlySqlTransaction.sqlstate  # 25006
_NO_SLOT = pg.TooManyConnections.sqlstate  # 53300: refuses connections, not writes
# SQLSTATEs of a deadline the server kept (see the module's docstring).
_TIMEOUT_STATES = frozenset(
    {
        pg.QueryCanceled.sqlstate,  # 57014: statement_timeout (or a cancel request)
        pg.LockNotAvailable.sqlstate,  # 55P03: lock_timeout
    }
)
# Classes of a refusal for a row's own sake: data exception (22), integrity constraint
# (23), triggered data change (27), WITH CHECK OPTION (44), program limit exceeded (54:
# a row or index entry too large), PL/pgSQL's RAISE (P0: a trigger's refusal).
_ROW_CLASSES = frozenset({"22", "23", "27", "44", "54", "P0"})

# What a caller is told when the database refuses writes (hubjobs.errors).
DATABASE_FULL = "database_full"
DATABASE_READ_ONLY = "database_read_only"


class DeadlineExceeded(Exception):
    """A unit of database work ran past its deadline (hubjobs.db.deadline): an outage."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no answer within {seconds:g} s")
        self.seconds = seconds


def _psycopg_outage(err: BaseException) -> bool:
    if not isinstance(err, psycopg.Error):
        return False
    state = err.sqlstate
    if state is None:
        # No SQLSTATE: the failure is the connection itself (refused, reset, closed).
        return isinstance(err, psycopg.OperationalError)
    # By class where a class says it: psycopg's classes per SQLSTATE are flat
    # (ConnectionFailure, 08006, is no ConnectionException, 08000).
    return (
        state[:2] == _CONNECTION_CLASS
        or state in _TIMEOUT_STATES
        or state in _OUTAGE_STATES
        or state == _READ_ONLY
        or state[:2] in _RESOURCE_CLASSES
    )


def _sqlalchemy_exc() -> ModuleType | None:
    """``sqlalchemy.exc`` if this process imported SQLAlchemy, else None."""
    return sys.modules.get("sqlalchemy.exc")


def is_outage(err: BaseException) -> bool:
    """True when ``err`` (psycopg's, SQLAlchemy's wrapping one, or a socket error) means
    the database does not answer, rather than that the work itself went wrong."""
    if isinstance(err, DeadlineExceeded):
        return True
    sa = _sqlalchemy_exc()
    if sa is not None and isinstance(err, sa.DBAPIError):
        if err.connection_invalidated:
            return True
        return err.orig is not None and _psycopg_outage(err.orig)
    if isinstance(err, ConnectionError):  # refused, reset, broken pipe
        return True
    if sa is not None and isinstance(err, sa.TimeoutError):  # no pooled connection in time
        return True
    return _psycopg_outage(err)


def is_timeout(err: BaseException) -> bool:
    """The outage is a deadline that passed (the client's or the server's), not a
    connection that failed: trying again at once on another connection would wait
    the whole budget once more."""
    return isinstance(err, DeadlineExceeded) or sqlstate_of(err) in _TIMEOUT_STATES


def driver_error(err: BaseException) -> BaseException:
    """psycopg's error under SQLAlchemy's wrapping one; any other error itself."""
    sa = _sqlalchemy_exc()
    return err.orig if sa is not None and isinstance(err, sa.DBAPIError) else err


def sqlstate_of(err: BaseException) -> str | None:
    """The SQLSTATE of a database error (psycopg's, or SQLAlchemy's wrapping one)."""
    orig = driver_error(err)
    return orig.sqlstate if isinstance(orig, psycopg.Error) else None


def server_answered(err: BaseException) -> bool:
    """The server itself answered with an outage (its own timeout, a lack of resource,
    read-only): another worker would fare no better, so it is waited out, not handed
    over. 53300 is not: it refused this worker a connection, another may hold one."""
    state = sqlstate_of(err)
    if state is None or state == _NO_SLOT:
        return False
    return state in _TIMEOUT_STATES or state == _READ_ONLY or state[:2] in _RESOURCE_CLASSES


def refused_writes(err: BaseException) -> str | None:
    """``database_full`` or ``database_read_only`` when the database answered but refused
    to write (a health check and a start say so); None for any other error."""
    state = sqlstate_of(err)
    if state == _READ_ONLY:
        return DATABASE_READ_ONLY
    if state is not None and state[:2] == "53" and state != _NO_SLOT:
        return DATABASE_FULL
    return None


def refused_for_its_row(err: BaseException) -> bool:
    """The database refused a write for the sake of the row it wrote (its data, a
    constraint, a trigger's refusal, a size limit): what may be recorded against that
    row. Anything else (an outage, a deadlock, a bug) is not the row's doing."""
    if is_data_error(err):
        return True
    state = sqlstate_of(err)
    return state is not None and state[:2] in _ROW_CLASSES


def is_data_error(err: BaseException) -> bool:
    """The input itself was refused by the database (an invalid character, a value out
    of range), or could not even be sent to it (text that is not valid Unicode, which
    psycopg cannot encode): the caller's fault, never worth a retry."""
    return isinstance(driver_error(err), (psycopg.DataError, UnicodeEncodeError))
