"""Searching a workspace's jobs (GET /workspaces/{ws}/jobs) on the real database: by a
payload or result field, an id or its prefix, the actor who started it, a set of
statuses, a date range; paged over an oldest-first sort, each job once; an unknown
field or kind refused with its code, never an empty list. The rows are made as a start
makes them (``admit``), then set to the times, statuses and actors each test needs."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from hubjobs.devstack.demo_data import DemoCourse, create_account
from hubjobs.errors import InvalidInput
from hubjobs.job_rows import JobRow, admit
from hubjobs.kinds.course_tagging import COURSE_TAGGING
from hubjobs.readmodel.search import JobSort
from hubjobs.settings import Settings
from starter.client import HubJobsClient
from tests.support.servers import bearer

BASE = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


async def add_job(
    engine: AsyncEngine,
    course: DemoCourse,
    *,
    tag: str = "t",
    minutes: int = 0,
    status: str = "queued",
    actor: uuid.UUID | None = None,
    result: dict[str, Any] | None = None,
) -> uuid.UUID:
    """A tagging job's row as a start makes it, created ``minutes`` after BASE."""
    job_id = uuid.uuid4()
    async with engine.begin() as conn:
        await admit(
            conn,
            JobRow(
                kind=COURSE_TAGGING.name,
                job_id=job_id,
                workspace_id=course.workspace_id,
                actor_id=actor or course.actor_id,
                correlation_id="c-1",
                payload={"root_page_id": str(course.root_page_id), "tag": tag},
            ),
        )
        await conn.execute(
            text(
                "UPDATE jobs SET created_at = :at, status = :status, result = "
                "CAST(:result AS jsonb), finished_at = CASE WHEN :status IN "
                "('succeeded', 'failed', 'cancelled') THEN :at + interval '1 minute' END "
                "WHERE id = :id"
            ),
            {
                "at": BASE + timedelta(minutes=minutes),
                "status": status,
                "result": None if result is None else json.dumps(result),
                "id": job_id,
            },
        )
    return job_id


async def listed(
    http: httpx.AsyncClient, course: DemoCourse, settings: Settings, **params: Any
) -> list[str]:
    """The ids of every page of the search, following ``next``."""
    ids: list[str] = []
    query: dict[str, Any] = {**params}
    while True:
        answer = await http.get(
            f"/workspaces/{course.workspace_id}/jobs",
            params=query,
            headers=bearer(course.actor_id, settings),
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        ids += [job["id"] for job in body["jobs"]]
        if body["next"] is None:
            return ids
        query["before"] = body["next"]


async def refusal(
    http: httpx.AsyncClient, course: DemoCourse, settings: Settings, **params: Any
) -> tuple[int, str]:
    answer = await http.get(
        f"/workspaces/{course.workspace_id}/jobs",
        params=params,
        headers=bearer(course.actor_id, settings),
    )
    return answer.status_code, answer.json()["error"]["code"]


async def test_a_tag_finds_exactly_the_jobs_whose_payload_holds_it(
    http: httpx.AsyncClient, api_settings: Settings, engine: AsyncEngine, course: DemoCourse
) -> None:
    exam = [await add_job(engine, course, tag="exam-2026", minutes=n) for n in range(3)]
    for n in range(4):
        await add_job(engine, course, tag=f"exam-2026-{n}", minutes=10 + n)
    await add_job(engine, course, tag="EXAM-2026", minutes=20)
    found = await listed(
        http, course, api_settings, kind="course_tagging", field="payload.tag=exam-2026"
    )
    assert found == [str(i) for i in reversed(exam)]
    root = await listed(
        http,
        course,
        api_settings,
        kind="course_tagging",
        field=[f"payload.root_page_id={str(course.root_page_id).upper()}", "payload.tag=exam-2026"],
    )
    assert root == found


async def test_a_result_field_matches_the_stored_result(
    http: httpx.AsyncClient, api_settings: Settings, engine: AsyncEngine, course: DemoCourse
) -> None:
    done = await add_job(engine, course, status="succeeded", result={"tag": "t", "failed": 3})
    await add_job(engine, course, status="succeeded", result={"tag": "t", "failed": 0}, minutes=1)
    await add_job(engine, course, minutes=2)
    found = await listed(http, course, api_settings, kind="course_tagging", field="result.failed=3")
    assert found == [str(done)]


async def test_an_id_prefix_finds_exactly_that_job(
    http: httpx.AsyncClient, api_settings: Settings, engine: AsyncEngine, course: DemoCourse
) -> None:
    ids = [await add_job(engine, course, minutes=n) for n in range(20)]
    target = ids[7]
    # The shortest prefix no other job shares, written with its dash and in capitals.
    others = [o.hex for o in ids if o != target]
    digits = next(n for n in range(1, 33) if not any(o.startswith(target.hex[:n]) for o in others))
    prefix = str(target)[: digits + (1 if digits > 8 else 0)].upper()
    assert await listed(http, course, api_settings, id=prefix) == [str(target)]
    assert await listed(http, course, api_settings, id=str(target)) == [str(target)]
    assert await listed(http, course, api_settings, id=target.hex) == [str(target)]
    # Another workspace's job is not found by its id.
    other = await add_job(engine, course)
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE jobs SET workspace_id = gen_random_uuid() WHERE id = :id"), {"id": other}
        )
    assert await listed(http, course, api_settings, id=str(other)) == []


