"""Restore: an empty database and its attachment folder from a backup archive, all or
nothing; or, with ``replace_workspace``, one workspace of a running hub.

The archive is checked whole, the rows loaded into a staging schema (by COPY on several
connections) while the files are staged in a private folder of DIR, and one final
transaction moves the staging schema in (or replaces the workspace's rows); its commit
is the restore. Steps, refusal codes and what a kill leaves: docs/guides/backup.md.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import PoolProxiedConnection

from hubjobs.archive.format import HUB_TABLES, SEQUENCES, Manifest
from hubjobs.archive.reader import ARCHIVE_ERROR_CODES, Archive, ArchiveError, open_archive
from hubjobs.db.engine import plain_url, sync_engine
from hubjobs.db.errors import driver_error, is_outage, refused_writes, sqlstate_of
from hubjobs.db.limits import ConnectOptions
from hubjobs.db.migrate import head_revision, known_revisions, upgrade_on
from hubjobs.errors import HubJobsError, InvalidInput, Unavailable
from hubjobs.ops import keys, replace, staging_schema
from hubjobs.ops.fanout import run_groups
from hubjobs.ops.parallel_copy import ParallelCopy
from hubjobs.ops.prefetch import prefetched
from hubjobs.ops.restore_phases import reached
from hubjobs.ops.staging import AttachmentStore, Stopped
from hubjobs.readmodel.status import Surface
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
    "attachments_dir_required",
    "not_a_workspace_archive",
    "database_not_migrated",
    "workspace_busy",
    "archive_conflict",
)
# Loading connections when neither the caller nor HUBJOBS_RESTORE_CONNECTIONS says:
# one per core (each COPY keeps a backend's core busy compressing), at most this many.
DEFAULT_CONNECTIONS = 4
# Every restore connection's session: memory for building indexes, no server timeout but
# the bulk purpose's generous ones (``bulk_settings``), and a backend whose client was
# killed stops within a second rather than hold the restores' lock.
BULK_SETTINGS = {
    "maintenance_work_mem": "256MB",
    "statement_timeout": "0",
    "lock_timeout": "0",
    "idle_in_transaction_session_timeout": "0",
    "transaction_timeout": "0",
    "client_connection_check_interval": "1000",
}


def bulk_settings(settings: Settings) -> dict[str, str]:
    """BULK_SETTINGS with the bulk purpose's statement and lock bounds (0: none)."""
    return {
        **BULK_SETTINGS,
        "statement_timeout": str(int(settings.db_bulk_timeout_seconds * 1000)),
        "lock_timeout": str(int(settings.db_bulk_lock_timeout_seconds * 1000)),
    }


def default_connections() -> int:
    return max(1, min(DEFAULT_CONNECTIONS, os.cpu_count() or 1))


# Any number, the same for every restore: two restores into one database take turns.
ADVISORY_LOCK = 0x6875626A6F6273
_SET = "SELECT set_config(%s, %s, false) WHERE current_setting(%s, true) IS NOT NULL"


class RestoreRefused(HubJobsError):
    code = "database_failed"


class CommitUnknown(Unavailable):
    """The database went away during the final COMMIT: whether it committed is unknown."""

    code = "database_unavailable"


@dataclass
class RestoreReport:
    backup_id: str
    created_at: str
    archive_schema_version: str
    schema_version: str
    # What the archive holds: "hub", or "workspace" and its id.
    scope: str = "hub"
    workspace_id: str | None = None
    # Whether it replaced its workspace in a running hub (else: an empty database).
    replaced: bool = False
    tables: dict[str, int] = field(default_factory=dict)
    attachments: int = 0
    attachment_bytes: int = 0
    # Files of the workspace's former attachments that the archive does not hold, removed.
    attachments_removed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def restore(
    archive: Path,
    database_url: str,
    attachments_dir: Path,
    *,
    max_bytes: int | None = None,
    connections: int | None = None,
    replace_workspace: bool = False,
) -> RestoreReport:
    """Restores ``archive`` into ``database_url`` and ``attachments_dir``; unset,
    ``max_bytes`` and ``connections`` (how many load at once) come from the settings."""
    settings = Settings()
    if max_bytes is None:
        max_bytes = settings.restore_max_bytes
    loaders = connections or settings.restore_connections or default_connections()
    engine = _engine(database_url, settings, loaders)
    with open_archive(
        archive, max_bytes=max_bytes, known_schema_versions=known_revisions()
    ) as source:
        manifest = source.manifest
        if replace_workspace and manifest.workspace_id is None:
            engine.dispose()
            raise RestoreRefused(
                "only a workspace's archive replaces its workspace in a running hub; this "
                "one holds a whole hub (restore it into an empty database)",
                code="not_a_workspace_archive",
            )
        store = AttachmentStore(attachments_dir, source.attachments)
        report = RestoreReport(
            backup_id=str(manifest.backup_id),
            created_at=manifest.created_at.isoformat(),
            archive_schema_version=manifest.schema_version,
            schema_version=head_revision(),
            scope=manifest.scope,
            workspace_id=None if manifest.workspace_id is None else str(manifest.workspace_id),
            attachments=len(source.attachments),
            attachment_bytes=manifest.attachment_bytes,
        )
        run = _Restore(engine, source, store, report, bulk_settings(settings), loaders)
        run.pause_at = settings.restore_pause_at
        run.replacing = replace_workspace
        try:
            run.run()
        except (sa_exc.DBAPIError, psycopg.Error) as err:
            raise _database_error(err) from None
        finally:
            engine.dispose()
        store.install()
        if run.removed:
            report.attachments_removed = store.remove(run.removed)
        _lap("install")
    log.info("restored backup %s into %s", report.backup_id, database_url.rsplit("@", 1)[-1])
    return report


