"""How the workflow judges a failed attempt (hubjobs.temporal.failures), from Temporal's
failure objects built by hand as the SDK hands them to workflow code: a worker that
died (heartbeat or start-to-close timeout), a refusal (non-retryable, with a code), an
attempt that crashed; the code a job fails with when its attempts run out; the backoff
between attempts; the plain message of each code."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

from hubjobs.temporal.failures import (
    ERROR_MESSAGES,
    Judged,
    backoff_seconds,
    exhausted_code,
    judge,
    message_for,
)
from hubjobs.temporal.messages import Beat, JobOptions

BEAT = {"cursor": {"after": 150}, "progress": 150}


def failed_attempt(cause: BaseException | None) -> ActivityError:
    """An attempt's ActivityError, its cause chained as the SDK chains it."""
    err = ActivityError(
        "activity error",
        scheduled_event_id=5,
        started_event_id=6,
        identity="worker-1",
        activity_type="tag_course",
        activity_id="1",
        retry_state=RetryState.MAXIMUM_ATTEMPTS_REACHED,
    )
    err.__cause__ = cause
    return err


def timed_out(kind: TimeoutType, details: list[Any]) -> ActivityError:
    return failed_attempt(TimeoutError("timed out", type=kind, last_heartbeat_details=details))


@pytest.mark.parametrize("kind", [TimeoutType.HEARTBEAT, TimeoutType.START_TO_CLOSE])
def test_a_worker_that_stopped_answering_died_and_its_last_beat_says_how_far(
    kind: TimeoutType,
) -> None:
    judged = judge(timed_out(kind, [BEAT]))
    assert judged == Judged(beat=Beat(cursor={"after": 150}, progress=150), died=True)
    assert judged.refusal is None
    assert exhausted_code(judged) == "abandoned"


def test_a_worker_that_died_before_its_first_beat_got_nowhere() -> None:
    judged = judge(timed_out(TimeoutType.HEARTBEAT, []))
    assert judged.died and judged.beat is None


@pytest.mark.parametrize("kind", [TimeoutType.SCHEDULE_TO_START, TimeoutType.SCHEDULE_TO_CLOSE])
def test_a_timeout_the_worker_did_not_cause_is_no_death(kind: TimeoutType) -> None:
    judged = judge(timed_out(kind, [BEAT]))
    assert not judged.died and judged.beat == Beat(cursor={"after": 150}, progress=150)
    assert exhausted_code(judged) == "processing_failed"


@pytest.mark.parametrize(
    "details",
    [["not a beat"], [{"progress": "lots"}], [None], [[1, 2]], [{"cursor": 3}]],
)
def test_details_that_are_no_beat_count_as_none(details: list[Any]) -> None:
    assert judge(timed_out(TimeoutType.HEARTBEAT, details)).beat is None
    assert judge(failed_attempt(ApplicationError("x", *details))).beat is None


def test_a_refusal_fails_the_job_with_its_own_code_and_message() -> None:
    refusal = ApplicationError(
        "the actor is no longer an enabled administrator",
        BEAT,
        type="actor_unavailable",
        non_retryable=True,
    )
    judged = judge(failed_attempt(refusal))
    assert judged.refusal == "actor_unavailable" and not judged.died
    assert judged.message == "the actor is no longer an enabled administrator"
    assert judged.beat == Beat(cursor={"after": 150}, progress=150)


@pytest.mark.parametrize(
    "error",
    [
        # Retryable, typed or not: an attempt that failed, not a refusal.
        ApplicationError("the attempt failed (KeyError)"),
        ApplicationError("flaky", type="page_unavailable"),
        # Non-retryable without a code says nothing a caller could act on.
        ApplicationError("odd", non_retryable=True),
    ],
)
def test_a_crashed_attempt_is_no_refusal(error: ApplicationError) -> None:
    judged = judge(failed_attempt(error))
    assert judged.refusal is None and not judged.died
    assert exhausted_code(judged) == "processing_failed"


@pytest.mark.parametrize("cause", [None, CancelledError("cancelled"), RuntimeError("?")])
def test_any_other_cause_is_a_plain_failure(cause: BaseException | None) -> None:
    assert judge(failed_attempt(cause)) == Judged(beat=None, died=False)


def test_the_default_backoff_is_2_10_30_30_seconds() -> None:
    options = JobOptions()
    assert [backoff_seconds(n, options) for n in range(6)] == [0, 2, 10, 30, 30, 30]
    assert backoff_seconds(-1, options) == 0


@settings(deadline=None)
@given(
    stalls=st.integers(min_value=1, max_value=60),
    initial=st.floats(min_value=0.1, max_value=60),
    coefficient=st.floats(min_value=1, max_value=10),
    ceiling=st.floats(min_value=0.1, max_value=3600),
)
def test_the_backoff_grows_and_stays_under_its_ceiling(
    stalls: int, initial: float, coefficient: float, ceiling: float
) -> None:
    options = JobOptions(
        retry_initial_seconds=initial, retry_coefficient=coefficient, retry_max_seconds=ceiling
    )
    wait = backoff_seconds(stalls, options)
    assert 0 < wait <= ceiling
    assert backoff_seconds(stalls + 1, options) >= wait
    assert backoff_seconds(1, options) == min(initial, ceiling)


# The codes a job can end with, whatever its kind (the README's table).
JOB_CODES = (
    "actor_unavailable",
    "invalid_payload",
    "processing_failed",
    "abandoned",
    "unavailable",
    "terminated",
    "timed_out",
    "no_space",
    "storage_unavailable",
)


def test_every_code_a_job_ends_with_has_a_plain_sentence() -> None:
    assert set(ERROR_MESSAGES) == set(JOB_CODES)
    for code in JOB_CODES:
        message = message_for(code)
        assert message == ERROR_MESSAGES[code]
        assert message[0].isupper() and message.endswith(".") and "_" not in message


def test_a_code_of_a_kind_keeps_its_own_message_and_an_unknown_one_gets_the_generic() -> None:
    assert message_for("page_not_found", "the root page is gone") == "the root page is gone"
    assert message_for("page_not_found") == ERROR_MESSAGES["processing_failed"]
    # A known code's plain message wins over the detail an activity raised with.
    assert (
        message_for("unavailable", "connection refused at 10.0.0.3")
        == (ERROR_MESSAGES["unavailable"])
    )
