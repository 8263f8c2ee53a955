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
# On a job schedule, its firings and the jobs they start: ``JobScheduleId = "..."``
# lists every run of one schedule (Temporal's own TemporalScheduledById marks only the
# firings, not the jobs they start as child workflows).
JOB_SCHEDULE_ID = SearchAttributeKey.for_keyword("JobScheduleId")

REGISTERED = (JOB_KIND, WORKSPACE_ID, JOB_STATUS, JOB_ACTOR, JOB_ID, JOB_SCHEDULE_ID)
