"""Invariant 7: the same idempotency key started one job, for one request. Every start
the campaign sent with a key is judged by the key's one row in the database: answered
with a job, that row, holding what the start sent; refused 409
``idempotency_key_reused``, naming that row, which holds another request (the key's
first request won: the campaign's repeat with another payload, or, when the original's
answer was lost to an outage, the repeat that got there first)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tests.chaos.checker.facts import Facts, Job
from tests.chaos.checker.verdict import Verdict, verdict

REUSED = "idempotency_key_reused"

Named = tuple[str, str, str]


def one_job_per_key(facts: Facts) -> Verdict:
    result = verdict(7)
    rows = _rows_by_key(facts)
    answered: dict[Named, set[str]] = defaultdict(set)
    conflicts = unanswered = 0
    for record in facts.of_type("start"):
        key = record.get("key")
        if key is None:
            continue
        named = (str(record["workspace_id"]), str(record["kind"]), str(key))
        conflicts += bool(record.get("conflict"))
        outcome = record.get("outcome")
        if outcome == "error":  # no answer (an outage): nothing to judge
            unanswered += 1
            continue
        if outcome == "accepted" and record.get("job_id"):
            answered[named].add(str(record["job_id"]))
        elif record.get("code") != REUSED:
            continue  # refused for another reason: not this invariant's
        result.checked += 1
        wrong = _answered_wrong(record, rows.get(named, []))
        if wrong is not None:
            job, what = wrong
            result.violated(job, f"key {key} sent {_which(record)}: {what}")
    for named, jobs in answered.items():
        result.checked += 1
        stored = sorted(job.id for job in rows.get(named, []))
        if len(jobs) != 1 or set(stored) != jobs:
            extra = sorted(jobs - set(stored)) or sorted(jobs)
            result.violated(
                extra[0],
                f"key {named[2]}: answered jobs {sorted(jobs)}, the database holds {stored}",
            )
    result.notes["conflicting_repeats"] = conflicts
    result.notes["keyed_starts_unanswered"] = unanswered
    return result


def _rows_by_key(facts: Facts) -> dict[Named, list[Job]]:
    rows: dict[Named, list[Job]] = defaultdict(list)
    for job in facts.jobs.values():
        if job.idempotency_key is not None:
            rows[(str(job.workspace_id), job.kind, job.idempotency_key)].append(job)
    return rows


def _which(record: dict[str, Any]) -> str:
    if record.get("repeat_of") is None:
        return "first"
    return "again with another payload" if record.get("conflict") else "again"


def _answered_wrong(record: dict[str, Any], stored: list[Job]) -> tuple[str | None, str] | None:
    """What is wrong with a keyed start's answer (the job it names, and what), or None.
    Judged by the key's row only when there is exactly one (else the count says it)."""
    held = stored[0] if len(stored) == 1 else None
    if record.get("outcome") == "accepted":
        job_id = record.get("job_id")
        if held is None or held.id != job_id or _holds(held, record):
            return None
        by = record.get("http_status") or "by the client"
        return job_id, f"answered {by} with job {job_id}, which holds another request"
    named_job = record.get("named_job_id")
    status = record.get("http_status")
    if held is not None and named_job == held.id and status in (None, 409):
        if not _holds(held, record):
            return None
        return named_job, f"refused {status or 'by the client'} {REUSED}: the same request"
    ids = [job.id for job in stored]
    return named_job or (ids[0] if ids else None), (
        f"refused {status or 'by the client'} {REUSED} naming {named_job}, the key's jobs {ids}"
    )


def _holds(job: Job, record: dict[str, Any]) -> bool:
    """Whether the job's row holds what the start sent (each field it sent)."""
    sent: dict[str, Any] = record.get("payload") or {}
    held = job.payload or {}
    return all(str(held.get(name)) == str(value) for name, value in sent.items())
