"""Text hubjobs writes itself into what crosses Temporal (a progress message, an error's
plain message, a code, a cancellation's reason), typed for pydantic: cut to its bound
before it is validated, so it never fails a workflow task for being long."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field

from hubjobs.domain.text import CODE_MAX_LENGTH, MESSAGE_MAX_LENGTH, REASON_MAX_LENGTH


def cut_to(limit: int) -> BeforeValidator:
    """Cuts text to ``limit`` characters before it is validated (Temporal fails a payload
    over 2 MB)."""

    def cut(value: object) -> object:
        return value[:limit] if isinstance(value, str) else value

    return BeforeValidator(cut)


# A message (progress, an error's plain message) and a code, cut to their bounds.
Message = Annotated[str, cut_to(MESSAGE_MAX_LENGTH), Field(max_length=MESSAGE_MAX_LENGTH)]
Code = Annotated[str, cut_to(CODE_MAX_LENGTH), Field(max_length=CODE_MAX_LENGTH)]
# A cancellation's reason as a signal carries it: cut, never refused (the cancel stands).
Reason = Annotated[str, cut_to(REASON_MAX_LENGTH), Field(max_length=REASON_MAX_LENGTH)]
