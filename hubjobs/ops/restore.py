"""Restore: rebuild an empty database and its attachment files (DIR) from a backup
archive, all or nothing.

1. **The archive is checked whole** before the database is touched
   (hubjobs.archive.reader): the zip's directory, the manifest and the attachment
   index read with a bound, every declared size, the expanded total against
   ``HUBJOBS_RESTORE_MAX_BYTES``, every storage path.
2. **One transaction** takes the database (an advisory lock keeps two restores apart):
   it must be empty, or hold the archive's schema without rows. Then **DIR is
   checked** (hubjobs.ops.staging): no target exists, no folder on the way is a link
   or a file, there is room. The schema is created at the archive's version; the hub
   tables' primary keys, unique constraints, indexes and foreign keys are set aside;
   every table is loaded with COPY (FREEZE, into tables this transaction created)
   while its bytes are verified (size and sha256 at the end of each: a mismatch aborts
   the COPY, and everything rolls back) and its row count checked against the
   manifest; the attachment index is checked against the attachments table; then the
   keys and indexes are built and the foreign keys validated in one pass each,
   sequences set, the schema migrated to today's head, and the tables analysed
   (planner statistics, committed with the rows).
3. Meanwhile a second thread **stages the attachment files** in a private folder
   inside DIR, verifying each as it is written and fsyncing it. Just before the
   commit the targets' folders are created and the targets checked once more.
4. **After the commit** the staged files are linked into place (never replacing,
   never following a link) and the staging folder goes.

A refusal or an error before the commit leaves the database and DIR exactly as they
were, and is a HubJobsError with one of these codes (details go to the log):

=========================  ======================================================
``archive_unreadable``     not a readable file, not a zip, no readable manifest
``archive_corrupt``        a member missing, extra, twice or damaged; a size, row
                           count or checksum that does not match; a malformed index
                           line; rows the database refuses (wrong shape, a bad value,
                           a duplicate key, a dangling reference)
``archive_too_large``      it would expand past ``HUBJOBS_RESTORE_MAX_BYTES``
                           (default: 100 times the archive's size, at least 1 GiB)
``archive_path_invalid``   a storage path that is absolute, has ``..``, empty or
                           ``.`` parts, is not in normal form, repeats, or nests in
                           another
``schema_unsupported``     an archive format or schema version this code does not know
``invalid_database_url``   the database URL cannot be used
``database_unavailable``   the database does not answer (should it stop answering
                           during the COMMIT itself, whether it committed is unknown:
                           the staged files are then kept, and the message says where)
``database_not_empty``     the database holds a schema of another version, or rows
``database_failed``        the database refused the restore for a reason of its own
                           (permissions, disk full, …); nothing was committed
``attachments_not_empty``  DIR already holds a target, or a file or link where a
                           target's folder should be
``attachments_unwritable`` DIR (or where it would go) cannot be written
``attachments_no_space``   DIR's file system has no room for the attachments
``attachments_incomplete`` (the only one after the commit) the database is restored
                           but some files could not be moved into place because
                           something else wrote to DIR meanwhile; they stay in the
                           staging folder the message names
=========================  ======================================================

A restore killed outright before its commit leaves the database as it was and, in DIR,
at most its staging folder (``.hubjobs-restore-…``), which can be removed.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from hubjobs.archive.format import HUB_TABLES, SEQUENCES, Manifest
from hubjobs.archive.reader import ARCHIVE_ERROR_CODES, Archive, ArchiveError, open_archive
from hubjobs.db.engine import sync_engine
from hubjobs.db.errors import is_outage, refused_writes
from hubjobs.db.limits import ConnectOptions
from hubjobs.db.migrate import head_revision, known_revisions, upgrade_on
from hubjobs.errors import HubJobsError, InvalidInput, Unavailable
from hubjobs.ops.staging import AttachmentStore, Stopped
from hubjobs.settings import Settings

log = logging.getLogger(__name__)

RESTORE_ERROR_CODES = (
    *ARCHIVE_ERROR_CODES,
    "invalid_database_url",
    "database_unavailable",
    "database_not_empty",
    "database_failed",
    "attachments_not_empty",
    "attachments_unwritable",
    "attachments_no_space",
    "attachments_incomplete",
)
# Blocks read ahead of the COPY, on a thread of their own.
PREFETCH = 4
# Session settings for the load (SET LOCAL: they end with the transaction).
# Memory for building the keys and indexes after the load; no timeout of the server's
# may cut a long restore short (a statement, a lock wait, the transaction, or the
# connection idle while the attachments finish staging) but the bulk purpose's own,
# generous ones (HUBJOBS_DB_BULK_TIMEOUT_SECONDS a statement, 3,600 s by default, and
# HUBJOBS_DB_BULK_LOCK_TIMEOUT_SECONDS a lock wait; see ``bulk_settings``). Settings
# this server does not have are skipped.
BULK_SETTINGS = {
    "maintenance_work_mem": "256MB",
    "statement_timeout": "0",
    "lock_timeout": "0",
    "idle_in_transaction_session_timeout": "0",
    "transaction_timeout": "0",
}


def bulk_settings(settings: Settings) -> dict[str, str]:
    """BULK_SETTINGS with the bulk purpose's statement and lock bounds (0: none)."""
    return {
        **BULK_SETTINGS,
        "statement_timeout": str(int(settings.db_bulk_timeout_seconds * 1000)),
        "lock_timeout": str(int(settings.db_bulk_lock_timeout_seconds * 1000)),
    }


