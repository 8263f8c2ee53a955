"""The hub's own tables (owned by the hub, their schema shipped here): workspaces,
accounts, memberships, pages, revisions and attachments; the migrations were generated
from these."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    ForeignKey,
    PrimaryKeyConstraint,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, UUID
from sqlalchemy.orm import Mapped, mapped_column

from hubjobs.db.metadata import Base, created_now

MAX_TAGS_PER_PAGE = 20
ROLES = ("reader", "editor", "administrator")


class Workspace(Base):
    __tablename__ = "workspaces"
    id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True)
    name: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = created_now()


class UserAccount(Base):
    __tablename__ = "user_accounts"
    id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True)
    email: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    display_name: Mapped[str] = mapped_column(Text, nullable=False)
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("true"))
    created_at: Mapped[datetime] = created_now()


class WorkspaceMembership(Base):
    __tablename__ = "workspace_memberships"
    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "user_id"),
        CheckConstraint(f"role IN {ROLES!r}", name="role"),
    )
    workspace_id: Mapped[uuid.UUID] = mapped_column(
        UUID, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    user_id: Mapped[uuid.UUID] = mapped_column(
        UUID, ForeignKey("user_accounts.id", ondelete="CASCADE"), index=True
    )
    role: Mapped[str] = mapped_column(Text, nullable=False)


class Page(Base):
    """A page of the hub. Its ETag is derived from ``version`` (see hubjobs.domain.pages)."""

    __tablename__ = "pages"
    __table_args__ = (
        CheckConstraint(f"cardinality(tags) <= {MAX_TAGS_PER_PAGE}", name="tag_limit"),
        # No two tags equal under tag_key() (migration 0002): the one definition of "the
        # same tag", in the database, so snapshot, job and hub can never disagree.
        CheckConstraint("tags_distinct(tags)", name="tags_distinct"),
        CheckConstraint("version >= 1", name="version_positive"),
    )
    id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True)
    workspace_id: Mapped[uuid.UUID] = mapped_column(
        UUID, ForeignKey("workspaces.id", ondelete="CASCADE"), nullable=False, index=True
    )
    parent_id: Mapped[uuid.UUID | None] = mapped_column(
        UUID, ForeignKey("pages.id", ondelete="SET NULL"), index=True
    )
    title: Mapped[str] = mapped_column(Text, nullable=False)
    markdown: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    document_type: Mapped[str] = mapped_column(Text, nullable=False, server_default="article")
    document_status: Mapped[str] = mapped_column(Text, nullable=False, server_default="draft")
    tags: Mapped[list[str]] = mapped_column(
        ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")
    )
    version: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="1")
    trashed: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    created_at: Mapped[datetime] = created_now()
    updated_at: Mapped[datetime] = created_now()


class PageRevision(Base):
    """One row per change of a page; (page, version) is unique, so a change is never
    recorded twice."""

    __tablename__ = "page_revisions"
    __table_args__ = (
        UniqueConstraint("page_id", "version", name="uq_page_revisions_page_version"),
    )
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    page_id: Mapped[uuid.UUID] = mapped_column(
        UUID, ForeignKey("pages.id", ondelete="CASCADE"), nullable=False
    )
    version: Mapped[int] = mapped_column(BigInteger, nullable=False)
    actor_id: Mapped[uuid.UUID] = mapped_column(UUID, nullable=False)
    change_summary: Mapped[str] = mapped_column(Text, nullable=False)
    correlation_id: Mapped[str | None] = mapped_column(Text)
    title: Mapped[str] = mapped_column(Text, nullable=False)
    tags: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False)
    created_at: Mapped[datetime] = created_now()


class Attachment(Base):
    __tablename__ = "attachments"
    id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True)
    page_id: Mapped[uuid.UUID] = mapped_column(
        UUID, ForeignKey("pages.id", ondelete="CASCADE"), nullable=False, index=True
    )
    file_name: Mapped[str] = mapped_column(Text, nullable=False)
    content_type: Mapped[str] = mapped_column(Text, nullable=False)
    storage_path: Mapped[str] = mapped_column(Text, nullable=False)
    size_bytes: Mapped[int] = mapped_column(BigInteger, nullable=False)
    sha256: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = created_now()
