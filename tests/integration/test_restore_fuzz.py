"""Restore against hostile archives and a hostile attachments folder (issue 10, item 5).

A real archive of a small hub with attachments (written by hubjobs.archive.writer, the
backup's own code) is damaged in every way an attacker or a bad disk could: random
byte flips, truncations and splices aimed at the zip's structure; members renamed,
duplicated, dropped or added; storage paths absolute, with ``..``, repeated, nested or
merely odd; malformed index lines; COPY rows of the wrong shape; checksums, sizes and
counts that disagree; zip bombs, honest and lying about their size. The attachments
folder (DIR) is planted with links at targets, at their folders and at staging names.
Structural damage is made the way an attacker would, with every checksum recomputed,
so that only the check under test can catch it.

Every attempt must end within a bounded time either in a refusal with a stated code,
the target database without a single table and the sandbox (DIR, the folder beside it
that links point into, the archives) exactly as before, compared by a full listing
with link targets and file hashes; or, where the damage touched nothing that matters
(a flipped timestamp), in an exact restore: every table's COPY text as in the
archive, every file at its path and nowhere else. Anything else (another code, an
``internal_error``, a stray file) fails the test.

HUBJOBS_FUZZ_EXAMPLES (default 60) sets how many examples each generated test runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import shutil
import threading
import time
import unicodedata
import uuid
import zipfile
import zlib
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hubjobs.archive.format import (
    ATTACHMENT_INDEX,
    HUB_TABLES,
    INDEX_LINE_MAX_BYTES,
    MANIFEST,
    attachment_member,
    table_member,
)
from hubjobs.archive.reader import ARCHIVE_ERROR_CODES, MemberReader, open_archive
from hubjobs.db.engine import async_engine
from hubjobs.devstack.demo_data import create_attachment, seed_demo
from hubjobs.devstack.embedded import StackInfo
from hubjobs.errors import HubJobsError
from hubjobs.ops.restore import RESTORE_ERROR_CODES, restore
from hubjobs.ops.staging import AttachmentStore
from tests.support.archive_helpers import (
    Databases,
    Parts,
    build_zip,
    bytes_under,
    deflate_zeros,
    raw_zip,
    snapshot_archive,
    tables_of,
    tree,
)
from tests.support.servers import TEMPLATE

EXAMPLES = int(os.environ.get("HUBJOBS_FUZZ_EXAMPLES", "60"))
ATTEMPT_SECONDS = 30.0
ARCHIVE = set(ARCHIVE_ERROR_CODES)
CORRUPT = {"archive_corrupt"}
ARCHIVE_MANIFEST = {"archive_unreadable", "archive_corrupt"}
SIZES = [0, 1, 700, 3000, 20_000, 70_000]
MIB = 1 << 20

fuzz = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# --- the source archive and the sandbox ---------------------------------------------------


@dataclass(frozen=True)
class Source:
    archive: bytes

    def parts(self) -> Parts:
        return Parts.of(self.archive)


@pytest.fixture(scope="module")
def databases(stack: StackInfo) -> Iterator[Databases]:
    made = Databases(stack)
    yield made
    made.drop_all()


@pytest.fixture(scope="module")
def source(databases: Databases, tmp_path_factory: pytest.TempPathFactory) -> Source:
    """A small hub (eight pages, six attachments, a page with tabs, newlines,
    backslashes and non-ASCII text) backed up by the archive writer."""
    url = databases.create(TEMPLATE)
    folder = tmp_path_factory.mktemp("fuzz-source") / "attachments"

    async def make() -> bytes:
        engine = async_engine(url, pool_size=1)
        try:
            async with engine.begin() as conn:
                course = await seed_demo(conn, 8)
                for i, size in enumerate(SIZES):
                    content = os.urandom(size) if i % 2 else (b"hub " * size)[:size]
                    page = course.page_ids[i % len(course.page_ids)]
                    await create_attachment(conn, folder, page, f"file-{i}.bin", content)
        finally:
            await engine.dispose()
        with psycopg.connect(url, autocommit=True) as plain:
            plain.execute(
                "UPDATE pages SET markdown = E'a\\ttab, a\\nnewline, a \\\\ backslash, é ✓' "
                "WHERE id = %s",
                (course.page_ids[3],),
            )
        out = io.BytesIO()
        await snapshot_archive(url, folder, out)
        return out.getvalue()

    # Its own thread and event loop: the session's loop is pytest-asyncio's.
    with ThreadPoolExecutor(1) as pool:
        archive = pool.submit(asyncio.run, make()).result()
    return Source(archive)


class Sandbox:
    """DIR, a folder beside it (``outside``, where planted links point), the archives
    tried, and an empty target database."""

    def __init__(self, root: Path, databases: Databases) -> None:
        self.root = root
        self.dir = root / "dir"
        self.outside = root / "outside"
        self.archives = root / "archives"
        self.databases = databases
        self.target = databases.create()
        self.tries = 0
        for folder in (self.dir, self.outside / "folder", self.archives):
            folder.mkdir(parents=True)
        (self.outside / "secret").write_bytes(b"not to be touched\n")

    def attempt(
        self,
        archive: bytes,
        expect: Collection[str],
        *,
        success: bool = False,
        max_bytes: int | None = None,
        watch_disk: int | None = None,
        intact: bytes | None = None,
    ) -> str | None:
        """Restores ``archive``; returns the refusal's code (None for a restore) after
        checking everything the backup guide promises of a refusal. A damaged archive that
        restores must restore exactly ``intact`` (the archive before the damage)."""
        assert set(expect) <= set(RESTORE_ERROR_CODES)
        self.tries += 1
        path = self.archives / f"{self.tries}.zip"
        path.write_bytes(archive)
        before, before_dir = tree(self.root), tree(self.dir)
        peak = _DiskWatch(self.dir) if watch_disk is not None else None
        started = time.monotonic()
        try:
            restore(path, self.target, self.dir, max_bytes=max_bytes)
            code, message = None, ""
        except HubJobsError as err:
            code, message = err.code, err.message
        finally:
            took = time.monotonic() - started
            highest = peak.stop() if peak else 0
        assert took < ATTEMPT_SECONDS, f"took {took:.1f} s"
        if watch_disk is not None:
            assert highest <= watch_disk, f"{highest} bytes written into DIR"
        if code is None:
            try:
                assert success, "an archive that had to be refused was restored"
                self._check_restored(intact or archive, before_dir)
            finally:
                self.reset()  # a failed check must not leave the next try a full database
        else:
            assert code in expect, f"{code}: {message}"
            assert tables_of(self.target) == set(), code
            assert tree(self.root) == before, f"{code}: the sandbox changed"
        path.unlink()
        return code

    def _check_restored(self, archive: bytes, before_dir: dict[str, tuple[object, ...]]) -> None:
        parts = Parts.of(archive)
        with psycopg.connect(self.target) as conn:
            for table, _ in HUB_TABLES:
                out = io.BytesIO()
                with conn.cursor().copy(f"COPY {table} TO STDOUT") as copy:
                    for data in copy:
                        out.write(data)
                assert out.getvalue() == parts.get(table_member(table)), table
        after = tree(self.dir)
        for path, facts in before_dir.items():
            assert after.get(path) == facts, f"{path} changed"
        expected = {
            e["storage_path"]: (
                "file",
                0o600,
                e["size_bytes"],
                hashlib.sha256(parts.get(attachment_member(e["id"]))).hexdigest(),
            )
            for e in parts.entries()
        }
        new = {p: f for p, f in after.items() if p not in before_dir}
        assert {p: f for p, f in new.items() if f[0] != "dir"} == expected
        folders = {str(Path(p).parent) for p in expected} - {"."}
        every_folder = {str(Path(*Path(f).parts[:i])) for f in folders for i in range(1, 99)}
        assert {p for p, f in new.items() if f[0] == "dir"} <= every_folder

    def reset(self) -> None:
        self.databases.drop(self.target)
        self.target = self.databases.create()
        shutil.rmtree(self.dir)
        self.dir.mkdir()


class _DiskWatch:
    """The most bytes found under a folder, sampled every few milliseconds."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.highest = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.highest = max(self.highest, bytes_under(self.folder))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return max(self.highest, bytes_under(self.folder))