async def test_actor_status_set_and_date_range_are_exact(
    http: httpx.AsyncClient, api_settings: Settings, engine: AsyncEngine, course: DemoCourse
) -> None:
    async with engine.begin() as conn:
        editor = await create_account(conn, course.workspace_id, name="Ed")
    statuses = ["queued", "running", "succeeded", "failed", "cancelled"]
    jobs = {
        n: (
            await add_job(
                engine,
                course,
                minutes=n * 10,
                status=statuses[n % 5],
                actor=editor if n % 3 == 0 else None,
            )
        )
        for n in range(15)
    }

    def ids(numbers: list[int]) -> list[str]:
        return [str(jobs[n]) for n in sorted(numbers, reverse=True)]

    by_editor = await listed(http, course, api_settings, actor_id=str(editor))
    assert by_editor == ids([n for n in jobs if n % 3 == 0])
    failed_or_cancelled = await listed(
        http, course, api_settings, status=["failed", "cancelled"], limit=2
    )
    assert failed_or_cancelled == ids([n for n in jobs if n % 5 in (3, 4)])
    # From minute 30 (taken) to minute 80 (not taken), the zone written or not.
    window = await listed(
        http,
        course,
        api_settings,
        since=(BASE + timedelta(minutes=30)).isoformat(),
        until=(BASE + timedelta(minutes=80)).replace(tzinfo=None).isoformat(),
    )
    assert window == ids([3, 4, 5, 6, 7])
    both = await listed(
        http,
        course,
        api_settings,
        actor_id=str(editor),
        status=["queued", "succeeded"],
        since=BASE.isoformat(),
    )
    assert both == ids([n for n in jobs if n % 3 == 0 and n % 5 in (0, 2)])


