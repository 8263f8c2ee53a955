"""Every message that crosses Temporal is bounded by construction (issue 30): the
largest value each model of hubjobs/temporal/messages.py can hold, and each kind's
payload, cursor and carried result, encoded by the one data converter, stays far under
Temporal's 512 KB warning (it fails a payload at 2 MB: a workflow task that returns
one is retried for good).

The largest value is built from the models themselves: text at its declared maximum
length, in the characters whose JSON is longest (``\\u0001``, six bytes each), a list at
its maximum length, a union's largest branch, and for a field that holds a kind's
model as JSON (``payload``, ``cursor``, ``result``) the largest of every kind's. A
field with no bound (text or a list without a maximum length) fails the test, named:
a new field must say how long it may grow.
"""

from __future__ import annotations

import inspect
import types
import typing
import uuid
from datetime import UTC, datetime
from enum import Enum
from typing import Annotated, Any, Literal, Union

import annotated_types
import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from hubjobs.domain.pages import MAX_TAG_LENGTH
from hubjobs.kinds import REGISTRY
from hubjobs.kinds.course_tagging import CourseTaggingPayload
from hubjobs.readmodel.views import Counters
from hubjobs.settings import Settings
from hubjobs.temporal import messages
from hubjobs.temporal.client import data_converter

# Temporal warns about a payload over 512 KB; every message stays under an eighth of it.
WARNING = 512 * 1024
BOUND = WARNING // 8
# The character whose JSON encoding is longest: ``"\u0001"``.
WIDEST = "\x01"
# Text bounded by its validator, which words its own refusal (a longer tag is refused
# as ``invalid_tag``, not by pydantic's maximum length).
VALIDATED: dict[tuple[type[BaseModel], str], int] = {(CourseTaggingPayload, "tag"): MAX_TAG_LENGTH}
# Not sent to the server: a local activity's argument (its marker records the result
# only), holding a refused direct start's payload as its caller sent it, which the
# server bounded when it took that start.
NOT_SENT = {messages.RefusedStart}


# The longest JSON of each fixed-size type.
SCALARS: dict[Any, Any] = {
    bool: False,
    int: -(2**63),
    float: -1.7976931348623157e308,
    uuid.UUID: uuid.UUID(int=0),
    datetime: datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
}


def kind_models(field: str) -> list[type[BaseModel]]:
    """The models a field holding a kind's JSON may hold, across every kind."""
    found: list[type[BaseModel] | None] = []
    for kind in REGISTRY:
        found.append(
            {"payload": kind.payload, "cursor": kind.cursor, "result": kind.carried_model}[field]
        )
    return [model for model in found if model is not None]


def max_length(metadata: list[Any]) -> int | None:
    for item in metadata:
        if isinstance(item, annotated_types.MaxLen):
            return item.max_length
        if isinstance(item, FieldInfo):
            inner = max_length(item.metadata)
            if inner is not None:
                return inner
    return None


def encoded_size(value: Any) -> int:
    converter = data_converter(Settings(payload_codec=False)).payload_converter
    return converter.to_payloads([value])[0].ByteSize()


def largest(tp: Any, metadata: list[Any], where: str) -> Any:
    """The largest value of type ``tp`` with field ``metadata``; fails on no bound."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        inner, *extra = typing.get_args(tp)
        return largest(inner, [*metadata, *extra], where)
    if origin in (Union, types.UnionType):
        options = [largest(a, metadata, where) for a in typing.get_args(tp) if a is not type(None)]
        return max(options, key=encoded_size)
    if origin is Literal:
        return max(typing.get_args(tp), key=lambda v: len(str(v)))
    if tp is str:
        limit = max_length(metadata)
        assert limit is not None, f"{where}: text without a maximum length"
        return WIDEST * limit
    if tp in SCALARS:
        return SCALARS[tp]
    if inspect.isclass(tp) and issubclass(tp, Enum):
        return max(tp, key=lambda member: len(str(member.value)))
    if inspect.isclass(tp) and issubclass(tp, BaseModel):
        return largest_model(tp)
    if origin in (list, tuple):
        limit = max_length(metadata)
        assert limit is not None, f"{where}: a list without a maximum length"
        (item,) = typing.get_args(tp)[:1]
        return [largest(item, [], f"{where}[]")] * limit
    if origin is dict:
        field = where.rsplit(".", 1)[-1]
        models = kind_models(field) if field in ("payload", "cursor", "result") else []
        assert models, f"{where}: JSON that is no kind's model"
        dumped = [largest_model(m).model_dump(mode="json", by_alias=True) for m in models]
        return max(dumped, key=encoded_size)
    raise AssertionError(f"{where}: no largest value known for {tp!r}")


def largest_model(model: type[BaseModel]) -> BaseModel:
    values: dict[str, Any] = {}
    hints = typing.get_type_hints(model, include_extras=True)
    for name, info in model.model_fields.items():
        where = f"{model.__name__}.{name}"
        if (model, name) in VALIDATED:
            values[name] = WIDEST * VALIDATED[(model, name)]
            continue
        values[name] = largest(hints[name], list(info.metadata), where)
    return model.model_construct(**values)


def crossing_models() -> list[type[BaseModel]]:
    """Every model of the messages module, and every kind's payload, cursor and result
    as its workflow returns it."""
    found = {
        value
        for value in vars(messages).values()
        if inspect.isclass(value)
        and issubclass(value, BaseModel)
        and value.__module__ == messages.__name__
    }
    for field in ("payload", "cursor", "result"):
        found.update(kind_models(field))
    return sorted(found - NOT_SENT, key=lambda m: m.__name__)


@pytest.mark.parametrize("model", crossing_models(), ids=lambda m: m.__name__)
def test_the_largest_value_of_each_message_is_far_under_the_warning(
    model: type[BaseModel],
) -> None:
    size = encoded_size(largest_model(model))
    assert size < BOUND, f"{model.__name__}: {size} bytes at most"


def test_the_sizes_are_measured_on_what_the_converter_sends() -> None:
    """The measure is real: a text field's widest characters count six bytes each."""
    report = messages.JobProgressReport.model_construct(counters=Counters(), message=WIDEST * 1000)
    assert encoded_size(report) > 6000
