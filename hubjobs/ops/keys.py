"""The hub tables' keys, indexes and foreign keys, set aside for a bulk load and built
again after it: a COPY into bare tables is much faster, each index is then built in
one pass, and each foreign key validated in one pass instead of row by row."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.engine import Connection

from hubjobs.archive.format import HUB_TABLES


@dataclass
class KeysAside:
    """What ``set_aside`` dropped, as statements that build it again."""

    # Per table, its primary key, unique constraints and other indexes, in order.
    builds: dict[str, list[str]] = field(default_factory=dict)
    # Each foreign key from or to a hub table: (its table, ADD … NOT VALID, VALIDATE …).
    # Added unvalidated (a catalog change, no scan), then validated table by table:
    # validations of different tables run at once, the end state is ADD's.
    foreign_keys: list[tuple[str, str, str]] = field(default_factory=list)


_ASIDE = """
WITH hub AS (
    SELECT c.oid FROM pg_class c
     WHERE c.relnamespace = to_regnamespace(:schema) AND c.relname = ANY(:hub)
)
SELECT 1 AS step, (SELECT relname::text FROM pg_class WHERE oid = conrelid) AS tab,
       format('ALTER TABLE %s DROP CONSTRAINT %I', conrelid::regclass, conname),
       format('ALTER TABLE %s ADD CONSTRAINT %I %s NOT VALID',
              conrelid::regclass, conname, pg_get_constraintdef(oid)),
       format('ALTER TABLE %s VALIDATE CONSTRAINT %I', conrelid::regclass, conname),
       conname::text AS name
  FROM pg_constraint
 WHERE contype = 'f'
   AND (conrelid IN (SELECT oid FROM hub) OR confrelid IN (SELECT oid FROM hub))
UNION ALL
SELECT 2, (SELECT relname::text FROM pg_class WHERE oid = conrelid),
       format('ALTER TABLE %s DROP CONSTRAINT %I', conrelid::regclass, conname),
       format('ALTER TABLE %s ADD CONSTRAINT %I %s',
              conrelid::regclass, conname, pg_get_constraintdef(oid)),
       NULL, conname::text
  FROM pg_constraint
 WHERE contype IN ('p', 'u') AND conrelid IN (SELECT oid FROM hub)
UNION ALL
SELECT 3, (SELECT relname::text FROM pg_class WHERE oid = i.indrelid),
       format('DROP INDEX %s', i.indexrelid::regclass),
       pg_get_indexdef(i.indexrelid), NULL, i.indexrelid::regclass::text
  FROM pg_index i
 WHERE i.indrelid IN (SELECT oid FROM hub)
   AND NOT EXISTS (SELECT 1 FROM pg_constraint c
                    WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid)
 ORDER BY 1, 6
"""


def set_aside(conn: Connection, schema: str) -> KeysAside:
    """Drops the hub tables' primary keys, unique constraints, other indexes (in
    ``schema``) and the foreign keys from or to them; returns how to build them again."""
    hub = [table for table, _ in HUB_TABLES]
    rows = conn.execute(text(_ASIDE), {"schema": schema, "hub": hub}).all()
    aside = KeysAside()
    for step, table, drop, build, validate, _ in rows:
        conn.execute(text(drop))
        if step == 1:
            aside.foreign_keys.append((table, build, validate))
        else:
            aside.builds.setdefault(table, []).append(build)
    return aside
