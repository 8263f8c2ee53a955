"""The registry of job kinds. One of hubjobs' own: its kind module here, its workflow
and activities in ``workflows/<name>.py`` and ``activities/<name>.py``, one line below.
One shipped elsewhere registers itself in a module named in HUBJOBS_KIND_MODULES."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator
from typing import Any

from hubjobs.domain.text import is_kind_name
from hubjobs.errors import UnknownKind
from hubjobs.kinds.backup import BACKUP
from hubjobs.kinds.base import JobKind, NewJob, Prepared, Result
from hubjobs.kinds.course_tagging import COURSE_TAGGING
from hubjobs.kinds.page_export import PAGE_EXPORT

# POST /workspaces/{ws}/jobs/cancel is the bulk cancel, not a start of a kind "cancel".
RESERVED_KIND_NAMES = frozenset({"cancel"})


class Registry:
    """Kinds by name; a name or workflow type registered twice is an error."""

    def __init__(self) -> None:
        self._kinds: dict[str, JobKind[Any]] = {}

    def register(self, kind: JobKind[Any]) -> JobKind[Any]:
        if kind.name in RESERVED_KIND_NAMES:
            raise ValueError(f"{kind.name!r} cannot name a kind: the API's path says it")
        if kind.name in self._kinds:
            raise ValueError(f"job kind {kind.name!r} is registered twice")
        if any(k.workflow_type == kind.workflow_type for k in self._kinds.values()):
            raise ValueError(f"workflow type {kind.workflow_type!r} is registered twice")
        self._kinds[kind.name] = kind
        return kind

    def get(self, name: str) -> JobKind[Any]:
        """The registered kind, or ``unknown_kind`` (never repeating the caller's text)."""
        kind = self._kinds.get(name) if is_kind_name(name) else None
        if kind is None:
            raise UnknownKind()
        return kind

    def find(self, name: str) -> JobKind[Any] | None:
        return self._kinds.get(name)

    def __iter__(self) -> Iterator[JobKind[Any]]:
        return iter(list(self._kinds.values()))

    def names(self) -> list[str]:
        return list(self._kinds)


def load_kinds(modules: Iterable[str]) -> None:
    """Imports the modules that declare kinds beyond hubjobs' own (they register them)."""
    for name in modules:
        importlib.import_module(name)


REGISTRY = Registry()
register = REGISTRY.register
get_kind = REGISTRY.get

register(COURSE_TAGGING)
register(BACKUP)
register(PAGE_EXPORT)

__all__ = [
    "REGISTRY",
    "JobKind",
    "NewJob",
    "Prepared",
    "Registry",
    "Result",
    "get_kind",
    "load_kinds",
    "register",
]
