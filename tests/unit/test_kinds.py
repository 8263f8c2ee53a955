"""The kind API without servers: the registry refuses a name or a workflow type twice,
the workflow type is derived from the name, an unknown kind is refused without its
name, and a payload that does not validate is refused with where and what, never the
value or a key of the caller's choosing."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from hubjobs.domain.text import is_kind_name
from hubjobs.errors import InvalidInput
from hubjobs.kinds import REGISTRY, JobKind, Registry
from hubjobs.kinds.base import Prepared, Result
from hubjobs.kinds.course_tagging import COURSE_TAGGING
from hubjobs.kinds.page_export import PAGE_EXPORT
from tests.support.hostile import hostile_text


class Nothing(BaseModel):
    pass


async def _prepare(*_: Any) -> Prepared:
    return Prepared(total=0, summary="")


def kind(name: str) -> JobKind[Nothing]:
    return JobKind(
        name=name,
        title=name,
        payload=Nothing,
        result=Result,
        prepare=_prepare,
        build_result=lambda *_: Result(),
    )


@pytest.mark.parametrize(
    ("name", "workflow_type"),
    [
        ("course_tagging", "CourseTagging"),
        ("backup", "Backup"),
        ("page_export", "PageExport"),
        ("a_b_c", "ABC"),
        ("x2_y", "X2Y"),
    ],
)
def test_the_workflow_type_is_derived_from_the_name(name: str, workflow_type: str) -> None:
    assert kind(name).workflow_type == workflow_type
    assert kind(name).workflow_module == f"workflows.{name}"
    assert kind(name).activities_module == f"activities.{name}"


def test_a_kind_shipped_elsewhere_names_its_one_module() -> None:
    shipped = replace(kind("toy"), module="elsewhere.toy")
    assert shipped.workflow_module == shipped.activities_module == "elsewhere.toy"


def test_a_name_registered_twice_is_refused() -> None:
    registry = Registry()
    first = registry.register(kind("report"))
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(replace(kind("report"), title="Another report"))
    assert registry.get("report") is first and registry.names() == ["report"]


def test_a_workflow_type_registered_twice_is_refused() -> None:
    registry = Registry()
    registry.register(kind("page_export"))
    # Another name, the same Temporal workflow type: the worker could serve only one.
    with pytest.raises(ValueError, match="workflow type 'PageExport'"):
        registry.register(kind("page_export_"))
    assert registry.names() == ["page_export"]


def test_an_unknown_kind_is_refused_without_repeating_its_name() -> None:
    with pytest.raises(InvalidInput) as refused:
        REGISTRY.get("no_such_kind")
    assert refused.value.code == "unknown_kind"
    assert "no_such_kind" not in refused.value.message
    assert REGISTRY.find("no_such_kind") is None


def test_the_registered_kinds_are_well_formed() -> None:
    kinds = list(REGISTRY)
    assert {"course_tagging", "backup", "page_export"} <= set(REGISTRY.names())
    assert len({k.workflow_type for k in kinds}) == len(kinds)
    for k in kinds:
        assert is_kind_name(k.name) and k.title
        assert 1 <= k.priority <= 5
        assert k.max_attempts is None or k.max_attempts >= 1
        assert issubclass(k.result, Result)


# Marks nobody would write in a message: if one shows up, the input was echoed. A key
# that is a plain name may be named (that is where the problem is); one that is not
# (the ``" "`` makes sure) is the caller's own text and is not.
MARK = "zq7MARKq"
ODD_KEY = MARK + " "
shapes = st.one_of(
    hostile_text(40).map(lambda t: MARK + t),
    st.lists(hostile_text(20).map(lambda t: t + MARK), min_size=1, max_size=3),
    st.dictionaries(hostile_text(20).map(lambda t: ODD_KEY + t), hostile_text(20), min_size=1),
    st.integers().map(lambda n: f"{MARK}{n}"),
)


@settings(deadline=None)
@given(st.sampled_from(sorted(REGISTRY.names())), st.data())
def test_a_refused_payload_never_echoes_a_value_or_a_key(name: str, data: st.DataObject) -> None:
    job_kind = REGISTRY.get(name)
    fields = sorted(job_kind.payload.model_fields)
    raw: dict[str, Any] = {}
    for field in data.draw(st.lists(st.sampled_from(fields), unique=True)) if fields else []:
        raw[field] = data.draw(shapes)
    if data.draw(st.booleans()) or not raw:
        raw[ODD_KEY + data.draw(hostile_text(20))] = data.draw(shapes)
    try:
        job_kind.validate(raw)
    except InvalidInput as refused:
        assert refused.code == "invalid_payload"
        assert MARK not in refused.message and MARK not in str(refused)
        assert refused.message.startswith(f"invalid {name} payload: ")
    else:
        pytest.fail(f"{name} took a payload holding only marked values")


def test_a_refusal_says_where() -> None:
    with pytest.raises(InvalidInput) as refused:
        COURSE_TAGGING.validate({"root_page_id": "not-a-uuid", "tag": "ok", "extra": 1})
    message = refused.value.message
    assert "root_page_id" in message and "extra" in message and "not-a-uuid" not in message


# --- strict payloads (issue 19) -----------------------------------------------------------

ROOT = "1c8a9f2e-5f0e-4c9a-9d5b-8f3b7a0e6d21"


@pytest.mark.parametrize(
    "pages_per_file",
    [True, False, 1e3, 1000.0, 2.5, "1000", "1e3", None, [1000]],
    ids=repr,
)
def test_a_number_is_a_number_and_nothing_else(pages_per_file: object) -> None:
    """No coercion: ``true`` is not 1 page a file, ``1e3`` (a float in JSON) is not
    1000, a string of digits is not a number."""
    with pytest.raises(InvalidInput) as refused:
        PAGE_EXPORT.validate({"root_page_id": ROOT, "pages_per_file": pages_per_file})
    assert refused.value.code == "invalid_payload"
    assert "pages_per_file" in refused.value.message


def test_ids_still_come_as_their_text_and_numbers_as_numbers() -> None:
    """What JSON carries only as text (an id) is read from its text, as a payload that
    came through Temporal or the API has it; a model's UUID is taken too."""
    payload = PAGE_EXPORT.validate({"root_page_id": ROOT, "pages_per_file": 7})
    assert (payload.root_page_id, payload.pages_per_file) == (uuid.UUID(ROOT), 7)
    assert PAGE_EXPORT.validate({"root_page_id": uuid.UUID(ROOT)}).pages_per_file == 1000
    tagging = COURSE_TAGGING.validate({"root_page_id": ROOT, "tag": " exam "})
    assert tagging.root_page_id == uuid.UUID(ROOT)


@pytest.mark.parametrize("tag", [7, 7.0, True, ["exam"]], ids=repr)
def test_a_tag_is_text(tag: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        COURSE_TAGGING.validate({"root_page_id": ROOT, "tag": tag})
    assert refused.value.code == "invalid_payload"
