"""The receiver's verification snippet of the 'From another service' guide, run as
written (taken from docs/other-services.md), against the signatures hubjobs sends: it
accepts them, and refuses another secret, a tampered body, an old timestamp and a
malformed header."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hubjobs.webhooks.delivery import Completion
from hubjobs.webhooks.signing import signature_header

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "other-services.md"
SECRET = b"the deployment's secret"


def snippet() -> Callable[..., bool]:
    text = GUIDE.read_text()
    found = re.search(r"<!-- receiver-snippet -->\n```python\n(.*?)```", text, re.DOTALL)
    assert found, "the guide's receiver snippet is marked <!-- receiver-snippet -->"
    namespace: dict[str, Any] = {}
    exec(compile(found.group(1), str(GUIDE), "exec"), namespace)
    verified: Callable[..., bool] = namespace["verified"]
    return verified


def test_the_guides_snippet_verifies_what_hubjobs_signs() -> None:
    verified = snippet()
    body = Completion(uuid.uuid4(), "backup", uuid.uuid4(), "succeeded", {"a": 1}).body()
    header = signature_header(SECRET, 1_800_000_000, body)
    assert verified(SECRET, header, body, now=1_800_000_030)
    assert not verified(b"another secret", header, body, now=1_800_000_030)
    assert not verified(SECRET, header, body.replace(b"succeeded", b"failed"), now=1_800_000_030)
    assert not verified(SECRET, header, body, now=1_800_000_000 + 301)
    for broken in ("", "t=abc,v1=00", "v1=00", "t=1800000000", "garbage"):
        assert not verified(SECRET, broken, body, now=1_800_000_000)
