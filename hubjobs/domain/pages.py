"""Pages of the hub: tag rules, ETags, and the ETag-guarded update.

Every change of a page bumps its version and writes one revision; the ETag a
caller read is the version it saw. An update whose ETag no longer matches is a
concurrency conflict and changes nothing.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import NamedTuple

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.db import direct
from hubjobs.db.arrays import int_array, uuid_array
from hubjobs.db.direct import Statement
from hubjobs.domain.tables import MAX_TAGS_PER_PAGE
from hubjobs.domain.text import check_free_text
from hubjobs.errors import HubJobsError, InvalidInput, NotFound

MAX_TAG_LENGTH = 64
CHECK_VIOLATION = "23514"


class ConcurrencyConflict(HubJobsError):
    code = "concurrency_conflict"


class TagLimit(InvalidInput):
    """A page would hold more than MAX_TAGS_PER_PAGE tags."""

    code = "tag_limit"


def normalize_tag(raw: str) -> str:
    """A tag as stored: trimmed, non-empty, bounded free text (``hubjobs.domain.text``)."""
    return check_free_text(raw, what="the tag", code="invalid_tag", max_length=MAX_TAG_LENGTH)


def etag(page_id: uuid.UUID, version: int) -> str:
    return f'"{page_id.hex}.{version}"'


# What ``etag`` writes (quoted, or bare as some clients send it): the page's id in hex,
# then its version in ASCII digits without a sign or a leading zero. Nothing else names
# a version: ``int()`` alone would read "+7", "07", "7_0" and other scripts' digits.
_ETAG = re.compile(r'("?)([0-9a-f]{32})\.([1-9][0-9]{0,18})\1', re.ASCII)
NO_VERSION = -1


def version_of(page_id: uuid.UUID, if_match: str) -> int:
    """The version an ETag names; a malformed or foreign ETag names NO_VERSION, which no
    page has (versions start at 1), so it never matches."""
    found = _ETAG.fullmatch(if_match)
    if found is None or found.group(2) != page_id.hex:
        return NO_VERSION
    return int(found.group(3))


# A course: page ``:root`` and every descendant out of the trash (a walk never steps into
# a trashed page, so nothing under one is reached). IS NOT DISTINCT FROM on purpose: no
# index serves it, so the planner walks by ix_pages_parent_id even without statistics.
OUT_OF_TRASH_CHILD = (
    "p.workspace_id IS NOT DISTINCT FROM CAST(:workspace AS uuid) AND NOT p.trashed"
)
COURSE = f"""
    WITH RECURSIVE course AS (
        SELECT id, 0 AS depth, title, tags FROM pages WHERE id = :root
        UNION ALL
        SELECT p.id, c.depth + 1, p.title, p.tags FROM pages p JOIN course c ON p.parent_id = c.id
         WHERE {OUT_OF_TRASH_CHILD}
    )
"""
# The whole workspace as one course: its top pages (no parent, or a parent outside it)
# out of the trash, then what the same step reaches. Read as ``course`` like COURSE.
WORKSPACE = f"""
    WITH RECURSIVE course AS (
        SELECT p.id, 0 AS depth, p.title, p.tags FROM pages p
         WHERE p.workspace_id = CAST(:workspace AS uuid) AND NOT p.trashed
           AND NOT EXISTS (SELECT 1 FROM pages q
                            WHERE q.id = p.parent_id AND q.workspace_id = p.workspace_id)
        UNION ALL
        SELECT p.id, c.depth + 1, p.title, p.tags FROM pages p JOIN course c ON p.parent_id = c.id
         WHERE {OUT_OF_TRASH_CHILD}
    )
