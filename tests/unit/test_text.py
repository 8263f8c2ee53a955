"""The text rules of ``hubjobs.domain.text`` and the log-safe error descriptions, with
no server: what free text may hold (emoji sequences yes; surrogates, bidi controls,
controls, separators and other format characters no), what keys are, and that no
message built from an error quotes the input."""

from __future__ import annotations

import unicodedata
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, ValidationError

from hubjobs.domain.pages import MAX_TAG_LENGTH, normalize_tag
from hubjobs.domain.text import (
    ALLOWED_FORMAT,
    BIDI_CONTROLS,
    KEY_MAX_LENGTH,
    check_correlation_id,
    check_free_text,
    check_idempotency_key,
    check_reason,
    is_key,
    is_kind_name,
    printable,
    text_problem,
)
from hubjobs.errors import InvalidInput, describe_validation_errors
from hubjobs.observability.logs import describe_failure
from tests.support.hostile import hostile_text

FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # man ZWJ woman ZWJ girl
RAINBOW_FLAG = "\U0001f3f3\ufe0f\u200d\U0001f308"  # white flag VS16 ZWJ rainbow
ENGLAND = "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"
TEXT_HEART = "\u2764\ufe0e"  # variation selector 15: text presentation

REFUSED = [
    ("a\ud800b", "surrogate"),
    ("a\udcffb", "surrogate"),  # what surrogateescape makes of an invalid UTF-8 byte
    ("admin\u202egnp.exe", "bidirectional"),  # RLO
    ("a\u202ab", "bidirectional"),
    ("a\u2066b\u2069", "bidirectional"),  # LRI … PDI
    ("a\u200eb", "bidirectional"),  # LRM
    ("a\u200fb", "bidirectional"),  # RLM
    ("a\u061cb", "bidirectional"),  # ALM
    ("a\x00b", "control"),
    ("a\x1b[31mb", "control"),
    ("a\nb", "control"),
    ("a\tb", "control"),
    ("a\x85b", "control"),
    ("a\u2028b", "separator"),
    ("a\u2029b", "separator"),
    ("a\u200bb", "format"),  # zero width space
    ("a\u2060b", "format"),  # word joiner
    ("a\ufeffb", "format"),  # BOM
    ("a\u00adb", "format"),  # soft hyphen
    ("a\U000e0001b", "format"),  # language tag (deprecated), not a flag's tag character
]


@pytest.mark.parametrize("value", [FAMILY, RAINBOW_FLAG, ENGLAND, TEXT_HEART, "a\u200cb"])
def test_emoji_sequences_joiners_and_variation_selectors_are_text(value: str) -> None:
    assert text_problem(value) is None
    assert normalize_tag(f" {value} ") == value


@pytest.mark.parametrize(
    "value",
    [
        "exam-2026",
        "Übung",
        "日本語",
        "e\u0301",  # a combining accent (NFD): allowed, compared elsewhere
        "'; DROP TABLE pages; --",
        "$(rm -rf /)",
        "`id`",
        '{"json": true}',
        "%s %n {0}",
    ],
)
def test_ordinary_and_odd_looking_text_is_accepted(value: str) -> None:
    assert normalize_tag(value) == value


@pytest.mark.parametrize(("value", "why"), REFUSED)
def test_hostile_characters_are_refused_with_a_plain_message(value: str, why: str) -> None:
    problem = text_problem(value)
    assert problem is not None and why in problem
    with pytest.raises(InvalidInput) as refused:
        normalize_tag(value)
    assert refused.value.code == "invalid_tag"
    assert value not in refused.value.message and "\\u" not in refused.value.message


def test_the_character_classes_are_exactly_the_stated_ones() -> None:
    for code in range(0x110000):
        ch = chr(code)
        category = unicodedata.category(ch)
        refused = (
            category in ("Cs", "Cc", "Zl", "Zp")
            or ch in BIDI_CONTROLS
            or (category == "Cf" and ch not in ALLOWED_FORMAT)
        )
        assert (text_problem(ch) is not None) == refused, hex(code)
    assert "\u200d" in ALLOWED_FORMAT and "\u200c" in ALLOWED_FORMAT
    assert all(chr(c) in ALLOWED_FORMAT for c in range(0xE0020, 0xE0080))
    assert len(BIDI_CONTROLS) == 12


def test_length_emptiness_and_trimming() -> None:
    assert normalize_tag("  x  ") == "x"
    assert normalize_tag("x" * MAX_TAG_LENGTH) == "x" * MAX_TAG_LENGTH
    for value in ("", "   ", "x" * (MAX_TAG_LENGTH + 1)):
        with pytest.raises(InvalidInput):
            normalize_tag(value)
    with pytest.raises(InvalidInput) as huge:
        normalize_tag("\ud800" * 1_000_000)
    assert huge.value.code == "invalid_tag" and len(huge.value.message) < 100


