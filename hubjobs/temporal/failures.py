"""How a failed attempt of a job's work is judged, and the stable codes a job can fail
with: pure functions of Temporal's failure objects, deterministic for the workflow.

Only attempts without durable progress count: the job fails after ``max_attempts`` of
them in a row, ``abandoned`` when the last one's worker stopped heartbeating and
``processing_failed`` otherwise. A refusal (non-retryable, with a code) fails it at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType

from hubjobs.errors import InvalidPayload, Unavailable
from hubjobs.temporal.messages import Beat, JobOptions

# The codes a job of any kind can end with (a kind's refusals add their own).
ACTOR_UNAVAILABLE = "actor_unavailable"
INVALID_PAYLOAD = InvalidPayload.code
PROCESSING_FAILED = "processing_failed"
ABANDONED = "abandoned"
UNAVAILABLE = Unavailable.code
TERMINATED = "terminated"
TIMED_OUT = "timed_out"
# A kind that writes files (a backup's archive, an export's files) could not: the file
# system is full (ENOSPC, or the quota: EDQUOT), or its folder is read-only, gone or
# not writable. Refusals: retrying the same write into the same place fails the same way.
NO_SPACE = "no_space"
STORAGE_UNAVAILABLE = "storage_unavailable"

# Plain messages for those codes. The detail of a failure goes to the worker's log,
# never here.
ERROR_MESSAGES: dict[str, str] = {
    ACTOR_UNAVAILABLE: "The actor is no longer an enabled administrator of the workspace.",
    INVALID_PAYLOAD: "The job's input is not valid for its kind.",
    PROCESSING_FAILED: "The job failed: its attempts ran out without progress.",
    ABANDONED: "The job was abandoned: its worker stopped responding and no attempts are left.",
    UNAVAILABLE: "The job failed: the database did not answer for longer than allowed.",
    TERMINATED: "The job was terminated in Temporal.",
    TIMED_OUT: "The job timed out in Temporal.",
    NO_SPACE: "The job failed: no space was left where it writes its files. Its partial "
    "files were removed; free some space and start it again.",
    STORAGE_UNAVAILABLE: "The job failed: the folder it writes its files to cannot be "
    "written (read-only, missing or not permitted).",
}


@dataclass(frozen=True)
class Judged:
    """A failed attempt, judged: how far it got (its last beat, if it sent one), whether
    its worker died, and the code it ends the job with if it is a refusal."""

    beat: Beat | None
    died: bool
    refusal: str | None = None
    message: str | None = None


def _beat(details: Any) -> Beat | None:
    if not details:
        return None
    try:
        return Beat.model_validate(details[0])
    except (ValidationError, TypeError, IndexError):
        return None


def judge(err: ActivityError) -> Judged:
    cause = err.cause
    if isinstance(cause, TimeoutError):
        # Heartbeat or start-to-close: the worker died or hung; its last beat says how
        # far it got.
        died = cause.type in (TimeoutType.HEARTBEAT, TimeoutType.START_TO_CLOSE)
        return Judged(beat=_beat(cause.last_heartbeat_details), died=died)
    if isinstance(cause, ApplicationError):
        beat = _beat(cause.details)
        if cause.non_retryable and cause.type:
            return Judged(beat=beat, died=False, refusal=cause.type, message=cause.message)
        return Judged(beat=beat, died=False)
    return Judged(beat=None, died=False)


def exhausted_code(judged: Judged) -> str:
    """The code of a job whose attempts without progress ran out."""
    return ABANDONED if judged.died else PROCESSING_FAILED


def backoff_seconds(stalls: int, options: JobOptions) -> float:
    """The wait before the next attempt after ``stalls`` attempts in a row without
    progress: none after progress, then 2 s, 10 s, 30 s, 30 s… by default."""
    if stalls <= 0:
        return 0.0
    wait = options.retry_initial_seconds * options.retry_coefficient ** (stalls - 1)
    return float(min(wait, options.retry_max_seconds))


def invalid_input(whose: str, reason: str) -> ApplicationError:
    """A workflow's input that did not read: it fails at once, naming what was wrong."""
    return ApplicationError(
        f"The {whose} input is not valid: {reason}.", type=INVALID_PAYLOAD, non_retryable=True
    )


# Codes whose own message says more than the plain sentence and is safe to show: an
# invalid input's names the field (built from pydantic's place and message, never the
# value sent), which a caller needs to mend it.
OWN_MESSAGE_WINS = frozenset({INVALID_PAYLOAD})


def message_for(code: str, fallback: str | None = None) -> str:
    """The plain message of a code: a known code's sentence wins over the detail an
    activity raised with (it may name hosts or values), but for OWN_MESSAGE_WINS."""
    if code in OWN_MESSAGE_WINS and fallback:
        return fallback
    return ERROR_MESSAGES.get(code) or fallback or ERROR_MESSAGES[PROCESSING_FAILED]
