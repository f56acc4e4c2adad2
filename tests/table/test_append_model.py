"""Model-based test of append tables: random appends and overwrites against an in-memory model.

The model is a list of row lists, one per snapshot, each in the order its rows were
written. After every step the table is read back (all columns, random projections,
random filters) and compared with the model filtered by ``evaluate_python``, the slow,
obviously correct oracle of the expr module, row for row: a read gives the partitions
in order and each partition's rows in the order they were written (docs/format.md,
"Row order"). Time travel is checked against every earlier state.
"""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from property_depth import examples

import raylake
from raylake.expr import (
    And,
    Compare,
    Expr,
    In,
    IsNull,
    Not,
    NotIn,
    NotNull,
    Or,
    bind,
    col,
    evaluate_python,
)
from raylake.table import Snapshot

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("dt", pa.string()),
        ("n", pa.int32()),
        ("v", pa.float64()),
        ("s", pa.string()),
    ]
)
NAMES = SCHEMA.names
# Small domains so that equality filters and partition overwrites hit existing rows.
# Floats stay finite: NaN ordering differs between pyarrow and Python (see the report).
DOMAINS: dict[str, list[Any]] = {
    "dt": ["2024-01-01", "2024-01-02", "2024-01-03", None],
    "n": [-2, 0, 1, 3, 7, None],
    "v": [-1.5, 0.0, 0.25, 3.0, None],
    "s": ["", "a", "ab", "b", None],
}
# Tiny row groups, splits, and a low merge threshold exercise slicing and manifest merging.
OPTIONS = {
    "write.row-group-rows": 3,
    "read.split.target-size": 200,  # about two row groups of three rows
    "read.split.open-file-cost": 16,
    "manifest.merge-min-count": 4,
}

Row = dict[str, Any]


def in_read_order(rows: list[Row], columns: list[str]) -> list[tuple[Any, ...]]:
    """Rows as a read gives them: by partition (null last), each partition's in the
    order written (a stable sort keeps it)."""
    ordered = sorted(rows, key=lambda r: (r["dt"] is None, r["dt"] or ""))
    return [tuple(r[c] for c in columns) for r in ordered]


row_values = st.fixed_dictionaries({c: st.sampled_from(values) for c, values in DOMAINS.items()})


def predicates() -> st.SearchStrategy[Expr]:
    def compare(column: str) -> st.SearchStrategy[Expr]:
        literals = st.sampled_from([v for v in DOMAINS[column] if v is not None])
        ops = st.sampled_from(["=", "!=", "<", "<=", ">", ">="])
        return st.builds(lambda op, lit: Compare(op, column, lit), ops, literals)

    def membership(column: str) -> st.SearchStrategy[Expr]:
        values = st.lists(
            st.sampled_from([v for v in DOMAINS[column] if v is not None]), max_size=3
        ).map(tuple)
        return st.one_of(
            values.map(lambda vs: In(column, vs)), values.map(lambda vs: NotIn(column, vs))
        )

    id_compare = st.builds(
        lambda op, lit: Compare(op, "id", lit),
        st.sampled_from(["<", ">=", "="]),
        st.integers(0, 60),
    )
    columns = sorted(DOMAINS)
    leaves = st.one_of(
        id_compare,
        st.sampled_from(columns).flatmap(compare),
        st.sampled_from(columns).flatmap(membership),
        st.sampled_from(columns).map(IsNull),
        st.sampled_from(columns).map(NotNull),
    )
    # Single predicates half the time: nested in and/or, a wrong prune is often masked.
    return leaves | st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.builds(And, inner, inner), st.builds(Or, inner, inner), st.builds(Not, inner)
        ),
        max_leaves=5,
    )