# Any number, the same for every restore: two restores into one database take turns.
ADVISORY_LOCK = 0x6875626A6F6273


class RestoreRefused(HubJobsError):
    code = "database_failed"


@dataclass
class RestoreReport:
    backup_id: str
    created_at: str
    archive_schema_version: str
    schema_version: str
    tables: dict[str, int] = field(default_factory=dict)
    attachments: int = 0
    attachment_bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def restore(
    archive: Path,
    database_url: str,
    attachments_dir: Path,
    *,
    max_bytes: int | None = None,
) -> RestoreReport:
    """Restores ``archive`` into the empty database at ``database_url`` and the folder
    ``attachments_dir`` (see the module's docstring). ``max_bytes`` defaults to
    HUBJOBS_RESTORE_MAX_BYTES, and that to 100 times the archive's size (1 GiB at
    least)."""
    settings = Settings()
    if max_bytes is None:
        max_bytes = settings.restore_max_bytes
    engine = _engine(database_url, settings)
    with open_archive(
        archive, max_bytes=max_bytes, known_schema_versions=known_revisions()
    ) as source:
        manifest = source.manifest
        store = AttachmentStore(attachments_dir, source.attachments)
        report = RestoreReport(
            backup_id=str(manifest.backup_id),
            created_at=manifest.created_at.isoformat(),
            archive_schema_version=manifest.schema_version,
            schema_version=head_revision(),
            attachments=len(source.attachments),
            attachment_bytes=manifest.attachment_bytes,
        )
        try:
            _load(engine, source, store, report, bulk_settings(settings))
        except (sa_exc.DBAPIError, psycopg.Error) as err:
            raise _database_error(err) from None
        finally:
            engine.dispose()
        store.install()
        _lap("install")
    log.info("restored backup %s into %s", report.backup_id, database_url.rsplit("@", 1)[-1])
    return report


def _engine(database_url: str, settings: Settings) -> Engine:
    invalid = InvalidInput(
        "the database URL is not a PostgreSQL URL restore can use", code="invalid_database_url"
    )
    if not database_url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        raise invalid
    try:
        # Connecting bounded, TCP keepalives on; the load's bounds are set per
        # transaction (bulk_settings).
        return sync_engine(database_url, ConnectOptions.of(settings))
    except (sa_exc.ArgumentError, ValueError):
        raise invalid from None


def _begin_bulk_load(conn: Connection, session: dict[str, str]) -> None:
    """The transaction's settings for a bulk load (``session``), and the lock that keeps
    a second restore of the same database out."""
    for name, value in session.items():
        conn.execute(
            text(
                "SELECT set_config(:name, :value, true) "
                "WHERE current_setting(:name, true) IS NOT NULL"
            ),
            {"name": name, "value": value},
        )
    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK})


def _load_tables(
    conn: Connection,
    source: Archive,
    store: AttachmentStore,
    report: RestoreReport,
    *,
    created_here: bool,
) -> None:
    """Every table by COPY, verified as it goes, while a thread stages the attachment
    files; an error in either stops both."""
    store.open()
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="restore-stage") as pool:
        staging = pool.submit(store.stage, source, stop)
        try:
            for table, _ in HUB_TABLES:
                report.tables[table] = _copy(conn, source, table, staging, created_here)
            _lap("tables")
            _check_index(conn, source)
            staging.result()
            _lap("attachments (beyond the tables)")
        except BaseException:
            stop.set()
            raise


def _set_sequences(conn: Connection) -> None:
    """Each serial column's sequence past the restored rows."""
    for table, column in SEQUENCES:
        conn.execute(
            text(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
                f"COALESCE((SELECT max({column}) FROM {table}), 0) + 1, false)"
            )
        )


