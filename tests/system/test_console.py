# ruff: noqa: F811 (the shared fixtures are imported by name, then taken as parameters)
"""The operator's console in headless Chromium, beside test_operator_page (whose
fixtures it shares: the API served for real, the browser): what an operator reads at a
glance, who may act and starting a job, schedules made from the page, the queue seen
whole (overview, workers) and the list's search. Screenshots in test-artifacts/."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, expect
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client
from temporalio.runtime import Runtime, TelemetryConfig

from hubjobs.devstack.demo_data import create_account
from hubjobs.settings import Settings
from starter.api import create_app
from starter.api.tokens import mint
from starter.client import HubJobsClient
from tests.integration.test_bulk_retry import finished_job
from tests.support.accessibility import severe_violations
from tests.support.helpers import until
from tests.support.servers import running_worker, seed, temporal_at
from tests.support.sse import serving
from tests.system.test_operator_page import (  # noqa: F401 (fixtures, by name)
    api,
    browser,
    open_tab,
    page_settings,
    row,
    shot,
    sign_in,
)

# --- what an operator reads at a glance --------------------------------------------------

# A fixed locale and zone: the separators and times asserted are en-US's, in UTC.
READER: dict[str, Any] = {"locale": "en-US", "timezone_id": "UTC"}


async def test_numbers_times_ids_titles_keys_and_dark_mode(
    api: tuple[str, HubJobsClient],
    page_settings: Settings,
    temporal: Client,
    engine: AsyncEngine,
    browser: Browser,
    tmp_path: Path,
) -> None:
    """Counts with separators, times relative with the exact one on hover, a duration,
    ids whole and copied in a click, a title per view, j/k/Enter/?/ keys that only move,
    dark mode by the system's choice and by the toggle; axe finds nothing serious."""
    base, hub = api
    course = await seed(engine, 1200)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    tab = await open_tab(browser, permissions=["clipboard-read", "clipboard-write"], **READER)
    page = tab.page
    refused: list[str] = []
    page.on("response", lambda r: refused.append(r.url) if r.status >= 400 else None)
    async with running_worker(temporal, page_settings):
        course_job = await jobs.start(
            "course_tagging", {"root_page_id": course.root_page_id, "tag": "t"}
        )
        backup = await jobs.start("backup", {})
        await sign_in(tab, base, course, page_settings)
        assert await page.title() == "Jobs · hubjobs"
        course_row = page.locator(row(page, course_job.id))
        await expect(course_row.locator(".num")).to_contain_text("/ 1,200", timeout=60_000)
        created = course_row.locator("time[data-ago]")
        await expect(created).to_have_text(re.compile(r"now|seconds? ago|minutes? ago"))
        assert str(course_job.created_at.year) in (await created.get_attribute("title") or "")
        assert not await severe_violations(page)

        # Keys move and open, nothing else: "/" is the filter, j/k the rows, Enter opens.
        await page.keyboard.press("/")
        assert await page.evaluate("() => document.activeElement.id") == "search-id"
        await page.locator("#main").focus()
        for key in ("j", "j", "k", "j"):
            await page.keyboard.press(key)
        focused = "() => document.activeElement.closest('tr')?.dataset.jobId"
        assert await page.evaluate(focused) == str(course_job.id)  # newest first: backup, course
        # A job started meanwhile comes in above; the row a person is on keeps its focus.
        newer = await jobs.start("backup", {})
        await expect(page.locator(row(page, newer.id))).to_be_visible()
        assert await page.evaluate(focused) == str(course_job.id)
        await page.keyboard.press("Enter")
        await expect(page.locator("#job-title")).to_be_visible()
        assert page.url.endswith(f"/jobs/{course_job.id}")
        assert await page.title() == f"{await page.locator('#job-title').inner_text()} · hubjobs"
        await page.keyboard.press("?")
        await expect(page.locator("#help")).to_be_visible()
        assert not await severe_violations(page)
        await page.keyboard.press("Escape")
        await expect(page.locator("#help")).to_be_hidden()

        await expect(page.locator("#job-done")).to_contain_text("of 1,200 done", timeout=60_000)
        await expect(page.locator("#duration")).to_have_text(re.compile(r"^\d+ (s|min)"))
        workflow = page.locator("code.id").nth(1)
        assert await workflow.inner_text() == course_job.workflow_id
        await page.get_by_role("button", name="Copy the workflow id").click()
        await expect(page.locator("#notice")).to_have_text("Copied the workflow id.")
        assert await page.evaluate("() => navigator.clipboard.readText()") == course_job.workflow_id
        await shot(tab, tmp_path, "glance-job")

        # Dark mode by the toggle, kept for the next view; and by the system's choice.
        await page.get_by_role("button", name="Dark mode").click()
        assert await page.evaluate("() => document.documentElement.dataset.theme") == "dark"
        paper = "() => getComputedStyle(document.documentElement).backgroundColor"
        assert await page.evaluate(paper) == "rgb(20, 24, 29)"
        assert not await severe_violations(page)
        await shot(tab, tmp_path, "dark-job")
        dark = await open_tab(browser, color_scheme="dark", **READER)
        await sign_in(dark, base, course, page_settings)
        await expect(dark.page.locator(row(dark.page, backup.id))).to_be_visible()
        assert await dark.page.evaluate("() => document.documentElement.dataset.theme") == "dark"
        assert (
            await dark.page.get_by_role("button", name="Dark mode").get_attribute("aria-pressed")
            == "true"
        )
        assert not await severe_violations(dark.page)
        await shot(dark, tmp_path, "dark-jobs")
        await jobs.cancel(course_job.id, reason="the test has seen enough")
    icon = await page.request.get(f"{base}/operator/favicon.svg")
    assert (icon.status, icon.headers["content-type"]) == (200, "image/svg+xml")
    assert await page.locator("link[rel=icon]").get_attribute("href") == "favicon.svg"
    assert refused == []


