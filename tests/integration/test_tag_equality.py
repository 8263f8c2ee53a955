"""One definition of "the same tag", shared by the snapshot, the job and the hub.

The definition is ``tag_key()`` in the database (migration 0002): NFKC, full Unicode case
folding under the builtin ``pg_unicode_fast`` collation, NFKC again; Python never
decides equality. These tests feed the characters where definitions drift apart
(İ/ı/i̇, ß/ẞ/ss, final sigma, fullwidth letters, combining marks) through the real
snapshot and the real batch: no page ever holds two tags equal under the definition,
and each page's outcome agrees with what the snapshot said."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from hubjobs.devstack.demo_data import DemoCourse, create_account, create_course, create_workspace
from hubjobs.domain.pages import update_page
from hubjobs.errors import InvalidInput
from tests.support.helpers import create_tagging_job, edit, items_of, tag_whole_job, tags_of

# Pairs that the same reader calls the same tag, and pairs that are different tags.
SAME = [
    ("İstanbul", "i̇stanbul"),  # dotted capital I folds to i + combining dot above
    ("straße", "STRASSE"),
    ("ẞ", "ss"),
    ("ΟΔΟΣ", "οδος"),  # capital sigma
    ("οδος", "οδοσ"),  # final sigma and sigma
    ("ＴＡＧ", "tag"),  # fullwidth
    ("café", "café"),  # precomposed é and e + combining acute
    ("ﬁle", "FILE"),  # ligature
]
DIFFERENT = [
    ("İstanbul", "istanbul"),  # full folding keeps the dot of İ
    ("ısparta", "isparta"),  # dotless i is its own letter
    ("tag", "tags"),
    ("naïve", "naive"),
]

# Pieces where case folding and normal forms disagree between definitions (some are two
# code points: i + combining dot above, e + combining acute).
PIECES = st.sampled_from(
    ["i", "I", "İ", "ı", "i̇", "ß", "ẞ", "s", "S", "σ", "ς", "Σ", "Ａ", "a", "A", "é", "é", "ﬁ", "x"]
)
TAGS = st.lists(PIECES, min_size=1, max_size=6).map("".join)


async def key(engine: AsyncEngine, tag: str) -> str:
    async with engine.connect() as conn:
        return str((await conn.execute(text("SELECT tag_key(:t)"), {"t": tag})).scalar_one())


async def tag_a_page_that_has(
    engine: AsyncEngine, course: DemoCourse, page: uuid.UUID, existing: str, wanted: str
) -> tuple[bool, str, list[str]]:
    """Gives ``page`` the tag ``existing``, then runs a job tagging the course with
    ``wanted``: whether the snapshot said the page had it, the page's outcome, its tags."""
    await edit(engine, page, tags=[existing])
    job_id = await create_tagging_job(engine, course, wanted)
    snapshot = (await items_of(engine, job_id))[page].done_at_snapshot
    await tag_whole_job(engine, job_id)
    outcome = (await items_of(engine, job_id))[page].state
    return snapshot, outcome, await tags_of(engine, page)


@pytest.mark.parametrize(("existing", "wanted"), SAME, ids=[f"{a}={b}" for a, b in SAME])
async def test_the_same_tag_in_another_form_is_already_there(
    engine: AsyncEngine, course: DemoCourse, existing: str, wanted: str
) -> None:
    page = course.page_ids[3]
    assert await key(engine, existing) == await key(engine, wanted)
    had_it, outcome, tags = await tag_a_page_that_has(engine, course, page, existing, wanted)
    assert had_it, "the snapshot must see the tag"
    assert outcome == "skipped", "the job must agree with its snapshot"
    assert tags == [existing], "the page must not get a second form of the same tag"


@pytest.mark.parametrize(("existing", "wanted"), DIFFERENT, ids=[f"{a}!={b}" for a, b in DIFFERENT])
async def test_a_different_tag_is_added(
    engine: AsyncEngine, course: DemoCourse, existing: str, wanted: str
) -> None:
    page = course.page_ids[4]
    assert await key(engine, existing) != await key(engine, wanted)
    had_it, outcome, tags = await tag_a_page_that_has(engine, course, page, existing, wanted)
    assert not had_it
    assert outcome == "succeeded"
    assert tags == [existing, wanted]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(existing=TAGS, wanted=TAGS)
async def test_snapshot_job_and_hub_agree_on_any_pair(
    engine: AsyncEngine, existing: str, wanted: str
) -> None:
    """Whatever the two tags, the job's outcome is the snapshot's verdict and the page
    ends with no two tags of one key (the database refuses that outright anyway)."""
    async with engine.begin() as conn:
        workspace = await create_workspace(conn, "equality")
        actor = await create_account(conn, workspace)
        [root] = await create_course(conn, workspace, 1)
    course = DemoCourse(workspace, actor, root, [root])
    had_it, outcome, tags = await tag_a_page_that_has(engine, course, root, existing, wanted)
    same = await key(engine, existing) == await key(engine, wanted)
    assert had_it == same
    assert outcome == ("skipped" if same else "succeeded")
    assert tags == ([existing] if same else [existing, wanted])
    keys = [await key(engine, t) for t in tags]
    assert len(set(keys)) == len(keys)


async def test_the_hub_refuses_two_forms_of_one_tag_on_a_page(
    engine: AsyncEngine, course: DemoCourse
) -> None:
    page = course.page_ids[5]
    async with engine.begin() as conn:
        version = (
            await conn.execute(text("SELECT version FROM pages WHERE id = :id"), {"id": page})
        ).scalar_one()
        with pytest.raises(InvalidInput) as refused:
            await update_page(
                conn,
                page_id=page,
                if_match=f'"{page.hex}.{version}"',
                actor_id=course.actor_id,
                change_summary="two forms",
                tags=["Straße", "STRASSE"],
            )
    assert refused.value.code == "invalid_tag"
    assert await tags_of(engine, page) == []
