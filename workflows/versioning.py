"""Declaring a workflow with its versioning behaviour once, and still letting an
unversioned worker run it: the server refuses a behaviour from an unversioned worker,
so each declared class gets a twin without one, ``<Class>Unversioned`` in its module
(the sandbox imports by module and name), same type, signals and queries.

The twin is made only once a worker asks (``unversioned``): the sandbox runs a module
afresh per run, and building a twin each time costs a versioned worker CPU. This module
is passed through, so what ``unversioned`` records here every fresh copy sees.
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
    """``workflow.defn`` with a behaviour, which must be stated, and its twin."""
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
    """The twin an unversioned worker registers, from now on in every sandboxed run."""
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

    # The SDK wants the run method on the class itself; its type hints decode the input.
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
