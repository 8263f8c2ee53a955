"""The Python client refuses a ``str`` where it declares a ``uuid.UUID`` (issue 19), with
a ``TypeError`` that names the argument, before it connects to anything: a string id
used to reach the database and come back as "the root page does not exist"."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from hubjobs.errors import HubJobsError
from hubjobs.settings import Settings
from starter.client import HubJobsClient

# Fixed ids: parametrized test ids show them, and xdist needs the same ids in every worker.
WS, ACTOR, PAGE = (uuid.UUID(int=n) for n in (1, 2, 3))


def client() -> HubJobsClient:
    # Nothing answers there: a call that got as far as connecting would fail otherwise.
    return HubJobsClient(settings=Settings(database_url="postgresql://x@127.0.0.1:1/x"))


@pytest.mark.parametrize(
    ("workspace", "actor", "name"),
    [(str(WS), ACTOR, "workspace_id"), (WS, str(ACTOR), "actor_id"), (WS, 7, "actor_id")],
)
def test_a_scope_takes_uuids(workspace: Any, actor: Any, name: str) -> None:
    with pytest.raises(TypeError, match=rf"{name} must be a uuid\.UUID, not "):
        client().scope(workspace, actor)
    with pytest.raises(TypeError, match=rf"{name} must be a uuid\.UUID, not "):
        client().schedules(workspace, actor)


async def test_a_start_takes_a_kind_and_a_json_object() -> None:
    """Refused before any server is asked: a kind not registered, a payload that is not
    a JSON object or holds what JSON cannot carry."""
    jobs = client().scope(WS, ACTOR)
    with pytest.raises(HubJobsError) as unknown:
        await jobs.start("no_such_kind", {})
    assert unknown.value.code == "unknown_kind"
    for payload in ([PAGE], {"root_page_id": object()}, {"\ud800": 1}):
        with pytest.raises(HubJobsError) as refused:
            await jobs.start("course_tagging", payload)  # type: ignore[arg-type]
        assert refused.value.code == "invalid_payload"


@pytest.mark.parametrize("call", ["get", "cancel", "items", "retry", "retry_of"])
async def test_job_calls_take_a_uuid_job_id(call: str) -> None:
    jobs = client().scope(WS, ACTOR)
    with pytest.raises(TypeError, match=r"job_id must be a uuid\.UUID, not str"):
        await getattr(jobs, call)(str(uuid.uuid4()))
