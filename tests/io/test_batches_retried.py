"""A streamed read that pyarrow's S3 client failed without retrying is read again from
the start, the rows already handed out skipped: none repeated, none lost, whatever the
batches' boundaries on the second read (raylake/io/read_errors.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from raylake.io.read_errors import batches_retried
from raylake.io.retry import RetryPolicy

OVERFLOWED = OSError("AWS Error INTERNAL_FAILURE during GetObject operation: Failed to flush")
POLICY = RetryPolicy(max_attempts=3, backoff_s=0.0)
ROWS = 40


def _reads(sizes: list[list[int]], fail_after: list[int | None]) -> Iterator[pa.RecordBatch]:
    """Each call: the rows 0..ROWS-1 in batches of the next sizes, failing after the
    next number of batches (None: not at all)."""
    attempt = 0

    def read() -> Iterator[pa.RecordBatch]:
        nonlocal attempt
        cut, fail = sizes[attempt], fail_after[attempt]
        attempt += 1
        start = 0
        for i, size in enumerate(cut):
            if fail is not None and i == fail:
                raise OSError(f"{OVERFLOWED} response stream")
            yield pa.record_batch({"x": list(range(start, start + size))})
            start += size

    return batches_retried(read, POLICY)


def _cuts() -> st.SearchStrategy[list[int]]:
    """Batch sizes adding up to ROWS."""
    return st.lists(st.integers(0, ROWS), min_size=1, max_size=6).map(
        lambda points: [b - a for a, b in zip([0, *sorted(points)], [*sorted(points), ROWS])]
    )


@given(first=_cuts(), second=_cuts(), data=st.data())
def test_the_rows_handed_out_are_skipped_on_the_read_again(
    first: list[int], second: list[int], data: st.DataObject
) -> None:
    fail = data.draw(st.integers(0, len(first) - 1))
    batches = list(_reads([first, second], [fail, None]))
    assert [x for b in batches for x in b.column("x").to_pylist()] == list(range(ROWS))


def test_the_last_try_fails_as_pyarrow_failed_it() -> None:
    with pytest.raises(OSError, match="Failed to flush response stream"):
        list(_reads([[ROWS]] * 3, [0, 0, 0]))


def test_another_error_is_not_retried() -> None:
    def read() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"x": [1]})
        raise FileNotFoundError("gone")

    with pytest.raises(FileNotFoundError):
        list(batches_retried(read, POLICY))
