"""Array parameters written as PostgreSQL array literals.

psycopg adapts a Python list element by element in Python; a batch's thousand page
ids and versions cost more to adapt than to update (a fifth of a tagging worker's CPU).
Ids and integers need no quoting, so their literal is one ``join``; the statement casts
it (``CAST(:ids AS uuid[])``). Text that could hold anything is still passed as a list.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable


def uuid_array(values: Iterable[uuid.UUID]) -> str:
    return "{" + ",".join(map(str, values)) + "}"


def int_array(values: Iterable[int]) -> str:
    return "{" + ",".join(map(str, map(int, values))) + "}"
