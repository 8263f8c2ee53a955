"""Invariant 7: the same idempotency key started one job. Every start the campaign sent
with a key and the same payload was answered that key's one job (one row in the
database); a start with a key already used for another payload was refused (409),
never answered the first job as though it were the same request."""

from __future__ import annotations

from collections import defaultdict

from tests.chaos.checker.facts import Facts
from tests.chaos.checker.verdict import Verdict, verdict


def one_job_per_key(facts: Facts) -> Verdict:
    result = verdict(7)
    answered: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    conflicts = 0
    for record in facts.of_type("start"):
        key = record.get("key")
        if key is None:
            continue
        named = (str(record["workspace_id"]), str(record["kind"]), str(key))
        if record.get("conflict"):
            conflicts += 1
            result.checked += 1
            if record.get("outcome") == "accepted":
                result.violated(
                    record.get("job_id"),
                    f"key {key} sent again with another payload: answered "
                    f"{record.get('http_status') or 'by the client'} with the first job",
                )
            continue
        if record.get("outcome") == "accepted" and record.get("job_id"):
            answered[named].add(str(record["job_id"]))
    rows: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for job in facts.jobs.values():
        if job.idempotency_key is not None:
            rows[(str(job.workspace_id), job.kind, job.idempotency_key)].append(job.id)
    for named, jobs in answered.items():
        result.checked += 1
        stored = rows.get(named, [])
        if len(jobs) != 1 or set(stored) != jobs:
            extra = sorted(jobs - set(stored)) or sorted(jobs)
            result.violated(
                extra[0],
                f"key {named[2]}: answered jobs {sorted(jobs)}, the database holds {stored}",
            )
    result.notes["conflicting_repeats"] = conflicts
    return result
