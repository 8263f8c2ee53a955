"""The embedded stack's sign-in links: the operator page's address with a one-time code in
its fragment (as Jupyter's token links), exchanged once for a session token.

Only a code's SHA-256 is kept, in a file its owner alone reads, under an flock: another
user of the machine can neither read a code nor mint one. A fragment is never sent to a
server, so the code stays out of access logs and ``Referer`` headers.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

LOGIN_CODES_FILE = "login-codes.json"
LOGIN_CODE_SECONDS = 600.0
# The fragment's parameter the page reads the code from.
LINK_PARAMETER = "login"
# What a code looks like (token_urlsafe(32)); anything else is refused unread.
CODE_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
CODE_MAX_LENGTH = 64

Codes = list[dict[str, Any]]


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def _update(home: Path, change: Callable[[Codes], Codes]) -> None:
    """``change`` applied to the live codes (expired ones dropped), under the file's
    lock. A file that does not read as codes holds none."""
    home.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(home / LOGIN_CODES_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    with os.fdopen(descriptor, "r+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            codes = json.loads(handle.read() or "[]")
        except ValueError:
            codes = []
        now = time.time()
        live = [c for c in codes if isinstance(c, dict) and float(c.get("expires", 0)) > now]
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(change(live)))
        handle.flush()


def issue(home: Path) -> str:
    """A new code, good once within ``LOGIN_CODE_SECONDS``."""
    code = secrets.token_urlsafe(32)
    entry = {"sha256": _digest(code), "expires": time.time() + LOGIN_CODE_SECONDS}
    _update(home, lambda codes: [*codes, entry])
    return code


def redeem(home: Path, code: str) -> bool:
    """Whether ``code`` is a live one; it is used up either way."""
    if not code or len(code) > CODE_MAX_LENGTH or not set(code) <= CODE_ALPHABET:
        return False
    if not (home / LOGIN_CODES_FILE).is_file():
        return False
    wanted = _digest(code)
    found: list[bool] = []

    def take(codes: Codes) -> Codes:
        kept = [c for c in codes if not hmac.compare_digest(str(c.get("sha256")), wanted)]
        found.append(len(kept) < len(codes))
        return kept

    _update(home, take)
    return found[0]


def login_link(page_url: str, code: str, route: str = "/") -> str:
    """The operator page at ``route`` (``/w/<workspace>/jobs/<job>``), signing in with
    ``code``."""
    return f"{page_url}#{route}?{LINK_PARAMETER}={code}"
