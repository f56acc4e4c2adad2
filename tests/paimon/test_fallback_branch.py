"""``scan.fallback-branch``: the partitions the main branch lacks come from the fallback
branch, read under that branch's own schema and kind (tables Java wrote: an append
table behind which stands a primary-key branch 'rt', and one behind an append branch)."""

from __future__ import annotations

import pytest
from java_corpus import ROOT

import raylake
from raylake.paimon import UnsupportedPaimonError


@pytest.mark.parametrize("fmt", ["orc", "parquet"])
def test_each_partition_comes_from_one_branch(fmt: str) -> None:
    tbl = raylake.open_table(str(ROOT / f"{fmt}_append_table_with_rt_branch"))
    rows = sorted(tuple(r.values()) for r in tbl.to_arrow().to_pylist())
    # dt=20240725 is the main branch's (apple 5, banana 7); the rt branch's newer
    # versions of that partition (apple 4, peach 10) are not read.
    assert rows == [
        ("20240725", "apple", 5),
        ("20240725", "banana", 7),
        ("20240726", "cherry", 3),
        ("20240726", "pear", 6),
    ]
    assert tbl.count() == 4
    # The rt branch's files are merged as a primary-key bucket, and counted so.
    assert tbl.count(filter="amount > 4") == tbl.to_arrow(filter="amount > 4").num_rows == 3
    assert tbl.to_arrow(columns=["dt"]).column("dt").to_pylist().count("20240726") == 2


@pytest.mark.parametrize("fmt", ["orc", "parquet"])
def test_a_partition_filter_keeps_the_rule(fmt: str) -> None:
    """A partition the main branch holds is never read from the fallback branch, even
    where the filter leaves the main branch nothing else."""
    tbl = raylake.open_table(str(ROOT / f"{fmt}_append_table_with_rt_branch"))
    main_only = tbl.to_arrow(filter="dt = '20240725'").column("name").to_pylist()
    assert sorted(main_only) == ["apple", "banana"]
    fallback_only = tbl.to_arrow(filter="dt = '20240726'").column("name").to_pylist()
    assert sorted(fallback_only) == ["cherry", "pear"]
    plan = tbl.scan(filter="dt = '20240726'").plan()
    assert all(f.branch == "rt" for s in plan for f in s.files)


def test_columns_added_on_both_branches_read_from_each(tmp_path: object) -> None:
    tbl = raylake.open_table(str(ROOT / "parquet_append_table_with_append_pt_branch"))
    got = sorted(tuple(r.values()) for r in tbl.to_arrow().to_pylist())
    assert got == [(1, 110, None), (1, 120, 1200), (2, 210, None), (2, 220, 2200)]


def test_a_branch_that_does_not_exist_is_refused_by_name(paimon_copy: object) -> None:
    import json

    table = paimon_copy("append_unaware")  # type: ignore[operator]
    schema = json.loads((table / "schema" / "schema-0").read_text())
    schema.update(id=1, options={**schema["options"], "scan.fallback-branch": "rt"})
    (table / "schema" / "schema-1").write_text(json.dumps(schema))
    with pytest.raises(UnsupportedPaimonError, match="names no branch"):
        raylake.open_table(str(table))


def test_a_snapshot_of_an_older_schema_is_refused_by_name() -> None:
    """Snapshot 1 was written before the fallback branch was set (schema 0): Paimon
    reads it beside the branch, under schema 0; raylake refuses rather than reading
    the main branch alone."""
    tbl = raylake.open_table(str(ROOT / "parquet_append_table_with_append_pt_branch"))
    with pytest.raises(UnsupportedPaimonError, match=r"scan\.fallback-branch"):
        tbl.to_arrow(snapshot_id=1)
    assert tbl.to_arrow(snapshot_id=2).num_rows == 4


def test_cli_snapshots_lists_a_refused_snapshot(capsys: pytest.CaptureFixture[str]) -> None:
    """Counting snapshot 1's live rows raised the refusal above and the whole command
    failed (exit 2) after its header: the list of snapshots was lost."""
    from raylake.cli import main

    assert main(["snapshots", str(ROOT / "parquet_append_table_with_append_pt_branch")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[0] == "1" and lines[1].split()[-1] == "refused"
    assert lines[2].split()[0] == "2" and lines[2].split()[-1] == "4"
    assert lines[3].startswith("snapshot 1: raylake cannot read the Paimon table")
