"""Text that enters hubjobs, checked in one place.

- **Free text** a person reads (a tag, a cancellation reason): any Unicode a person
  writes, emoji sequences and flags included, but nothing that hides or reorders what is
  shown: no lone surrogate, bidirectional control, other control character, line or
  paragraph separator, or format character but the joiners and flags' tag characters.
- **Keys** a machine passes along (idempotency keys, correlation ids): 1–128 characters
  of ``KEY_CHARACTERS``, nothing outside ASCII.

A refusal is an ``InvalidInput`` whose message never repeats the value: the value may be
the very thing that must not reach a log.
"""

from __future__ import annotations

import re
import unicodedata

from hubjobs.errors import InvalidInput

# Bidirectional formatting: embeddings and overrides, isolates, and the implicit marks.
BIDI_CONTROLS = frozenset(
    [chr(c) for c in range(0x202A, 0x202F)]  # LRE, RLE, PDF, LRO, RLO
    + [chr(c) for c in range(0x2066, 0x206A)]  # LRI, RLI, FSI, PDI
    + ["\u200e", "\u200f", "\u061c"]  # LRM, RLM, ALM
)
# Format characters (Cf) that real text needs: joiners, and the tag characters that
# spell subdivision flags (England's flag is U+1F3F4 U+E0067 … U+E007F).
ALLOWED_FORMAT = frozenset(["\u200c", "\u200d"] + [chr(c) for c in range(0xE0020, 0xE0080)])

KEY_MAX_LENGTH = 128
KEY_CHARACTERS = "A-Z a-z 0-9 . _ ~ : / @ + = -"
# The same rule as a regular expression, for the OpenAPI document (and here).
KEY_PATTERN = rf"^[A-Za-z0-9._~:/@+=-]{{1,{KEY_MAX_LENGTH}}}$"
_KEY = re.compile(KEY_PATTERN[1:-1])

REASON_MAX_LENGTH = 500
# Text hubjobs writes itself into what crosses Temporal: a message (progress, an error's
# plain message, a summary) and a code.
MESSAGE_MAX_LENGTH = 1000
CODE_MAX_LENGTH = 64
# Job kinds are identifiers: what the registry holds and what a path may name.
KIND_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
_KIND = re.compile(r"[a-z][a-z0-9_]{0,63}")


def text_problem(value: str) -> str | None:
    """What is wrong with free text, as a plain phrase ("a control character"), or None
    when every character may stand in it. The phrase never quotes the value."""
    for ch in value:
        code = ord(ch)
        if 0xD800 <= code <= 0xDFFF:
            return "a lone surrogate (it is not valid Unicode text)"
        if ch in BIDI_CONTROLS:
            return "a bidirectional control character"
        category = unicodedata.category(ch)
        if category == "Cc":
            return "a control character"
        if category in ("Zl", "Zp"):
            return "a line or paragraph separator"
        if category == "Cf" and ch not in ALLOWED_FORMAT:
            return "an invisible format character"
    return None


def check_free_text(value: str, *, what: str, code: str, max_length: int) -> str:
    """``value`` trimmed, when it is 1 to ``max_length`` characters of free text;
    otherwise ``InvalidInput(code)`` saying what is wrong with ``what``."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be text", code=code)
    trimmed = value.strip()
    if not trimmed:
        raise InvalidInput(f"{what} is empty", code=code)
    if len(trimmed) > max_length:
        raise InvalidInput(f"{what} is longer than {max_length} characters", code=code)
    problem = text_problem(trimmed)
    if problem is not None:
        raise InvalidInput(f"{what} contains {problem}", code=code)
    return trimmed


def is_key(value: str) -> bool:
    return isinstance(value, str) and _KEY.fullmatch(value) is not None


def _key_refusal(what: str, code: str) -> InvalidInput:
    return InvalidInput(
        f"{what} must be 1 to {KEY_MAX_LENGTH} characters of {KEY_CHARACTERS}", code=code
    )


def invalid_idempotency_key() -> InvalidInput:
    return _key_refusal("the idempotency key", "invalid_idempotency_key")


def invalid_correlation_id() -> InvalidInput:
    return _key_refusal("the correlation id", "invalid_correlation_id")


def check_idempotency_key(value: str | None) -> str | None:
    """The key as given (None stays None), or ``invalid_idempotency_key``."""
    if value is not None and not is_key(value):
        raise invalid_idempotency_key()
    return value


def check_correlation_id(value: str | None) -> str | None:
    """The id as given (None stays None), or ``invalid_correlation_id``."""
    if value is not None and not is_key(value):
        raise invalid_correlation_id()
    return value


def check_reason(value: str | None) -> str | None:
    """A cancellation reason: free text of at most 500 characters, or ``invalid_reason``."""
    if value is None:
        return None
    return check_free_text(
        value, what="the reason", code="invalid_reason", max_length=REASON_MAX_LENGTH
    )


def is_kind_name(value: str) -> bool:
    return isinstance(value, str) and _KIND.fullmatch(value) is not None


def printable(value: str, *, limit: int = 300) -> str:
    """Text we did not write (a library's message) safe for a terminal or a log: every
    character free text may not hold as ``\\uXXXX``, at most ``limit`` characters."""
    out = []
    for ch in value[:limit]:
        if text_problem(ch) is None:
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
    return "".join(out) + ("…" if len(value) > limit else "")