async def test_a_phone_shows_every_column_and_a_schedule_reads_in_its_zone(
    api: tuple[str, HubJobsClient],
    page_settings: Settings,
    engine: AsyncEngine,
    browser: Browser,
    tmp_path: Path,
) -> None:
    """At 390 px a row's every cell is on screen, named by its column; a cron and its
    next firing read in the schedule's own zone; an address in another workspace than
    the tab's says so."""
    base, hub = api
    course, other = await seed(engine, 3), await seed(engine, 3)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    job = await jobs.start("backup", {})
    made = await jobs.schedules.create("backup", cron="0 6 * * *", time_zone="Europe/Paris")
    tab = await open_tab(browser, width=390, height=844, **READER)
    page = tab.page
    try:
        await sign_in(tab, base, course, page_settings)
        for table, line in (
            ("jobs", page.locator(row(page, job.id))),
            ("schedules", page.locator(f'tr[data-schedule-id="{made.id}"]')),
        ):
            if table == "schedules":
                await page.get_by_role("link", name="Schedules").click()
            await expect(line).to_be_visible()
            cells = await line.locator("td").evaluate_all(
                """(cells) => cells.map((c) => {
                    const box = c.getBoundingClientRect();
                    return [getComputedStyle(c, "::before").content, box.width > 0,
                            box.left >= 0 && box.right <= window.innerWidth];
                })"""
            )
            assert cells and all(shown and inside for _, shown, inside in cells), (table, cells)
            assert all(label not in ("none", "normal", '""') for label, _, _ in cells), cells
            assert not await severe_violations(page)
            await shot(tab, tmp_path, f"phone-every-column-{table}")
        schedule = page.locator(f'tr[data-schedule-id="{made.id}"]')
        await expect(schedule).to_contain_text("0 6 * * * (Europe/Paris)")
        await expect(schedule.locator(".next-run .hint")).to_contain_text("6:00:00 AM GMT+1")

        # A link into another workspace: said so, whatever job it names.
        await page.goto(f"{base}/operator/#/w/{other.workspace_id}/jobs/{uuid.uuid4()}")
        note = page.locator("#other-workspace")
        await expect(note).to_contain_text(str(other.workspace_id))
        await expect(note).to_contain_text(str(course.workspace_id))
        await note.get_by_role("link").click()
        await expect(page.locator(row(page, job.id))).to_be_visible()
        await page.goto(f"{base}/operator/#/w/{course.workspace_id}/jobs/{uuid.uuid4()}")
        await expect(page.get_by_role("heading", name="Job not shown")).to_be_visible()
        await expect(page.locator("#other-workspace")).to_have_count(0)
        # The audit finds what it is for: a button with no name is a critical violation.
        await page.evaluate("() => document.body.append(document.createElement('button'))")
        assert "button-name" in {v["id"] for v in await severe_violations(page)}
    finally:
        await jobs.schedules.delete(made.id)