def test_keys_and_correlation_ids() -> None:
    for good in ("k", "k-1", "a" * KEY_MAX_LENGTH, uuid.uuid4().hex, str(uuid.uuid4())):
        assert check_idempotency_key(good) == good and check_correlation_id(good) == good
    assert is_key("urn:uuid:1234") and is_key("user@example.org/job+1=~_.")
    assert check_idempotency_key(None) is None and check_correlation_id(None) is None
    for bad in ("", " ", "a b", "a" * (KEY_MAX_LENGTH + 1), "ключ", "a\nb", "a\ud800", "a%20b"):
        with pytest.raises(InvalidInput) as key:
            check_idempotency_key(bad)
        assert key.value.code == "invalid_idempotency_key"
        with pytest.raises(InvalidInput) as correlation:
            check_correlation_id(bad)
        assert correlation.value.code == "invalid_correlation_id"
        assert "128" in correlation.value.message
    assert not is_key("a\n")  # no end-of-line loophole in the pattern


def test_reasons_and_kind_names() -> None:
    assert check_reason(None) is None and check_reason(" too late ") == "too late"
    for bad in ("", "x" * 501, "stop\u202e", "a\x00"):
        with pytest.raises(InvalidInput) as refused:
            check_reason(bad)
        assert refused.value.code == "invalid_reason"
    assert is_kind_name("course_tagging") and is_kind_name("toy_echo")
    for bad in ("", "Course", "a-b", "a b", "x" * 65, "course_tagging\n", "1x"):
        assert not is_kind_name(bad)


def test_printable_escapes_what_a_terminal_would_act_on() -> None:
    assert printable("plain ✓ " + FAMILY) == "plain ✓ " + FAMILY
    assert printable("a\x1b]0;title\x07b") == "a\\u001b]0;title\\u0007b"
    assert printable("\u202e\ud800") == "\\u202e\\ud800"
    assert printable("\U000e0001") == "\\U000e0001"
    assert printable("x" * 500, limit=10) == "x" * 10 + "…"


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    root_page_id: uuid.UUID
    tag: str


@pytest.mark.parametrize(
    "payload",
    [
        {"root_page_id": "SECRET-not-a-uuid-\u202e", "tag": "t"},
        {"root_page_id": str(uuid.uuid4()), "tag": "t", "SECRET key \ud800": 1},
        {"root_page_id": str(uuid.uuid4()), "tag": ["SECRET"]},
        {"root_page_id": str(uuid.uuid4()), "tag": "t", "SECRET\n": {"nested": "SECRET"}},
    ],
)
def test_validation_messages_never_quote_the_input(payload: dict[str, object]) -> None:
    with pytest.raises(ValidationError) as caught:
        _Payload.model_validate(payload)
    line = describe_validation_errors(caught.value.errors())
    assert "SECRET" not in line and "\\u" not in line and "\n" not in line
    assert line  # it still says where and what


def test_an_unknown_key_that_is_a_plain_name_is_named() -> None:
    with pytest.raises(ValidationError) as caught:
        _Payload.model_validate({"root_page_id": str(uuid.uuid4()), "tag": "t", "extra": 1})
    assert describe_validation_errors(caught.value.errors()) == (
        "extra: Extra inputs are not permitted"
    )


def test_a_failure_is_described_without_its_message() -> None:
    try:
        try:
            raise KeyError("SECRET payload")
        except KeyError as inner:
            raise ValueError("SECRET tag \ud800") from inner
    except ValueError as err:
        described = describe_failure(err)
    assert "SECRET" not in described
    assert "builtins.ValueError <- builtins.KeyError" in described
    assert "test_text.py" in described


@settings(max_examples=300, deadline=None, database=None)
@given(hostile_text())
def test_whatever_free_text_lets_through_is_clean_unicode(value: str) -> None:
    try:
        accepted = check_free_text(value, what="it", code="invalid_payload", max_length=64)
    except InvalidInput as refused:
        assert refused.code == "invalid_payload"
        assert len(value.strip()) < 8 or value.strip() not in refused.message
        return
    accepted.encode("utf-8")  # strict: no surrogate got through
    assert 1 <= len(accepted) <= 64
    for ch in accepted:
        assert unicodedata.category(ch) not in ("Cs", "Cc", "Zl", "Zp")
        assert ch not in BIDI_CONTROLS
        assert unicodedata.category(ch) != "Cf" or ch in ALLOWED_FORMAT


@settings(max_examples=300, deadline=None, database=None)
@given(st.one_of(hostile_text(), st.from_regex(r"[A-Za-z0-9._~:/@+=-]{1,130}", fullmatch=True)))
def test_whatever_a_key_lets_through_is_short_plain_ascii(value: str) -> None:
    if is_key(value):
        assert 1 <= len(value) <= KEY_MAX_LENGTH and value.isascii() and value.isprintable()
        assert not any(ch in value for ch in " \"'`%\\;,<>")
    else:
        with pytest.raises(InvalidInput):
            check_idempotency_key(value)
