"""Observability on the real servers: the worker's Prometheus endpoint agrees with the
read model, one trace runs from the start through the workflow to its activities with
the correlation id in its baggage, structured logs carry the job's ids and nothing of
its content, and the Temporal UI finds a job by its search attributes and shows its
summary."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import ProxyTracerProvider
from playwright.async_api import Locator, Page, async_playwright, expect
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

import worker as worker_module
from activities.course_tagging import CourseTaggingActivities
from hubjobs import job_rows
from hubjobs.devstack import embedded
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.kinds.course_tagging import COURSE_TAGGING
from hubjobs.observability import telemetry
from hubjobs.observability.logs import setup_logging
from hubjobs.readmodel.views import JobView, QueueState
from hubjobs.settings import Settings
from hubjobs.temporal.client import data_converter
from starter.client import HubJobsClient, WorkspaceJobs
from tests.support.helpers import with_kind
from tests.support.servers import running_worker, seed

TAG = "Zephyrine"  # a word found nowhere else, to see whether it leaks into the logs
CHROMIUM = Path("/usr/bin/chromium")
PROMTOOL = Path("/usr/bin/promtool")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
BAGGAGE_KEY = "hubjobs.correlation_id"
TAG_COURSE = CourseTaggingActivities.tag_course.__name__
WORKFLOW = COURSE_TAGGING.workflow_type


@pytest.fixture
def slow_settings(settings: Settings) -> Settings:
    """Small batches with a pause between them: a few hundred pages take seconds."""
    return with_kind(
        settings, "course_tagging", tagging_batch_size=10, tagging_batch_pause_seconds=0.05
    )


async def _connect(stack: embedded.StackInfo, **extra: Any) -> Client:
    return await Client.connect(
        stack.temporal_address,
        data_converter=data_converter(Settings(payload_codec=False)),
        interceptors=telemetry.interceptors(),
        **extra,
    )


async def _running(jobs: WorkspaceJobs, job: JobView, at_least: int) -> JobView:
    async for current in jobs.watch(job.id, interval=0.05):
        if current.processed >= at_least and not current.is_final:
            return current
    raise AssertionError("the job ended before it got going")


# --- metrics ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(body: str) -> list[Sample]:
    """The samples of a Prometheus text exposition (comments skipped)."""
    samples = []
    for line in body.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = _LINE.match(line.strip())
        assert match is not None, f"not a Prometheus sample line: {line!r}"
        name, labels, value = match.groups()
        parsed = {
            k: bytes(v, "utf-8").decode("unicode_escape") for k, v in _LABEL.findall(labels or "")
        }
        samples.append(Sample(name, parsed, float(value)))
    return samples


def select(samples: list[Sample], name: str, **labels: str) -> list[Sample]:
    return [
        s
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def one_value(samples: list[Sample], name: str, **labels: str) -> float | None:
    """The value of the one series with these labels, None when there is none."""
    found = select(samples, name, **labels)
    assert len(found) <= 1, f"several {name} series match {labels}: {found}"
    return found[0].value if found else None


def metrics_text(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body: bytes = response.read()
        return body.decode()


def promtool_problems(port: int) -> str:
    """What ``promtool check metrics`` says of the endpoint's text ("" when clean)."""
    assert PROMTOOL.is_file(), f"promtool is required at {PROMTOOL}: apt-get install prometheus"
    checked = subprocess.run(
        [str(PROMTOOL), "check", "metrics"],
        input=metrics_text(port),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return "" if checked.returncode == 0 else checked.stdout + checked.stderr


async def scrape(port: int) -> list[Sample]:
    def get() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            assert response.status == 200
            body: bytes = response.read()
            return body.decode()

    return parse_exposition(await asyncio.to_thread(get))


async def scrape_until(
    port: int, name: str, labels: dict[str, str], expected: float, timeout: float = 5.0
) -> list[Sample]:
    """Scrapes until the series has the expected value (the refresher and the worker
    record asynchronously), then returns that scrape; fails with the last value seen."""
    deadline = time.monotonic() + timeout
    while True:
        samples = await scrape(port)
        value = one_value(samples, name, **labels)
        if value == expected or time.monotonic() > deadline:
            assert value == expected, f"{name}{labels} is {value}, expected {expected}"
            return samples
        await asyncio.sleep(0.1)


class Refresher:
    """The worker's queue-state refresher; ``fresh()`` restarts it, which reads the read
    model at once (its period is 10 s)."""

    def __init__(self, engine: AsyncEngine, metrics: telemetry.JobMetrics) -> None:
        self.engine = engine
        self.metrics = metrics
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def fresh(self) -> None:
        await self.close()
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(
            telemetry.refresh_queue_state(self.engine, self.metrics, self.stop)
        )

    async def close(self) -> None:
        if self.task is not None:
            self.stop.set()
            await self.task
            self.task = None


RUNNING = {"status": "running"}


async def _queue_state(engine: AsyncEngine) -> QueueState:
    async with engine.connect() as conn:
        return await job_rows.queue_state(conn)


async def test_the_metrics_endpoint_agrees_with_the_read_model(
    stack: embedded.StackInfo, engine: AsyncEngine, slow_settings: Settings
) -> None:
    port = embedded.choose_port(0)
    runtime = telemetry.metrics_runtime(slow_settings.model_copy(update={"metrics_port": port}))
    assert runtime is not None, "the metrics runtime did not start"
    client = await _connect(stack, runtime=runtime)
    course = await seed(engine, 300)
    jobs = HubJobsClient(client, engine, slow_settings).scope(course.workspace_id, course.actor_id)
    refresher = Refresher(engine, worker_module.metrics_of(client))
    try:
        async with worker_module.build_worker(client, engine, slow_settings):
            # Before any job: the first reading shows nothing running, as the read model.
            await refresher.fresh()
            idle = await _queue_state(engine)
            assert (idle.queued, idle.running, idle.failed) == (0, 0, 0)
            first = await scrape_until(port, "hubjobs_queue_jobs", RUNNING, 0)
            assert one_value(first, "hubjobs_queue_jobs", status="queued") == idle.queued

            job = await jobs.start(
                "course_tagging", {"root_page_id": course.root_page_id, "tag": TAG}
            )
            running = await _running(jobs, job, at_least=20)
            busy = await _queue_state(engine)
            assert busy.running == 1
            await refresher.fresh()
            samples = await scrape_until(port, "hubjobs_queue_jobs", RUNNING, busy.running)
            assert one_value(samples, "hubjobs_queue_jobs", status="queued") == busy.queued
            assert (await jobs.get(running.id)).status == "running"

            done = await jobs.wait(job.id, timeout=60, interval=0.1)
            assert done.status == "succeeded" and done.succeeded == 300

            await refresher.fresh()
            after = await _queue_state(engine)
            samples = await scrape_until(port, "hubjobs_queue_jobs", RUNNING, after.running)
            assert after.running == 0
            for status in ("queued", "failed"):
                expected = getattr(after, status)
                assert one_value(samples, "hubjobs_queue_jobs", status=status) == expected
            oldest = one_value(samples, "hubjobs_queue_oldest_queued_age_seconds")
            assert oldest == (after.oldest_queued_age_seconds or 0.0) == 0.0

            # finish_job records its metrics just after the row is final.
            finished = {"kind": "course_tagging", "status": "succeeded"}
            samples = await scrape_until(port, "hubjobs_jobs_finished_total", finished, 1)
            # The row is final before the workflow's last task: wait for the run to close
            # (with the worker still polling) before reading the SDK's own counters.
            run = {"task_queue": slow_settings.task_queue, "workflow_type": WORKFLOW}
            samples = await scrape_until(port, "temporal_workflow_completed_total", run, 1)
    finally:
        await refresher.close()

    items = {"kind": "course_tagging"}
    assert one_value(samples, "hubjobs_items_processed_total", **items, outcome="succeeded") == (
        done.succeeded
    )
    assert one_value(samples, "hubjobs_items_processed_total", **items, outcome="skipped") is None
    assert one_value(samples, "hubjobs_items_processed_total", **items, outcome="failed") is None
    assert one_value(samples, "hubjobs_job_duration_seconds_count", **finished) == 1
    assert done.started_at is not None and done.finished_at is not None
    took = (done.finished_at - done.started_at).total_seconds()
    recorded = one_value(samples, "hubjobs_job_duration_seconds_sum", **finished)
    assert recorded is not None and abs(recorded - took) < 0.01
    buckets = select(samples, "hubjobs_job_duration_seconds_bucket", **finished)
    assert buckets and max(b.value for b in buckets) == 1
    # Seconds to hours: the buckets of telemetry.DURATION_BUCKETS, then +Inf.
    bounds = [float(b.labels["le"]) for b in buckets]
    assert bounds == [*map(float, telemetry.DURATION_BUCKETS), float("inf")]
    # No label the SDK adds to every series by itself.
    assert not [s for s in samples if "service_name" in s.labels]
    # Prometheus' own linter finds nothing (Debian's prometheus package: `make test`).
    assert await asyncio.to_thread(promtool_problems, port) == ""

    # The SDK's own metrics come out of the same endpoint.
    names = {s.name for s in samples}
    print("metric names:", *sorted(names), sep="\n  ")
    assert any(name.startswith("temporal_") for name in names), sorted(names)
    queue = slow_settings.task_queue
    slots = select(samples, "temporal_worker_task_slots_available", task_queue=queue)
    assert slots, sorted(names)
    assert all(s.value >= 0 for s in slots)
    # One activity per attempt (each a time slice), in the one workflow run.
    attempts = {"task_queue": queue, "activity_type": TAG_COURSE}
    assert one_value(samples, "temporal_activity_execution_latency_count", **attempts) == (
        done.attempts
    )
    assert one_value(samples, "temporal_workflow_completed_total", **run) == 1


# --- traces -----------------------------------------------------------------------------


class BaggageRecorder(SpanProcessor):
    """Notes, per span name, the correlation id found in the baggage a span starts in."""

    def __init__(self) -> None:
        self.seen: dict[str, list[object]] = defaultdict(list)

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        ctx = parent_context if parent_context is not None else otel_context.get_current()
        self.seen[span.name].append(baggage.get_baggage(BAGGAGE_KEY, ctx))

    def on_end(self, span: ReadableSpan) -> None:
        pass


@dataclass(frozen=True)
class Tracing:
    exporter: InMemorySpanExporter
    baggage: BaggageRecorder


_tracing: Tracing | None = None


@pytest.fixture(scope="module")
def installed_tracing() -> Tracing:
    """An in-memory exporter on the global tracer provider, set once per process (a
    global provider cannot be replaced; one set elsewhere gets our processors)."""
    global _tracing
    if _tracing is None:
        exporter, recorder = InMemorySpanExporter(), BaggageRecorder()
        provider = trace.get_tracer_provider()
        if isinstance(provider, ProxyTracerProvider):
            provider = TracerProvider()
            trace.set_tracer_provider(provider)
        assert isinstance(provider, TracerProvider), f"cannot add processors to {provider}"
        provider.add_span_processor(recorder)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        _tracing = Tracing(exporter, recorder)
    return _tracing


@pytest.fixture
def tracing(installed_tracing: Tracing) -> Iterator[Tracing]:
    """The spans of one test."""
    installed_tracing.exporter.clear()
    installed_tracing.baggage.seen.clear()
    yield installed_tracing
    installed_tracing.exporter.clear()
    installed_tracing.baggage.seen.clear()


def _ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> Iterator[ReadableSpan]:
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        yield span


async def test_one_trace_runs_from_the_start_to_the_activities(
    tracing: Tracing,
    stack: embedded.StackInfo,
    engine: AsyncEngine,
    settings: Settings,
    course: DemoCourse,
) -> None:
    client = await _connect(stack)
    jobs = HubJobsClient(client, engine, settings).scope(course.workspace_id, course.actor_id)
    correlation_id = f"trace-{uuid.uuid4().hex}"
    # A course bigger than one batch: its work runs as ordinary attempts (a smaller one
    # would be done at once by a local activity), the activities this trace follows.
    ordinary = with_kind(settings, "course_tagging", tagging_batch_size=10)
    async with running_worker(client, ordinary):
        job = await jobs.start(
            "course_tagging",
            {"root_page_id": course.root_page_id, "tag": TAG},
            correlation_id=correlation_id,
        )
        done = await jobs.wait(job.id, timeout=60, interval=0.1)
    assert done.status == "succeeded" and done.correlation_id == correlation_id

    spans = list(tracing.exporter.get_finished_spans())
    print("span names:", sorted({s.name for s in spans}))
    starts = [s for s in spans if s.name == "hubjobs.start"]
    assert len(starts) == 1, spans
    start = starts[0]
    assert start.attributes is not None
    assert start.attributes["hubjobs.correlation_id"] == correlation_id
    assert start.attributes["hubjobs.job_id"] == str(job.id)
    assert start.context is not None
    trace_id = start.context.trace_id

    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    for name in (
        f"StartWorkflow:{WORKFLOW}",
        f"RunWorkflow:{WORKFLOW}",
        f"StartActivity:{TAG_COURSE}",
        f"RunActivity:{TAG_COURSE}",
    ):
        named = [s for s in spans if s.name == name]
        assert named, f"no {name} span among {sorted({s.name for s in spans})}"
        for span in named:
            assert span.context is not None and span.context.trace_id == trace_id, name
            assert start in _ancestors(span, by_id), f"{name} does not descend from the start"
    # The SDK parents the workflow's spans on the context it was started with: the
    # activity runs under its start, which hangs under the workflow's start, under ours.
    run_activity = next(s for s in spans if s.name == f"RunActivity:{TAG_COURSE}")
    chain = [s.name for s in _ancestors(run_activity, by_id)]
    assert chain == [f"StartActivity:{TAG_COURSE}", f"StartWorkflow:{WORKFLOW}", "hubjobs.start"]
    run_workflow = next(s for s in spans if s.name == f"RunWorkflow:{WORKFLOW}")
    assert [s.name for s in _ancestors(run_workflow, by_id)] == [
        f"StartWorkflow:{WORKFLOW}",
        "hubjobs.start",
    ]

    # The correlation id travelled in the baggage into the activities.
    for name in (f"RunActivity:{TAG_COURSE}",):
        seen = tracing.baggage.seen[name]
        assert seen and set(seen) == {correlation_id}, (name, seen)


# --- logs -------------------------------------------------------------------------------


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """hubjobs' JSON logging into a buffer for one test; the root logger as it was after."""
    root, sdk = logging.getLogger(), logging.getLogger("temporalio")
    handlers, level, sdk_level = root.handlers[:], root.level, sdk.level
    stream = io.StringIO()
    setup_logging(json_lines=True, stream=stream)
    try:
        yield stream
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        sdk.setLevel(sdk_level)


async def test_log_lines_are_json_with_the_jobs_ids_and_none_of_its_content(
    json_logs: io.StringIO,
    hub: HubJobsClient,
    engine: AsyncEngine,
    temporal: Client,
    slow_settings: Settings,
) -> None:
    course = await seed(engine, 200)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    correlation_id = f"logs-{uuid.uuid4().hex}"
    async with running_worker(temporal, slow_settings):
        job = await jobs.start(
            "course_tagging",
            {"root_page_id": course.root_page_id, "tag": TAG},
            correlation_id=correlation_id,
        )
        await _running(jobs, job, at_least=20)
        # The actor is demoted mid-course: the tagging activity fails, and the
        # workflow and finish_job say so in the log.
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE workspace_memberships SET role = 'editor' WHERE user_id = :id"),
                {"id": course.actor_id},
            )
        done = await jobs.wait(job.id, timeout=30, interval=0.1)
    assert done.status == "failed" and done.error_code == "actor_unavailable"

    raw = json_logs.getvalue()
    lines = [line for line in raw.splitlines() if line.strip()]
    assert lines
    records: list[dict[str, Any]] = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise AssertionError(f"not a JSON line: {line!r}") from err
    assert all({"time", "level", "logger", "message"} <= record.keys() for record in records)

    expected = {
        "job_id": str(job.id),
        "kind": "course_tagging",
        "workspace_id": str(course.workspace_id),
        "correlation_id": correlation_id,
    }
    from_activity = [
        r for r in records if r.get("activity") == TAG_COURSE and r.get("job_id") == str(job.id)
    ]
    assert from_activity, "no log line from the tagging activity"
    for record in from_activity:
        assert {k: record.get(k) for k in expected} == expected, record
        assert record.get("attempt") == 1, record  # a number, not its text
    finished = [r for r in records if r["message"].startswith("job finished: failed")]
    assert len(finished) == 1, finished
    assert {k: finished[0].get(k) for k in expected} == expected, finished
    assert finished[0].get("activity") == "finish_job" and finished[0].get("attempt") == 1
    assert any(
        r["message"].startswith("job failed: actor_unavailable")
        and r.get("job_id") == str(job.id)
        and r.get("correlation_id") == correlation_id
        for r in records
    )

    # Ids and codes only: no page titles or markdown, no payload.
    for leak in ("Onboarding lesson", "# Onboarding", "Onboarding", TAG, TAG.lower()):
        assert leak not in raw, f"{leak!r} appears in the log"