"""


ROOT_PAGE = Statement.of(
    "SELECT workspace_id, trashed, title FROM pages WHERE id = :id", prepared=True
)


async def course_root(
    conn: AsyncConnection, root_page_id: uuid.UUID, workspace_id: uuid.UUID
) -> str:
    """The title of a course's root page, which must be a page of the workspace
    (``page_not_found`` otherwise, as for a page of another one) and out of the trash
    (``page_trashed``)."""
    root = await direct.first(conn, ROOT_PAGE, {"id": root_page_id})
    if root is None or root["workspace_id"] != workspace_id:
        raise NotFound("the root page does not exist in this workspace", code="page_not_found")
    if root["trashed"]:
        raise InvalidInput("the root page is in the trash", code="page_trashed")
    return str(root["title"])


class PageFacts(NamedTuple):
    """What deciding a page's tagging outcome needs, read in one statement with its
    version; whether it holds the tag is the database's ``tag_key()`` to say, never Python's."""

    available: bool
    has_tag: bool
    tag_count: int
    version: int

    @property
    def at_tag_limit(self) -> bool:
        return self.tag_count >= MAX_TAGS_PER_PAGE


# The columns of PageFacts for page ``p`` in workspace ``:workspace`` and tag ``:tag``.
PAGE_FACTS = (
    "p.id IS NOT NULL AND p.workspace_id = :workspace AND NOT p.trashed AS available, "
    "EXISTS (SELECT 1 FROM unnest(p.tags) t WHERE tag_key(t) = tag_key(:tag)) AS has_tag, "
    "coalesce(cardinality(p.tags), 0) AS tag_count, coalesce(p.version, 0) AS version"
)


PAGES_FACTS = Statement.of(f"SELECT p.id, {PAGE_FACTS} FROM pages p WHERE p.id = ANY(:ids)")


async def read_page_facts(
    conn: AsyncConnection, page_ids: Sequence[uuid.UUID], *, workspace_id: uuid.UUID, tag: str
) -> dict[uuid.UUID, PageFacts]:
    found, _ = await direct.rows(
        conn, PAGES_FACTS, {"ids": list(page_ids), "workspace": workspace_id, "tag": tag}
    )
    return {page_id: PageFacts(*facts) for page_id, *facts in found}


class TagChange(NamedTuple):
    """Add ``tag`` to a page if it is still at ``expected_version`` (the ETag read)."""

    page_id: uuid.UUID
    expected_version: int


async def add_tag_if_match(
    conn: AsyncConnection,
    *,
    workspace_id: uuid.UUID,
    tag: str,
    changes: Sequence[TagChange],
    actor_id: uuid.UUID,
    correlation_id: str | None,
    change_summary: str,
) -> set[uuid.UUID]:
    """Adds the tag to every page still at the version read, one revision each, in one
    statement; returns the pages changed. The version is the whole guard (the facts were
    read with it). Pages picked by key (``= ANY``): stale statistics hashed the workspace."""
    if not changes:
        return set()
    found, _ = await direct.rows(
        conn,
        ADD_TAG_IF_MATCH,
        {
            "ids": uuid_array(c.page_id for c in changes),
            "versions": int_array(c.expected_version for c in changes),
            "tag": tag,
            "workspace": workspace_id,
            "actor": actor_id,
            "summary": change_summary,
            "correlation": correlation_id,
        },
    )
    return {page_id for (page_id,) in found}


ADD_TAG_IF_MATCH = Statement.of(
    """
            WITH wanted AS (
                SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:versions AS bigint[]))
                    AS w(id, version)
            ), changed AS (
                UPDATE pages p
                   SET tags = array_append(p.tags, :tag), version = p.version + 1,
                       updated_at = now()
                  FROM wanted w
                 WHERE p.id = ANY(CAST(:ids AS uuid[]))
                   AND p.id = w.id AND p.version = w.version
                   AND p.workspace_id = :workspace AND NOT p.trashed
             RETURNING p.id, p.version, p.title, p.tags
            )
            INSERT INTO page_revisions
                   (page_id, version, actor_id, change_summary, correlation_id, title, tags)
            SELECT id, version, :actor, :summary, :correlation, title, tags FROM changed
            RETURNING page_id
    """
)


UPDATE_PAGE = """
    WITH changed AS (
        UPDATE pages
           SET title = COALESCE(:title, title),
               markdown = COALESCE(:markdown, markdown),
               tags = COALESCE(CAST(:tags AS text[]), tags),
               trashed = COALESCE(:trashed, trashed),
               workspace_id = COALESCE(:workspace, workspace_id),
               version = version + 1, updated_at = now()
         WHERE id = :id AND version = :version
     RETURNING id, version, title, tags
    )
    INSERT INTO page_revisions
           (page_id, version, actor_id, change_summary, correlation_id, title, tags)
    SELECT id, version, :actor, :summary, :correlation, title, tags FROM changed
    RETURNING version
"""


async def update_page(
    conn: AsyncConnection,
    *,
    page_id: uuid.UUID,
    if_match: str,
    actor_id: uuid.UUID,
    change_summary: str,
    correlation_id: str | None = None,
    title: str | None = None,
    markdown: str | None = None,
    tags: Sequence[str] | None = None,
    trashed: bool | None = None,
    workspace_id: uuid.UUID | None = None,
) -> str:
    """The hub's own single-page update (If-Match). Returns the new ETag."""
    if tags is not None:
        # Uniqueness (under tag_key) is the database's to check: tags_distinct(tags).
        normalized = [normalize_tag(t) for t in tags]
        if len(normalized) > MAX_TAGS_PER_PAGE:
            raise TagLimit(f"a page holds at most {MAX_TAGS_PER_PAGE} tags")
        tags = normalized
    try:
        async with conn.begin_nested():
            params = {
                "id": page_id,
                "version": version_of(page_id, if_match),
                "title": title,
                "markdown": markdown,
                "tags": list(tags) if tags is not None else None,
                "trashed": trashed,
                "workspace": workspace_id,
                "actor": actor_id,
                "summary": change_summary,
                "correlation": correlation_id,
            }
            row = (await conn.execute(text(UPDATE_PAGE), params)).first()
    except IntegrityError as err:
        if getattr(err.orig, "sqlstate", None) == CHECK_VIOLATION:
            raise InvalidInput(
                "tags must be unique (the same tag under tag_key)", code="invalid_tag"
            ) from None
        raise
    if row is None:
        raise ConcurrencyConflict("the page changed since it was read")
    return etag(page_id, row.version)
