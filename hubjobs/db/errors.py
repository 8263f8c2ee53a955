"""Telling a database outage from a real error, by the error's class.

An outage (the server refused or dropped the connection, is shutting down or starting
up, has no connection slot left) says nothing about the work: waiting and trying again
is right, and it must never cost a job an attempt nor reach a client as anything but
``unavailable``. Everything else (bad data, a constraint, a bug in a query) is a real
error. Messages are never looked at: they change between versions and locales.

A deadline that passed is an outage too, whoever kept it: the client's own
(``DeadlineExceeded``, hubjobs.db.deadline) or the server's, ``statement_timeout``
(57014 query_canceled) and ``lock_timeout`` (55P03 lock_not_available). Deliberately:
a server too slow or too contended to answer within the budget is, to the caller, one
that does not answer, and the two must end the same way (a client hears
``unavailable`` and tries again; a job waits, then hands over, and fails only past
HUBJOBS_MAX_OUTAGE_SECONDS), or a slow server would fail jobs that a stopped one lets
ride out. Nothing about the work is wrong, and the unit is retried whole. The risk, a
statement that can never finish within its budget, is bounded by the maximum outage
and logged with its SQLSTATE every time; raise the purpose's budget for it.
(``query_canceled`` also comes from an operator's ``pg_cancel_backend``: retrying is
right then too.)

SQLAlchemy is not imported here: a process that never imported it (the command line
reading a job with psycopg alone) cannot hold one of its errors, and importing it
costs a command ~100 ms.
"""

from __future__ import annotations

import sys
from types import ModuleType

import psycopg
from psycopg import errors as pg

# SQLSTATEs of a server that is going away, coming back, or full.
_OUTAGE_STATES = frozenset(
    {
        pg.AdminShutdown.sqlstate,  # 57P01: pg_ctl stop, a restart
        pg.CrashShutdown.sqlstate,  # 57P02
        pg.CannotConnectNow.sqlstate,  # 57P03: starting up, in recovery
        pg.TooManyConnections.sqlstate,  # 53300
    }
)
# SQLSTATEs of a deadline the server kept (see the module's docstring).
_TIMEOUT_STATES = frozenset(
    {
        pg.QueryCanceled.sqlstate,  # 57014: statement_timeout (or a cancel request)
        pg.LockNotAvailable.sqlstate,  # 55P03: lock_timeout
    }
)


class DeadlineExceeded(Exception):
    """A unit of database work ran past its deadline (hubjobs.db.deadline): an outage."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no answer within {seconds:g} s")
        self.seconds = seconds


def _psycopg_outage(err: BaseException) -> bool:
    if isinstance(err, pg.ConnectionException):  # SQLSTATE class 08
        return True
    if isinstance(err, psycopg.Error) and err.sqlstate in _TIMEOUT_STATES:
        return True
    if isinstance(err, psycopg.OperationalError):
        # No SQLSTATE: the failure is the connection itself (refused, reset, closed).
        return err.sqlstate is None or err.sqlstate in _OUTAGE_STATES
    return False


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
    if isinstance(err, DeadlineExceeded):
        return True
    sa = _sqlalchemy_exc()
    orig = err.orig if sa is not None and isinstance(err, sa.DBAPIError) else err
    return isinstance(orig, psycopg.Error) and orig.sqlstate in _TIMEOUT_STATES


def answered_late(err: BaseException) -> bool:
    """The server itself ended the statement at its ``statement_timeout`` or
    ``lock_timeout``: it answers (slowly, or a lock is held), so another worker would
    fare no better; an outage to wait out, not a reason to hand the work over."""
    sa = _sqlalchemy_exc()
    orig = err.orig if sa is not None and isinstance(err, sa.DBAPIError) else err
    return isinstance(orig, psycopg.Error) and orig.sqlstate in _TIMEOUT_STATES


def is_data_error(err: BaseException) -> bool:
    """The input itself was refused by the database (an invalid character, a value out
    of range), or could not even be sent to it (text that is not valid Unicode, which
    psycopg cannot encode): the caller's fault, never worth a retry."""
    sa = _sqlalchemy_exc()
    orig = err.orig if sa is not None and isinstance(err, sa.DBAPIError) else err
    return isinstance(orig, (psycopg.DataError, UnicodeEncodeError))
