"""Typed search attributes: how a run is found in the Temporal UI
(``WorkspaceId = "..." AND JobKind = "course_tagging"``). Registered on the dev
server by ``hubjobs up`` and on a cluster by docker-compose."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

JOB_KIND = SearchAttributeKey.for_keyword("JobKind")
WORKSPACE_ID = SearchAttributeKey.for_keyword("WorkspaceId")
JOB_STATUS = SearchAttributeKey.for_keyword("JobStatus")
JOB_ACTOR = SearchAttributeKey.for_keyword("JobActor")
JOB_ID = SearchAttributeKey.for_keyword("JobId")

REGISTERED = (JOB_KIND, WORKSPACE_ID, JOB_STATUS, JOB_ACTOR, JOB_ID)