# --- who may do what, and starting a job -----------------------------------------------


async def test_a_job_starts_from_its_kinds_form_and_a_reader_sees_no_action(
    api: tuple[str, HubJobsClient],
    page_settings: Settings,
    temporal: Client,
    engine: AsyncEngine,
    browser: Browser,
    tmp_path: Path,
) -> None:
    """The start form is built from the kind's payload schema (GET /kinds) and refused
    with the API's own codes; a reader of the workspace sees every job and no button for
    what the API would refuse it, and the API refuses it still (403)."""
    base, hub = api
    course = await seed(engine, 3)
    async with engine.begin() as conn:
        reader = await create_account(conn, course.workspace_id, role="reader", name="Rita")
    jobs = hub.scope(course.workspace_id, course.actor_id)
    made = await jobs.schedules.create("backup", cron="0 3 * * *")
    tab = await open_tab(browser, **READER)
    page = tab.page
    try:
        await sign_in(tab, base, course, page_settings)
        await expect(page.locator("#who")).to_contain_text("· administrator")
        await page.get_by_role("link", name="Start a job").click()
        await expect(page.get_by_role("heading", name="Start a job")).to_be_visible()
        assert await page.title() == "Start a job · hubjobs"
        await page.get_by_label("Kind").select_option("course_tagging")
        await expect(page.get_by_role("button", name="Start Course tagging")).to_be_visible()
        root, tag = (
            page.get_by_label(re.compile("^Root Page Id")),
            page.get_by_label(re.compile("^Tag")),
        )
        for given, code in (
            ("not-a-uuid", "invalid_payload"),
            (str(uuid.uuid4()), "page_not_found"),
        ):
            await root.fill(given)
            await tag.fill("from-the-form")
            await page.get_by_role("button", name="Start Course tagging").click()
            await expect(page.locator("#start-code")).to_have_text(code)
        await shot(tab, tmp_path, "start-refused")
        assert not await severe_violations(page)
        await root.fill(str(course.root_page_id))
        await page.get_by_role("button", name="Start Course tagging").click()
        await expect(page.locator("#job-title")).to_be_visible()
        started = await jobs.get(uuid.UUID(page.url.rsplit("/", 1)[-1]))
        assert (started.kind, started.payload["tag"]) == ("course_tagging", "from-the-form")
        assert [job.id for job in await jobs.list()] == [started.id]  # the refusals left none

        # A reader: everything shown, nothing offered.
        other = await open_tab(browser, **READER)
        seen = other.page
        await seen.goto(f"{base}/operator/")
        await seen.get_by_label("API token").fill(mint(reader, page_settings))
        await seen.get_by_label("Workspace").fill(str(course.workspace_id))
        await seen.get_by_role("button", name="Sign in").click()
        await expect(seen.locator(row(seen, started.id))).to_be_visible()
        await expect(seen.locator("#who")).to_contain_text("· reader")
        await expect(seen.locator("#cancel-selected")).to_have_count(0)
        await expect(seen.locator("#retry-selected")).to_have_count(0)
        await expect(seen.locator("#jobs input[type=checkbox]")).to_have_count(0)
        await expect(seen.get_by_role("link", name="Start a job")).to_be_hidden()
        assert not await severe_violations(seen)
        await shot(other, tmp_path, "reader-jobs")
        await seen.goto(f"{base}/operator/#/w/{course.workspace_id}/jobs/{started.id}")
        await expect(seen.locator("#no-actions")).to_be_visible()
        await expect(seen.get_by_role("button", name="Cancel the job")).to_have_count(0)
        await shot(other, tmp_path, "reader-job")
        await seen.goto(f"{base}/operator/#/w/{course.workspace_id}/schedules")
        await expect(seen.locator(f'tr[data-schedule-id="{made.id}"]')).to_be_visible()
        await expect(
            seen.get_by_role("button", name=re.compile("^(Pause|Resume|Edit) "))
        ).to_have_count(0)
        edited = await seen.request.patch(
            f"{base}/workspaces/{course.workspace_id}/schedules/{made.id}",
            data={"cron": "0 4 * * *"},
            headers={"Authorization": f"Bearer {mint(reader, page_settings)}"},
        )
        assert edited.status == 403
        assert (await edited.json())["error"]["code"] == "actor_not_administrator"
        await seen.goto(f"{base}/operator/#/w/{course.workspace_id}/start")
        await expect(seen.locator("#no-actions")).to_be_visible()
        refused = await seen.request.delete(
            f"{base}/workspaces/{course.workspace_id}/jobs/{started.id}",
            headers={"Authorization": f"Bearer {mint(reader, page_settings)}"},
        )
        assert refused.status == 403
        assert (await refused.json())["error"]["code"] == "actor_not_administrator"
        me = await seen.request.get(
            f"{base}/workspaces/{course.workspace_id}/me",
            headers={"Authorization": f"Bearer {mint(reader, page_settings)}"},
        )
        assert (await me.json())["role"] == "reader" and not (await me.json())["may_act"]
    finally:
        await jobs.schedules.delete(made.id)


