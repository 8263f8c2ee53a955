"""Every table of the hub is in a backup, or left out on purpose with the reason
written down: a table added to hubjobs/domain/tables.py (or anywhere on the metadata)
fails here until someone decides.
And what the backup declares of its tables holds: each is dumped in its primary key's
order, comes after the tables it refers to (restore loads them in this order), and each
serial column is listed so that restore moves its sequence past the restored rows."""

from __future__ import annotations

import hubjobs.domain.tables  # noqa: F401  (declares the hub's tables on the metadata)
from hubjobs.archive.format import HUB_TABLES, SEQUENCES
from hubjobs.archive.scope import WORKSPACE_ROWS
from hubjobs.db.metadata import Base
from hubjobs.readmodel.tables import AuditEvent, Job, JobItem, JobMinute

# Tables of the schema a backup leaves out, each with why. A hub table belongs in
# HUB_TABLES (hubjobs/archive/format.py); one deliberately left out goes here.
NOT_BACKED_UP: dict[str, str] = {
    Job.__tablename__: "the job read model: this service's operational state, not the hub's",
    JobItem.__tablename__: "the job read model's items: operational state, not the hub's",
    AuditEvent.__tablename__: "operator actions on the jobs: this service's record, kept "
    "like jobs; a restore adds its own event",
    JobMinute.__tablename__: "the jobs' ends counted per minute: kept in step with the job "
    "rows, which a backup leaves out too",
}

TABLES = {table.name: table for table in Base.metadata.sorted_tables}
BACKED_UP = [name for name, _ in HUB_TABLES]


def test_every_table_is_backed_up_or_left_out_with_a_reason() -> None:
    undecided = set(TABLES) - set(BACKED_UP) - set(NOT_BACKED_UP)
    assert not undecided, (
        f"tables with no backup decision: {sorted(undecided)}; add each to HUB_TABLES "
        "(hubjobs/archive/format.py) or to NOT_BACKED_UP here, with the reason"
    )
    assert all(reason.strip() for reason in NOT_BACKED_UP.values())


def test_the_backup_names_only_tables_that_exist_once() -> None:
    assert len(BACKED_UP) == len(set(BACKED_UP))
    assert set(BACKED_UP) <= set(TABLES), "HUB_TABLES names a table the schema lacks"
    assert set(NOT_BACKED_UP) <= set(TABLES), "NOT_BACKED_UP names a table the schema lacks"
    assert not set(BACKED_UP) & set(NOT_BACKED_UP)


def test_each_table_is_dumped_in_its_primary_key_order() -> None:
    for name, key in HUB_TABLES:
        columns = [c.strip() for c in key.split(",")]
        assert columns == [c.name for c in TABLES[name].primary_key.columns], name


def test_each_table_comes_after_the_tables_it_refers_to() -> None:
    for position, name in enumerate(BACKED_UP):
        referred = {fk.column.table.name for fk in TABLES[name].foreign_keys} - {name}
        assert referred <= set(BACKED_UP[:position]), f"{name} is loaded before {referred}"


def test_every_serial_column_of_a_backed_up_table_has_its_sequence_restored() -> None:
    serial = {
        (name, TABLES[name].autoincrement_column.name)  # type: ignore[union-attr]
        for name in BACKED_UP
        if TABLES[name].autoincrement_column is not None
    }
    assert serial == set(SEQUENCES)


def test_every_backed_up_table_says_which_of_its_rows_a_workspace_holds() -> None:
    assert set(WORKSPACE_ROWS) == set(BACKED_UP)