def _load(
    engine: Engine,
    source: Archive,
    store: AttachmentStore,
    report: RestoreReport,
    session: dict[str, str],
) -> None:
    """The database's part, in one transaction, with the staging of attachments beside
    it; commits only when both are done."""
    _lap(None)
    committing = False
    with engine.connect() as conn:
        trans = conn.begin()
        try:
            _begin_bulk_load(conn, session)
            has_schema = _require_empty(conn, source.manifest)
            store.check()  # the last refusal: nothing has been written anywhere yet
            if not has_schema:
                upgrade_on(conn, source.manifest.schema_version)
            keys = _set_keys_aside(conn)
            _lap("schema")
            _load_tables(conn, source, store, report, created_here=not has_schema)
            for statement in keys:
                conn.execute(text(statement))
            _lap("keys, indexes and foreign keys")
            _set_sequences(conn)
            if source.manifest.schema_version != report.schema_version:
                upgrade_on(conn, "head")
            _analyze(conn)
            _lap("analyze")
            store.prepare()
            _lap("migration and folders")
            committing = True
            trans.commit()
            _lap("commit")
        except BaseException as err:
            if committing and is_outage(err) and refused_writes(err) is None:
                # The server went away during COMMIT: whether it committed is unknown.
                # The staged files stay, so that nothing the database may now name is lost.
                store.abandon()
                log.error("restore: the database went away while committing: %r", err)
                raise Unavailable(
                    "the database stopped answering while the restore committed: check "
                    "whether it holds the restored rows; if it does, the attachment files "
                    f"are in {store.staging_path} (named by attachment id), otherwise "
                    "remove that folder",
                    code="database_unavailable",
                ) from None
            if trans.is_active:
                try:
                    trans.rollback()
                except Exception as again:  # the connection may be gone: nothing committed
                    log.info("rollback after %r failed: %r", err, again)
            store.discard()
            if isinstance(err, Stopped):  # only ever raised after another error
                raise RestoreRefused("the restore was stopped") from None
            raise


def _analyze(conn: Connection) -> None:
    """Planner statistics for every table loaded. A restored database has none, and
    until autovacuum comes by (its thresholds count changes, a minute apart at best)
    the planner takes each table for a few pages and picks plans the benchmarks found
    to be traps. In the restore's own transaction, before the commit: ANALYZE may run
    inside one (VACUUM may not), it sees the rows this transaction loaded, and its
    statistics (pg_statistic) commit with them, so the database is never seen
    restored without them, and a failed ANALYZE rolls the restore back whole rather
    than leaving one restored but unanalysed. It samples (300 x the statistics target
    rows a table): seconds even for large tables."""
    conn.execute(text("ANALYZE " + ", ".join(table for table, _ in HUB_TABLES)))


def _database_error(err: BaseException) -> HubJobsError:
    orig = err.orig if isinstance(err, sa_exc.DBAPIError) else err
    refusal = refused_writes(err)
    if refusal is not None:
        state = getattr(orig, "sqlstate", None)
        log.warning("restore: the database refuses writes: %s", orig)
        return Unavailable(
            f"the database refused to write (SQLSTATE {state}: it is full or read-only); "
            "nothing was committed",
            code=refusal,
        )
    if is_outage(err):
        log.info("restore: the database did not answer: %r", orig)
        return Unavailable(
            "the database does not answer (or cannot be reached at that URL)",
            code="database_unavailable",
        )
    if isinstance(orig, psycopg.DataError | psycopg.IntegrityError):
        state = getattr(orig, "sqlstate", None)
        log.info("restore: the database refused the archive's rows: %s", orig)
        return ArchiveError(
            f"the database refused the archive's rows (SQLSTATE {state})", code="archive_corrupt"
        )
    log.warning("restore: the database refused the restore: %s", orig)
    state = getattr(orig, "sqlstate", None)
    return RestoreRefused(
        f"the database refused the restore (SQLSTATE {state}); nothing was committed",
        code="database_failed",
    )


def _require_empty(conn: Connection, manifest: Manifest) -> bool:
    """Refuses a database with rows or with a schema of another version; True when it
    has the archive's schema already (without rows), False when it has none."""
    tables = set(
        conn.execute(
            text(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
            )
        ).scalars()
    )
    if not tables:
        return False
    version = (
        conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        if ("alembic_version" in tables)
        else None
    )
    if version != manifest.schema_version:
        raise RestoreRefused(
            f"the database already has a schema ({version or 'unknown'}); restore needs an "
            f"empty database, or an empty one at the archive's version {manifest.schema_version}",
            code="database_not_empty",
        )
    for table in sorted(tables - {"alembic_version"}):
        if conn.execute(text(f'SELECT EXISTS (SELECT 1 FROM "{table}")')).scalar():
            raise RestoreRefused(
                f"the database is not empty (table {table} has rows)", code="database_not_empty"
            )
    return True