def _database_of(url: str) -> tuple[str, str, str] | None:
    """(host, port, database) a URL names, None when it does not parse."""
    try:
        given = conninfo_to_dict(plain_url(url))
    except psycopg.ProgrammingError:
        return None
    return (
        str(given.get("host") or "localhost"),
        str(given.get("port") or "5432"),
        str(given.get("dbname") or ""),
    )


def default_attachments_dir(database_url: str, settings: Settings) -> Path:
    """This hub's attachment folder, only when ``database_url`` is this hub's database:
    another hub's files never land in this hub's folder (``attachments_dir_required``)."""
    try:
        own = settings.resolved_database_url()
    except HubJobsError:
        own = None
    target = _database_of(database_url)
    if own is None or target is None or target != _database_of(own):
        raise InvalidInput(
            "this database is not the hub's own (HUBJOBS_DATABASE_URL): say where its "
            "attachment files go with --attachments-dir",
            code="attachments_dir_required",
        )
    return settings.resolved_attachments_dir


def _engine(database_url: str, settings: Settings, loaders: int) -> Engine:
    invalid = InvalidInput(
        "the database URL is not a PostgreSQL URL restore can use", code="invalid_database_url"
    )
    if not database_url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        raise invalid
    try:
        # Connecting bounded, TCP keepalives on; the load's bounds are set per session
        # (bulk_settings). Room for the loaders and the one that steers them.
        return sync_engine(database_url, ConnectOptions.of(settings), pool_size=loaders + 1)
    except (sa_exc.ArgumentError, ValueError):
        raise invalid from None