# --- the queue seen whole ---------------------------------------------------------------


async def test_the_overview_counts_and_charts_the_queue_live_and_workers_come_and_go(
    page_settings: Settings,
    temporal: Client,
    engine: AsyncEngine,
    browser: Browser,
    tmp_path: Path,
) -> None:
    """The overview's counts per kind and its throughput chart while jobs run, moving
    with the stream; the workers view with two workers of their own identities, then the
    one stopped shown gone."""
    settings = page_settings.model_copy(update={"workers_gone_seconds": 20.0})
    course = await seed(engine, 400)
    hub = HubJobsClient(temporal, engine, settings)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    first, second = f"worker-a-{uuid.uuid4().hex[:8]}", f"worker-b-{uuid.uuid4().hex[:8]}"
    address = settings.temporal_address
    assert address is not None
    beating = Runtime(telemetry=TelemetryConfig(), worker_heartbeat_interval=timedelta(seconds=1))
    a = await temporal_at(address, identity=first, runtime=beating)
    b = await temporal_at(address, identity=second, runtime=beating)
    async with serving(create_app(settings, client=hub)) as base:
        tab = await open_tab(browser, **READER)
        page = tab.page
        await sign_in(tab, base, course, settings)
        async with running_worker(a, settings):
            backed_up = [await jobs.start("backup", {}) for _ in range(2)]
            for job in backed_up:
                await jobs.wait(job.id, timeout=60, interval=0.1)
            await page.get_by_role("link", name="Overview").click()
            await expect(page.get_by_role("heading", name="Overview")).to_be_visible()
            assert await page.title() == "Overview · hubjobs"
            backups = page.locator('#overview tr[data-kind="backup"]')
            await expect(backups.locator('[data-label="Succeeded"]')).to_have_text("2")
            await expect(page.locator("#chart-jobs canvas")).to_be_visible()
            await expect(page.locator("#chart-jobs figcaption")).to_contain_text("2 succeeded")
            # Live: a job started now shows running, then succeeded, with no reload.
            tagging = await jobs.start(
                "course_tagging", {"root_page_id": course.root_page_id, "tag": "overview"}
            )
            courses = page.locator('#overview tr[data-kind="course_tagging"]')
            await expect(courses.locator('[data-label="Running"]')).to_have_text("1")
            await shot(tab, tmp_path, "overview-running")
            assert not await severe_violations(page)
            await jobs.wait(tagging.id, timeout=120, interval=0.1)
            await expect(courses.locator('[data-label="Succeeded"]')).to_have_text("1")
            # Pages: the course's 400 and each backup's tables, as the jobs count them.
            pages = sum([(await jobs.get(j.id)).succeeded for j in [*backed_up, tagging]])
            assert pages > 400
            await expect(page.locator("#chart-pages figcaption")).to_contain_text(
                f"{pages:,} succeeded"
            )
            await shot(tab, tmp_path, "overview")

            await page.get_by_role("link", name="Workers").click()
            live = page.locator(f'#workers tr[data-worker="{first}"]')
            await expect(live).to_have_attribute("data-state", "live")
            async with running_worker(b, settings):
                other = page.locator(f'#workers tr[data-worker="{second}"]')
                # Read again by the view itself, every few seconds.
                await expect(other).to_have_attribute("data-state", "live", timeout=30_000)
                await shot(tab, tmp_path, "workers-two")
            await expect(other).to_have_attribute("data-state", "gone", timeout=60_000)
            await expect(live).to_have_attribute("data-state", "live")
            assert not await severe_violations(page)
            await shot(tab, tmp_path, "workers-one-gone")
    await hub.close()


