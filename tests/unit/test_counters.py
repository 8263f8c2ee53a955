"""The counters every kind's progress is told in (hubjobs.readmodel.views.Counters)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hubjobs.readmodel.views import Counters

counts = st.integers(min_value=0, max_value=10**9)
counters = st.builds(
    Counters, total=counts, processed=counts, succeeded=counts, skipped=counts, failed=counts
)


def test_zero_and_a_line() -> None:
    assert Counters() == Counters(total=0, processed=0, succeeded=0, skipped=0, failed=0)
    progress = Counters(total=30, processed=12, succeeded=9, skipped=2, failed=1)
    assert progress.describe() == "12 of 30 done: 9 succeeded, 2 skipped, 1 failed"


@settings(deadline=None)
@given(counters, counters, counters)
def test_adding_counts_each_field(a: Counters, b: Counters, c: Counters) -> None:
    total = a + b
    for field in Counters.model_fields:
        assert getattr(total, field) == getattr(a, field) + getattr(b, field)
    assert a + b == b + a and (a + b) + c == a + (b + c) and a + Counters() == a


def test_from_a_row_or_a_view() -> None:
    """Anything with the five counts as attributes (a row, a job view) gives Counters."""

    class Row:
        total, processed, succeeded, skipped, failed, status = 5, 4, 2, 1, 1, "running"

    assert Counters.of(Row()) == Counters(total=5, processed=4, succeeded=2, skipped=1, failed=1)
