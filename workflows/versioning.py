"""Declaring a workflow with its Worker Deployment versioning behaviour, once, and still
letting an unversioned worker (HUBJOBS_WORKER_VERSIONING=false) run it.

The SDK sends a workflow's declared behaviour with every workflow task it completes,
and the server refuses a behaviour from a worker that is not versioned ("versioning
behavior cannot be specified without deployment options being set with versioned
mode"). So ``declare_workflow`` also makes the same workflow without a behaviour, a
subclass named ``<Class>Unversioned`` in the same module (the sandbox imports a
workflow class by module and name), and ``unversioned`` hands it to unversioned
workers. Both have the same Temporal type, signals and queries: a history recorded by
one replays on the other.

The twin is made only once a worker of this process asks for it (``unversioned``):
the sandbox runs a workflow's module afresh for each workflow run, and a versioned
worker would otherwise build, and throw away, a second workflow class per run
(a measurable share of its CPU in a burst of one-page jobs). This
module is passed through the sandbox, so what ``unversioned`` records here is seen by
every run's fresh copy of the workflow's module, which then makes its twin too.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import VersioningBehavior

C = TypeVar("C", bound=type)
TWIN = "__hubjobs_unversioned__"
MADE_TWIN = "__hubjobs_twin__"

# (module, class name) of the declared workflows an unversioned worker runs: their
# modules, run afresh in a sandbox, make their twins again.
_TWINS_WANTED: set[tuple[str, str]] = set()


def declare_workflow(name: str, behaviour: VersioningBehavior) -> Callable[[C], C]:
    """``workflow.defn(name=name, versioning_behavior=behaviour)``, plus its twin without
    a behaviour for unversioned workers. A behaviour must be stated."""
    if behaviour == VersioningBehavior.UNSPECIFIED:
        raise ValueError(f"the {name} workflow must state its versioning behaviour")

    def declare(cls: C) -> C:
        _check_run(cls)
        versioned = workflow.defn(name=name, versioning_behavior=behaviour)(cls)
        setattr(versioned, TWIN, name)
        if (cls.__module__, cls.__name__) in _TWINS_WANTED:
            _twin_of(versioned)
        return versioned

    return declare


def is_declared(obj: object) -> bool:
    """A workflow class declared with ``declare_workflow`` (not its twin)."""
    return isinstance(obj, type) and TWIN in vars(obj)


def unversioned(cls: type) -> type:
    """The workflow as an unversioned worker registers it (made on first request, and
    from then on in every sandboxed run of its module too)."""
    _TWINS_WANTED.add((cls.__module__, cls.__name__))
    return _twin_of(cls)


def _check_run(cls: type) -> Callable[..., Any]:
    runs = [fn for fn in vars(cls).values() if hasattr(fn, "__temporal_workflow_run")]
    if len(runs) != 1:
        raise ValueError(f"{cls.__qualname__} must define one @workflow.run method")
    run: Callable[..., Any] = runs[0]
    return run


def _twin_of(cls: type) -> type:
    """The twin of a declared workflow class, made once per class object."""
    twin_name = f"{cls.__name__}Unversioned"
    made = vars(cls).get(MADE_TWIN)
    if made is None:
        made = _without_behaviour(cls, getattr(cls, TWIN), twin_name)
        setattr(cls, MADE_TWIN, made)
    setattr(sys.modules[cls.__module__], twin_name, made)
    return made


def _without_behaviour(cls: type, name: str, twin_name: str) -> type:
    run = _check_run(cls)

    # The SDK wants the run method defined on the class itself; this one delegates, with
    # the original's signature and type hints (they decode the workflow's input).
    async def run_here(self: Any, *args: Any) -> Any:
        return await run(self, *args)

    functools.update_wrapper(run_here, run)
    run_here.__qualname__ = f"{twin_name}.{run.__name__}"
    namespace = {
        "__module__": cls.__module__,
        "__qualname__": twin_name,
        "__doc__": cls.__doc__,
        run.__name__: workflow.run(run_here),
    }
    return workflow.defn(name=name)(type(twin_name, (cls,), namespace))