# What the page shows when each first-paint mark is set (the paint benchmark reads them).
MARKS_SEEN = """(() => {
    const mark = performance.mark.bind(performance);
    window.marksSeen = [];
    performance.mark = (name, ...rest) => {
        window.marksSeen.push({
            name,
            rows: document.querySelectorAll("#jobs tbody tr").length,
            kinds: document.querySelectorAll("#overview tbody tr").length,
            charts: document.querySelectorAll("#chart-jobs canvas, #chart-pages canvas").length,
        });
        return mark(name, ...rest);
    };
})();"""


async def test_the_list_and_the_overview_mark_their_first_paint_once(
    api: tuple[str, HubJobsClient],
    page_settings: Settings,
    engine: AsyncEngine,
    browser: Browser,
) -> None:
    """``hubjobs:jobs-painted`` once the list's rows are in the page and
    ``hubjobs:overview-painted`` once its counts and both charts are: each set once,
    from the navigation's start, whatever the stream reads again after."""
    base, hub = api
    course = await seed(engine, 3)
    job = await hub.scope(course.workspace_id, course.actor_id).start("backup", {})
    tab = await open_tab(browser, **READER)
    page = tab.page
    await page.add_init_script(MARKS_SEEN)
    await sign_in(tab, base, course, page_settings)
    await expect(page.locator(row(page, job.id))).to_be_visible()
    await page.wait_for_function("() => performance.getEntriesByType('mark').length > 0")
    await page.get_by_role("link", name="Overview").click()
    await expect(page.locator("#chart-pages canvas")).to_be_visible()
    await page.wait_for_function("() => performance.getEntriesByType('mark').length > 1")
    await page.get_by_role("link", name="Jobs", exact=True).click()
    await expect(page.locator(row(page, job.id))).to_be_visible()
    seen = await page.evaluate("() => window.marksSeen")
    assert seen == [
        {"name": "hubjobs:jobs-painted", "rows": 1, "kinds": 0, "charts": 0},
        {"name": "hubjobs:overview-painted", "rows": 0, "kinds": 1, "charts": 2},
    ]
    at = await page.evaluate(
        "() => performance.getEntriesByType('mark').map((m) => [m.name, m.startTime])"
    )
    assert [name for name, _ in at] == ["hubjobs:jobs-painted", "hubjobs:overview-painted"]
    assert 0 < at[0][1] < at[1][1]


