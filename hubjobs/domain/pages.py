"""Pages of the hub: tag rules, ETags, and the ETag-guarded update.

Every change of a page bumps its version and writes one revision; the ETag a
caller read is the version it saw. An update whose ETag no longer matches is a
concurrency conflict and changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.db.schema import MAX_TAGS_PER_PAGE
from hubjobs.domain.text import check_free_text
from hubjobs.errors import HubJobsError, InvalidInput

MAX_TAG_LENGTH = 64


class ConcurrencyConflict(HubJobsError):
    code = "concurrency_conflict"


def normalize_tag(raw: str) -> str:
    """A tag as stored: trimmed, non-empty, bounded, free text (``hubjobs.domain.text``:
    no control, bidi or invisible format character, no lone surrogate; emoji sequences
    are fine)."""
    return check_free_text(raw, what="the tag", code="invalid_tag", max_length=MAX_TAG_LENGTH)


def has_tag(tags: Sequence[str], tag: str) -> bool:
    """Tags are unique case-insensitively (``lower()``, as the snapshot query compares)."""
    folded = tag.lower()
    return any(existing.lower() == folded for existing in tags)


def etag(page_id: uuid.UUID, version: int) -> str:
    return f'"{page_id.hex}.{version}"'


def version_of(page_id: uuid.UUID, if_match: str) -> int:
    """The version an ETag names; a malformed or foreign ETag never matches."""
    try:
        page_hex, version = if_match.strip('"').split(".")
        if page_hex != page_id.hex:
            return -1
        return int(version)
    except ValueError:
        return -1


@dataclass(frozen=True)
class PageState:
    id: uuid.UUID
    workspace_id: uuid.UUID
    trashed: bool
    tags: list[str]
    version: int
    title: str

    @property
    def at_tag_limit(self) -> bool:
        return len(self.tags) >= MAX_TAGS_PER_PAGE


async def read_pages(
    conn: AsyncConnection, page_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, PageState]:
    rows = await conn.execute(
        text(
            "SELECT id, workspace_id, trashed, tags, version, title FROM pages WHERE id = ANY(:ids)"
        ),
        {"ids": list(page_ids)},
    )
    return {row.id: PageState(*row) for row in rows}


@dataclass(frozen=True)
class TagChange:
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
    """Adds the tag to every page whose version still matches, writing one revision each,
    in one statement. Returns the pages changed; the others were in conflict (or had
    left the workspace, or were trashed) and are untouched."""
    if not changes:
        return set()
    rows = await conn.execute(
        text(
            """
            WITH wanted AS (
                SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:versions AS bigint[]))
                    AS w(id, version)
            ), changed AS (
                UPDATE pages p
                   SET tags = array_append(p.tags, :tag), version = p.version + 1,
                       updated_at = now()
                  FROM wanted w
                 WHERE p.id = w.id AND p.version = w.version
                   AND p.workspace_id = :workspace AND NOT p.trashed
             RETURNING p.id, p.version, p.title, p.tags
            )
            INSERT INTO page_revisions
                   (page_id, version, actor_id, change_summary, correlation_id, title, tags)
            SELECT id, version, :actor, :summary, :correlation, title, tags FROM changed
            RETURNING page_id
            """
        ),
        {
            "ids": [c.page_id for c in changes],
            "versions": [c.expected_version for c in changes],
            "tag": tag,
            "workspace": workspace_id,
            "actor": actor_id,
            "summary": change_summary,
            "correlation": correlation_id,
        },
    )
    return {row.page_id for row in rows}


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
        normalized = [normalize_tag(t) for t in tags]
        if len({t.lower() for t in normalized}) != len(normalized):
            raise InvalidInput("tags must be unique (case-insensitively)", code="invalid_tag")
        if len(normalized) > MAX_TAGS_PER_PAGE:
            raise InvalidInput(f"a page holds at most {MAX_TAGS_PER_PAGE} tags", code="tag_limit")
        tags = normalized
    row = (
        await conn.execute(
            text(
                """
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
            ),
            {
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
            },
        )
    ).first()
    if row is None:
        raise ConcurrencyConflict("the page changed since it was read")
    return etag(page_id, row.version)
