"""The registry of job kinds. Adding one of hubjobs' own: its kind module here, its
workflow in ``workflows/<name>.py``, its activities in ``activities/<name>.py``, and one
line below. A kind shipped elsewhere registers itself in its own module, named in
HUBJOBS_KIND_MODULES (``load_kinds``). The worker serves exactly the registered kinds
(see worker.py); the API's routes and schemas, the client's start and the CLI's
commands come from their declarations."""

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
    """Kinds by name; a name (or a workflow type) registered twice is an error, never a
    silent overwrite."""

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
        """The registered kind, or ``unknown_kind`` (the name is the caller's text, and
        the message may reach a log: it is not repeated)."""
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
    """Imports the modules that declare kinds beyond hubjobs' own (each registers its
    kinds as it is imported; importing one again registers nothing twice)."""
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
