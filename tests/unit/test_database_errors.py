"""How a database error is told (hubjobs/db/errors.py), by its SQLSTATE alone: which are
outages, which of those the server answered (waited out, never handed over), which mean
it refuses writes (and what a caller is told), and which alone may be recorded against
the row written. psycopg's errors as the server sends them, bare and wrapped by
SQLAlchemy as the engine raises them."""

from __future__ import annotations

import pytest
from psycopg import errors as pg
from sqlalchemy import exc as sa

from hubjobs.db.errors import (
    DATABASE_FULL,
    DATABASE_READ_ONLY,
    is_outage,
    refused_for_its_row,
    refused_writes,
    server_answered,
)

# sqlstate: (outage, server answered, refused writes, refused for its row)
CASES: dict[str, tuple[bool, bool, str | None, bool]] = {
    "53000": (True, True, DATABASE_FULL, False),  # insufficient_resources
    "53100": (True, True, DATABASE_FULL, False),  # disk_full
    "53200": (True, True, DATABASE_FULL, False),  # out_of_memory
    "53300": (True, False, None, False),  # too_many_connections: still handed over
    "53400": (True, True, DATABASE_FULL, False),  # configuration_limit_exceeded
    "58000": (True, True, None, False),  # system_error
    "58030": (True, True, None, False),  # io_error
    "58P01": (True, True, None, False),  # undefined_file
    "25006": (True, True, DATABASE_READ_ONLY, False),  # read_only_sql_transaction
    "57P01": (True, False, None, False),  # admin_shutdown
    "57P03": (True, False, None, False),  # cannot_connect_now
    "57014": (True, True, None, False),  # query_canceled (statement_timeout)
    "55P03": (True, True, None, False),  # lock_not_available (lock_timeout)
    "08006": (True, False, None, False),  # connection_failure
    "22P02": (False, False, None, True),  # invalid_text_representation
    "23505": (False, False, None, True),  # unique_violation
    "23514": (False, False, None, True),  # check_violation
    "27000": (False, False, None, True),  # triggered_data_change_violation
    "44000": (False, False, None, True),  # with_check_option_violation
    "54000": (False, False, None, True),  # program_limit_exceeded (a row too large)
    "P0001": (False, False, None, True),  # raise_exception (a trigger's refusal)
    "40P01": (False, False, None, False),  # deadlock_detected: not the row's doing
    "40001": (False, False, None, False),  # serialization_failure
    "42501": (False, False, None, False),  # insufficient_privilege: every row alike
    "XX000": (False, False, None, False),  # internal_error
}


def raised(sqlstate: str) -> list[BaseException]:
    orig = pg.lookup(sqlstate)("refused")
    return [orig, sa.OperationalError("UPDATE pages …", {}, orig)]


@pytest.mark.parametrize("sqlstate", sorted(CASES))
def test_each_sqlstate_is_told_by_its_class(sqlstate: str) -> None:
    outage, answered, refusal, for_its_row = CASES[sqlstate]
    for err in raised(sqlstate):
        assert is_outage(err) is outage, err
        assert server_answered(err) is answered, err
        assert refused_writes(err) == refusal, err
        assert refused_for_its_row(err) is for_its_row, err


def test_an_error_without_a_sqlstate_is_the_connection_itself() -> None:
    lost = pg.OperationalError("connection lost")
    assert is_outage(lost)
    assert not server_answered(lost) and refused_writes(lost) is None
    assert not refused_for_its_row(lost)
    assert refused_for_its_row(UnicodeEncodeError("utf-8", "x", 0, 1, "surrogate"))
