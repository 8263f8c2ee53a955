"""The fast tier runs without servers. tests/conftest.py's fixtures are session-scoped
and start only when a test asks for one; here ``stack`` (which every server fixture
stands on: ``database_url``, ``temporal``, ``settings``, ``engine``, ``hub``,
``worker``) fails at once instead, so a unit test that reaches for a server says so
rather than quietly starting PostgreSQL and Temporal."""

from __future__ import annotations

from typing import NoReturn

import pytest


@pytest.fixture(scope="session")
def stack() -> NoReturn:
    pytest.fail(
        "tests/unit runs without servers: a test that needs PostgreSQL or Temporal "
        "belongs in tests/, next to the others",
        pytrace=False,
    )
