"""The merge-on-read kernel (raylake/table/pk/kernel.py) against a model of versions.

Random sections of files (each file's keys once, in key order, as both formats' writers
store them) whose rows are versions of kinds +I, +U, -D and -U: the winners of each way
to decide (newest file first, by sort) are the model's. A -D is the newest version of
its key and removes it; a -U (Paimon's ignored retracts) is no version at all.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from property_depth import examples

from raylake.format.schema import TableSchema
from raylake.table.pk import kernel
from raylake.table.pk.schema import (
    DELETE,
    INSERT,
    KIND,
    SEQ,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    MergeSpec,
)
from raylake.table.split import FileSlice

TS = TableSchema(pa.schema([("id", pa.int64())]), primary_key=("id",))

_file = st.dictionaries(
    st.integers(0, 12), st.sampled_from([INSERT, UPDATE_AFTER, DELETE, UPDATE_BEFORE]), max_size=8
)


def _section(
    files: list[dict[int, int]], order: list[int]
) -> tuple[list[FileSlice], list[pa.Table]]:
    """Files whose sequence ranges follow ``order`` (a file's rank: its ranges' place)."""
    slices, tables = [], []
    for i, rows in enumerate(files):
        keys = sorted(rows)
        base = 100 * order[i]
        slices.append(
            FileSlice(
                path=f"f{i}",
                row_groups=None,
                row_count=len(keys),
                size_bytes=0,
                file_size=0,
                min_sequence=base,
                max_sequence=base + 99,
                delete_row_count=1,
            )
        )
        tables.append(
            pa.table(
                {
                    "id": pa.array(keys, pa.int64()),
                    SEQ: pa.array([base + j for j in range(len(keys))], pa.int64()),
                    KIND: pa.array([rows[k] for k in keys], pa.int8()),
                }
            )
        )
    return slices, tables


def _model(tables: list[pa.Table], engine: str) -> list[list[bool]]:
    """Each key's versions in sequence order (no -U); deduplicate: the last wins unless a
    -D; first-row: the first after the last -D."""
    versions: dict[int, list[tuple[int, int, int, int]]] = {}
    for i, t in enumerate(tables):
        for j, (k, s, kind) in enumerate(
            zip(*(t.column(c).to_pylist() for c in ("id", SEQ, KIND)))
        ):
            if kind != UPDATE_BEFORE:
                versions.setdefault(k, []).append((s, kind, i, j))
    masks = [[False] * t.num_rows for t in tables]
    for found in versions.values():
        found.sort()
        if engine == "deduplicate":
            _, kind, i, j = found[-1]
            if kind != DELETE:
                masks[i][j] = True
            continue
        last_delete = max((n for n, v in enumerate(found) if v[1] == DELETE), default=-1)
        after = found[last_delete + 1 :]
        if after:
            masks[after[0][2]][after[0][3]] = True
    return masks


def _decide(spec: MergeSpec, slices: list[FileSlice], tables: list[pa.Table]) -> Any:
    def versions(columns: Any) -> list[tuple[pa.Table, int]]:
        return [(t.select(list(columns)), 0) for t in tables]

    return kernel.decide(None, spec, slices, TS, versions)


@settings(max_examples=examples(150), deadline=None)
@given(files=st.lists(_file, min_size=1, max_size=4), data=st.data())
def test_both_ways_to_decide_give_the_models_winners(
    files: list[dict[int, int]], data: Any
) -> None:
    order = data.draw(st.permutations(range(len(files))))
    slices, tables = _section(files, order)
    want = _model(tables, "deduplicate")
    newest = _decide(MergeSpec(key=("id",)), slices, tables)
    assert newest.newest_first
    assert [newest.mask(i).tolist() for i in range(len(files))] == want
    # The same files decided by sort (the way of every section newest first cannot take).
    by_sort = kernel._decide_by_sort(MergeSpec(key=("id",)), [(t, 0) for t in tables])
    assert not by_sort.newest_first
    assert [by_sort.mask(i).tolist() for i in range(len(files))] == want
    first = _decide(MergeSpec(key=("id",), engine="first-row"), slices, tables)
    assert [first.mask(i).tolist() for i in range(len(files))] == _model(tables, "first-row")
    assert sum(first.winners) == sum(sum(m) for m in _model(tables, "first-row"))


def test_a_file_holding_a_key_twice_is_decided_by_sort() -> None:
    slices, tables = _section([{1: INSERT, 2: INSERT}, {2: UPDATE_AFTER}], [0, 1])
    twice = pa.table(
        {
            "id": pa.array([2, 2], pa.int64()),
            SEQ: pa.array([5, 6], pa.int64()),
            KIND: pa.array([0, 2], pa.int8()),
        }
    )
    decision = _decide(MergeSpec(key=("id",)), slices, [tables[0], twice])
    assert not decision.newest_first
    assert [decision.mask(i).tolist() for i in range(2)] == [[True, False], [False, True]]
    assert np.array_equal(decision.positions(1), [1])


@settings(max_examples=examples(200), deadline=None)
@given(
    keep=st.lists(st.booleans(), max_size=70),
    offset=st.integers(0, 20),
    bounds=st.tuples(st.integers(0, 100), st.integers(0, 100)),
)
def test_selection_is_the_mask_over_any_rows_of_the_file(
    keep: list[bool], offset: int, bounds: tuple[int, int]
) -> None:
    """A filter's mask over file rows [start, stop): the decision's own bits where it
    read them all (no copy), False for rows it did not read; the same as the unpacked
    mask, and the same bits a filter sees."""
    start, stop = min(bounds), max(bounds)
    packed = np.packbits(np.array(keep, dtype=bool), bitorder="little")
    decision = kernel.Decision((0,), (offset,), (packed,), (len(keep),), (sum(keep),))
    assert decision.mask(0).tolist() == keep
    expected = [offset <= r < offset + len(keep) and keep[r - offset] for r in range(start, stop)]
    got = decision.selection(0, start, stop)
    assert got.to_pylist() == expected and got.true_count == sum(expected)
    rows = pa.table({"r": list(range(start, stop))})
    assert rows.filter(got).column("r").to_pylist() == [
        r for r, won in zip(range(start, stop), expected) if won
    ]
    assert decision.selection(0).to_pylist() == keep
