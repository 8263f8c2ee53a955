"""Demo and test data: a workspace, its administrator, and a course of N pages, by bulk
inserts (100,000 pages take seconds). Each page hangs under the one ``fanout``
positions before it: chapters, sections and lessons.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.domain.access import ADMINISTRATOR


@dataclass(frozen=True)
class DemoCourse:
    workspace_id: uuid.UUID
    actor_id: uuid.UUID
    root_page_id: uuid.UUID
    page_ids: list[uuid.UUID]


async def create_workspace(conn: AsyncConnection, name: str) -> uuid.UUID:
    workspace_id = uuid.uuid4()
    await conn.execute(
        text("INSERT INTO workspaces (id, name) VALUES (:id, :name)"),
        {"id": workspace_id, "name": name},
    )
    return workspace_id


async def create_account(
    conn: AsyncConnection,
    workspace_id: uuid.UUID,
    *,
    role: str = ADMINISTRATOR,
    enabled: bool = True,
    name: str = "Ada Admin",
    account_id: uuid.UUID | None = None,
) -> uuid.UUID:
    account_id = account_id or uuid.uuid4()
    await conn.execute(
        text(
            "INSERT INTO user_accounts (id, email, display_name, enabled) "
            "VALUES (:id, :email, :name, :enabled)"
        ),
        {
            "id": account_id,
            "email": f"{account_id.hex[:12]}@hub.example",
            "name": name,
            "enabled": enabled,
        },
    )
    await conn.execute(
        text(
            "INSERT INTO workspace_memberships (workspace_id, user_id, role) "
            "VALUES (:workspace, :user, :role)"
        ),
        {"workspace": workspace_id, "user": account_id, "role": role},
    )
    return account_id


async def create_course(
    conn: AsyncConnection,
    workspace_id: uuid.UUID,
    pages: int,
    *,
    title: str = "Onboarding",
    fanout: int = 10,
) -> list[uuid.UUID]:
    """Inserts a course of ``pages`` pages (root first) and returns their ids."""
    ids = [uuid.uuid4() for _ in range(pages)]
    parents = [None] + [ids[(i - 1) // fanout] for i in range(1, pages)]
    titles = [title] + [f"{title} lesson {i}" for i in range(1, pages)]
    await conn.execute(
        text(
            """
            INSERT INTO pages (id, workspace_id, parent_id, title, markdown)
            SELECT id, :workspace, parent, title, '# ' || title
              FROM unnest(CAST(:ids AS uuid[]), CAST(:parents AS uuid[]), CAST(:titles AS text[]))
                   AS p(id, parent, title)
            """
        ),
        {"workspace": workspace_id, "ids": ids, "parents": parents, "titles": titles},
    )
    await conn.execute(
        text(
            """
            INSERT INTO page_revisions (page_id, version, actor_id, change_summary, title, tags)
            SELECT id, 1, :system, 'Page created', title, tags FROM pages WHERE id = ANY(:ids)
            """
        ),
        {"system": uuid.UUID(int=0), "ids": ids},
    )
    return ids


async def create_attachment(
    conn: AsyncConnection, attachments_dir: Path, page_id: uuid.UUID, name: str, content: bytes
) -> uuid.UUID:
    """Writes the file under ``attachments_dir`` and records it."""
    attachment_id = uuid.uuid4()
    relative = f"{attachment_id.hex[:2]}/{attachment_id}"
    path = attachments_dir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    await conn.execute(
        text(
            "INSERT INTO attachments (id, page_id, file_name, content_type, storage_path, "
            "size_bytes, sha256) VALUES (:id, :page, :name, 'application/octet-stream', "
            ":path, :size, :sha)"
        ),
        {
            "id": attachment_id,
            "page": page_id,
            "name": name,
            "path": relative,
            "size": len(content),
            "sha": hashlib.sha256(content).hexdigest(),
        },
    )
    return attachment_id


async def seed_demo(conn: AsyncConnection, pages: int, *, name: str = "Demo hub") -> DemoCourse:
    workspace_id = await create_workspace(conn, name)
    actor_id = await create_account(conn, workspace_id)
    page_ids = await create_course(conn, workspace_id, pages)
    return DemoCourse(workspace_id, actor_id, page_ids[0], page_ids)