def _set_keys_aside(conn: Connection) -> list[str]:
    """Drops the hub tables' primary keys, unique constraints, other indexes and the
    foreign keys from or to them; returns the statements that build them again (keys
    and indexes first, then foreign keys), to run once the rows are in. A COPY into
    bare tables is much faster, and each foreign key is then validated in one pass
    instead of row by row."""
    hub = [table for table, _ in HUB_TABLES]
    rows = conn.execute(
        text(
            """
            WITH hub AS (
                SELECT c.oid FROM pg_class c
                 WHERE c.relnamespace = 'public'::regnamespace AND c.relname = ANY(:hub)
            )
            SELECT 1 AS step,
                   format('ALTER TABLE %s DROP CONSTRAINT %I', conrelid::regclass, conname),
                   format('ALTER TABLE %s ADD CONSTRAINT %I %s',
                          conrelid::regclass, conname, pg_get_constraintdef(oid)),
                   conname::text AS name
              FROM pg_constraint
             WHERE contype = 'f'
               AND (conrelid IN (SELECT oid FROM hub) OR confrelid IN (SELECT oid FROM hub))
            UNION ALL
            SELECT 2,
                   format('ALTER TABLE %s DROP CONSTRAINT %I', conrelid::regclass, conname),
                   format('ALTER TABLE %s ADD CONSTRAINT %I %s',
                          conrelid::regclass, conname, pg_get_constraintdef(oid)),
                   conname::text
              FROM pg_constraint
             WHERE contype IN ('p', 'u') AND conrelid IN (SELECT oid FROM hub)
            UNION ALL
            SELECT 3, format('DROP INDEX %s', i.indexrelid::regclass),
                   pg_get_indexdef(i.indexrelid), i.indexrelid::regclass::text
              FROM pg_index i
             WHERE i.indrelid IN (SELECT oid FROM hub)
               AND NOT EXISTS (SELECT 1 FROM pg_constraint c
                                WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid)
             ORDER BY 1, 4
            """
        ),
        {"hub": hub},
    ).all()
    for row in rows:
        conn.execute(text(row[1]))
    builds = [row[2] for row in rows if row[0] != 1]
    return builds + [row[2] for row in rows if row[0] == 1]


def _check_index(conn: Connection, source: Archive) -> None:
    """The files restored are the ones the attachments table names, and no others."""
    rows = conn.execute(
        text("SELECT id::text, storage_path, size_bytes, sha256 FROM attachments")
    ).all()
    in_table = {row[0]: (row[1], row[2], row[3]) for row in rows}
    in_index = {a.id: (a.storage_path, a.size, a.sha256) for a in source.attachments}
    if in_table != in_index:
        raise ArchiveError(
            "the attachment index does not agree with the attachments table",
            code="archive_corrupt",
        )


def _copy(
    conn: Connection, source: Archive, table: str, staging: Future[None], freeze: bool
) -> int:
    """Loads one table, its bytes verified on the way (a mismatch aborts the COPY).
    Into a table this transaction created, rows go in frozen (COPY FREEZE): no later
    pass has to set their hint bits or freeze them."""
    started = time.perf_counter()
    raw = conn.connection.driver_connection
    assert isinstance(raw, psycopg.Connection)
    with raw.cursor() as cursor:
        with cursor.copy(f"COPY {table} FROM STDIN{' (FREEZE)' if freeze else ''}") as copy:
            for data in _prefetched(source.table_blocks(table)):
                if staging.done():
                    staging.result()  # a failed staging ends the COPY with its error
                copy.write(data)
        rows = int(cursor.rowcount)
    expected = source.tables[table].rows
    if rows != expected:
        raise ArchiveError(
            f"{table}: loaded {rows} rows, the manifest says {expected}", code="archive_corrupt"
        )
    log.debug("restore: %s, %d rows, in %.2f s", table, rows, time.perf_counter() - started)
    return rows


_END = object()
_clock = threading.local()


def _lap(done: str | None) -> None:
    """Logs (debug) how long the step just ``done`` took; None starts the clock."""
    now = time.perf_counter()
    if done is not None:
        log.debug("restore: %s in %.2f s", done, now - getattr(_clock, "last", now))
    _clock.last = now


def _prefetched(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """``blocks`` read (inflated, hashed) on a thread of its own, up to PREFETCH ahead,
    while the caller sends the ones before to the database; its error comes out here."""
    handoff: queue.Queue[object] = queue.Queue(PREFETCH)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for block in blocks:
                if not put(block):
                    return
            put(_END)
        except BaseException as err:
            put(err)
        finally:
            close = getattr(blocks, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=produce, name="restore-read", daemon=True)
    worker.start()
    try:
        while (item := handoff.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, bytes)
            yield item
    finally:
        stop.set()
        worker.join()