async def test_paging_a_filtered_oldest_first_sort_returns_each_job_once(
    http: httpx.AsyncClient, api_settings: Settings, engine: AsyncEngine, course: DemoCourse
) -> None:
    # Three jobs share each created_at: pages end mid-tie, where the id breaks it.
    made = []
    for n in range(40):
        tag = "q" if n % 4 == 0 else "p"
        made.append((n // 3, str(await add_job(engine, course, tag=tag, minutes=n // 3)), tag))
    tagged = [job for _, job, tag in sorted(made) if tag == "p"]
    found = await listed(
        http,
        course,
        api_settings,
        kind="course_tagging",
        field="payload.tag=p",
        sort="created_asc",
        limit=4,
    )
    assert len(tagged) == 30
    assert found == tagged
    assert await listed(http, course, api_settings, sort="finished_desc", limit=3) == []


async def test_finished_sort_pages_the_finished_jobs_by_when_they_finished(
    http: httpx.AsyncClient, api_settings: Settings, engine: AsyncEngine, course: DemoCourse
) -> None:
    done = [await add_job(engine, course, status="succeeded", minutes=n) for n in range(5)]
    await add_job(engine, course, status="running", minutes=9)
    newest = await listed(http, course, api_settings, sort="finished_desc", limit=2)
    assert newest == [str(i) for i in reversed(done)]
    oldest = await listed(http, course, api_settings, sort="finished_asc", limit=2)
    assert oldest == [str(i) for i in done]


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"kind": "course_tagging", "field": "payload.colour=red"}, "unknown_field"),
        ({"kind": "course_tagging", "field": "result.nothing=1"}, "unknown_field"),
        ({"kind": "no_such_kind"}, "unknown_kind"),
        ({"kind": "no such kind"}, "unknown_kind"),
        ({"field": "payload.tag=x"}, "invalid_field_filter"),
        ({"kind": "course_tagging", "field": "tag=x"}, "invalid_field_filter"),
        ({"kind": "course_tagging", "field": "result.failed=many"}, "invalid_field_value"),
        ({"kind": "course_tagging", "field": "payload.root_page_id=12"}, "invalid_field_value"),
        ({"kind": "backup", "field": "payload.scope=galaxy"}, "invalid_field_value"),
        ({"id": "xyz"}, "invalid_job_id"),
        ({"id": "0" * 33}, "invalid_job_id"),
    ],
)
async def test_an_unknown_field_or_kind_is_refused_with_its_code(
    http: httpx.AsyncClient,
    api_settings: Settings,
    engine: AsyncEngine,
    course: DemoCourse,
    params: dict[str, str],
    code: str,
) -> None:
    await add_job(engine, course, tag="x")
    assert await refusal(http, course, api_settings, **params) == (422, code)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    kind=st.sampled_from([None, "course_tagging", "backup", "page_export"]),
    fields=st.lists(
        st.one_of(
            st.text(max_size=40),
            st.builds(
                "{}={}".format,
                st.sampled_from(["payload.tag", "payload.root_page_id", "result.failed"]),
                st.text(max_size=30),
            ),
        ),
        max_size=3,
    ),
    prefix=st.one_of(st.none(), st.text(max_size=40)),
)
async def test_any_filter_text_is_a_page_or_a_refusal_with_its_code(
    http: httpx.AsyncClient,
    api_settings: Settings,
    course: DemoCourse,
    kind: str | None,
    fields: list[str],
    prefix: str | None,
) -> None:
    params: dict[str, Any] = {"field": fields}
    if kind is not None:
        params["kind"] = kind
    if prefix is not None:
        params["id"] = prefix
    answer = await http.get(
        f"/workspaces/{course.workspace_id}/jobs",
        params=params,
        headers=bearer(course.actor_id, api_settings),
    )
    assert answer.status_code in (200, 422), answer.text
    if answer.status_code == 422:
        assert answer.json()["error"]["code"] in {
            "invalid_field_filter",
            "invalid_field_value",
            "unknown_field",
            "invalid_job_id",
        }


async def test_the_kinds_listing_names_their_filterable_fields(http: httpx.AsyncClient) -> None:
    kinds = {k["name"]: k for k in (await http.get("/kinds")).json()["kinds"]}
    tagging = {f["name"]: f for f in kinds["course_tagging"]["fields"]}
    assert tagging["payload.tag"]["type"] == "string"
    assert tagging["payload.root_page_id"]["format"] == "uuid"
    assert tagging["result.failed"]["type"] == "integer"
    scope = {f["name"]: f for f in kinds["backup"]["fields"]}["payload.scope"]
    assert scope["enum"] == ["workspace", "hub"]


async def test_a_search_is_planned_for_its_values_never_prepared(
    hub: HubJobsClient, engine: AsyncEngine, course: DemoCourse
) -> None:
    """psycopg prepares a statement on its fifth run on a connection, and PostgreSQL may
    then keep a generic plan, blind to the values: a search's plan turns on them."""
    await add_job(engine, course)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    for _ in range(8):  # one after the other: the pool's one connection each time
        await jobs.list(actor_id=course.actor_id, sort=JobSort.created_asc)
        await jobs.list()

    async def prepared(conn: Any) -> list[str]:
        rows = await (await conn.execute("SELECT statement FROM pg_prepared_statements")).fetchall()
        return [str(row[0]) for row in rows]

    statements = [s for s in await hub.read(prepared) if "FROM jobs" in s]
    # The plain list is prepared (the check can see one), the search never.
    assert len(statements) == 1 and "actor_id = $" not in statements[0]


async def test_the_client_refuses_an_unknown_status_or_sort_with_a_code(
    hub: HubJobsClient, course: DemoCourse
) -> None:
    jobs = hub.scope(course.workspace_id, course.actor_id)
    with pytest.raises(InvalidInput) as status:
        await jobs.list(status=["failed", "nope"])  # type: ignore[list-item]
    with pytest.raises(InvalidInput) as sort:
        await jobs.list(sort="sideways")  # type: ignore[arg-type]
    assert (status.value.code, sort.value.code) == ("invalid_status", "invalid_argument")
