"""Who may do what in a workspace: roles come from memberships of enabled accounts.

A workspace the actor is not an enabled member of answers exactly as one that does not
exist (``workspace_not_found``), or anyone with a token could probe which ids exist."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from typing import TYPE_CHECKING

from hubjobs.errors import Forbidden, NotFound

if TYPE_CHECKING:  # imported when a check runs: reading a job needs no SQLAlchemy
    from sqlalchemy.ext.asyncio import AsyncConnection

ADMINISTRATOR = "administrator"
# In psycopg's form (hubjobs.db.direct), prepared: a row by its key.
ROLE_OF = (
    "SELECT m.role FROM workspace_memberships m JOIN user_accounts u ON u.id = m.user_id "
    "WHERE m.workspace_id = %(workspace)s AND m.user_id = %(actor)s AND u.enabled"
)


async def role_of(
    conn: AsyncConnection, workspace_id: uuid.UUID, actor_id: uuid.UUID
) -> str | None:
    """The actor's role in the workspace, or None when not an enabled member."""
    from hubjobs.db import direct

    params = {"workspace": workspace_id, "actor": actor_id}
    row = await direct.first(conn, direct.Statement(ROLE_OF, prepared=True), params)
    return None if row is None else str(row["role"])


def workspace_not_found() -> NotFound:
    """The one answer for a workspace that does not exist and for one the actor is not
    an enabled member of."""
    return NotFound("the workspace does not exist", code="workspace_not_found")


async def require_member(
    conn: AsyncConnection, workspace_id: uuid.UUID, actor_id: uuid.UUID
) -> str:
    """The actor's role; ``workspace_not_found`` when it is not an enabled member (or
    there is no such workspace: the same answer)."""
    role = await role_of(conn, workspace_id, actor_id)
    if role is None:
        raise workspace_not_found()
    return role


def not_administrator() -> Forbidden:
    """What a member who may not act hears (a reader, an editor)."""
    return Forbidden(
        "the actor is not an enabled administrator of the workspace",
        code="actor_not_administrator",
    )


async def require_administrator(
    conn: AsyncConnection, workspace_id: uuid.UUID, actor_id: uuid.UUID
) -> None:
    if await require_member(conn, workspace_id, actor_id) != ADMINISTRATOR:
        raise not_administrator()


def require_hub_operator(operators: Collection[uuid.UUID], actor_id: uuid.UUID) -> None:
    """An action on the whole hub (a whole-hub backup) is a hub operator's, an account
    HUBJOBS_HUB_OPERATORS names; a workspace's administrator is refused with its own code."""
    if actor_id not in operators:
        raise Forbidden(
            "the whole hub is a hub operator's (HUBJOBS_HUB_OPERATORS); a workspace's "
            "administrator may back up that workspace",
            code="hub_operator_required",
        )
