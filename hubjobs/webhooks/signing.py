"""A delivery's signature, as Stripe and GitHub sign theirs: HMAC-SHA256 with the
deployment's secret over ``<timestamp>.<body>``, sent as
``X-Hubjobs-Signature: t=<unix seconds>,v1=<hex>``. The timestamp is signed so that a
captured delivery cannot be replayed later than the receiver's tolerance."""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Hubjobs-Signature"
IDEMPOTENCY_HEADER = "Idempotency-Key"
# How old a delivery a receiver takes by default (a retry is signed anew).
TOLERANCE_SECONDS = 300


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    return hmac.new(secret, b"%d." % timestamp + body, hashlib.sha256).hexdigest()


def signature_header(secret: bytes, timestamp: int, body: bytes) -> str:
    """The header's value for ``body`` sent at ``timestamp``."""
    return f"t={timestamp},v1={signature(secret, timestamp, body)}"


def verify(
    secret: bytes, header: str, body: bytes, *, now: int, tolerance: int = TOLERANCE_SECONDS
) -> bool:
    """Whether ``header`` signs ``body`` with ``secret``, sent at most ``tolerance``
    seconds from ``now``: what a receiver runs (in constant time)."""
    parts = dict(part.partition("=")[::2] for part in header.split(","))
    try:
        timestamp = int(parts.get("t", ""))
    except ValueError:
        return False
    if abs(now - timestamp) > tolerance:
        return False
    return hmac.compare_digest(parts.get("v1", ""), signature(secret, timestamp, body))