@pytest.fixture
def sandbox(tmp_path: Path, databases: Databases) -> Sandbox:
    return Sandbox(tmp_path / "sandbox", databases)


# --- 1. the untouched archive ------------------------------------------------------------


def test_the_untouched_archive_restores_exactly(sandbox: Sandbox, source: Source) -> None:
    assert sandbox.attempt(source.archive, (), success=True) is None
    assert len(source.parts().entries()) == len(SIZES)


def test_a_restore_leaves_the_planner_statistics_of_what_it_loaded(
    sandbox: Sandbox, source: Source
) -> None:
    """Issue 22, item 3: the restore analyses the tables it loaded before it commits;
    the planner's statistics are there the moment the rows are, not when autovacuum
    comes by."""
    path = sandbox.archives / "whole.zip"
    path.write_bytes(source.archive)
    try:
        restore(path, sandbox.target, sandbox.dir)
        tables = [table for table, _ in HUB_TABLES]
        with psycopg.connect(sandbox.target, autocommit=True) as conn:
            # pg_class and pg_statistic: what the planner reads, committed with the rows.
            planner: dict[str, float] = dict(
                conn.execute(
                    "SELECT c.relname, c.reltuples FROM pg_class c "
                    "WHERE c.relnamespace = 'public'::regnamespace AND c.relname = ANY(%s)",
                    (tables,),
                ).fetchall()
            )
            with_stats = {
                row[0]
                for row in conn.execute(
                    "SELECT DISTINCT tablename FROM pg_stats "
                    "WHERE schemaname = 'public' AND tablename = ANY(%s)",
                    (tables,),
                )
            }
            # The cumulative statistics: the restore's session reports its ANALYZE when
            # it ends; wait for that (bounded), never for a time.
            analysed: dict[str, object] = {}
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                conn.execute("SELECT pg_stat_clear_snapshot()")
                analysed = dict(
                    conn.execute(
                        "SELECT relname, last_analyze FROM pg_stat_user_tables "
                        "WHERE schemaname = 'public' AND relname = ANY(%s)",
                        (tables,),
                    ).fetchall()
                )
                if len(analysed) == len(tables) and all(analysed.values()):
                    break
                conn.execute("SELECT pg_sleep(0.05)")
        assert set(planner) == set(tables)
        # -1: never analysed or vacuumed (PostgreSQL 14 on); 0 for an empty table.
        assert all(planner[t] >= 0 for t in tables), planner
        rows = {entry["name"]: entry["rows"] for entry in source.parts().manifest["tables"]}
        nonempty = {t for t in tables if rows[t] > 0}
        assert nonempty and all(planner[t] > 0 for t in nonempty), planner
        assert with_stats == nonempty, with_stats
        assert all(analysed.get(t) for t in tables), analysed
    finally:
        sandbox.reset()


# --- 2. random damage --------------------------------------------------------------------


