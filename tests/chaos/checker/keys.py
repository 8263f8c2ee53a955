"""Invariant 7: the same idempotency key started one job. Every start the campaign sent
with a key and the same payload was answered that key's one job (one row in the
database), never refused as another request; a start with a key already used for
another payload was refused 409 ``idempotency_key_reused`` naming the key's job, never
answered the first job as though it were the same request, nor a job of its own."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tests.chaos.checker.facts import Facts, Job
from tests.chaos.checker.verdict import Verdict, verdict

REUSED = "idempotency_key_reused"

Named = tuple[str, str, str]


def one_job_per_key(facts: Facts) -> Verdict:
    result = verdict(7)
    answered: dict[Named, set[str]] = defaultdict(set)
    conflicts: list[tuple[Named, dict[str, Any]]] = []
    for record in facts.of_type("start"):
        key = record.get("key")
        if key is None:
            continue
        named = (str(record["workspace_id"]), str(record["kind"]), str(key))
        if record.get("conflict"):
            conflicts.append((named, record))
        elif record.get("outcome") == "accepted" and record.get("job_id"):
            answered[named].add(str(record["job_id"]))
        elif record.get("code") == REUSED:
            result.checked += 1
            result.violated(
                record.get("named_job_id"),
                f"key {key} sent again with the same payload: refused as another request",
            )
    rows = _rows_by_key(facts)
    for named, jobs in answered.items():
        result.checked += 1
        stored = sorted(job.id for job in rows.get(named, []))
        if len(jobs) != 1 or set(stored) != jobs:
            extra = sorted(jobs - set(stored)) or sorted(jobs)
            result.violated(
                extra[0],
                f"key {named[2]}: answered jobs {sorted(jobs)}, the database holds {stored}",
            )
    unanswered = 0
    for named, record in conflicts:
        if record.get("outcome") == "error":  # no answer (an outage): nothing to judge
            unanswered += 1
            continue
        result.checked += 1
        wrong = _conflict_answered_wrong(record, rows.get(named, []), answered.get(named))
        if wrong is not None:
            job, what = wrong
            result.violated(job, f"key {named[2]} sent again with another payload: {what}")
    result.notes["conflicting_repeats"] = len(conflicts)
    result.notes["conflicting_repeats_unanswered"] = unanswered
    return result


def _rows_by_key(facts: Facts) -> dict[Named, list[Job]]:
    rows: dict[Named, list[Job]] = defaultdict(list)
    for job in facts.jobs.values():
        if job.idempotency_key is not None:
            rows[(str(job.workspace_id), job.kind, job.idempotency_key)].append(job)
    return rows


def _conflict_answered_wrong(
    record: dict[str, Any], stored: list[Job], answered: set[str] | None
) -> tuple[str | None, str] | None:
    """What is wrong with the answer to a key's repeat with another payload (the job
    named, and what), or None: a 409 ``idempotency_key_reused`` naming the key's job."""
    if record.get("outcome") == "accepted":
        if _first_request(record, stored, answered):
            return None
        by = record.get("http_status") or "by the client"
        return record.get("job_id"), f"answered {by} with a job"
    named_job = record.get("named_job_id")
    held = [job.id for job in stored]
    if (
        record.get("code") == REUSED
        and record.get("http_status") in (None, 409)
        and named_job in held
    ):
        return None
    refusal = f"{record.get('http_status') or 'the client'} {record.get('code')}"
    return named_job or (held[0] if held else None), (
        f"refused {refusal} naming {named_job}, the key's job {held}"
    )


def _first_request(record: dict[str, Any], stored: list[Job], answered: set[str] | None) -> bool:
    """A repeat with another payload answered with a job is right only when it was the
    key's first request after all (the original start never made a job): then it is the
    key's one row, and holds what the repeat sent."""
    if answered or len(stored) != 1 or stored[0].id != record.get("job_id"):
        return False
    sent: dict[str, Any] = record.get("payload") or {}
    held = stored[0].payload or {}
    return all(str(held.get(name)) == str(value) for name, value in sent.items())