async def test_a_search_by_a_tag_finds_exactly_its_jobs_and_says_what_it_refuses(
    api: tuple[str, HubJobsClient],
    page_settings: Settings,
    engine: AsyncEngine,
    browser: Browser,
    tmp_path: Path,
) -> None:
    """A field of the kind's payload searched from the list, the search kept in the
    address (opened afresh, the same jobs); an id's start; an unknown field refused with
    its code, not an empty list."""
    base, hub = api
    course = await seed(engine, 3)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    root = {"root_page_id": course.root_page_id}
    exam = [await jobs.start("course_tagging", {**root, "tag": "exam"}) for _ in range(2)]
    await jobs.start("course_tagging", {**root, "tag": "draft"})
    await jobs.start("backup", {})
    tab = await open_tab(browser, **READER)
    page = tab.page
    await sign_in(tab, base, course, page_settings)
    await expect(page.locator("#jobs tbody tr")).to_have_count(4)
    await page.get_by_label("Kind", exact=True).select_option("course_tagging")
    await expect(page.locator("#jobs tbody tr")).to_have_count(3)
    await page.get_by_label("Field", exact=True).select_option("payload.tag")
    await page.get_by_label("Its value").fill("exam")
    await page.get_by_role("button", name="Search").click()
    found = page.locator("#jobs tbody tr")
    await expect(found).to_have_count(2)
    ids = {await line.get_attribute("data-job-id") for line in await found.all()}
    assert ids == {str(job.id) for job in exam}
    assert "field=payload.tag%3Dexam" in page.url
    assert not await severe_violations(page)
    await shot(tab, tmp_path, "search-tag")
    shared = page.url
    await page.goto("about:blank")
    await page.goto(shared)
    await expect(page.locator("#jobs tbody tr")).to_have_count(2)

    # "/" is the search: a job's id by its start.
    await page.goto(f"{base}/operator/#/w/{course.workspace_id}/jobs")
    await expect(page.locator("#jobs tbody tr")).to_have_count(4)
    await page.locator("#main").focus()
    await page.keyboard.press("/")
    await page.keyboard.type(str(exam[0].id)[:8])
    await page.keyboard.press("Enter")
    await expect(page.locator("#jobs tbody tr")).to_have_count(1)
    await expect(page.locator(row(page, exam[0].id))).to_be_visible()

    # A field the kind does not have: said, with the API's code.
    await page.goto(
        f"{base}/operator/#/w/{course.workspace_id}/jobs?kind=backup&field=payload.tag%3Dexam"
    )
    await expect(page.locator("#search-code")).to_have_text("unknown_field")
    await expect(page.locator("#jobs tbody tr")).to_have_count(0)
    await shot(tab, tmp_path, "search-refused")