class _Restore:
    """One restore's database part: the steering connection (``conn``: the lock, the
    checks, the schema, the final transaction) and the loaders, with the staging of
    the attachment files beside them; see the module's docstring."""

    def __init__(
        self,
        engine: Engine,
        source: Archive,
        store: AttachmentStore,
        report: RestoreReport,
        session: dict[str, str],
        loaders: int,
    ) -> None:
        self.engine = engine
        self.source = source
        self.store = store
        self.report = report
        self.session = session
        self.loaders = loaders
        self.pause_at: str | None = None
        # Asked to replace the archive's workspace in a running hub (hubjobs.ops.replace);
        # ``live_hub`` once the database turned out to be one (else: as an empty one).
        self.replacing = False
        self.live_hub = False
        # The storage paths of the attachments a workspace's replacement removed.
        self.removed: list[str] = []
        self.schema = staging_schema.new_name()
        self._opened: list[PoolProxiedConnection] = []
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="restore-stage")
        self._staging: Future[None] | None = None

    def run(self) -> None:
        _lap(None)
        with self.engine.connect() as conn:
            for name, value in self.session.items():
                conn.exec_driver_sql(_SET, (name, value, name))
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": ADVISORY_LOCK})
            conn.commit()
            try:
                self._restore(conn)
            finally:
                try:
                    conn.rollback()
                    conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_LOCK})
                    conn.commit()
                except Exception as err:  # the session may be gone: its lock went with it
                    log.info("restore: unlocking after %r", err)

    def _restore(self, conn: Connection) -> None:
        staged = False
        try:
            with conn.begin():
                has_schema = self._check_target(conn)
            self.store.check()  # the last refusal: nothing has been written anywhere yet
            staged = True
            aside = self._create_schema(conn, has_schema)
            _lap("schema")
            self._load()
            _check_index(conn, self.source, self.schema)
            _lap("tables")
            self._build(aside)
            self._finish_schema(conn)
            self._wait_for_files()
            if self.live_hub:
                with conn.begin():
                    replace.check_scope(conn, self.schema, self._workspace)
                    self.store.replaceable = frozenset(
                        replace.live_attachment_paths(conn, self._workspace)
                    )
            self.store.prepare()
            _lap("folders")
            self._final(conn)
        except CommitUnknown:
            raise  # the staged files stay (see _final)
        except BaseException as err:
            self._stop.set()
            self._close_loaders()
            if staged:
                self._drop_staging(conn)
            self._pool.shutdown(wait=True)
            self.store.discard()
            if isinstance(err, Stopped):  # only ever raised after another error
                raise RestoreRefused("the restore was stopped") from None
            raise
        finally:
            self._close_loaders()
            self._pool.shutdown(wait=True)

    @property
    def _workspace(self) -> uuid.UUID:
        workspace = self.source.manifest.workspace_id
        assert workspace is not None, "a workspace's archive"
        return workspace

    def _check_target(self, conn: Connection) -> bool:
        """The database is empty (True: with the archive's schema), or, replacing a
        workspace, a running hub at this version (then ``live_hub``; False)."""
        if self.replacing and _live_version(conn) == self.report.schema_version:
            self.live_hub = True
            self.report.replaced = True
            self.store.adopt_identical = True
            replace.require_idle(conn, self._workspace)
            self.store.replaceable = frozenset(replace.live_attachment_paths(conn, self._workspace))
            return False
        return _require_empty(conn, self.source.manifest, replacing=self.replacing)

    def _create_schema(self, conn: Connection, has_schema: bool) -> keys.KeysAside:
        """The staging schema at the archive's version, keys set aside; leftovers of
        restores that did not finish dropped first. (``has_schema``: the live schema is
        the archive's, empty; the swap replaces it.)"""
        log.debug(
            "restore: into %s, live schema %s",
            self.schema,
            "empty" if not has_schema else "at the archive's version",
        )
        with conn.begin():
            staging_schema.drop_leftovers(conn)
            staging_schema.create(conn, self.schema)
            conn.exec_driver_sql(_SET, ("search_path", replace.quoted(self.schema), "search_path"))
            upgrade_on(conn, self.source.manifest.schema_version)
            return keys.set_aside(conn, self.schema)

    def _load(self) -> None:
        """Every table through the loaders, the attachment files staged beside them; the
        loaders commit only once every table arrived whole and counted."""
        self.store.open()
        self._staging = self._pool.submit(self.store.stage, self.source, self._stop)
        opened = [self._connect() for _ in range(self.loaders)]
        largest = max(HUB_TABLES, key=lambda t: self.source.tables[t[0]].bytes)[0]
        targets = {self._qualified(table): table for table, _ in HUB_TABLES}

        def streams() -> Iterator[tuple[str, Iterator[bytes]]]:
            for target, table in targets.items():
                yield target, prefetched(self.source.table_blocks(table))

        def dispatched(target: str, n: int) -> None:
            if n == 1 and targets[target] == largest:
                reached("load", self.pause_at)

        rows = ParallelCopy(opened).load(streams(), self._check_files, dispatched)
        for target, table in targets.items():
            expected = self.source.tables[table].rows
            if rows[target] != expected:
                raise ArchiveError(
                    f"{table}: loaded {rows[target]} rows, the manifest says {expected}",
                    code="archive_corrupt",
                )
            self.report.tables[table] = expected
        for raw in opened:
            raw.commit()
            raw.autocommit = True

    def _build(self, aside: keys.KeysAside) -> None:
        """Keys and indexes, table by table on the loaders at once (the largest table
        first); the foreign keys added unvalidated, then validated the same way."""
        loaders = [self._driver(c) for c in self._opened]
        by_size = sorted(aside.builds, key=self._bytes_of, reverse=True)
        run_groups(loaders, [aside.builds[t] for t in by_size], self._pause("keys"))
        _lap("keys and indexes")
        run_groups(loaders[:1], [[add for _, add, _ in aside.foreign_keys]])
        validations: dict[str, list[str]] = {}
        for table, _, validate in aside.foreign_keys:
            validations.setdefault(table, []).append(validate)
        by_size = sorted(validations, key=self._bytes_of, reverse=True)
        run_groups(loaders, [validations[t] for t in by_size], self._pause("validate"))
        _lap("foreign keys")

    def _finish_schema(self, conn: Connection) -> None:
        """Sequences past the rows, the schema at today's head, then ANALYZE in staging:
        statistics move with the tables, and a database without them gets bad plans
        until autovacuum comes by."""
        with conn.begin():
            _set_sequences(conn, self.schema)
            if self.source.manifest.schema_version != self.report.schema_version:
                upgrade_on(conn, "head")
        if self.live_hub:
            return  # its rows are copied into the live tables, whose statistics stay
        loaders = [self._driver(c) for c in self._opened]
        tables = sorted((t for t, _ in HUB_TABLES), key=self._bytes_of, reverse=True)
        run_groups(loaders, [[f"ANALYZE {self._qualified(t)}"] for t in tables])
        _lap("migration and analyze")

    def _final(self, conn: Connection) -> None:
        """The final transaction: into an empty database, the live schema checked again
        under lock and the staged one moved in; into a running hub, the workspace's rows
        replaced by the staged ones (hubjobs.ops.replace). Its commit is the restore."""
        reached("swap", self.pause_at)
        # Here, not at the top: the job rows' package brings the ORM, which a restore
        # would otherwise load before its COPY starts.
        from hubjobs.job_rows import audit

        # Who restores: a hub operator at the shell, no account of the hub.
        at_the_shell = audit.Operator(None, Surface.cli)
        committing = False
        try:
            with conn.begin():
                if self.live_hub:
                    self._replace(conn)
                else:
                    _lock_live(conn)
                    has_schema = _require_empty(conn, self.source.manifest)
                    staging_schema.swap_in(conn, self.schema, replace=has_schema)
                # The restore is the commit: its audit event commits with it.
                restored = self._workspace if self.live_hub else None
                audit.record_restore(conn, restored, at_the_shell, self.report.backup_id)
                reached("swapped", self.pause_at)
                committing = True
            _lap("commit")
        except BaseException as err:
            if committing and is_outage(err) and refused_writes(err) is None:
                # The server went away during COMMIT: whether it committed is unknown.
                # The staged files stay, so that nothing the database may now name is lost.
                self.store.abandon()
                log.error("restore: the database went away while committing: %r", err)
                raise CommitUnknown(
                    "the database stopped answering while the restore committed: check "
                    "whether it holds the restored rows; if it does, the attachment files "
                    f"are in {self.store.staging_path} (named by attachment id), otherwise "
                    "remove that folder",
                    code="database_unavailable",
                ) from None
            raise

    def _replace(self, conn: Connection) -> None:
        """In the final transaction: the workspace's row locked (no page or membership
        can be added to it meanwhile), checked again, its rows replaced; the staging
        schema dropped."""
        workspace = self._workspace
        conn.execute(
            text("SELECT id FROM public.workspaces WHERE id = :w FOR UPDATE"), {"w": workspace}
        )
        if _live_version(conn) != self.report.schema_version:
            raise RestoreRefused(
                "the hub's schema changed under the restore", code="database_not_migrated"
            )
        replace.require_idle(conn, workspace)
        replace.advance_sequences(conn, self.schema)
        replace.find_conflicts(conn, self.schema, workspace)
        self.removed = replace.replace(conn, self.schema, workspace)
        staging_schema.drop(conn, self.schema)

    # --- helpers --------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection:
        """A loader: a connection with the restore's session settings, the staging
        schema first on its search_path, in a transaction."""
        proxy = self.engine.raw_connection()
        self._opened.append(proxy)
        raw = self._driver(proxy)
        for name, value in {**self.session, "search_path": replace.quoted(self.schema)}.items():
            raw.execute(_SET, (name, value, name))
        raw.commit()
        return raw

    @staticmethod
    def _driver(proxy: PoolProxiedConnection) -> psycopg.Connection:
        raw = proxy.driver_connection
        assert isinstance(raw, psycopg.Connection)
        return raw

    def _close_loaders(self) -> None:
        for proxy in self._opened:
            try:
                proxy.close()  # back to the pool, rolled back
            except Exception as err:  # a connection that is gone holds nothing
                log.info("restore: closing a loader: %r", err)
        self._opened.clear()

    def _drop_staging(self, conn: Connection) -> None:
        """On the way out after an error: the staging schema goes (if the session is
        gone, the next restore drops it)."""
        try:
            conn.rollback()
            with conn.begin():
                staging_schema.drop(conn, self.schema)
        except Exception as err:
            log.info("restore: could not drop %s: %r", self.schema, err)

    def _check_files(self) -> None:
        if self._staging is not None and self._staging.done():
            self._staging.result()  # a failed staging stops the load with its error

    def _wait_for_files(self) -> None:
        if self._staging is not None:
            self._staging.result()
        _lap("attachments (beyond the rest)")

    def _qualified(self, table: str) -> str:
        return f"{replace.quoted(self.schema)}.{table}"

    def _bytes_of(self, table: str) -> int:
        entry = self.source.tables.get(table)
        return entry.bytes if entry is not None else 0

    def _pause(self, phase: str) -> Callable[[], None]:
        return lambda: reached(phase, self.pause_at)


