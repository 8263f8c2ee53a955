"""Connections: one async engine per process, psycopg 3 underneath.

Every engine hides statement parameters from its errors (``hide_parameters``): an
error's text goes to logs, and parameters are payloads, tags and keys."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by the functions that make engines: URLs need no SQLAlchemy
    from sqlalchemy.engine import Engine
    from sqlalchemy.ext.asyncio import AsyncEngine


def driver_url(url: str) -> str:
    """``postgresql://…`` as given by people and the stack file, with the psycopg driver."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def plain_url(url: str) -> str:
    """The URL as libpq (and so psql or pg_dump) takes it."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


# psycopg prepares a statement run five times; PostgreSQL then plans it five times with
# the values given and switches to a generic plan that knows none of them. For a batch
# statement (``id = ANY(:ids)`` over a thousand pages) the generic plan scanned the
# whole workspace: a tagging batch went from 28 ms to 117 ms at its eleventh run. So
# no prepared statements: each is planned with its values. (``plan_cache_mode =
# force_custom_plan`` would do it too, but also replans the foreign-key checks of
# every inserted row: 3× their cost.)
NO_PREPARE = {"prepare_threshold": None}


def async_engine(url: str, *, pool_size: int = 10) -> AsyncEngine:
    from sqlalchemy.ext.asyncio import create_async_engine

    return create_async_engine(
        driver_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        hide_parameters=True,
        connect_args=NO_PREPARE,
    )


def sync_engine(url: str) -> Engine:
    from sqlalchemy import create_engine

    return create_engine(
        driver_url(url), pool_pre_ping=True, hide_parameters=True, connect_args=NO_PREPARE
    )
