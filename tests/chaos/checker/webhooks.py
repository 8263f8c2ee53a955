"""Invariant 6: every webhook of a final job delivered (the receiver answered one try with
a 2xx; every try of it carried the same ``Idempotency-Key``) or recorded ``failed`` (or
``refused``); every try signed with the deployment's secret over its body, its
timestamp within five minutes of the receiver's clock; what it says is the row's
status; and no delivery for a job that asked for none."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections import defaultdict
from typing import Any

from tests.chaos.checker.facts import Facts
from tests.chaos.checker.verdict import Verdict, verdict

SIGNATURE = "x-hubjobs-signature"
KEY = "idempotency-key"
TOLERANCE_SECONDS = 300


def signed(secret: bytes, record: dict[str, Any]) -> bool:
    header = record["headers"].get(SIGNATURE, "")
    parts = dict(part.partition("=")[::2] for part in header.split(","))
    try:
        stamp = int(parts.get("t", ""))
    except ValueError:
        return False
    if abs(float(record["received_at"]) - stamp) > TOLERANCE_SECONDS:
        return False
    body = record["body"].encode()
    expected = hmac.new(secret, b"%d." % stamp + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(parts.get("v1", ""), expected)


def webhooks_delivered(facts: Facts, secret: bytes) -> Verdict:
    result = verdict(6)
    tries: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in facts.of_type("webhook"):
        try:
            job_id = str(json.loads(record["body"])["job_id"])
        except (ValueError, KeyError, TypeError):
            result.violated(None, "a delivery whose body names no job")
            continue
        tries[job_id].append(record)
    for job in facts.jobs.values():
        if job.notify_url is None:
            if job.id in tries:
                result.violated(job.id, f"{len(tries[job.id])} deliveries, none asked for")
            continue
        if not job.final:
            continue
        result.checked += 1
        _judge(result, job.id, job.status, job.notify_state, tries.get(job.id, []), secret)
    result.notes["deliveries"] = sum(len(t) for t in tries.values())
    return result


def _judge(
    result: Verdict,
    job_id: str,
    status: str,
    state: str | None,
    tries: list[dict[str, Any]],
    secret: bytes,
) -> None:
    if state not in ("delivered", "failed", "refused"):
        result.violated(job_id, f"webhook {state} after the settle bound ({len(tries)} tries)")
    keys = {t["headers"].get(KEY) for t in tries}
    if len(keys) > 1:
        result.violated(job_id, f"{len(keys)} idempotency keys over {len(tries)} tries")
    if state == "delivered" and not any(200 <= (t.get("answered") or 0) < 300 for t in tries):
        result.violated(job_id, f"recorded delivered, the receiver took none of {len(tries)} tries")
    unsigned = sum(1 for t in tries if not signed(secret, t))
    if unsigned:
        result.violated(job_id, f"{unsigned} of {len(tries)} tries not signed right")
    said = {json.loads(t["body"]).get("status") for t in tries}
    if said - {status}:
        result.violated(job_id, f"the webhook said {sorted(said)}, the row {status}")
