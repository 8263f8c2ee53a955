"""The page export's pure parts and the retry key, with no server: how pages split into
files, the manifest built from a finished export, which names a download may take, and
a retry's idempotency key that no caller's key can equal."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from activities.page_export import WholeFile
from hubjobs.domain.text import is_key
from hubjobs.kinds.page_export import (
    PAGE_EXPORT,
    PageExportPayload,
    absolute_manifest,
    export_file,
    export_folder,
    files_of,
)
from hubjobs.readmodel.status import JobStatus
from hubjobs.readmodel.views import Counters, JobView
from hubjobs.settings import Settings
from starter.client import retry_key

WORKSPACE = uuid.UUID(int=1)
JOB = uuid.UUID(int=2)
WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("total", "per_file", "counts"),
    [
        (0, 10, []),
        (1, 10, [1]),
        (10, 10, [10]),
        (11, 10, [10, 1]),
        (20_000, 1000, [1000] * 20),
        (2500, 1000, [1000, 1000, 500]),
    ],
)
def test_pages_split_into_files_of_n(total: int, per_file: int, counts: list[int]) -> None:
    files = files_of(total, per_file)
    assert [count for _, count in files] == counts
    assert [name for name, _ in files] == [
        f"pages-{k:04d}.ndjson" for k in range(1, len(counts) + 1)
    ]


def manifest(total: int, per_file: int) -> dict[str, Any]:
    output = {
        "transaction_time": WHEN.isoformat(),
        "workspace_id": str(WORKSPACE),
        "job_id": str(JOB),
        "files": files_of(total, per_file),
    }
    payload = PageExportPayload(pages_per_file=per_file)
    result: dict[str, Any] = PAGE_EXPORT.result_of(payload, Counters(total=total), output)
    return result


def test_the_manifest_has_the_fhir_bulk_data_shape_and_the_apis_urls() -> None:
    assert manifest(2500, 1000) == {
        "transactionTime": "2026-01-02T03:04:05Z",
        "request": f"/workspaces/{WORKSPACE}/jobs/page_export",
        "requiresAccessToken": True,
        "output": [
            {
                "type": "Page",
                "url": f"/workspaces/{WORKSPACE}/jobs/{JOB}/files/pages-{k:04d}.ndjson",
                "count": count,
            }
            for k, count in ((1, 1000), (2, 1000), (3, 500))
        ],
        "error": [],
    }


def test_the_manifest_is_absolute_under_the_apis_base_url() -> None:
    relative = manifest(1500, 1000)
    for base in ("https://hub.example/jobs-api", "https://hub.example/jobs-api/"):
        absolute = absolute_manifest(relative, base)
        assert absolute["request"] == f"https://hub.example/jobs-api{relative['request']}"
        assert [e["url"] for e in absolute["output"]] == [
            f"https://hub.example/jobs-api{e['url']}" for e in relative["output"]
        ]
        assert [e["count"] for e in absolute["output"]] == [1000, 500]
        assert absolute_manifest(absolute, base) == absolute  # absolute stays as it is
    assert relative["request"].startswith("/")  # the stored manifest is untouched


def job(result: dict[str, object] | None, kind: str = "page_export") -> JobView:
    return JobView(
        id=JOB,
        workflow_id=f"{kind}-{JOB}",
        kind=kind,
        status=JobStatus.succeeded if result else JobStatus.running,
        workspace_id=WORKSPACE,
        actor_id=uuid.UUID(int=3),
        correlation_id="c",
        idempotency_key=None,
        payload={},
        summary=None,
        total=2,
        processed=2,
        succeeded=2,
        skipped=0,
        failed=0,
        progress_message=None,
        result=result,
        result_content_type=None,
        error_code=None,
        error_message=None,
        cancel_requested_at=None,
        cancel_requested_by=None,
        attempts=1,
        attempts_failed=0,
        source_job_id=None,
        schedule_id=None,
        created_at=WHEN,
        started_at=WHEN,
        finished_at=WHEN,
        expires_at=None,
    )


def test_only_the_manifests_files_of_a_finished_export_are_served(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    folder = export_folder(settings, JOB)
    folder.mkdir(parents=True)
    for name in ("pages-0001.ndjson", "pages-0002.ndjson", ".pages-0003.ndjson.partial"):
        (folder / name).write_text("{}\n")
    (tmp_path / "secret").write_text("x")
    finished = job(manifest(2, 1))
    assert export_file(settings, finished, "pages-0001.ndjson") == folder / "pages-0001.ndjson"
    for name in (
        "pages-0003.ndjson",  # not in the manifest
        ".pages-0003.ndjson.partial",
        "../secret",
        "..",
        "",
        "pages-0001.ndjson/..",
        "PAGES-0001.NDJSON",
        "pages-0001.ndjson\n",
    ):
        assert export_file(settings, finished, name) is None, name
    assert export_file(settings, job(None), "pages-0001.ndjson") is None  # not finished
    other_kind = job(manifest(2, 1), kind="course_tagging")
    assert export_file(settings, other_kind, "pages-0001.ndjson") is None
    (folder / "pages-0002.ndjson").unlink()  # removed (expired): not served
    assert export_file(settings, finished, "pages-0002.ndjson") is None


def test_a_retrys_key_is_one_per_source_and_no_callers_key() -> None:
    source = uuid.uuid4()
    assert retry_key(source) == retry_key(source) != retry_key(uuid.uuid4())
    assert not is_key(retry_key(source))  # a start's key can never name a retry


def test_two_attempts_writing_the_same_file_each_commit_it_whole(tmp_path: Path) -> None:
    """An attempt presumed dead wakes while the next writes the same file: each writes
    aside under a name of its own, and both commits land the same whole file. Before
    (chaos campaign, seed 101): they shared one temporary name, the second's rename
    found it gone, and the export's folder was removed as unwritable under a job that
    then succeeded."""
    first, second = (
        WholeFile(tmp_path, "pages-0001.ndjson"),
        WholeFile(tmp_path, "pages-0001.ndjson"),
    )
    with first, second:
        for out in (first, second):
            out.write(b'{"page": 1}\n')
        first.commit()
        second.commit()
    assert (tmp_path / "pages-0001.ndjson").read_bytes() == b'{"page": 1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["pages-0001.ndjson"]


def test_a_file_left_without_a_commit_leaves_nothing(tmp_path: Path) -> None:
    with WholeFile(tmp_path, "pages-0001.ndjson") as out:
        out.write(b"half")
    assert list(tmp_path.iterdir()) == []


def test_a_file_swept_aside_after_another_committed_it_commits_as_done(tmp_path: Path) -> None:
    """The attempt that finished the export swept the leftovers aside while one presumed
    dead still wrote: its commit finds the file whole and does not fail."""
    late = WholeFile(tmp_path, "pages-0001.ndjson")
    with late:
        late.write(b'{"page": 1}\n')
        (tmp_path / "pages-0001.ndjson").write_bytes(b'{"page": 1}\n')
        late.partial.unlink()
        late.commit()
    assert [p.name for p in tmp_path.iterdir()] == ["pages-0001.ndjson"]