async def test_failed_jobs_a_search_matches_are_retried_once_counted_and_confirmed(
    api: tuple[str, HubJobsClient],
    page_settings: Settings,
    engine: AsyncEngine,
    browser: Browser,
    tmp_path: Path,
) -> None:
    """ "Retry failed" over a search by a tag: the count the list gives asked first (kept:
    nothing moves), then the jobs retried and said so; ticked jobs that cannot be
    retried said by code, not hidden."""
    base, hub = api
    course = await seed(engine, 3)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    exam = [await finished_job(engine, course, "exam") for _ in range(2)]
    clean = await finished_job(engine, course, "exam", failed=False)
    draft = await finished_job(engine, course, "draft")
    tab = await open_tab(browser, **READER)
    page = tab.page
    await sign_in(tab, base, course, page_settings)
    await page.goto(
        f"{base}/operator/#/w/{course.workspace_id}/jobs?kind=course_tagging&field=payload.tag%3Dexam"
    )
    await expect(page.locator("#jobs tbody tr")).to_have_count(3)
    await page.get_by_label("every job matching this filter").check()
    await page.get_by_label("Reason to cancel or retry").fill("exam week")
    retry = page.get_by_role("button", name="Retry failed: every job matching this filter")
    await retry.click()
    confirm = page.get_by_role("group", name="Confirm the retry")
    await expect(confirm).to_contain_text("Retry 2 failed jobs?")
    assert not await severe_violations(page)
    await shot(tab, tmp_path, "list-retry-confirm")
    await page.get_by_role("button", name="Keep them").click()
    assert [await jobs.retry_of(job_id) for job_id in (*exam, draft)] == [None, None, None]
    await retry.click()
    await page.get_by_role("button", name="Yes, retry 2").click()
    await expect(page.locator("#retry-outcome")).to_have_text("2 retried")
    for job_id in exam:
        made = await jobs.retry_of(job_id)
        assert made is not None and made.source_job_id == job_id
    assert await jobs.retry_of(draft) is None
    [event] = await jobs.audit(action="bulk_retry")
    assert (event.reason, event.surface) == ("exam week", "console")
    await shot(tab, tmp_path, "list-retried")

    # Ticked: one retried already, one with nothing failed; each said, by its code.
    for job_id in (exam[0], clean):
        await page.locator(f"{row(page, job_id)} input[type=checkbox]").check()
    await page.get_by_role("button", name="Retry failed: 2 selected").click()
    await expect(page.get_by_role("group", name="Confirm the retry")).to_contain_text(
        "Retry 2 selected jobs' failed items?"
    )
    await page.get_by_role("button", name="Yes, retry 2").click()
    await expect(page.locator("#retry-outcome")).to_have_text(
        "0 retried, 1 already retried, 1 not retried (nothing_to_retry: 1)"
    )
    assert not await severe_violations(page)
    await shot(tab, tmp_path, "list-retry-refused")
    # Nothing left to retry: said, and nothing asked.
    await page.get_by_label("every job matching this filter").check()
    await retry.click()
    await expect(page.locator("#bulk-outcome")).to_have_text(
        "Nothing to retry: no job matching has failed items not yet retried."
    )


# --- schedules made from the page -------------------------------------------------------


