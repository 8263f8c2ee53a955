"""A page's ETag (hubjobs.domain.pages): it names the page and the version read, reads
back as that version, and nothing else ever matches a version: not another page's ETag,
not a weak or malformed one, not a version written another way (``+7``, ``07``, ``7_0``,
digits of another script). A version that matches nothing is below 1, where no page is
(``version >= 1`` is a CHECK of the schema)."""

from __future__ import annotations

import uuid

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from hubjobs.domain.pages import etag, version_of

page_ids = st.uuids()
versions = st.integers(min_value=1, max_value=2**63 - 1)


def names_a_version(page_id: uuid.UUID, if_match: str) -> bool:
    return version_of(page_id, if_match) >= 1


@settings(deadline=None)
@given(page_ids, versions)
def test_an_etag_reads_back_as_its_version(page_id: uuid.UUID, version: int) -> None:
    tag = etag(page_id, version)
    assert version_of(page_id, tag) == version
    # Quoted, as HTTP wants an entity tag.
    assert tag.startswith('"') and tag.endswith('"')


@settings(deadline=None)
@given(page_ids, page_ids, versions)
def test_another_pages_etag_never_matches(
    page_id: uuid.UUID, other: uuid.UUID, version: int
) -> None:
    assume(page_id != other)
    assert not names_a_version(page_id, etag(other, version))


@settings(deadline=None)
@given(page_ids, st.text(max_size=80))
@example(uuid.UUID(int=1), "")
@example(uuid.UUID(int=1), '""')
@example(uuid.UUID(int=1), ".")
def test_text_that_is_no_etag_of_the_page_never_matches(page_id: uuid.UUID, raw: str) -> None:
    assume(not any(raw == etag(page_id, v) for v in range(1, 3)))
    version = version_of(page_id, raw)
    assert version < 1 or raw in (etag(page_id, version), f"{page_id.hex}.{version}")


@settings(deadline=None)
@given(page_ids, versions)
def test_a_version_written_another_way_never_matches(page_id: uuid.UUID, version: int) -> None:
    arabic = str(version).translate({ord(d): 0x660 + int(d) for d in "0123456789"})
    for spelled in (
        f"+{version}",
        f"0{version}",
        f" {version}",
        f"{version} ",
        arabic,
        f"{version}.0",
        f"{version:_}" if version >= 1000 else f"{version}_0",
    ):
        assert not names_a_version(page_id, f'"{page_id.hex}.{spelled}"'), spelled


@settings(deadline=None)
@given(page_ids, versions)
def test_weak_uppercase_or_mangled_etags_never_match(page_id: uuid.UUID, version: int) -> None:
    good = etag(page_id, version)
    for bad in (
        f"W/{good}",
        good.upper(),
        f'"{page_id.hex[:-1]}.{version}"',
        f'"{page_id}.{version}"',  # the dashed form of the id
        f'"{page_id.hex}.{version}.1"',
        f'"{page_id.hex}"',
        f'"{page_id.hex}.{-version}"',
        f'"{page_id.hex}.{version}',  # one quote
        f'""{page_id.hex}.{version}""',
        good + good,
    ):
        assert not names_a_version(page_id, bad), bad