def _set_sequences(conn: Connection, schema: str) -> None:
    """Each serial column's sequence past the restored rows."""
    for table, column in SEQUENCES:
        qualified = f"{replace.quoted(schema)}.{table}"
        conn.execute(
            text(
                f"SELECT setval(pg_get_serial_sequence(:table, '{column}'), "
                f"COALESCE((SELECT max({column}) FROM {qualified}), 0) + 1, false)"
            ),
            {"table": qualified},
        )


def _database_error(err: BaseException) -> HubJobsError:
    orig, state = driver_error(err), sqlstate_of(err)
    refusal = refused_writes(err)
    if refusal is not None:
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
        log.info("restore: the database refused the archive's rows: %s", orig)
        return ArchiveError(
            f"the database refused the archive's rows (SQLSTATE {state})", code="archive_corrupt"
        )
    log.warning("restore: the database refused the restore: %s", orig)
    return RestoreRefused(
        f"the database refused the restore (SQLSTATE {state}); nothing was committed",
        code="database_failed",
    )


def _lock_live(conn: Connection) -> None:
    """Every table of the live schema, locked against every other session until the
    final transaction ends: none can write a row between the check and the swap."""
    tables = conn.execute(
        text(
            "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables WHERE schemaname = :live"
        ),
        {"live": staging_schema.LIVE},
    ).scalars()
    names = ", ".join(str(t) for t in tables)
    if names:
        conn.execute(text(f"LOCK TABLE {names} IN ACCESS EXCLUSIVE MODE"))


