"""Paimon tables that Java Paimon wrote (another reader's test data) read as Java reads them.

Every table either reads equal to the rows that project's tests expect (or, where its
tests expect none, reads without error), or is refused with UnsupportedPaimonError
naming what raylake does not read; nothing else may happen. The tally is printed and
checked against the floor below, and docs/paimon.md's corpus table is checked against
it (tests/paimon/java_corpus.py, `python tests/paimon/java_corpus.py` prints it).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from java_corpus import (
    CASES,
    CRASHED,
    DIFFERENT,
    EQUAL,
    NAMES,
    READ,
    REFUSED,
    ROOT,
    compare,
    java_rows_matching,
    outcome,
    support_table,
    tally,
)

import raylake
from raylake.errors import UnsupportedPaimonError

DOC = Path(__file__).parents[2] / "docs" / "paimon.md"


@pytest.mark.parametrize("name", NAMES)
def test_java_table_reads_as_java_or_is_refused_by_name(name: str) -> None:
    status, detail = outcome(name)
    assert status in (EQUAL, READ, REFUSED), f"{name}: {status}: {detail}"
    if CASES[name]["expected"]:
        assert status in (EQUAL, REFUSED), detail
    if status == REFUSED:
        assert "cannot read the Paimon table" in detail


def test_corpus_tally_and_docs_table() -> None:
    counts = tally()
    print(dict(counts))
    assert counts[CRASHED] == counts[DIFFERENT] == 0
    # Floors, so that a change that turns reads into refusals shows: all 89 tables with
    # Java's rows read equal, 89 of the 93 read.
    assert counts[EQUAL] >= 89, counts
    assert counts[EQUAL] + counts[READ] >= 89, counts
    assert support_table() in DOC.read_text(), "docs/paimon.md's corpus table is stale"


def test_a_filtered_case_holds_the_rows_its_predicate_selects() -> None:
    """Java's rows of a read with a predicate all match it, unless the case says Java's
    index only prunes (then some do not, or the flag would hide nothing); checked with
    the filter's Python oracle, so a transcription slip shows without a raylake read."""
    filtered = [
        (name, run) for name in NAMES for run in CASES[name]["expected"] if run.get("filter")
    ]
    assert len(filtered) > 100
    for name, run in filtered:
        tbl = raylake.open_table(str(ROOT / name))
        schema = tbl.schema if run["snapshot"] is None else tbl.schema_at(run["snapshot"])
        if run.get("columns"):
            schema = pa.schema([schema.field(c) for c in run["columns"]])
        kept = java_rows_matching(run["rows"], schema, run["filter"])
        if run.get("java_prunes_only"):
            assert len(kept) < len(run["rows"]), (name, run["filter"])
        else:
            assert kept == run["rows"], (name, run["filter"])


@pytest.mark.parametrize("fmt", ["orc", "parquet"])
def test_data_evolution_filters_and_projections_keep_whole_rows(fmt: str) -> None:
    """A value filter may not prune one file of a row range by statistics: the rows
    would lose the columns it holds. Java's rows, filtered here, are the reference."""
    name = f"{fmt}_data_evolution_with_index"
    tbl = raylake.open_table(str(ROOT / name))
    java = CASES[name]["expected"][0]["rows"]
    for column, value in (("f2", 102), ("f2", 202), ("f1", 6)):
        i = ["f0", "f1", "f2", "f3"].index(column)
        want = [r for r in java if r[i] == value]
        got = tbl.to_arrow(filter=f"{column} = {value}")
        assert compare(got, want) == "", (column, value)
    projected = tbl.to_arrow(columns=["f0", "f3"])
    assert compare(projected, [[r[0], r[3]] for r in java]) == ""
    assert tbl.count() == len(java)


