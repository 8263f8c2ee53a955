"""Page export: a course or a whole workspace as NDJSON files of N pages, with a FHIR
bulk-data manifest as result. Each page's fields are frozen into its item by the first
attempt (``snapshot_at`` is the ``transactionTime``), so a resumed export writes what a
whole one would; a file is complete and counted, or rewritten from the snapshot.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.domain.pages import COURSE, WORKSPACE, course_root
from hubjobs.kinds.base import KIND_SETTINGS, CarriedResult, JobKind, NewJob, Prepared, Result
from hubjobs.readmodel import items as job_items
from hubjobs.readmodel.views import Counters, JobView
from hubjobs.settings import Settings

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/x-ndjson"
# Matched whole, ASCII digits only (``\d`` takes other scripts' digits).
FILE_NAME = re.compile(r"pages-[0-9]{4,}\.ndjson")


class PageExportPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    root_page_id: uuid.UUID | None = Field(
        default=None,
        description="Root page of a course; the whole workspace without.",
        json_schema_extra={"x-option": "root-page"},
    )
    # Strict: a boolean, a float or a string is refused, never taken for a number.
    pages_per_file: int = Field(
        default=1000, ge=1, le=100_000, strict=True, description="Pages a file."
    )


class ExportCursor(BaseModel):
    """Where an attempt carries on: after the last file written and recorded."""

    files: int = 0


class OutputFile(BaseModel):
    type: str = "Page"
    url: str
    count: int


class PageExportResult(Result):
    """The FHIR bulk-data manifest: what the read model stores and the API serves."""

    transaction_time: datetime
    request: str
    requires_access_token: bool = True
    output: list[OutputFile]
    error: list[OutputFile] = Field(default_factory=list)


# The API's paths a summary names: a workspace's and a job's UUID and a few words.
PATH_MAX_LENGTH = 200


class PageExportSummary(CarriedResult):
    """What an export's workflow returns: the manifest's head, where the whole manifest
    is served (``manifest``: the job's status URL, relative to the API as the manifest's
    own URLs are) and how many files and pages it lists. The manifest itself, a line
    per file, stays in the read model."""

    transaction_time: datetime
    request: str = Field(max_length=PATH_MAX_LENGTH)
    requires_access_token: bool = True
    manifest: str = Field(max_length=PATH_MAX_LENGTH)
    files: int
    pages: int

    @classmethod
    def of(cls, job: JobView) -> PageExportSummary:
        stored = PageExportResult.model_validate(job.result)
        return cls(
            transaction_time=stored.transaction_time,
            request=stored.request,
            requires_access_token=stored.requires_access_token,
            manifest=f"/workspaces/{job.workspace_id}/jobs/{job.id}",
            files=len(stored.output),
            pages=sum(entry.count for entry in stored.output),
        )


def file_name(number: int) -> str:
    return f"pages-{number:04d}.ndjson"


def file_of(ordinal: int, per_file: int) -> int:
    """The number of the file that holds item ``ordinal`` (both counted from 1)."""
    return (ordinal - 1) // per_file + 1


def ordinals_of(number: int, per_file: int, total: int) -> range:
    """The ordinals file ``number`` holds (the last file fewer)."""
    return range((number - 1) * per_file + 1, min(number * per_file, total) + 1)


def files_of(total: int, per_file: int) -> list[tuple[str, int]]:
    """Each file's name and line count for ``total`` pages, ``per_file`` a file."""
    count = file_of(total, per_file) if total > 0 else 0
    return [(file_name(k), len(ordinals_of(k, per_file, total))) for k in range(1, count + 1)]


class PageExportSettings(BaseSettings):
    """HUBJOBS_EXPORT_DIR."""

    model_config = KIND_SETTINGS

    # Where their files go (pages per file is the job's own payload).
    export_dir: Path | None = None

    @classmethod
    def of(cls, settings: Settings) -> PageExportSettings:
        return PAGE_EXPORT.settings_as(cls, settings)

    def resolved_export_dir(self, home: Path) -> Path:
        """Where exports are written, for the deployment's state folder ``home``."""
        return (self.export_dir or home / "exports").resolve()


def export_folder(settings: Settings, job_id: uuid.UUID) -> Path:
    return PageExportSettings.of(settings).resolved_export_dir(settings.home) / str(job_id)


def export_file(settings: Settings, job: JobView, name: str) -> Path | None:
    """The file ``name`` of a finished export, if it is one of its manifest's files."""
    if job.kind != PAGE_EXPORT.name or job.result is None or not FILE_NAME.fullmatch(name):
        return None
    listed = {entry["url"].rsplit("/", 1)[-1] for entry in job.result.get("output", [])}
    if name not in listed:
        return None
    path = export_folder(settings, job.id) / name
    return path if path.is_file() else None


