"""The page export's files (hubjobs.kinds.page_export): file k holds items
(k-1)*N+1 … k*N, so a file rewritten by a later attempt holds the same lines; the files
cover every item exactly once, each named so that the download route takes it (and the
names sort in order up to 9,999 files)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hubjobs.kinds.page_export import FILE_NAME, file_name, file_of, files_of, ordinals_of

totals = st.integers(min_value=0, max_value=50_000)
per_files = st.integers(min_value=1, max_value=2_000)


def test_file_names() -> None:
    assert file_name(1) == "pages-0001.ndjson"
    assert file_name(42) == "pages-0042.ndjson"
    assert file_name(12345) == "pages-12345.ndjson"
    for number in (1, 9999, 10_000, 123_456):
        assert FILE_NAME.fullmatch(file_name(number))
    for other in (
        "pages-1.ndjson",
        "../pages-0001.ndjson",
        "pages-0001.ndjson.partial",
        ".pages-0001.ndjson.partial",
        "pages-0001.json",
        "pages-0001.ndjson\n",
        "pages-\u0660\u0660\u0660\u0661.ndjson",
    ):
        assert not FILE_NAME.fullmatch(other), other


def test_a_small_export() -> None:
    assert files_of(0, 1000) == []
    assert files_of(1, 1000) == [("pages-0001.ndjson", 1)]
    assert files_of(2500, 1000) == [
        ("pages-0001.ndjson", 1000),
        ("pages-0002.ndjson", 1000),
        ("pages-0003.ndjson", 500),
    ]
    assert list(ordinals_of(3, 1000, 2500)) == list(range(2001, 2501))


@settings(deadline=None)
@given(totals, per_files)
def test_the_files_cover_every_item_once_in_order(total: int, per_file: int) -> None:
    files = files_of(total, per_file)
    assert sum(count for _, count in files) == total
    assert all(0 < count <= per_file for _, count in files)
    assert all(count == per_file for _, count in files[:-1])
    names = [name for name, _ in files]
    assert names == [file_name(k) for k in range(1, len(files) + 1)]
    if len(files) < 10_000:  # four digits: the names sort as the files go
        assert names == sorted(names)
    covered = [o for k in range(1, len(files) + 1) for o in ordinals_of(k, per_file, total)]
    assert covered == list(range(1, total + 1))


@settings(deadline=None)
@given(totals.filter(bool), per_files, st.data())
def test_an_item_is_in_the_file_its_ordinal_names(
    total: int, per_file: int, data: st.DataObject
) -> None:
    ordinal = data.draw(st.integers(min_value=1, max_value=total))
    number = file_of(ordinal, per_file)
    assert ordinal in ordinals_of(number, per_file, total)
    assert files_of(total, per_file)[number - 1] == (
        file_name(number),
        len(ordinals_of(number, per_file, total)),
    )
