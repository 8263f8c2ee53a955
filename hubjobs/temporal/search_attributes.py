"""Typed search attributes: how a run is found in the Temporal UI
(``WorkspaceId = "..." AND JobKind = "<kind name>"``, ``JobFailedItems > 0``).
Registered on the dev server by ``hubjobs up`` and on a cluster by docker-compose; a
workflow that sets one not registered fails its task, so a new one is registered
before the workers that set it are deployed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.common import SearchAttributeKey

if TYPE_CHECKING:
    from temporalio.client import Client

JOB_KIND = SearchAttributeKey.for_keyword("JobKind")
WORKSPACE_ID = SearchAttributeKey.for_keyword("WorkspaceId")
JOB_STATUS = SearchAttributeKey.for_keyword("JobStatus")
JOB_ACTOR = SearchAttributeKey.for_keyword("JobActor")
JOB_ID = SearchAttributeKey.for_keyword("JobId")
# On a job schedule, its firings and the jobs they start: ``JobScheduleId = "..."``
# lists every run of one schedule (Temporal's own TemporalScheduledById marks only the
# firings, not the jobs they start as child workflows).
JOB_SCHEDULE_ID = SearchAttributeKey.for_keyword("JobScheduleId")
# A finished job's failed items: a job that "succeeded" with some of them failed is
# found by ``JobFailedItems > 0`` (its run closes Completed all the same).
JOB_FAILED_ITEMS = SearchAttributeKey.for_int("JobFailedItems")

REGISTERED = (
    JOB_KIND,
    WORKSPACE_ID,
    JOB_STATUS,
    JOB_ACTOR,
    JOB_ID,
    JOB_SCHEDULE_ID,
    JOB_FAILED_ITEMS,
)


def registration() -> dict[str, IndexedValueType.ValueType]:
    """Each registered attribute's name and type, as the operator service's
    ``AddSearchAttributes`` takes them (a namespace of a test server of one's own)."""
    return {
        key.name: IndexedValueType.ValueType(key.indexed_value_type.value) for key in REGISTERED
    }


async def register_missing(client: Client, namespace: str = "default") -> list[str]:
    """Registers each attribute the namespace lacks; returns their names. A dev server
    restarted on its store ignores ``--search-attribute``: one added by a later build
    would fail every run that sets it."""
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    missing = {
        name: value_type
        for name, value_type in registration().items()
        if name not in listed.custom_attributes
    }
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(search_attributes=missing, namespace=namespace)
        )
    return sorted(missing)