def _regions(archive: bytes) -> list[tuple[int, int]]:
    """Where the zip's structure lives: local headers, the central directory, the end
    record, the manifest; and the whole file."""
    regions = [(0, len(archive))]
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        infos = zf.infolist()
        for info in infos:
            start = info.header_offset
            regions.append((start, start + 30 + len(info.filename) + 20))
            if info.filename == MANIFEST:
                regions.append((start, start + 30 + info.compress_size + 60))
        end_of_data = max(i.header_offset + 80 + i.compress_size for i in infos)
    regions.append((min(end_of_data, len(archive) - 1), len(archive)))
    return [(a, min(b, len(archive))) for a, b in regions if a < min(b, len(archive))]


@fuzz
@given(data=st.data())
def test_random_damage_is_refused_or_harmless(
    sandbox: Sandbox, source: Source, data: st.DataObject
) -> None:
    archive = bytearray(source.archive)
    how = data.draw(st.sampled_from(["flip", "flip", "truncate", "splice"]), label="how")
    regions = _regions(source.archive)
    if how == "flip":
        for _ in range(data.draw(st.integers(1, 4), label="flips")):
            start, end = data.draw(st.sampled_from(regions), label="region")
            at = data.draw(st.integers(start, end - 1), label="at")
            archive[at] ^= data.draw(st.integers(1, 255), label="xor")
    elif how == "truncate":
        archive = archive[: data.draw(st.integers(0, len(archive) - 1), label="length")]
    else:
        start, end = data.draw(st.sampled_from(regions), label="region")
        at = data.draw(st.integers(start, end - 1), label="at")
        cut = data.draw(st.integers(0, 64), label="cut")
        insert = data.draw(st.binary(max_size=64), label="insert")
        archive[at : at + cut] = insert
    # Harmless damage (a zip field the reader does not rely on, such as a member's CRC:
    # sha256 verifies the content) must restore the undamaged archive's content exactly.
    restored = sandbox.attempt(bytes(archive), ARCHIVE, success=True, intact=source.archive)
    event(f"{how}: {restored or 'restored'}")


def test_a_member_crc_damaged_restores_the_intact_content(sandbox: Sandbox, source: Source) -> None:
    """Found by the fuzzer: a member's CRC-32, damaged in both its local header and the
    central directory, is not the content (sha256 verifies that): the restore succeeds
    and holds exactly what the undamaged archive holds."""
    archive = bytearray(source.archive)
    name = table_member("workspaces").encode()
    local = archive.find(b"PK\x03\x04")
    central = archive.find(b"PK\x01\x02")
    damaged = 0
    while local != -1:
        if archive[local + 30 : local + 30 + len(name)] == name:
            archive[local + 14] ^= 0xFF
            damaged += 1
        local = archive.find(b"PK\x03\x04", local + 4)
    while central != -1:
        if archive[central + 46 : central + 46 + len(name)] == name:
            archive[central + 16] ^= 0xFF
            damaged += 1
        central = archive.find(b"PK\x01\x02", central + 4)
    assert damaged == 2
    assert sandbox.attempt(bytes(archive), (), success=True, intact=source.archive) is None


# --- 3. members renamed, duplicated, dropped, added ----------------------------------------

HOSTILE_NAMES = [
    "../evil",
    "/etc/evil",
    "attachments/../../evil",
    "tables/../tables/pages.copy",
    "attachments/x/../../../evil",
    "./manifest.json",
    "manifest.json/",
    "MANIFEST.JSON",
    "tables/pages.copy\x00.txt",
    "attachments\\index.jsonl",
    "",
]


@fuzz
@given(data=st.data())
def test_members_renamed_duplicated_dropped_or_added(
    sandbox: Sandbox, source: Source, data: st.DataObject
) -> None:
    parts = source.parts()
    names = [name for name, _ in parts.members]
    target = data.draw(st.sampled_from(names), label="member")
    how = data.draw(st.sampled_from(["rename", "duplicate", "drop", "add"]), label="how")
    other = data.draw(st.sampled_from(HOSTILE_NAMES) | st.sampled_from(names) | st.text())
    # The manifest gone (or renamed) leaves no readable manifest, unless the change also
    # made a name repeat, which is found first.
    expect = ARCHIVE_MANIFEST if target == MANIFEST else CORRUPT
    if how == "rename":
        if other == target:
            return
        parts.members = [(other if n == target else n, d) for n, d in parts.members]
    elif how == "duplicate":
        extra = data.draw(st.sampled_from([parts.get(target), b"", b"other bytes\n"]))
        parts.members.append((target, extra))
    elif how == "drop":
        parts.members = [(n, d) for n, d in parts.members if n != target]
    else:
        expect = CORRUPT
        parts.members.append((other, b"planted\n"))
    try:
        archive = parts.build()
    except (ValueError, UnicodeError):
        return  # a name zipfile itself will not write
    event(f"{how}: {sandbox.attempt(archive, expect)}")


# --- 4. storage paths ---------------------------------------------------------------------

BAD_PATHS = [
    "",
    "/",
    "/etc/passwd",
    "//x",
    "..",
    "../x",
    "a/../b",
    "a/..",
    ".",
    "./a",
    "a/./b",
    "a//b",
    "a/",
    "a\\b",
    "..\\..\\x",
    "a\x00b",
    "a\nb",
    "a\tb",
    "a\x7fb",
    unicodedata.normalize("NFD", "café"),
    "x" * 256,
    "d/" * 40 + "f",
    "y" * 1100,
    ".hubjobs-restore-0123456789abcdef/x",
]
GOOD_PART = st.text(
    alphabet=st.characters(
        codec="utf-8", exclude_characters="/\\", exclude_categories=("Cc", "Cs")
    ),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in (".", ".."))
