"""What a request body must be beyond its schema: JSON whose objects name each key once
(JSON leaves a duplicated key undefined; Python would silently keep the last)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from hubjobs.errors import InvalidPayload


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' object hook: a key twice in one object is refused."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise InvalidPayload("the payload holds a key twice in one object")
        found[key] = value
    return found


async def no_duplicate_keys(request: Request) -> None:
    """The body's JSON objects name each key once (else 422 ``invalid_payload``)."""
    body = await request.body()
    if not body:
        return
    try:
        json.loads(body, object_pairs_hook=_refuse_duplicates)
    except ValueError:
        return  # not JSON: FastAPI's own parsing refuses it
