"""What arrives at a workflow from outside, read without trusting it.

Anyone who can reach Temporal sends signals, queries and inputs (the CLI's bare
``cancel``, the UI's empty box). A typed handler sent nothing or the wrong shape fails
its workflow task for ever, so handlers take ``*args: Any`` (plain JSON) and read it here.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from hubjobs.errors import describe_validation_errors

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Accepted(Generic[M]):
    value: M


@dataclass(frozen=True)
class Refused:
    """Why an argument was refused: where and what, never the value sent."""

    reason: str


def read_argument(
    model: type[M], args: Sequence[Any], *, optional: bool = False
) -> Accepted[M] | Refused:
    """One JSON argument as ``model``. With ``optional``, no argument, ``null`` and ``{}``
    mean the model's defaults (a bare ``cancel``). More than one argument is refused."""
    if len(args) > 1:
        return Refused(f"expects at most one argument, got {len(args)}")
    value = args[0] if args else None
    if value is None:
        if optional:
            return Accepted(model())
        return Refused("an argument is required")
    if not isinstance(value, dict):
        return Refused(f"expects a JSON object, got {json_type(value)}")
    try:
        return Accepted(model.model_validate(value))
    except ValidationError as err:
        return Refused(describe_validation_errors(err.errors(include_input=False), default_loc=""))


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type (never the value)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "a value that is not JSON"


def uuid_or_none(value: object) -> uuid.UUID | None:
    """A UUID from text sent from outside; None for anything else."""
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            return None
    return None
