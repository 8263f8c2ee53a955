"""The schema a restore loads into before its rows go live (``hubjobs_restore_<random>``).

No one else sees it: it is on no search_path but the restore's, and no role but its
owner may use it. ``swap_in`` moves its objects into ``public`` (catalog rows, not data);
one a killed restore left behind is dropped by the next restore.
"""

from __future__ import annotations

import logging
import secrets

from sqlalchemy import text
from sqlalchemy.engine import Connection

log = logging.getLogger(__name__)

PREFIX = "hubjobs_restore_"
LIVE = "public"


def new_name() -> str:
    return f"{PREFIX}{secrets.token_hex(8)}"


def create(conn: Connection, name: str) -> None:
    conn.execute(text(f'CREATE SCHEMA "{name}"'))
    conn.execute(text(f'REVOKE ALL ON SCHEMA "{name}" FROM PUBLIC'))


def drop(conn: Connection, name: str) -> None:
    conn.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))


def drop_leftovers(conn: Connection) -> list[str]:
    """Drops the staging schemas of restores that never finished (the caller holds the
    restores' lock: none of them is running); returns their names."""
    names = list(
        conn.execute(
            text("SELECT nspname::text FROM pg_namespace WHERE starts_with(nspname, :prefix)"),
            {"prefix": PREFIX},
        ).scalars()
    )
    for name in names:
        log.info("restore: dropping %s, left by a restore that did not finish", name)
        drop(conn, name)
    return names


# Everything a migration makes in a schema, as (kind for ALTER/DROP, name with a
# function's arguments). Anything else stays behind, and the DROP SCHEMA that ends the
# swap refuses it: no object is lost.
_OBJECTS = """
SELECT CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END,
       quote_ident(c.relname)
  FROM pg_class c
 WHERE c.relnamespace = to_regnamespace(:schema)
   AND (c.relkind IN ('r', 'p', 'v')
        OR (c.relkind = 'S' AND NOT EXISTS (
               SELECT 1 FROM pg_depend d
                WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                  AND d.deptype IN ('a', 'i'))))
UNION ALL
SELECT CASE p.prokind WHEN 'p' THEN 'PROCEDURE' WHEN 'a' THEN 'AGGREGATE' ELSE 'FUNCTION' END,
       format('%I(%s)', p.proname, oidvectortypes(p.proargtypes))
  FROM pg_proc p
 WHERE p.pronamespace = to_regnamespace(:schema)
UNION ALL
SELECT CASE t.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END, quote_ident(t.typname)
  FROM pg_type t
 WHERE t.typnamespace = to_regnamespace(:schema)
   AND (t.typtype IN ('e', 'd', 'r')
        OR (t.typtype = 'c' AND (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c'))
"""
# Dropped in this order, each kind in one statement (so that dependencies within it
# do not matter): what uses a function or a type goes first.
_DROP_ORDER = (
    "VIEW",
    "TABLE",
    "SEQUENCE",
    "PROCEDURE",
    "AGGREGATE",
    "FUNCTION",
    "DOMAIN",
    "TYPE",
)


def swap_in(conn: Connection, name: str, *, replace: bool) -> None:
    """Moves every object of schema ``name`` into ``public`` and drops ``name``. With
    ``replace`` (``public`` holds the archive's schema, empty, checked under lock) the
    objects of the same names there are dropped first; without, a taken name fails."""
    rows = conn.execute(text(_OBJECTS), {"schema": name}).all()
    objects = [(str(kind), str(ident)) for kind, ident in rows]
    if replace:
        _drop_live(conn, objects)
    for kind, ident in objects:
        conn.execute(text(f'ALTER {kind} "{name}".{ident} SET SCHEMA {LIVE}'))
    conn.execute(text(f'DROP SCHEMA "{name}"'))


def _drop_live(conn: Connection, objects: list[tuple[str, str]]) -> None:
    for kind in _DROP_ORDER:
        present = [i for k, i in objects if k == kind and _exists(conn, kind, f"{LIVE}.{i}")]
        if present:
            conn.execute(text(f"DROP {kind} " + ", ".join(f"{LIVE}.{i}" for i in present)))


def _exists(conn: Connection, kind: str, qualified: str) -> bool:
    if kind in ("FUNCTION", "PROCEDURE", "AGGREGATE"):
        lookup = "to_regprocedure"
    elif kind in ("TYPE", "DOMAIN"):
        lookup = "to_regtype"
    else:
        lookup = "to_regclass"
    found = conn.execute(text(f"SELECT {lookup}(:name) IS NOT NULL"), {"name": qualified})
    return bool(found.scalar())