async def test_a_schedule_is_created_edited_run_now_and_deleted_from_the_page(
    api: tuple[str, HubJobsClient],
    page_settings: Settings,
    temporal: Client,
    engine: AsyncEngine,
    browser: Browser,
    tmp_path: Path,
) -> None:
    """Created from the kind's form (a bad cron refused with its code), in its own zone;
    edited in its row with the same form, filled (a bad zone refused with its code), its
    next firings then read in its new zone; run now, its job appearing; deleted only once
    the row's question is answered."""
    base, hub = api
    course = await seed(engine, 3)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    tab = await open_tab(browser, **READER)
    page = tab.page
    await sign_in(tab, base, course, page_settings)
    await page.get_by_role("link", name="Schedules").click()
    await page.get_by_text("New schedule").click()
    await page.get_by_label("Kind").select_option("backup")
    await expect(page.get_by_label("Scope")).to_have_value("workspace")
    await page.get_by_label("Cron (five fields)").fill("0 3 * *")
    await page.get_by_role("button", name="Create the schedule").click()
    await expect(page.locator("#schedule-code")).to_have_text("invalid_cron")
    await page.get_by_label("Cron (five fields)").fill("30 4 * * *")
    await page.get_by_label("Its time zone").fill("Asia/Tokyo")
    await page.get_by_role("button", name="Create the schedule").click()
    line = page.locator("#schedules tbody tr").first
    await expect(line).to_contain_text("30 4 * * * (Asia/Tokyo)")
    await expect(page.get_by_text("No schedules in this workspace.")).to_be_hidden()
    made = await line.get_attribute("data-schedule-id")
    assert made is not None
    assert [s.id for s in await jobs.schedules.list()] == [made]
    assert not await severe_violations(page)
    await shot(tab, tmp_path, "schedule-created")

    # Edited in its row: the create form's fields, filled with what it is now.
    await page.get_by_role("button", name=f"Edit {made}").click()
    edit = page.get_by_role("form", name=f"Edit {made}")
    await expect(edit.get_by_label("Cron (five fields)")).to_have_value("30 4 * * *")
    await expect(edit.get_by_label("Its time zone")).to_have_value("Asia/Tokyo")
    await expect(edit.get_by_label("Scope")).to_have_value("workspace")
    await edit.get_by_label("Cron (five fields)").fill("15 6 * * *")
    await edit.get_by_label("Its time zone").fill("Mars/Olympus")
    await edit.get_by_role("button", name="Save the schedule").click()
    await expect(edit.locator("#edit-schedule-code")).to_have_text("invalid_time_zone")
    assert (await jobs.schedules.get(made)).cron == "30 4 * * *"  # refused: unchanged
    assert not await severe_violations(page)
    await shot(tab, tmp_path, "schedule-edit")
    await edit.get_by_label("Its time zone").fill("Europe/Paris")
    await edit.get_by_role("button", name="Save the schedule").click()
    await expect(edit).to_have_count(0)
    line = page.locator(f'tr[data-schedule-id="{made}"]')
    await expect(line).to_contain_text("15 6 * * * (Europe/Paris)")
    await expect(line.locator(".next-run .hint")).to_contain_text("6:15:00 AM GMT+1")
    await expect(page.locator("#notice")).to_contain_text(f"Saved {made}: next ")
    await expect(page.locator("#notice")).to_contain_text("6:15:00 AM GMT+1")
    edited = await jobs.schedules.get(made)
    assert (edited.cron, edited.time_zone, edited.paused) == ("15 6 * * *", "Europe/Paris", False)
    await shot(tab, tmp_path, "schedule-edited")
    # The edit in dark mode and on a phone: readable, axe finding nothing serious; Cancel
    # closes it, nothing sent.
    await page.get_by_role("button", name="Dark mode").click()
    await page.get_by_role("button", name=f"Edit {made}").click()
    await expect(edit.get_by_label("Cron (five fields)")).to_have_value("15 6 * * *")
    assert not await severe_violations(page)
    await shot(tab, tmp_path, "schedule-edit-dark")
    await page.set_viewport_size({"width": 390, "height": 844})
    await edit.get_by_role("button", name="Save the schedule").scroll_into_view_if_needed()
    box = await edit.bounding_box()
    assert box is not None and 0 <= box["x"] and box["x"] + box["width"] <= 390, box
    assert not await severe_violations(page)
    await shot(tab, tmp_path, "schedule-edit-phone")
    await edit.get_by_role("button", name="Cancel").click()
    await expect(edit).to_have_count(0)
    await page.get_by_role("button", name="Dark mode").click()
    await page.set_viewport_size({"width": 1280, "height": 900})
    async with running_worker(temporal, page_settings):
        await page.get_by_role("button", name=f"Run {made} now").click()
        fired = await until("the schedule's job", lambda: jobs.list(schedule_id=made))
        assert [job.kind for job in fired] == ["backup"]
    await page.get_by_role("button", name=f"Delete {made}").click()
    await expect(page.get_by_role("group", name=f"Delete {made}?")).to_be_visible()
    await shot(tab, tmp_path, "schedule-delete-asked")
    await page.get_by_role("button", name="Keep it").click()
    assert [s.id for s in await jobs.schedules.list()] == [made]
    await page.get_by_role("button", name=f"Delete {made}").click()
    await page.get_by_role("button", name="Yes, delete").click()
    await expect(page.locator(f'tr[data-schedule-id="{made}"]')).to_have_count(0)
    assert await jobs.schedules.list() == []
    await expect(page.get_by_text("No schedules in this workspace.")).to_be_visible()