GOOD_PATHS = st.lists(GOOD_PART, min_size=1, max_size=4).map("/".join)


def path_is_acceptable(paths: list[str]) -> bool:
    """The rule, written out independently of the code under test."""
    for path in paths:
        parts = path.split("/")
        if (
            not path
            or any(0xD800 <= ord(c) <= 0xDFFF for c in path)
            or len(path.encode("utf-8", "surrogatepass")) > 1024
            or len(parts) > 32
            or path != unicodedata.normalize("NFC", path)
            or any(ord(c) < 0x20 or ord(c) == 0x7F or c == "\\" for c in path)
            or any(p in ("", ".", "..") or len(p.encode()) > 255 for p in parts)
            or parts[0].startswith(".hubjobs-restore-")
        ):
            return False
    if len(set(paths)) != len(paths):
        return False
    folders = {"/".join(p.split("/")[:i]) for p in paths for i in range(1, p.count("/") + 1)}
    return not folders & set(paths)


def with_paths(parts: Parts, paths: list[str]) -> None:
    """Gives the attachments these storage paths, in the index and in the attachments
    table alike."""
    entries = parts.entries()
    new = dict(zip((e["id"] for e in entries), paths, strict=False))
    for entry in entries:
        entry["storage_path"] = new.get(entry["id"], entry["storage_path"])
    parts.set_entries(entries)
    lines = []
    for line in parts.get(table_member("attachments")).splitlines(keepends=True):
        fields = line.rstrip(b"\n").split(b"\t")
        if fields[0].decode() in new:
            fields[4] = _copy_escape(new[fields[0].decode()]).encode("utf-8", "surrogatepass")
        lines.append(b"\t".join(fields) + b"\n")
    parts.set_table("attachments", b"".join(lines))


def _copy_escape(value: str) -> str:
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    )


@fuzz
@given(
    paths=st.lists(
        GOOD_PATHS | st.sampled_from(BAD_PATHS) | st.text(max_size=30),
        min_size=1,
        max_size=len(SIZES),
    )
)
def test_storage_paths_are_refused_unless_plain_and_then_land_exactly(
    sandbox: Sandbox, source: Source, paths: list[str]
) -> None:
    parts = source.parts()
    try:
        with_paths(parts, paths)
        archive = parts.build()
    except UnicodeError:
        return
    acceptable = path_is_acceptable(
        paths + [e["storage_path"] for e in parts.entries()[len(paths) :]]
    )
    code = sandbox.attempt(archive, {"archive_path_invalid"}, success=acceptable)
    assert (code is None) == acceptable
    event(code or "restored")


@pytest.mark.parametrize(
    "paths",
    [
        ["a", "a"],
        ["a", "a/b"],
        ["a/b/c", "a/b"],
        ["x/y", "x/y/z/w"],
        ["/abs/olute"],
        ["../../../tmp/evil"],
        ["ok/../../evil"],
    ],
)
def test_repeated_nested_absolute_or_climbing_paths_are_refused(
    sandbox: Sandbox, source: Source, paths: list[str]
) -> None:
    parts = source.parts()
    with_paths(parts, paths)
    assert sandbox.attempt(parts.build(), {"archive_path_invalid"}) == "archive_path_invalid"


# --- 5. malformed index lines ------------------------------------------------------------

LineChange = Callable[[list[bytes]], list[bytes]]


def _edit_first(change: Callable[[dict[str, object]], object]) -> LineChange:
    def apply(lines: list[bytes]) -> list[bytes]:
        entry = json.loads(lines[0])
        change(entry)
        return [json.dumps(entry).encode() + b"\n", *lines[1:]]

    return apply


