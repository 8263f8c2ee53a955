"""Invariant 4: every cancel that was accepted ends its job ``cancelled``, unless the job
was final already.

- A row whose cancellation was recorded (the API's and the client's cancel record it
  first, and only while the job is unfinished) ended ``cancelled``.
- Each cancel the campaign sent and had accepted (202, the client's return, the
  Temporal CLI's exit 0 for a bare signal) ended its job ``cancelled``, unless the job
  had finished before it was sent. A bare signal is taken by the server somewhere
  between its send and its answer: a job that finished in between raced it (counted,
  not a violation).
- No job ended ``cancelled`` that nobody asked to cancel (a flood's malformed
  ``cancel`` signals are no request)."""

from __future__ import annotations

from tests.chaos.checker.facts import Facts, Job
from tests.chaos.checker.verdict import Verdict, verdict


def cancels_honoured(facts: Facts) -> Verdict:
    result = verdict(4)
    for job in facts.jobs.values():
        if job.cancel_recorded is not None and job.final and job.status != "cancelled":
            result.checked += 1
            ahead = (job.finished or 0) - job.cancel_recorded
            result.violated(
                job.id,
                f"cancel recorded {ahead:.1f} s before the job ended {job.status}",
            )
    asked: set[str] = set()
    raced = 0
    for record in facts.of_type("cancel"):
        job_id = record.get("job_id")
        if job_id is None:
            continue
        asked.add(str(job_id))
        target = facts.jobs.get(str(job_id))
        if not record.get("accepted") or target is None:
            continue
        result.checked += 1
        raced += _accepted(result, target, record)
    result.notes["raced_bare_signals"] = raced
    for job in facts.jobs.values():
        if job.status == "cancelled" and job.id not in asked:
            result.checked += 1
            result.violated(job.id, "cancelled, though the campaign never asked")
    return result


def _accepted(result: Verdict, job: Job, record: dict[str, object]) -> int:
    """Judges one accepted cancel; returns 1 when a bare signal raced the job's end."""
    if job.status == "cancelled" or not job.final:
        return 0  # an unfinished row is invariant 3's
    sent = float(record["sent_at"])  # type: ignore[arg-type]
    answered = float(record["answered_at"])  # type: ignore[arg-type]
    finished = job.finished or 0.0
    if finished <= sent:
        return 0  # final before it was asked
    method = record["method"]
    if method != "bare":
        # Not recorded: right when the job was final by the time the cancel looked.
        if job.cancel_recorded is None and finished > answered:
            result.violated(
                job.id,
                f"{method} cancel accepted ({record.get('status_in_answer')}) but never "
                f"recorded; the job ended {job.status} {finished - answered:.1f} s after",
            )
        return 0  # a recorded one is judged on the row
    if finished <= answered:
        return 1
    result.violated(
        job.id,
        f"bare cancel signal taken by the server, the job ended {job.status} "
        f"{finished - answered:.1f} s later",
    )
    return 0