class AppendTableMachine(RuleBasedStateMachine):
    """Drives one table and its model through random writes and reads."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.tbl = raylake.create_table(
            str(root / uuid.uuid4().hex), SCHEMA, partition_by=["dt"], options=OPTIONS
        )
        self.states: list[list[Row]] = [[]]  # states[i]: the rows of snapshot i
        self.deletes: set[int] = set()  # the snapshots a delete() committed
        self.ids = itertools.count()

    @property
    def current(self) -> list[Row]:
        return self.states[-1]

    def make_rows(self, values: list[Row]) -> list[Row]:
        return [{"id": next(self.ids), **v} for v in values]

    def write(self, rows: list[Row], **kwargs: Any) -> None:
        data = pa.Table.from_pylist(rows, schema=SCHEMA)
        snap = self.tbl.write(data, **kwargs)
        assert snap is not None and snap.id == len(self.states)

    def check_no_commit(self, snap: Snapshot | None) -> None:
        """Nothing to write: no snapshot, and the latest one (if any) comes back."""
        latest = self.tbl.latest_snapshot()
        assert snap == latest and len(self.tbl.snapshots()) == len(self.states) - 1

    @rule(values=st.lists(row_values, max_size=12))
    def append(self, values: list[Row]) -> None:
        rows = self.make_rows(values)
        if not rows:
            self.check_no_commit(self.tbl.write(pa.Table.from_pylist(rows, schema=SCHEMA)))
            return
        self.write(rows)
        self.states.append(self.current + rows)

    @rule(first=st.lists(row_values, max_size=5), second=st.lists(row_values, max_size=5))
    def append_from_two_writers(self, first: list[Row], second: list[Row]) -> None:
        """Two writers (as two Ray tasks would be), one commit."""
        batches = [self.make_rows(first), self.make_rows(second)]
        messages = []
        for rows in batches:
            writer = self.tbl.new_writer()
            writer.write(pa.Table.from_pylist(rows, schema=SCHEMA))
            messages += writer.prepare_commit()
        snap = self.tbl.commit(messages)
        if not batches[0] + batches[1]:
            self.check_no_commit(snap)
            return
        assert snap is not None and snap.id == len(self.states)
        self.states.append(self.current + batches[0] + batches[1])

    @rule(values=st.lists(row_values, max_size=6))
    def overwrite_all(self, values: list[Row]) -> None:
        rows = self.make_rows(values)
        self.write(rows, mode="overwrite")
        self.states.append(rows)

    @rule(
        partitions=st.lists(st.sampled_from(DOMAINS["dt"]), min_size=1, max_size=2, unique=True),
        values=st.lists(row_values, max_size=9),
    )
    def overwrite_partitions(self, partitions: list[str | None], values: list[Row]) -> None:
        # Every written row must lie inside the replaced partitions.
        rows = self.make_rows(
            [{**v, "dt": partitions[i % len(partitions)]} for i, v in enumerate(values)]
        )
        named = [p for p in partitions if p is not None]
        terms: list[Expr] = [col("dt").isin(named)] if named else []
        if None in partitions:
            terms.append(col("dt").is_null())
        condition = terms[0] if len(terms) == 1 else Or(terms[0], terms[1])
        self.write(rows, mode="overwrite", overwrite_filter=condition)
        kept = [r for r in self.current if r["dt"] not in partitions]
        self.states.append(kept + rows)

    @rule(values=st.lists(row_values, max_size=9))
    def overwrite_written_partitions(self, values: list[Row]) -> None:
        """A dynamic overwrite: the partitions the rows lie in (a null dt included) are
        replaced, the others kept; no rows replace nothing and commit nothing."""
        rows = self.make_rows(values)
        data = pa.Table.from_pylist(rows, schema=SCHEMA)
        snap = self.tbl.write(data, mode="overwrite", partition_overwrite_mode="dynamic")
        if not rows:
            self.check_no_commit(snap)
            return
        assert snap is not None and snap.id == len(self.states)
        written = {r["dt"] for r in rows}
        kept = [r for r in self.current if r["dt"] not in written]
        self.states.append(kept + rows)

    @rule(expr=predicates())
    def delete(self, expr: Expr) -> None:
        """Exactly the rows a scan with the filter returns go; the others keep their
        order. Nothing matching commits nothing."""
        bound = bind(expr, SCHEMA)
        kept = [r for r in self.current if evaluate_python(bound, r) is not True]
        snap = self.tbl.delete(expr)
        if len(kept) == len(self.current):
            self.check_no_commit(snap)
            return
        assert snap is not None and snap.commit_kind == "OVERWRITE"
        assert snap.id == len(self.states)
        self.deletes.add(snap.id)
        self.states.append(kept)

    @rule(
        columns=st.none() | st.lists(st.sampled_from(NAMES), min_size=1, unique=True),
        exprs=st.lists(st.none() | predicates(), min_size=1, max_size=4),
    )
    def read(self, columns: list[str] | None, exprs: list[Expr | None]) -> None:
        names = columns or NAMES
        for expr in exprs:
            expected_rows = self.current
            if expr is not None:
                bound = bind(expr, SCHEMA)
                expected_rows = [r for r in expected_rows if evaluate_python(bound, r)]
            actual = self.tbl.to_arrow(columns=columns, filter=expr)
            assert actual.column_names == names
            assert [tuple(r.values()) for r in actual.to_pylist()] == in_read_order(
                expected_rows, names
            )
            assert self.tbl.count(filter=expr) == len(expected_rows)

    @precondition(lambda self: len(self.states) > 1)
    @rule(data=st.data())
    def time_travel(self, data: st.DataObject) -> None:
        snapshot_id = data.draw(st.integers(1, len(self.states) - 1))
        actual = self.tbl.to_arrow(snapshot_id=snapshot_id).to_pylist()
        assert [tuple(r.values()) for r in actual] == in_read_order(self.states[snapshot_id], NAMES)
        snap = self.tbl.snapshot(snapshot_id)
        # as_of picks the newest snapshot at or before the time (several may share a millisecond).
        newest = max(s.id for s in self.tbl.snapshots() if s.time_millis <= snap.time_millis)
        by_time = self.tbl.to_arrow(as_of=snap.time_millis).to_pylist()
        assert [tuple(r.values()) for r in by_time] == in_read_order(self.states[newest], NAMES)

    @rule(full=st.booleans())
    def compact(self, full: bool) -> None:
        """Compaction changes no row, nor the order of any (a COMPACT snapshot, or None)."""
        snap = self.tbl.compact(full=full)
        if snap is None:  # nothing to compact: no snapshot
            assert len(self.tbl.snapshots()) == len(self.states) - 1
            return
        assert snap.commit_kind == "COMPACT" and snap.id == len(self.states)
        self.states.append(self.current)

    @precondition(lambda self: len(self.states) > 1)
    @rule(data=st.data())
    def changes(self, data: st.DataObject) -> None:
        """The net change after a snapshot (compactions in between change nothing):
        rows there now and not then (+I), rows there then and not now (-D)."""
        start = data.draw(st.integers(0, len(self.states) - 2))
        then = {r["id"]: r for r in self.states[start]}
        now = {r["id"]: r for r in self.current}
        rows = self.tbl.changes(start, include_row_kind=True).to_arrow().to_pylist()
        kinds = {(r["_rl_kind"], r["id"]) for r in rows}
        assert len(kinds) == len(rows)  # no row twice
        expected = {("+I", i) for i in now.keys() - then.keys()}
        expected |= {("-D", i) for i in then.keys() - now.keys()}
        if not any(start < d for d in self.deletes):
            assert kinds == expected
            return
        # A delete rewrote files: their kept rows may come out and in again, unchanged
        # (docs/decisions.md), and nothing else may.
        extra = kinds - expected
        assert expected <= kinds
        assert {i for _, i in extra} <= then.keys() & now.keys()
        assert extra == {(k, i) for _, i in extra for k in ("-D", "+I")}

    @precondition(lambda self: len(self.states) > 1)
    @rule()
    def split_union_equals_scan(self) -> None:
        splits = self.tbl.scan().plan()
        rows = [r for s in splits for b in self.tbl.read_split(s) for r in b.to_pylist()]
        assert [tuple(r.values()) for r in rows] == in_read_order(self.current, NAMES)

    @invariant()
    def snapshot_chain(self) -> None:
        snap = self.tbl.latest_snapshot()
        if snap is None:
            assert len(self.states) == 1
            return
        assert snap.id == len(self.states) - 1
        assert snap.parent_id == (snap.id - 1 or None)
        assert snap.total_record_count == len(self.current)
        assert len(snap.base_manifests) < OPTIONS["manifest.merge-min-count"]


def test_append_table_matches_model(tmp_path: Path) -> None:
    run_state_machine_as_test(
        lambda: AppendTableMachine(tmp_path),
        settings=settings(
            max_examples=examples(30),
            stateful_step_count=15,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


@pytest.mark.parametrize("storage", ["local", "memory"])
def test_model_sequence_on_each_filesystem(tmp_path: Path, storage: str) -> None:
    """A fixed sequence of the machine's operations, also on memory:// (fsspec, not native)."""
    uri = str(tmp_path / "t") if storage == "local" else f"memory://{uuid.uuid4().hex}/t"
    tbl = raylake.create_table(uri, SCHEMA, partition_by=["dt"], options=OPTIONS)
    rows = [
        {"id": i, "dt": DOMAINS["dt"][i % 4], "n": i, "v": float(i), "s": str(i)} for i in range(20)
    ]
    tbl.write(pa.Table.from_pylist(rows[:10], schema=SCHEMA))
    tbl.write(pa.Table.from_pylist(rows[10:], schema=SCHEMA))
    tbl.write(
        pa.Table.from_pylist(rows[:2], schema=SCHEMA).filter(pa.compute.field("dt").is_null()),
        mode="overwrite",
        overwrite_filter="dt is null",
    )
    expected = [r for r in rows if r["dt"] is not None]
    assert [tuple(r.values()) for r in tbl.to_arrow().to_pylist()] == in_read_order(expected, NAMES)
    assert tbl.count(filter="n >= 10 and dt = '2024-01-02'") == 2
    assert tbl.count(snapshot_id=2) == 20