def test_data_evolution_changes_and_streams_are_refused_by_name() -> None:
    """Changes and streams read a snapshot's new files on their own; a data-evolution
    file holds only some columns of its rows, so they are refused, not half-read."""
    tbl = raylake.open_table(str(ROOT / "parquet_data_evolution_with_dense_stats"))
    for read in (
        lambda: tbl.changes(0, 2).to_arrow(),
        lambda: tbl.changelog(2),
        lambda: tbl.stream(start="earliest"),
    ):
        with pytest.raises(UnsupportedPaimonError, match="data-evolution table"):
            read()


def test_data_evolution_rows_reach_the_torch_loader_whole() -> None:
    pytest.importorskip("torch")
    from raylake.train.torch_iterable import LakeIterableDataset

    name = "orc_data_evolution_with_index"
    java = CASES[name]["expected"][0]["rows"]
    ds = LakeIterableDataset(
        str(ROOT / name), columns=["f1", "f2"], batch_size=4, shuffle=True, fill_null=-1
    )
    got = sorted(pair for b in ds for pair in zip(b["f1"].tolist(), b["f2"].tolist()))
    assert got == sorted((-1 if r[1] is None else r[1], r[2]) for r in java)


@pytest.mark.parametrize("fmt", ["orc", "parquet"])
def test_a_branch_directory_is_refused_by_name(fmt: str) -> None:
    """A branch shares its table's manifests and data files: on its own it names files
    its directory does not hold, so opening it is refused, not a missing-file error."""
    branch = ROOT / f"{fmt}_append_table_with_rt_branch" / "branch" / "branch-rt"
    with pytest.raises(UnsupportedPaimonError, match="branch 'rt' of a table"):
        raylake.open_table(str(branch)).to_arrow()


@pytest.mark.parametrize("column", ["ts_nano", "ts_tz_nano"])
def test_nanosecond_statistics_keep_their_nanoseconds(column: str) -> None:
    """An ORC file's statistics of a TIMESTAMP(9) column end in nanoseconds (max
    00:00:00.000000003): read as a datetime they lost them, and a filter above the
    truncated max pruned the file with the rows it matches."""
    tbl = raylake.open_table(str(ROOT / "orc_append_with_multiple_ts_precision_and_timezone"))
    nanos = [v for v in tbl.to_arrow().column(column).cast(pa.int64()).to_pylist() if v]
    assert len(nanos) == 2 and max(nanos) < 1000  # below a microsecond: only nanoseconds
    for text, low in (("> '1970-01-01 00:00:00'", 1), (">= '1970-01-01 00:00:00.000000002'", 2)):
        want = sum(1 for v in nanos if v >= low)
        assert tbl.to_arrow(filter=f"{column} {text}").num_rows == want > 0, text
        assert tbl.count(filter=f"{column} {text}") == want


def test_a_filter_moves_with_its_scan_to_an_older_schema() -> None:
    """``scan(filter=...).at(n)`` switches to snapshot n's schema but kept the filter as
    bound under the latest: Arrow failed in the read ('No match for FieldRef.Name(e)',
    or no kernel for timestamp[s] against int16) where a named error is due, as the same
    filter given with ``snapshot_id=`` raises."""
    from raylake.errors import FilterError, UnknownColumnError

    altered = raylake.open_table(str(ROOT / "orc_append_table_with_alter_table"))
    with pytest.raises(UnknownColumnError, match="unknown column 'e'"):
        altered.scan(filter="e > 0").at(1)
    cast = raylake.open_table(str(ROOT / "orc_append_with_cast_timestamp"))
    with pytest.raises(FilterError, match="column 'ts_sec' of type timestamp"):
        cast.scan(filter="ts_sec = -28799").at(1)
    with pytest.raises(FilterError, match="column 'ts_sec' of type timestamp"):
        cast.to_arrow(snapshot_id=1, filter="ts_sec = -28799")
    kept = altered.scan(filter="a > 0").at(1).to_arrow()
    assert kept == altered.to_arrow(snapshot_id=1, filter="a > 0")
