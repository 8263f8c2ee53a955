"""A job search's filters as callers write them: any id prefix and any field filter
either parses (to a range holding every id it starts, to JSON of the field's type) or is
refused with its code, never another error; and a kind's filterable fields come from
its declared schemas."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hubjobs.errors import InvalidInput
from hubjobs.kinds import REGISTRY
from hubjobs.kinds.base import JobKind
from hubjobs.kinds.fields import (
    INVALID_FIELD_FILTER,
    INVALID_FIELD_VALUE,
    UNKNOWN_FIELD,
    KindField,
    containment,
    kind_fields,
)
from hubjobs.readmodel.search import INVALID_JOB_ID, id_range

KINDS: list[JobKind[Any]] = list(REGISTRY)
FIELD_CODES = {INVALID_FIELD_FILTER, INVALID_FIELD_VALUE, UNKNOWN_FIELD}
# Text that looks like a filter: a known part, a name (a real field's, often), a value.
NAMES = st.sampled_from(sorted({f.name.split(".", 1)[1] for k in KINDS for f in kind_fields(k)}))
FILTER_TEXT = st.one_of(
    st.text(max_size=80),
    st.builds(
        lambda part, name, value: f"{part}.{name}={value}",
        st.sampled_from(["payload", "result", "Payload", "other"]),
        st.one_of(NAMES, st.text(max_size=20)),
        st.one_of(
            st.text(max_size=40),
            st.integers().map(str),
            st.floats().map(str),
            st.sampled_from(["true", "false", "null", "1e400", "NaN", "-0", "[]"]),
            st.uuids().map(str),
        ),
    ),
)


@given(st.text(max_size=50))
def test_any_id_text_parses_to_a_range_or_is_refused(text: str) -> None:
    try:
        low, high = id_range(text)
    except InvalidInput as refused:
        assert refused.code == INVALID_JOB_ID
        return
    digits = text.replace("-", "").lower()
    assert low <= high
    assert low.hex.startswith(digits) and high.hex.startswith(digits)


@given(st.uuids(), st.integers(min_value=1, max_value=36), st.booleans())
def test_every_start_of_an_id_finds_it(job: uuid.UUID, length: int, dashed: bool) -> None:
    written = str(job) if dashed else job.hex
    low, high = id_range(written[:length].upper())
    assert low <= job <= high
    if length >= len(written):
        assert low == high == job


@given(st.sampled_from([None, *KINDS]), st.lists(FILTER_TEXT, max_size=4))
def test_any_field_filter_parses_or_is_refused_with_its_code(
    kind: JobKind[Any] | None, texts: list[str]
) -> None:
    try:
        found = containment(kind, texts)
    except InvalidInput as refused:
        assert refused.code in FIELD_CODES
        return
    assert kind is not None or not texts
    assert len(found.payload) + len(found.result) <= len(texts)


@given(st.sampled_from(KINDS), st.text(st.characters(exclude_categories=["Cs"]), max_size=10))
def test_a_value_jsonb_cannot_hold_is_refused(kind: JobKind[Any], around: str) -> None:
    strings = [f for f in kind_fields(kind) if f.type == "string" and f.format is None]
    with pytest.raises(InvalidInput) as refused:
        containment(kind, [f"{strings[0].name}={around}\x00{around}"])
    assert refused.value.code == INVALID_FIELD_VALUE


# Text jsonb holds: no NUL, no lone surrogate (those are refused, as no job has them).
JSONB_TEXT = st.text(
    st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=30
)


def values_of(field: KindField) -> st.SearchStrategy[Any]:
    if field.enum is not None:
        return st.sampled_from(field.enum)
    return {
        "string": st.uuids().map(str) if field.format == "uuid" else JSONB_TEXT,
        "integer": st.integers(min_value=-(2**62), max_value=2**62),
        "number": st.floats(allow_nan=False, allow_infinity=False),
        "boolean": st.booleans(),
    }[field.type]


@st.composite
def valid_filter(draw: st.DrawFn) -> tuple[JobKind[Any], KindField, Any]:
    kind = draw(st.sampled_from(KINDS))
    field = draw(st.sampled_from(kind_fields(kind)))
    return kind, field, draw(values_of(field))


@given(valid_filter())
def test_a_value_of_the_fields_type_is_what_the_job_must_contain(
    case: tuple[JobKind[Any], KindField, Any],
) -> None:
    kind, field, value = case
    written = str(value).lower() if isinstance(value, bool) else str(value)
    found = containment(kind, [f"{field.name}={written}"])
    part, name = field.name.split(".", 1)
    assert getattr(found, part) == {name: [value] if field.array else value}


def test_fields_come_from_the_declared_schemas() -> None:
    tagging = {f.name: f for f in kind_fields(REGISTRY.get("course_tagging"))}
    assert tagging["payload.tag"].type == "string"
    assert tagging["payload.root_page_id"].format == "uuid"
    # The result as stored: camelCase, as the kind's Result writes it.
    assert "result.rootPageId" in tagging and "result.root_page_id" not in tagging


@pytest.mark.parametrize(
    ("texts", "code"),
    [
        (["payload.colour=red"], UNKNOWN_FIELD),
        (["payload.tag"], INVALID_FIELD_FILTER),
        (["payload.tag=a", "payload.tag=b"], INVALID_FIELD_FILTER),
        (["result.failed=1.5"], INVALID_FIELD_VALUE),
        (["result.failed=99999999999999999999"], INVALID_FIELD_VALUE),
        (["payload.root_page_id=not-a-uuid"], INVALID_FIELD_VALUE),
    ],
)
def test_a_refused_filter_names_its_code(texts: list[str], code: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        containment(REGISTRY.get("course_tagging"), texts)
    assert refused.value.code == code


def test_a_field_filter_needs_a_kind() -> None:
    with pytest.raises(InvalidInput) as refused:
        containment(None, ["payload.tag=a"])
    assert refused.value.code == INVALID_FIELD_FILTER