INDEX_DAMAGE: dict[str, LineChange] = {
    "not json": lambda ls: [b"this is not json\n", *ls[1:]],
    "truncated json": lambda ls: [ls[0][: len(ls[0]) // 2] + b"\n", *ls[1:]],
    "a json array": lambda ls: [b"[1, 2, 3]\n", *ls[1:]],
    "null": lambda ls: [b"null\n", *ls[1:]],
    "an empty object": lambda ls: [b"{}\n", *ls[1:]],
    "a blank line": lambda ls: [b"\n", *ls],
    "no final newline": lambda ls: [*ls[:-1], ls[-1].rstrip(b"\n")],
    "a line too long": lambda ls: [b" " * (INDEX_LINE_MAX_BYTES + 10) + ls[0], *ls[1:]],
    "a line of 2 MiB": lambda ls: [b" " * (2 * MIB) + ls[0], *ls[1:]],
    "nothing but a line of 2 MiB": lambda ls: [b"x" * (2 * MIB)],
    "a line twice": lambda ls: [ls[0], *ls],
    "missing size": _edit_first(lambda e: e.pop("size_bytes")),
    "an extra field": _edit_first(lambda e: e.update(owner="root")),
    "size as text": _edit_first(lambda e: e.update(size_bytes="12")),
    "negative size": _edit_first(lambda e: e.update(size_bytes=-1)),
    "fractional size": _edit_first(lambda e: e.update(size_bytes=1.5)),
    "huge size": _edit_first(lambda e: e.update(size_bytes=10**30)),
    "sha in capitals": _edit_first(lambda e: e.update(sha256=str(e["sha256"]).upper())),
    "short sha": _edit_first(lambda e: e.update(sha256="abc")),
    "not a uuid": _edit_first(lambda e: e.update(id="not-a-uuid")),
    "another entry's id": lambda ls: [
        json.dumps({**json.loads(ls[0]), "id": json.loads(ls[1])["id"]}).encode() + b"\n",
        *ls[1:],
    ],
    "path as a number": _edit_first(lambda e: e.update(storage_path=7)),
}


@pytest.mark.parametrize("damage", sorted(INDEX_DAMAGE))
@pytest.mark.parametrize("recount", [True, False], ids=["count agrees", "count kept"])
def test_malformed_index_lines_are_refused(
    sandbox: Sandbox, source: Source, damage: str, recount: bool
) -> None:
    parts = source.parts()
    parts.set_index(INDEX_DAMAGE[damage](list(parts.index)), count=recount)
    assert sandbox.attempt(parts.build(), CORRUPT) == "archive_corrupt"


# --- 6. COPY rows of the wrong shape -----------------------------------------------------


def _row_change(
    table: str, change: Callable[[list[bytes]], list[bytes]]
) -> Callable[[Parts], None]:
    def apply(parts: Parts) -> None:
        lines = parts.get(table_member(table)).splitlines(keepends=True)
        fields = lines[0].rstrip(b"\n").split(b"\t")
        lines[0] = b"\t".join(change(fields)) + b"\n"
        parts.set_table(table, b"".join(lines))

    return apply


def _field(index: int, value: bytes) -> Callable[[list[bytes]], list[bytes]]:
    return lambda fields: [value if i == index else f for i, f in enumerate(fields)]


def _lines(table: str, change: Callable[[list[bytes]], list[bytes]]) -> Callable[[Parts], None]:
    def apply(parts: Parts) -> None:
        lines = parts.get(table_member(table)).splitlines(keepends=True)
        parts.set_table(table, b"".join(change(lines)))

    return apply


def _rows_claimed(table: str, delta: int) -> Callable[[Parts], None]:
    def apply(parts: Parts) -> None:
        data = parts.get(table_member(table))
        parts.set_table(table, data, rows=data.count(b"\n") + delta)

    return apply


# pages: id, workspace_id, parent_id, title, markdown, document_type, document_status,
#        tags, version, trashed, created_at, updated_at
ROW_DAMAGE: dict[str, Callable[[Parts], None]] = {
    "an extra column": _row_change("pages", lambda f: [*f, b"extra"]),
    "a missing column": _row_change("pages", lambda f: f[:-1]),
    "no columns": _row_change("pages", lambda f: []),
    "an empty line": _lines("pages", lambda ls: [b"\n", *ls]),
    "not a uuid": _row_change("pages", _field(0, b"not-a-uuid")),
    "an invalid escape": _row_change("pages", _field(3, b"bad \\x escape \\")),
    "a NUL byte": _row_change("pages", _field(3, b"nul \x00 byte")),
    "an escaped NUL": _row_change("pages", _field(3, b"nul \\000 byte")),
    "invalid UTF-8": _row_change("pages", _field(3, b"\xff\xfe\xc3")),
    "NULL where not allowed": _row_change("pages", _field(3, b"\\N")),
    "not a boolean": _row_change("pages", _field(9, b"maybe")),
    "not a timestamp": _row_change("pages", _field(10, b"the day before")),
    "not a number": _row_change("pages", _field(8, b"12x")),
    "out of range": _row_change("pages", _field(8, b"99999999999999999999999")),
    "a broken array": _row_change("pages", _field(7, b"{unclosed")),
    "a check violated (version 0)": _row_change("pages", _field(8, b"0")),
    "21 tags": _row_change(
        "pages", _field(7, b"{" + b",".join(b"t%d" % i for i in range(21)) + b"}")
    ),
    "a duplicate key": _lines("pages", lambda ls: [*ls, ls[0]]),
    "a dangling foreign key": _row_change("pages", _field(1, str(uuid.uuid4()).encode())),
    "a dangling parent": _row_change("pages", _field(2, str(uuid.uuid4()).encode())),
    "an attachment of no page": _row_change("attachments", _field(1, str(uuid.uuid4()).encode())),
    "an attachment row the index does not know": _row_change(
        "attachments", _field(0, str(uuid.uuid4()).encode())
    ),
    "a membership with an unknown role": _row_change("workspace_memberships", _field(2, b"owner")),
    "an end-of-data marker inside": _lines("pages", lambda ls: [ls[0], b"\\.\n", *ls[1:]]),
    "one row more than claimed": _rows_claimed("pages", -1),
    "one row fewer than claimed": _rows_claimed("pages", +1),
    "revisions of a missing page": _row_change(
        "page_revisions", _field(1, str(uuid.uuid4()).encode())
    ),
}


@pytest.mark.parametrize("damage", sorted(ROW_DAMAGE))
def test_copy_rows_of_the_wrong_shape_are_refused(
    sandbox: Sandbox, source: Source, damage: str
) -> None:
    parts = source.parts()
    ROW_DAMAGE[damage](parts)
    assert sandbox.attempt(parts.build(), CORRUPT) == "archive_corrupt"


# --- 7. checksums, sizes, counts and the manifest ------------------------------------------


def _table_entry(parts: Parts, table: str) -> dict[str, object]:
    entry: dict[str, object] = next(t for t in parts.manifest["tables"] if t["name"] == table)
    return entry


def _first_attachment(parts: Parts) -> str:
    """The largest attachment's id."""
    return str(max(parts.entries(), key=lambda e: int(e["size_bytes"]))["id"])


def _manifest(**fields: object) -> Callable[[Parts], None]:
    return lambda parts: parts.manifest.update(fields)


def _table(table: str, **fields: object) -> Callable[[Parts], None]:
    return lambda parts: _table_entry(parts, table).update(fields)


def _grow_table(parts: Parts) -> None:
    entry = _table_entry(parts, "pages")
    entry["bytes"] = int(str(entry["bytes"])) + 1


def _zero_an_attachment(parts: Parts) -> None:
    name = attachment_member(_first_attachment(parts))
    parts.put(name, bytes(len(parts.get(name))))


UNSUPPORTED = {"schema_unsupported"}
UNREADABLE = {"archive_unreadable"}
MANIFEST_DAMAGE: dict[str, tuple[Callable[[Parts], None], set[str]]] = {
    "a table's checksum": (_table("pages", sha256="0" * 64), CORRUPT),
    "a table's size": (_grow_table, CORRUPT),
    "a table's rows": (_table("workspaces", rows=5), CORRUPT),
    "a table missing": (lambda p: p.manifest["tables"].pop(), CORRUPT),
    "a table twice": (lambda p: p.manifest["tables"].append(p.manifest["tables"][0]), CORRUPT),
    "an unknown table": (_table("workspaces", name="jobs"), CORRUPT),
    "the index's checksum": (_manifest(attachment_index_sha256="f" * 64), CORRUPT),
    "the index's size": (_manifest(attachment_index_bytes=5), CORRUPT),
    "no index size in format 2": (lambda p: p.manifest.pop("attachment_index_bytes"), CORRUPT),
    "the attachment count": (_manifest(attachment_count=99), CORRUPT),
    "the attachment bytes": (_manifest(attachment_bytes=1), CORRUPT),
    "an attachment's bytes": (_zero_an_attachment, CORRUPT),
    "an attachment's checksum in the index": (
        lambda p: p.set_entries([{**e, "sha256": "0" * 64} for e in p.entries()]),
        CORRUPT,
    ),
    "an attachment's size in the index": (
        lambda p: p.set_entries([{**e, "size_bytes": e["size_bytes"] + 1} for e in p.entries()]),
        CORRUPT,
    ),
    "a format from the future": (_manifest(format="hubjobs-backup/99"), UNSUPPORTED),
    "a schema from the future": (_manifest(schema_version="9999"), UNSUPPORTED),
    "a field missing": (lambda p: p.manifest.pop("backup_id"), UNREADABLE),
    "a negative count": (_manifest(attachment_count=-1), UNREADABLE),
    "not json at all": (lambda p: p.put(MANIFEST, b"{nope"), UNREADABLE),
}


@pytest.mark.parametrize("damage", sorted(MANIFEST_DAMAGE))
def test_checksums_sizes_and_counts_that_disagree_are_refused(
    sandbox: Sandbox, source: Source, damage: str
) -> None:
    change, expect = MANIFEST_DAMAGE[damage]
    parts = source.parts()
    change(parts)
    archive = build_zip(parts.members) if damage == "not json at all" else parts.build()
    assert sandbox.attempt(archive, expect) in expect


def test_a_manifest_too_large_to_read_is_refused(sandbox: Sandbox, source: Source) -> None:
    parts = source.parts()
    parts.manifest["padding"] = " " * (2 * MIB)
    assert sandbox.attempt(parts.build(), {"archive_unreadable"}) == "archive_unreadable"


def _stored_zip(parts: Parts, replace: dict[str, tuple[bytes, int, int, int]]) -> bytes:
    """The archive written by hand, members stored, some replaced by (raw data, method,
    CRC, declared size)."""
    entries = []
    for name, data in parts.members:
        if name == MANIFEST:
            data = json.dumps(parts.manifest).encode()
        if name in replace:
            raw, method, crc, size = replace[name]
            entries.append((name, raw, method, crc, size))
        else:
            entries.append((name, data, 0, _crc(data), len(data)))
    return raw_zip(entries)


def _crc(data: bytes) -> int:

    return zlib.crc32(data)


@pytest.mark.parametrize("method", [12, 14, 99], ids=["bzip2", "lzma", "unknown"])
def test_a_member_compressed_another_way_is_refused(
    sandbox: Sandbox, source: Source, method: int
) -> None:
    parts = source.parts()
    name = table_member("pages")
    data = parts.get(name)
    archive = _stored_zip(parts, {name: (data, method, _crc(data), len(data))})
    assert sandbox.attempt(archive, CORRUPT) == "archive_corrupt"


def test_an_encrypted_member_is_refused(sandbox: Sandbox, source: Source) -> None:
    parts = source.parts()
    archive = bytearray(_stored_zip(parts, {}))
    name = table_member("pages").encode()
    # Set the "encrypted" flag in the member's local header and its directory entry.
    for signature, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = 0
        while (at := archive.find(signature, at)) >= 0:
            name_at = at + (30 if signature == b"PK\x03\x04" else 46)
            if archive[name_at : name_at + len(name)] == name:
                archive[at + flag_at] |= 0x01
            at += 4
    assert sandbox.attempt(bytes(archive), CORRUPT) == "archive_corrupt"


def _patch_directory(archive: bytes, name: str, at: int, value: bytes) -> bytes:
    """``value`` written at offset ``at`` of the central directory entry of ``name``."""
    data = bytearray(archive)
    encoded = name.encode()
    start = 0
    while (start := data.find(b"PK\x01\x02", start)) >= 0:
        if data[start + 46 : start + 46 + len(encoded)] == encoded:
            data[start + at : start + at + len(value)] = value
            return bytes(data)
        start += 4
    raise AssertionError(f"{name} not in the directory")


@pytest.mark.parametrize(
    ("where", "offset"),
    [("past the end of the file", 0xFFFFFFF0), ("into another member", 0), ("one byte on", 1)],
)
@pytest.mark.parametrize("member", ["tables/pages.copy", MANIFEST, ATTACHMENT_INDEX])
def test_a_directory_entry_that_points_elsewhere_is_refused(
    sandbox: Sandbox, source: Source, where: str, offset: int, member: str
) -> None:
    archive = _stored_zip(source.parts(), {})
    if offset == 1:
        with zipfile.ZipFile(io.BytesIO(archive)) as zf:
            offset = zf.getinfo(member).header_offset + 1
    archive = _patch_directory(archive, member, 42, offset.to_bytes(4, "little"))
    expect = ARCHIVE_MANIFEST if member == MANIFEST else CORRUPT
    assert sandbox.attempt(archive, expect) in expect


@pytest.mark.parametrize("field", ["compressed size", "size"])
def test_a_directory_entry_with_a_size_past_the_end_is_refused(
    sandbox: Sandbox, source: Source, field: str
) -> None:
    archive = _stored_zip(source.parts(), {})
    at = 20 if field == "compressed size" else 24
    archive = _patch_directory(archive, table_member("pages"), at, b"\xf0\xff\xff\xff")
    assert sandbox.attempt(archive, ARCHIVE) in {"archive_corrupt", "archive_too_large"}


# --- 8. zip bombs ---------------------------------------------------------------------------


def _bomb(parts: Parts, mebibytes: int, *, declared: int, sha: str) -> bytes:
    """The largest attachment replaced by ``mebibytes`` MiB of zeros (a few KiB of
    deflate), its size given everywhere as ``declared``."""
    target = _first_attachment(parts)
    parts.set_entries(
        [
            {**e, "size_bytes": declared, "sha256": sha} if e["id"] == target else e
            for e in parts.entries()
        ]
    )
    lines = []
    for line in parts.get(table_member("attachments")).splitlines(keepends=True):
        fields = line.rstrip(b"\n").split(b"\t")
        if fields[0].decode() == target:
            fields[5], fields[6] = str(declared).encode(), sha.encode()
        lines.append(b"\t".join(fields) + b"\n")
    parts.set_table("attachments", b"".join(lines))
    bomb = deflate_zeros(mebibytes)
    return _stored_zip(parts, {attachment_member(target): (bomb, 8, 0, declared)})


def test_a_bomb_that_declares_its_size_is_refused_before_a_byte_is_written(
    sandbox: Sandbox, source: Source
) -> None:
    size = 256 * MIB
    sha = hashlib.sha256(bytes(size)).hexdigest()
    archive = _bomb(source.parts(), 256, declared=size, sha=sha)
    assert len(archive) < 400_000
    code = sandbox.attempt(archive, {"archive_too_large"}, max_bytes=32 * MIB, watch_disk=0)
    assert code == "archive_too_large"


def test_a_three_megabyte_archive_of_three_gibibytes_is_refused_by_default(
    sandbox: Sandbox, source: Source, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe of the issue: no limit configured, the default (100 times the archive,
    at least 1 GiB) refuses it before expanding anything."""
    monkeypatch.delenv("HUBJOBS_RESTORE_MAX_BYTES", raising=False)
    archive = _bomb(source.parts(), 3 * 1024, declared=3 << 30, sha="0" * 64)
    assert 3_000_000 < len(archive) < 4_000_000
    code = sandbox.attempt(archive, {"archive_too_large"}, watch_disk=0)
    assert code == "archive_too_large"


def test_a_bomb_that_lies_about_its_size_stops_at_the_size_it_declared(
    sandbox: Sandbox, source: Source
) -> None:
    """Its directory, index and manifest say 4 KiB; its data inflates to 256 MiB. The
    restore reads no more than it was told, finds the damage, and writes (for a moment,
    in its staging folder) at most that much."""
    parts = source.parts()
    archive = _bomb(parts, 256, declared=4096, sha="0" * 64)
    declared = sum(int(e["size_bytes"]) for e in parts.entries())
    started = time.monotonic()
    code = sandbox.attempt(archive, CORRUPT, watch_disk=declared)
    assert code == "archive_corrupt"
    assert time.monotonic() - started < 10


# --- 9. a hostile attachments folder -----------------------------------------------------------


def _targets(source: Source) -> list[str]:
    return [str(e["storage_path"]) for e in source.parts().entries()]


def test_a_link_planted_at_a_target_is_refused_and_never_followed(
    sandbox: Sandbox, source: Source
) -> None:
    target = sandbox.dir / _targets(source)[-1]
    target.parent.mkdir(parents=True)
    target.symlink_to(sandbox.outside / "secret")
    assert sandbox.attempt(source.archive, {"attachments_not_empty"}) == "attachments_not_empty"


def test_a_dangling_link_at_a_target_is_refused(sandbox: Sandbox, source: Source) -> None:
    target = sandbox.dir / _targets(source)[0]
    target.parent.mkdir(parents=True)
    target.symlink_to(sandbox.outside / "nothing-here")
    assert sandbox.attempt(source.archive, {"attachments_not_empty"}) == "attachments_not_empty"


def test_a_link_planted_at_a_targets_folder_is_refused(sandbox: Sandbox, source: Source) -> None:
    folder = sandbox.dir / Path(_targets(source)[2]).parts[0]
    folder.symlink_to(sandbox.outside / "folder", target_is_directory=True)
    assert sandbox.attempt(source.archive, {"attachments_not_empty"}) == "attachments_not_empty"
    assert list((sandbox.outside / "folder").iterdir()) == []


def test_a_file_where_a_folder_goes_is_refused(sandbox: Sandbox, source: Source) -> None:
    (sandbox.dir / Path(_targets(source)[1]).parts[0]).write_bytes(b"in the way")
    assert sandbox.attempt(source.archive, {"attachments_not_empty"}) == "attachments_not_empty"


def test_a_folder_that_is_a_file_is_refused(sandbox: Sandbox, source: Source) -> None:
    shutil.rmtree(sandbox.dir)
    sandbox.dir.write_bytes(b"not a folder")
    assert sandbox.attempt(source.archive, {"attachments_unwritable"}) == "attachments_unwritable"


def test_links_at_the_old_staging_names_are_left_alone(sandbox: Sandbox, source: Source) -> None:
    """The attack of the issue: a link at DIR/<path>.restoring (where the old restore
    wrote through it). The staging is elsewhere now; the restore succeeds, the links
    stay links and nothing outside changes."""
    planted = []
    for path in _targets(source):
        link = sandbox.dir / (path + ".restoring")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(sandbox.outside / "secret")
        planted.append(link)
    for i in range(3):
        (sandbox.dir / f".hubjobs-restore-{i:016x}").symlink_to(sandbox.outside / "folder")
    outside = tree(sandbox.outside)
    assert sandbox.attempt(source.archive, (), success=True) is None
    assert tree(sandbox.outside) == outside


def test_a_link_at_the_staging_name_is_never_used(tmp_path: Path, source: Source) -> None:
    """The staging folder is made with mkdir, which never follows nor reuses what is
    there: given a name where a link waits, it takes the next name."""

    root, outside = tmp_path / "dir", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    planted = ".hubjobs-restore-planted"
    (root / planted).symlink_to(outside, target_is_directory=True)
    archive = tmp_path / "a.zip"
    archive.write_bytes(source.archive)
    before = tree(tmp_path)
    with open_archive(archive) as opened:
        store = AttachmentStore(root, opened.attachments)
        store.check()
        store.open(names=iter([planted, ".hubjobs-restore-fresh"]))
        assert store.staging_name == ".hubjobs-restore-fresh"
        store.stage(opened, threading.Event())
        assert list(outside.iterdir()) == []
        assert len(list((root / ".hubjobs-restore-fresh").iterdir())) == len(SIZES)
        store.discard()
    assert tree(tmp_path) == before


def test_a_failed_restore_into_a_missing_folder_leaves_no_folder(
    sandbox: Sandbox, source: Source
) -> None:
    parts = source.parts()
    _zero_an_attachment(parts)  # damaged: found while staging
    shutil.rmtree(sandbox.dir)
    deep = sandbox.dir
    sandbox.dir = deep / "not" / "yet"
    assert sandbox.attempt(parts.build(), CORRUPT) == "archive_corrupt"
    assert not deep.exists()
    sandbox.dir = deep
    deep.mkdir()


# --- 10. the database side -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("mysql://root@localhost/hub", "invalid_database_url"),
        ("postgresql://host:notaport/hub", "invalid_database_url"),
        ("not a url", "invalid_database_url"),
        ("postgresql://postgres@127.0.0.1:1/hub", "database_unavailable"),
    ],
)
def test_a_database_that_cannot_be_used_is_refused(
    sandbox: Sandbox, source: Source, url: str, code: str
) -> None:
    sandbox.target, usable = url, sandbox.target
    try:
        path = sandbox.archives / "a.zip"
        path.write_bytes(source.archive)
        before = tree(sandbox.root)
        with pytest.raises(HubJobsError) as refused:
            restore(path, url, sandbox.dir)
        assert refused.value.code == code
        assert tree(sandbox.root) == before
    finally:
        sandbox.target = usable


def test_a_database_with_rows_is_refused_before_a_byte_is_written(
    sandbox: Sandbox, source: Source
) -> None:
    with psycopg.connect(sandbox.target, autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (body text)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
    path = sandbox.archives / "a.zip"
    path.write_bytes(source.archive)
    before = tree(sandbox.root)
    with pytest.raises(HubJobsError) as refused:
        restore(path, sandbox.target, sandbox.dir)
    assert refused.value.code == "database_not_empty"
    assert tree(sandbox.root) == before
    assert tables_of(sandbox.target) == {"public.notes"}


# --- 11. the reader reads what zip means --------------------------------------------------


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    members=st.lists(
        st.tuples(
            st.one_of(
                st.integers(0, 5000),
                st.sampled_from([MIB - 1, MIB, MIB + 1, 2 * MIB + 7, 3 * MIB - 5]),
            ),
            st.sampled_from(["random", "text", "zeros"]),
            st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]),
            st.integers(0, 9),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_the_reader_reads_every_member_as_zipfile_does(
    tmp_path_factory: pytest.TempPathFactory, members: list[tuple[int, str, int, int]]
) -> None:
    """The reader inflates members itself (bounded, from its own offsets); whatever the
    size (around its 1 MiB blocks of input and output), content and method, it
    gives exactly the bytes zipfile gives, and checks the manifest's CRC."""
    path = tmp_path_factory.mktemp("reader") / "members.zip"
    contents: dict[str, bytes] = {}
    with zipfile.ZipFile(path, "w") as zf:
        for i, (size, kind, method, level) in enumerate(members):
            if kind == "random":
                data = os.urandom(size)
            elif kind == "text":
                data = (b"hub text %d\n" * (size // 10 + 1))[:size]
            else:
                data = bytes(size)
            name = f"m{i}"
            contents[name] = data
            zf.compression, zf.compresslevel = method, level
            with zf.open(name, "w", force_zip64=i % 2 == 0) as out:
                out.write(data)
    with open(path, "rb") as file, zipfile.ZipFile(file) as zf:
        reader = MemberReader(path, file)
        for info in zf.infolist():
            got = b"".join(reader.read(info, info.file_size, crc=True))
            assert got == contents[info.filename] == zf.read(info)