# --- the Temporal UI --------------------------------------------------------------------


async def _shown(
    page: Page, ready: Locator, navigate: Callable[[], Awaitable[object]], failed: list[str]
) -> None:
    """Navigates and waits for ``ready``. The UI server now and then answers a page's
    first API calls with an internal error (its "500 Uh oh" page) while the dev server
    warms up; like a user, reload then. (Anchored: a workflow id's heading may hold "500".)"""
    error = page.get_by_role("heading", name=re.compile(r"^\s*500\b"))
    for attempt in range(3):
        await (navigate() if attempt == 0 else page.reload())
        await expect(ready.first.or_(error).first).to_be_visible(timeout=20_000)
        if await ready.first.is_visible():
            return
    raise AssertionError(f"the Temporal UI keeps failing: {failed}")


async def test_the_temporal_ui_finds_the_job_by_workspace_and_shows_its_summary(
    chromium: Path,
    stack: embedded.StackInfo,
    hub: HubJobsClient,
    engine: AsyncEngine,
    course: DemoCourse,
    worker: None,
) -> None:
    other = await seed(engine, 30)
    mine = hub.scope(course.workspace_id, course.actor_id)
    theirs = hub.scope(other.workspace_id, other.actor_id)
    job = await mine.start("course_tagging", {"root_page_id": course.root_page_id, "tag": TAG})
    their_job = await theirs.start(
        "course_tagging", {"root_page_id": other.root_page_id, "tag": TAG}
    )
    done = await mine.wait(job.id, timeout=60, interval=0.1)
    assert (await theirs.wait(their_job.id, timeout=60, interval=0.1)).status == "succeeded"
    assert done.status == "succeeded"
    assert done.summary == f"Tag course Onboarding with {TAG}, 30 pages"
    # The workflow's static summary is the start's (the page count comes with the
    # snapshot, in the first attempt, and shows in the job's details and current details).
    summary = f"Tag course Onboarding with {TAG}"
    assert job.summary == summary

    query = f'WorkspaceId = "{course.workspace_id}" AND JobKind = "course_tagging"'
    url = f"{stack.ui_url}/namespaces/default/workflows?query={urllib.parse.quote(query)}"
    ARTIFACTS.mkdir(exist_ok=True)
    list_png, detail_png = ARTIFACTS / "temporal-ui-list.png", ARTIFACTS / "temporal-ui-job.png"
    for path in (list_png, detail_png):
        path.unlink(missing_ok=True)
    async with async_playwright() as p:
        browser = await p.chromium.launch(
            executable_path=str(chromium),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 1000})
            failed: list[str] = []
            page.on(
                "response",
                lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 500 else None,
            )
            link = page.get_by_role("link", name=done.workflow_id)
            await _shown(page, link, lambda: page.goto(url), failed)
            assert their_job.workflow_id not in await page.content()
            assert await page.get_by_text(their_job.workflow_id).count() == 0
            await page.screenshot(path=str(list_png), full_page=True)

            async def open_job() -> None:
                await link.first.click()
                await page.wait_for_url(f"**/workflows/{done.workflow_id}/**", timeout=20_000)

            metadata = page.get_by_role("tab", name="User Metadata")
            await _shown(page, metadata, open_job, failed)
            # UI 2.x shows the static summary, then the details, under the "User
            # Metadata" tab, each rendered as markdown in an iframe of its own.
            await metadata.click()
            await expect(page.get_by_role("heading", name="Summary")).to_be_visible()
            frames = page.frame_locator("iframe")
            await expect(frames.first.get_by_text(summary)).to_be_visible(timeout=20_000)
            await expect(frames.nth(1).get_by_text(str(done.id))).to_be_visible()
            await page.screenshot(path=str(detail_png), full_page=True)
            print("UI responses with a server error:", failed)
        finally:
            await browser.close()

    for path in (list_png, detail_png):
        data = path.read_bytes()
        assert len(data) > 1000 and data.startswith(b"\x89PNG\r\n\x1a\n"), path