# --- the start and the snapshot -------------------------------------------------------------

# Every page's exported fields, frozen: id, title, markdown, tags, version, updatedAt.
FROZEN = (
    "jsonb_build_object('id', p.id, 'title', p.title, 'markdown', p.markdown, "
    "'tags', to_jsonb(p.tags), 'version', p.version, 'updatedAt', p.updated_at)"
)
COURSE_PAGES = f"""{COURSE}
    SELECT row_number() OVER (ORDER BY c.depth, p.title, p.id)::int, p.id, p.title, false,
           {FROZEN}
      FROM course c JOIN pages p ON p.id = c.id
"""
# The whole workspace: every page out of the trash by the course's own rule (a page
# under a trashed parent is in the trash with it), in id order.
WORKSPACE_PAGES = f"""{WORKSPACE}
    SELECT row_number() OVER (ORDER BY p.id)::int, p.id, p.title, false, {FROZEN}
      FROM course c JOIN pages p ON p.id = c.id
"""
COURSE_SNAPSHOT = job_items.item_snapshot("page_export.course", COURSE_PAGES)
WORKSPACE_SNAPSHOT = job_items.item_snapshot("page_export.workspace", WORKSPACE_PAGES)


async def check(conn: AsyncConnection, job: NewJob, payload: PageExportPayload) -> str:
    """A course export's root is a page of the workspace out of the trash."""
    if payload.root_page_id is None:
        return "Export the workspace's pages"
    title = await course_root(conn, payload.root_page_id, job.workspace_id)
    return f"Export course {title}"


async def prepare(conn: AsyncConnection, job: NewJob, payload: PageExportPayload) -> Prepared:
    """By the first attempt: the pages as they are then, their fields frozen."""
    params: dict[str, Any] = {"workspace": job.workspace_id}
    if payload.root_page_id is None:
        total = await job_items.insert_items(conn, job.job_id, WORKSPACE_SNAPSHOT, params)
        return Prepared(total=total, summary=f"Export the workspace's {total} pages")
    title = await course_root(conn, payload.root_page_id, job.workspace_id)
    total = await job_items.insert_items(
        conn, job.job_id, COURSE_SNAPSHOT, {**params, "root": payload.root_page_id}
    )
    return Prepared(total=total, summary=f"Export course {title}, {total} pages")


class ExportOutput(BaseModel):
    """What the attempt that finished an export hands to its result."""

    transaction_time: datetime
    workspace_id: uuid.UUID
    job_id: uuid.UUID
    files: list[tuple[str, int]]


def build_result(
    payload: PageExportPayload, counters: Counters, output: dict[str, Any] | None
) -> PageExportResult:
    done = ExportOutput.model_validate(output)
    base = f"/workspaces/{done.workspace_id}/jobs/{done.job_id}"
    return PageExportResult(
        transaction_time=done.transaction_time,
        request=f"/workspaces/{done.workspace_id}/jobs/{PAGE_EXPORT.name}",
        output=[OutputFile(url=f"{base}/files/{name}", count=count) for name, count in done.files],
    )


def absolute_manifest(manifest: dict[str, Any], base_url: str | None) -> dict[str, Any]:
    """The manifest's URLs absolute under HUBJOBS_API_BASE_URL, when set."""
    if not base_url:
        return manifest
    base = base_url.rstrip("/")

    def absolute(url: str) -> str:
        return f"{base}{url}" if url.startswith("/") else url

    return {
        **manifest,
        "request": absolute(manifest["request"]),
        **{
            key: [{**entry, "url": absolute(entry["url"])} for entry in manifest.get(key, [])]
            for key in ("output", "error")
        },
    }


async def expire(job: JobView, settings: Settings) -> None:
    """Removes an export's files: when it expires, and at once when it is cancelled."""
    folder = export_folder(settings, job.id)
    await asyncio.to_thread(shutil.rmtree, folder, ignore_errors=True)
    log.info("removed the files of export %s", job.id)


PAGE_EXPORT = JobKind(
    name="page_export",
    title="Page export",
    payload=PageExportPayload,
    result=PageExportResult,
    cursor=ExportCursor,
    carried=PageExportSummary,
    check=check,
    prepare=prepare,
    build_result=build_result,
    expire=expire,
    discard=expire,
    # Bulk, like a backup.
    priority=4,
    command="export",
    help="Export a course, or the whole workspace, as NDJSON files of pages; the result "
    "is a FHIR bulk-data manifest whose files the API serves.",
    show=absolute_manifest,
    file_of=export_file,
    file_content_type=CONTENT_TYPE,
    settings=PageExportSettings,
)