def _table_with_rows(conn: Connection, tables: set[str]) -> str | None:
    for table in sorted(tables - {"alembic_version"}):
        if conn.execute(text(f'SELECT EXISTS (SELECT 1 FROM public."{table}")')).scalar():
            return table
    return None


def _live_version(conn: Connection) -> str | None:
    """The live schema's Alembic version, None without one."""
    found = conn.execute(text("SELECT to_regclass('public.alembic_version') IS NOT NULL"))
    if not found.scalar():
        return None
    return conn.execute(text("SELECT version_num FROM public.alembic_version")).scalar()


def _require_empty(conn: Connection, manifest: Manifest, *, replacing: bool = False) -> bool:
    """Refuses a live schema with rows or of another version (``database_not_migrated``
    when ``replacing``); True when it holds the archive's schema, empty."""
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
        conn.execute(text("SELECT version_num FROM public.alembic_version")).scalar()
        if ("alembic_version" in tables)
        else None
    )
    full = _table_with_rows(conn, tables)
    if replacing and (version != manifest.schema_version or full is not None):
        raise RestoreRefused(
            f"the hub's schema is at {version or 'an unknown version'}, this version's at "
            f"{head_revision()}: migrate it first (hubjobs migrate)",
            code="database_not_migrated",
        )
    if version != manifest.schema_version:
        raise RestoreRefused(
            f"the database already has a schema ({version or 'unknown'}); restore needs an "
            f"empty database, or an empty one at the archive's version {manifest.schema_version}",
            code="database_not_empty",
        )
    if full is not None:
        hint = (
            ""
            if manifest.workspace_id is None
            else "; a workspace's archive replaces its workspace in a running hub with "
            "--replace-workspace"
        )
        raise RestoreRefused(
            f"the database is not empty (table {full} has rows){hint}", code="database_not_empty"
        )
    return True


def _check_index(conn: Connection, source: Archive, schema: str) -> None:
    """The files restored are the ones the attachments table names, and no others."""
    with conn.begin():
        rows = conn.execute(
            text(
                "SELECT id::text, storage_path, size_bytes, sha256 "
                f"FROM {replace.quoted(schema)}.attachments"
            )
        ).all()
    in_table = {row[0]: (row[1], row[2], row[3]) for row in rows}
    in_index = {a.id: (a.storage_path, a.size, a.sha256) for a in source.attachments}
    if in_table != in_index:
        raise ArchiveError(
            "the attachment index does not agree with the attachments table",
            code="archive_corrupt",
        )


_clock = threading.local()


def _lap(done: str | None) -> None:
    """Logs (debug) how long the step just ``done`` took; None starts the clock."""
    now = time.perf_counter()
    if done is not None:
        log.debug("restore: %s in %.2f s", done, now - getattr(_clock, "last", now))
    _clock.last = now
