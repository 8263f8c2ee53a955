"""Every row of the SPEC's outcome table for a page of a tagging job, from the pure
decisions the activity makes (``decide`` before writing, ``written`` after the
ETag-guarded update), without servers. The states and codes are written out here on
purpose: they are the contract callers read, stated independently of the constants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hubjobs.domain.pages import PageFacts
from hubjobs.domain.tables import MAX_TAGS_PER_PAGE
from hubjobs.kinds.course_tagging import PageOutcome, decide, written

PAGE = PageFacts(available=True, has_tag=False, tag_count=3, version=7)
GONE = None
TRASHED_OR_MOVED = PAGE._replace(available=False)
TAGGED = PAGE._replace(has_tag=True, tag_count=4)
FULL = PAGE._replace(tag_count=MAX_TAGS_PER_PAGE)


def as_row(outcome: PageOutcome | None) -> tuple[str, str | None] | None:
    return None if outcome is None else (outcome.state.value, outcome.code)


@pytest.mark.parametrize(
    ("situation", "done_at_snapshot", "page", "row"),
    [
        ("page gone", False, GONE, ("failed", "page_unavailable")),
        ("page gone, tagged at snapshot", True, GONE, ("failed", "page_unavailable")),
        (
            "trashed or moved to another workspace",
            False,
            TRASHED_OR_MOVED,
            ("failed", "page_unavailable"),
        ),
        (
            "trashed, and holding the tag",
            True,
            TAGGED._replace(available=False),
            ("failed", "page_unavailable"),
        ),
        ("has the tag, had it at snapshot", True, TAGGED, ("skipped", None)),
        ("has the tag, not at snapshot", False, TAGGED, ("succeeded", None)),
        (
            "has the tag and the maximum of tags",
            True,
            FULL._replace(has_tag=True),
            ("skipped", None),
        ),
        ("the maximum number of tags", False, FULL, ("skipped", "tag_limit")),
        (
            "more than the maximum (an older limit)",
            False,
            FULL._replace(tag_count=MAX_TAGS_PER_PAGE + 3),
            ("skipped", "tag_limit"),
        ),
        ("needs the tag: written", False, PAGE, None),
        (
            "needs the tag, one below the maximum",
            False,
            PAGE._replace(tag_count=MAX_TAGS_PER_PAGE - 1),
            None,
        ),
    ],
)
def test_the_outcome_before_writing(
    situation: str, done_at_snapshot: bool, page: PageFacts | None, row: tuple[str, str | None]
) -> None:
    assert as_row(decide(done_at_snapshot, page)) == row, situation


def test_the_outcome_of_the_write() -> None:
    # The ETag-guarded update succeeds (on the first write or after the re-read).
    assert as_row(written(True, False, reread=False)) == ("succeeded", None)
    assert as_row(written(True, False, reread=True)) == ("succeeded", None)
    # Any other update failure.
    assert as_row(written(False, True, reread=False)) == ("failed", "page_update_failed")
    assert as_row(written(False, True, reread=True)) == ("failed", "page_update_failed")
    # Changed between read and write: read again and decided afresh, once...
    assert written(False, False, reread=False) is None
    # ...and still in conflict after the fresh re-read: failed.
    assert as_row(written(False, False, reread=True)) == ("failed", "concurrency_conflict")


def test_a_conflict_reread_is_decided_afresh() -> None:
    """The re-read after a conflict goes through the same table: a page someone else
    tagged meanwhile succeeded, one trashed meanwhile is unavailable."""
    assert written(False, False, reread=False) is None
    assert as_row(decide(False, TAGGED)) == ("succeeded", None)
    assert as_row(decide(False, TRASHED_OR_MOVED)) == ("failed", "page_unavailable")
    assert as_row(decide(False, FULL)) == ("skipped", "tag_limit")


def test_every_failure_and_limit_explains_itself() -> None:
    """A failed or skipped-for-a-reason item carries a plain message; a plain success or
    skip carries none."""
    outcomes = [
        decide(False, GONE),
        decide(False, FULL),
        written(False, True, reread=True),
        written(False, False, reread=True),
    ]
    for outcome in outcomes:
        assert outcome is not None and outcome.code and outcome.message
    for outcome in (decide(True, TAGGED), decide(False, TAGGED), written(True, False, reread=True)):
        assert outcome is not None and outcome.code is None and outcome.message is None


@settings(deadline=None)
@given(
    done_at_snapshot=st.booleans(),
    available=st.booleans(),
    has_tag=st.booleans(),
    tag_count=st.integers(min_value=0, max_value=2 * MAX_TAGS_PER_PAGE),
    version=st.integers(min_value=1, max_value=2**40),
)
def test_the_table_is_read_in_its_order(
    done_at_snapshot: bool, available: bool, has_tag: bool, tag_count: int, version: int
) -> None:
    """For any page, the first row that applies decides: unavailable before the tag,
    the tag before the limit; nothing else is left to write."""
    page = PageFacts(available, has_tag, tag_count, version)
    outcome = as_row(decide(done_at_snapshot, page))
    if not available:
        assert outcome == ("failed", "page_unavailable")
    elif has_tag:
        assert outcome == (("skipped", None) if done_at_snapshot else ("succeeded", None))
    elif tag_count >= MAX_TAGS_PER_PAGE:
        assert outcome == ("skipped", "tag_limit")
    else:
        assert outcome is None
