"""The registry of job kinds. Adding a kind: one module, and one line below."""

from __future__ import annotations

from hubjobs.errors import InvalidInput
from hubjobs.kinds.backup import BACKUP
from hubjobs.kinds.base import JobKind, NewJob, Prepared
from hubjobs.kinds.course_tagging import COURSE_TAGGING

REGISTRY: dict[str, JobKind] = {}


def register(kind: JobKind) -> JobKind:
    REGISTRY[kind.name] = kind
    return kind


def get_kind(name: str) -> JobKind:
    try:
        return REGISTRY[name]
    except KeyError:
        raise InvalidInput(f"unknown job kind {name!r}", code="unknown_kind") from None


register(COURSE_TAGGING)
register(BACKUP)

__all__ = ["REGISTRY", "JobKind", "NewJob", "Prepared", "get_kind", "register"]
