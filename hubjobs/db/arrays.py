"""Array parameters written as PostgreSQL array literals (``CAST(:ids AS uuid[])``):
psycopg adapts a list element by element in Python, which cost more than the update for
a batch's thousand ids. Text that could hold anything is still passed as a list.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable


def uuid_array(values: Iterable[uuid.UUID]) -> str:
    return "{" + ",".join(map(str, values)) + "}"


def int_array(values: Iterable[int]) -> str:
    return "{" + ",".join(map(str, map(int, values))) + "}"
