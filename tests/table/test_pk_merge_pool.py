"""The merge threads of primary-key reads live from one read to the next (issue 20).

Long-lived threads keep their allocator's freed memory for the next read. A read in
a forked child (DataLoader workers, multiprocessing) makes its own threads instead of
waiting on the parent's, which do not exist there.
"""

from __future__ import annotations

import multiprocessing
import threading
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import raylake
import raylake.table.pk.read as pk_read
from raylake.table.pk.late import clear_decision_cache

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.float32())])


def two_section_table(tmp_path: Path) -> raylake.Table:
    """Two buckets, each a section of two overlapping files (merged on two threads)."""
    tbl = raylake.create_table(
        str(tmp_path / uuid.uuid4().hex),
        SCHEMA,
        primary_key=["id"],
        buckets=2,
        options={"compaction.auto": "false"},
    )
    ids = pa.array(range(1000), pa.int64())
    tbl.write(pa.table({"id": ids, "v": pa.array([0.0] * 1000, pa.float32())}, schema=SCHEMA))
    upsert = pa.array(range(0, 1000, 3), pa.int64())
    ones = pa.array([1.0] * len(upsert), pa.float32())
    tbl.write(pa.table({"id": upsert, "v": ones}, schema=SCHEMA))
    return tbl


def merge_threads() -> set[int]:
    return {t.ident or 0 for t in threading.enumerate() if t.name.startswith("raylake-merge")}


def expected_sum() -> float:
    return float(len(range(0, 1000, 3)))


def test_reads_merge_on_the_same_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pk_read, "MERGE_THREADS", 2)
    tbl = two_section_table(tmp_path)
    clear_decision_cache()
    first = tbl.to_arrow()
    after_first = merge_threads()
    assert after_first  # the threads outlive the read
    clear_decision_cache()
    second = tbl.to_arrow()
    assert merge_threads() == after_first  # and the next read merges on them
    assert first.num_rows == second.num_rows == 1000
    assert sum(second.column("v").to_pylist()) == expected_sum()


def _read_in_child(uri: str, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    clear_decision_cache()
    rows = raylake.open_table(uri).to_arrow()
    out.put((rows.num_rows, sum(rows.column("v").to_pylist())))


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs fork start method"
)
# Python 3.12+ warns on every fork of a process with threads (pyarrow's own pool is one):
# forking one is what this test is about.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_merges_on_threads_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pk_read, "MERGE_THREADS", 2)
    tbl = two_section_table(tmp_path)
    tbl.to_arrow()  # the parent's threads exist before the fork
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_read_in_child, args=(tbl.uri, out))
    child.start()
    try:
        child.join(60)
        assert child.exitcode == 0  # None: the child waited on threads it does not have
    finally:
        if child.is_alive():
            child.kill()
    assert out.get(timeout=5) == (1000, expected_sum())
