"""The fields of a kind's payload and result a job list may be filtered by, read from the
JSON Schemas the kind declares (the ones the API publishes), so that a new kind has its
own with no change elsewhere; and a filter's text (``payload.tag=exam``) made JSON the
job's must contain."""

from __future__ import annotations

import json
import math
import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from hubjobs.errors import InvalidInput

if TYPE_CHECKING:
    from hubjobs.kinds.base import JobKind

UNKNOWN_FIELD = "unknown_field"
INVALID_FIELD_FILTER = "invalid_field_filter"
INVALID_FIELD_VALUE = "invalid_field_value"
Part = Literal["payload", "result"]
Scalar = str | int | float | bool
# A filter's text: where, a field name as a schema writes it, "=", the value.
_FILTER = re.compile(r"(payload|result)\.([A-Za-z_][A-Za-z0-9_]{0,63})=(.*)", re.ASCII | re.DOTALL)
FILTER_MAX_LENGTH = 500
# Larger integers than PostgreSQL's jsonb compares exactly are no field's.
_INT_LIMIT = 2**63


class KindField(BaseModel):
    """A field a kind's jobs may be filtered by."""

    name: str
    type: Literal["string", "integer", "number", "boolean"]
    format: str | None = None
    enum: list[Scalar] | None = None
    # A list of such values: a job matches when its list holds the one asked for.
    array: bool = False
    description: str | None = None


def _scalar(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The schema of a filterable value (an optional one's, without its null), else None:
    objects, nested lists and times are not filtered by."""
    options = [o for o in schema.get("anyOf", [schema]) if o.get("type") != "null"]
    if len(options) != 1:
        return None
    one: dict[str, Any] = options[0]
    if one.get("type") not in ("string", "integer", "number", "boolean"):
        return None
    if one.get("type") == "string" and one.get("format") not in (None, "uuid"):
        return None
    return one


def fields_of(schema: dict[str, Any], part: Part) -> list[KindField]:
    """The filterable top-level fields of a JSON Schema, named ``part.field``."""
    found: list[KindField] = []
    for name, prop in schema.get("properties", {}).items():
        value = prop
        is_list = prop.get("type") == "array"
        if is_list:
            value = prop.get("items", {})
        scalar = _scalar(value)
        if scalar is None:
            continue
        found.append(
            KindField(
                name=f"{part}.{name}",
                type=scalar["type"],
                format=scalar.get("format"),
                enum=scalar.get("enum"),
                array=is_list,
                description=prop.get("description"),
            )
        )
    return found


def kind_fields(kind: JobKind[Any]) -> list[KindField]:
    """The kind's filterable fields: its payload's, then its result's (as stored)."""
    return fields_of(kind.payload.model_json_schema(), "payload") + fields_of(
        kind.result.model_json_schema(mode="serialization", by_alias=True), "result"
    )


def _value(field: KindField, text: str) -> Scalar:
    """The text as the field's JSON value, or ``invalid_field_value`` (the text is the
    caller's: not repeated)."""
    refused = InvalidInput(
        f"the value of {field.name} is not a {field.type}"
        + (f" ({field.format})" if field.format else "")
        + (" of its allowed values" if field.enum else ""),
        code=INVALID_FIELD_VALUE,
    )
    value: Scalar
    try:
        if field.type == "string":
            # What jsonb cannot hold (NUL, a lone surrogate) no job's value is.
            if "\x00" in text:
                raise ValueError(text)
            text.encode()
            value = str(uuid.UUID(text)) if field.format == "uuid" else text
        elif field.type == "boolean":
            value = {"true": True, "false": False}[text]
        elif field.type == "integer":
            if not re.fullmatch(r"-?[0-9]{1,19}", text, re.ASCII) or abs(int(text)) >= _INT_LIMIT:
                raise ValueError(text)
            value = int(text)
        else:
            number = json.loads(text)
            if isinstance(number, bool) or not isinstance(number, int | float):
                raise ValueError(text)
            if not math.isfinite(number):
                raise ValueError(text)
            value = number
    except (ValueError, KeyError, RecursionError):  # UnicodeError and JSONDecodeError too
        raise refused from None
    if field.enum is not None and value not in field.enum:
        raise refused
    return value


@dataclass(frozen=True)
class Containment:
    """What a job's payload and result must contain: the filters, as JSON."""

    payload: dict[str, Any]
    result: dict[str, Any]


def containment(kind: JobKind[Any] | None, filters: list[str]) -> Containment:
    """The filters' texts, ``payload.<field>=<value>`` or ``result.<field>=<value>``, as
    JSON the job's must contain; refused with a code: malformed or without a kind
    (``invalid_field_filter``), a field the kind does not declare (``unknown_field``),
    a value not of its type (``invalid_field_value``)."""
    payload: dict[str, Any] = {}
    result: dict[str, Any] = {}
    if not filters:
        return Containment(payload, result)
    if kind is None:
        raise InvalidInput("a field filter needs a kind", code=INVALID_FIELD_FILTER)
    known = {field.name: field for field in kind_fields(kind)}
    for text in filters:
        matched = _FILTER.fullmatch(text) if len(text) <= FILTER_MAX_LENGTH else None
        if matched is None:
            raise InvalidInput(
                "a field filter is payload.<field>=<value> or result.<field>=<value>",
                code=INVALID_FIELD_FILTER,
            )
        part, name, raw = matched.groups()
        field = known.get(f"{part}.{name}")
        if field is None:
            raise InvalidInput(
                f"{kind.name} has no such field to filter by (GET /kinds lists its fields)",
                code=UNKNOWN_FIELD,
            )
        value = _value(field, raw)
        into = payload if part == "payload" else result
        if field.array:
            into.setdefault(name, []).append(value)
        elif name in into:
            raise InvalidInput(
                "a field that is not a list is filtered by one value", code=INVALID_FIELD_FILTER
            )
        else:
            into[name] = value
    return Containment(payload, result)
