"""The worker serves exactly the registered kinds, built from the registry: each kind's
workflow (Temporal type derived from its name) and activities are found where the kind
says, every kind module of workflows/ and activities/ is registered, and no two
activities or workflows share a Temporal name (a clash shows otherwise only when a
worker starts, or as a workflow calling the wrong code)."""

from __future__ import annotations

import importlib
import pkgutil
from collections import Counter
from collections.abc import Callable
from typing import Any

import activities
import worker
import workflows
from activities.attempt import KindActivities
from hubjobs.kinds import REGISTRY
from workflows.job_lifecycle import JobWorkflow


def workflow_name(cls: type) -> str:
    return str(getattr(cls, "__temporal_workflow_definition").name)


def activity_names(cls: type) -> list[str]:
    return [
        getattr(member, "__temporal_activity_definition").name
        for name in dir(cls)
        if hasattr(member := getattr(cls, name), "__temporal_activity_definition")
    ]


def activity_name(method: Callable[..., Any]) -> str:
    return str(getattr(method, "__temporal_activity_definition").name)


def test_every_registered_kind_is_served_and_nothing_else() -> None:
    served = worker.implementations()
    assert [i.kind for i in served] == list(REGISTRY)
    for implementation in served:
        kind = implementation.kind
        workflow: Any = implementation.workflow
        assert workflow.kind is kind
        assert workflow_name(implementation.workflow) == kind.workflow_type
        assert issubclass(implementation.activities, KindActivities)
        assert implementation.activities.kind is kind
    # The worker's kind workflows are the registered kinds', and only those.
    kind_workflows = [w for w in worker.workflows() if issubclass(w, JobWorkflow)]
    assert kind_workflows == [i.workflow for i in served]
    assert sorted(map(workflow_name, kind_workflows)) == sorted(k.workflow_type for k in REGISTRY)
    assert set(worker.workflows()) == {*kind_workflows, *worker.SHARED_WORKFLOWS}


def test_each_kind_workflow_runs_its_own_kinds_work() -> None:
    """``work`` is an activity of the kind's own activities class, by reference."""
    for implementation in worker.implementations():
        workflow: Any = implementation.workflow
        work = workflow.work
        assert activity_name(work) in activity_names(implementation.activities)
        assert getattr(implementation.activities, work.__name__) is work


def _declared_in(package: Any) -> list[Any]:
    modules = [
        importlib.import_module(f"{package.__name__}.{m.name}")
        for m in pkgutil.iter_modules(package.__path__)
    ]
    return [obj for module in modules for obj in vars(module).values() if isinstance(obj, type)]


def test_no_kind_in_workflows_or_activities_is_left_unregistered() -> None:
    """A kind's workflow or activities without its registration line would be served by
    no worker: every one found in the two packages names a registered kind."""
    declared = [
        obj
        for obj in _declared_in(workflows) + _declared_in(activities)
        if (issubclass(obj, JobWorkflow) and obj is not JobWorkflow)
        or (issubclass(obj, KindActivities) and "kind" in obj.__dict__)
    ]
    assert declared, "no kind found in workflows/ and activities/"
    for obj in declared:
        assert REGISTRY.find(obj.kind.name) is obj.kind, (
            f"{obj.__module__}.{obj.__qualname__} serves kind {obj.kind.name!r}, which "
            "hubjobs/kinds/__init__.py does not register"
        )


def test_no_two_activities_or_workflows_share_a_name() -> None:
    classes = worker.activity_classes(worker.implementations())
    names = Counter(name for cls in classes for name in activity_names(cls))
    assert names and not [name for name, count in names.items() if count > 1]
    workflow_names = Counter(map(workflow_name, worker.workflows()))
    assert not [name for name, count in workflow_names.items() if count > 1]


def test_every_activity_class_serves_something() -> None:
    for cls in worker.activity_classes(worker.implementations()):
        assert activity_names(cls), cls
