"""Hostile text for the property tests: what an attacker (or a careless script) sends
through every text field. Lone surrogates, bidi controls, NUL and other controls,
separators, invisible format characters, odd normal forms, SQL- and shell-looking text,
format strings, JSON oddities, huge values, and bytes that are not UTF-8 at all."""

from __future__ import annotations

import os
import unicodedata

from hypothesis import strategies as st

from hubjobs.domain.text import BIDI_CONTROLS

SAMPLES = [
    "",
    " ",
    "a\ud800b",  # a lone high surrogate
    "\udfff",  # a lone low surrogate
    "a\udcffb",  # an invalid UTF-8 byte as surrogateescape makes it
    "admin\u202egnp.exe",  # RLO
    "\u2066isolated\u2069",
    "a\u200eb\u200fc\u061c",
    "nul\x00byte",
    "\x1b[31mred\x1b[0m\x1b]0;title\x07",
    "line\r\nbreak",
    "tab\there",
    "a\u2028b\u2029c",
    "zero\u200bwidth\ufeff\u2060\u00ad",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467",  # a ZWJ family: valid
    "\u2764\ufe0f",  # heart with VS16: valid
    unicodedata.normalize("NFD", "Übungsklausur é"),
    unicodedata.normalize("NFKD", "ﬁ ｆｕｌｌ"),
    "'; DROP TABLE jobs; --",
    "' OR '1'='1",
    "$(reboot)",
    "`id`; rm -rf / &",
    "%s%s%n {0} {payload} ${jndi:ldap://x}",
    "{{7*7}}",
    '{"__proto__": {"admin": true}}',
    "\\u0000 \\ud800 \\\\",
    "null",
    "../../etc/passwd",
    "%00%0d%0a",
    "x" * 10_000,
    "\ud800" * 2_000,
    "é" * 65,
]

# One of each kind the rules refuse, in plain text: every property test tries these first.
CANONICAL = [
    "a\ud800b",
    "a\udcffb",
    "a\u202eb",
    "a\u2066b",
    "a\x00b",
    "a\x1bb",
    "a\u2028b",
    "a\u200bb",
]

_characters = st.one_of(
    st.characters(codec=None, categories=None),
    st.integers(0xD800, 0xDFFF).map(chr),  # surrogates, often
    st.sampled_from(["\x00", "\u202e", "\u2066", "\u200d", "\u2028", "\ufeff", "\x1b", "'"]),
)


# One character of each kind the rules refuse, to hide inside otherwise plain text.
_one_bad_character = st.one_of(
    st.integers(0xD800, 0xDFFF).map(chr),  # a lone surrogate
    st.sampled_from(sorted(BIDI_CONTROLS)),
    st.one_of(st.integers(0, 0x1F), st.integers(0x7F, 0x9F)).map(chr),  # Cc
    st.sampled_from(["\u2028", "\u2029", "\u200b", "\u2060", "\ufeff", "\u00ad", "\U000e0001"]),
)
_plain = st.text(st.characters(categories=["L", "N", "So"]), min_size=1, max_size=12)


def hostile_text(max_size: int = 80) -> st.SearchStrategy[str]:
    """Curated hostile strings, random text over every code point (surrogates often),
    the two mixed, and plain text with one refused character inside (which only that
    character's rule can catch)."""
    random_text = st.text(_characters, max_size=max_size)
    return st.one_of(
        st.sampled_from(SAMPLES),
        random_text,
        st.tuples(st.sampled_from(SAMPLES), random_text).map("".join),
        st.tuples(_plain, _one_bad_character, _plain).map("".join),
    )


def invalid_utf8() -> st.SearchStrategy[str]:
    """What Python makes of argv bytes that are not UTF-8 (``os.fsdecode``: each bad byte
    becomes a lone surrogate U+DC80–U+DCFF)."""
    bad = st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80"])
    return st.tuples(st.binary(max_size=12), bad).map(
        lambda parts: os.fsdecode(parts[0] + parts[1] + parts[0])
    )
