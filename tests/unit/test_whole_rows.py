"""A restore hands a table's COPY text to several connections in chunks
(hubjobs.ops.parallel_copy.whole_rows): whatever the blocks the archive's stream comes
in, the chunks put together are the stream, byte for byte, and every chunk but the
last ends at the end of a row, so that no row is split across two COPY statements."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hubjobs.ops.parallel_copy import whole_rows

ROW = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"\\n") + b"\n")


@given(
    rows=st.lists(ROW, max_size=30),
    tail=st.sampled_from([b"", b"no newline at the end"]),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=8),
    size=st.integers(min_value=1, max_value=120),
)
def test_chunks_are_the_stream_cut_at_ends_of_rows(
    rows: list[bytes], tail: bytes, cuts: list[int], size: int
) -> None:
    data = b"".join(rows) + tail
    edges = sorted({min(c, len(data)) for c in cuts})
    blocks = [data[a:b] for a, b in zip([0, *edges], [*edges, len(data)], strict=True)]
    chunks = [b"".join(bytes(piece) for piece in chunk) for chunk in whole_rows(blocks, size)]
    assert b"".join(chunks) == data
    assert all(chunks)
    assert all(chunk.endswith(b"\n") for chunk in chunks[:-1])


def test_a_stream_without_rows_is_no_chunk() -> None:
    assert list(whole_rows([], 10)) == []
    assert list(whole_rows([b""], 10)) == []


def test_a_row_longer_than_a_chunk_stays_whole() -> None:
    long_row = b"x" * 50 + b"\n"
    blocks = [long_row[:20], long_row[20:40], long_row[40:] + b"y\n"]
    chunks = [b"".join(bytes(p) for p in c) for c in whole_rows(blocks, 10)]
    assert chunks == [long_row + b"y\n"]
