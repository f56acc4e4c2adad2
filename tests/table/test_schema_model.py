"""Model-based test of schema evolution on append and primary-key tables (issue 18).

A hypothesis state machine drives one table and a model through random writes (upserts
on the primary-key table), schema changes (add, rename, widen, drop, re-add a dropped
name) and compactions. The model keeps rows by field id, so a rename moves nothing
and a re-added name is a new column. After every step each snapshot is read (time
travel, under its own schema) and must equal the model's state at that snapshot;
the latest state is also read through filters on evolved columns, and ``changes()`` from
the empty table and from the previous snapshot to the latest (under the current schema,
row kinds exact) must equal the model's difference of the two states. The primary-key
table also deletes keys.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
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

NAMES = ("a", "b", "c", "d", "e")
Row = dict[int, Any]  # field id -> value
# The model's schema: (field id, name, is_wide) in column order; column 0 is the key.
Fields = list[tuple[int, str, bool]]
_dirs = itertools.count()


def view(fields: Fields, row: Row) -> dict[str, Any]:
    return {name: row.get(fid) for fid, name, _ in fields}


def multiset(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(tuple((v is None, v or 0) for v in r.values()) for r in rows)


def in_order(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in rows]


class SchemaMachine(RuleBasedStateMachine):
    primary_key = False

    def __init__(self, root: Path) -> None:
        super().__init__()
        schema = pa.schema([pa.field("k", pa.int32(), nullable=False), ("a", pa.int32())])
        options = {"compaction.auto": "false"} if self.primary_key else {}
        self.tbl = raylake.create_table(
            str(root / f"t{next(_dirs)}"),
            schema,
            primary_key=["k"] if self.primary_key else [],
            buckets=2 if self.primary_key else None,
            options=options,
        )
        self.fields: Fields = [(0, "k", False), (1, "a", False)]
        self.next_id = 2
        self.rows: dict[int, Row] | list[Row] = {} if self.primary_key else []
        # snapshot id -> (the schema it reads with, its rows)
        self.snapshots: dict[int, tuple[Fields, list[Row]]] = {}

    # -- model ---------------------------------------------------------------------

    def current_rows(self) -> list[Row]:
        return list(self.rows.values()) if isinstance(self.rows, dict) else list(self.rows)

    def record(self, snapshot_id: int | None) -> None:
        assert snapshot_id is not None and snapshot_id not in self.snapshots
        self.snapshots[snapshot_id] = (list(self.fields), self.current_rows())

    def value_columns(self) -> list[tuple[int, str, bool]]:
        return self.fields[1:]

    def same_rows(self, actual: list[dict[str, Any]], expected: list[dict[str, Any]]) -> bool:
        """An append table reads in write order (across schema versions too); a
        primary-key table bucket by bucket."""
        if self.primary_key:
            return multiset(actual) == multiset(expected)
        return in_order(actual) == in_order(expected)

    # -- rules ---------------------------------------------------------------------

    @rule(
        data=st.data(),
        n=st.integers(1, 6),
        merge=st.booleans(),
    )
    def write(self, data: st.DataObject, n: int, merge: bool) -> None:
        keys = data.draw(st.lists(st.integers(0, 7), min_size=n, max_size=n))
        values = st.one_of(st.none(), st.integers(-100, 100))
        written: list[Row] = []
        for key in keys:
            row: Row = {0: key}
            for fid, _, _ in self.value_columns():
                row[fid] = data.draw(values)
            written.append(row)
        columns = {
            name: pa.array([r.get(fid) for r in written], pa.int64() if wide else pa.int32())
            for fid, name, wide in self.fields
        }
        extra = merge and len(self.fields) < 4 and self.free_name() is not None
        if extra:  # a column the table lacks: schema_mode="merge" adds it first
            name = self.free_name()
            assert name is not None
            new = [data.draw(values) for _ in written]
            columns[name] = pa.array(new, pa.int64())
            self.fields.append((self.next_id, name, True))
            for r, v in zip(written, new):
                r[self.next_id] = v
            self.next_id += 1
        snap = self.tbl.write(pa.table(columns), schema_mode="merge" if extra else "strict")
        if isinstance(self.rows, dict):
            for r in written:
                self.rows[r[0]] = r
        else:
            self.rows.extend(written)
        assert snap is not None
        self.record(snap.id)

    def free_name(self) -> str | None:
        used = {name for _, name, _ in self.fields}
        free = [n for n in NAMES if n not in used]
        return free[0] if free else None

    @precondition(lambda self: len(self.fields) < 5)
    @rule(data=st.data())
    def add_column(self, data: st.DataObject) -> None:
        used = {name for _, name, _ in self.fields}
        name = data.draw(st.sampled_from([n for n in NAMES if n not in used]))
        position = data.draw(st.integers(1, len(self.fields)))
        with self.tbl.update_schema() as u:
            u.add_column(name, pa.int32(), after=self.fields[position - 1][1])
        self.fields.insert(position, (self.next_id, name, False))
        self.next_id += 1

    @precondition(lambda self: len(self.fields) > 1 and len(self.fields) < 6)
    @rule(data=st.data())
    def rename_column(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(1, len(self.fields) - 1))
        used = {name for _, name, _ in self.fields}
        new = data.draw(st.sampled_from([n for n in NAMES if n not in used]))
        fid, old, wide = self.fields[i]
        with self.tbl.update_schema() as u:
            u.rename_column(old, new)
        self.fields[i] = (fid, new, wide)

    @precondition(lambda self: any(not wide for _, _, wide in self.fields[1:]))
    @rule(data=st.data())
    def widen_column(self, data: st.DataObject) -> None:
        narrow = [i for i, (_, _, wide) in enumerate(self.fields) if i and not wide]
        i = data.draw(st.sampled_from(narrow))
        fid, name, _ = self.fields[i]
        with self.tbl.update_schema() as u:
            u.update_column(name, pa.int64())
        self.fields[i] = (fid, name, True)

    @precondition(lambda self: len(self.fields) > 2)
    @rule(data=st.data())
    def delete_column(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(1, len(self.fields) - 1))
        with self.tbl.update_schema() as u:
            u.delete_column(self.fields[i][1])
        del self.fields[i]

    @precondition(lambda self: self.primary_key and self.snapshots)
    @rule(full=st.booleans())
    def compact(self, full: bool) -> None:
        snap = self.tbl.compact(full=full)
        if snap is not None:
            self.record(snap.id)

    @precondition(lambda self: self.primary_key and self.snapshots)
    @rule(keys=st.lists(st.integers(0, 7), min_size=1, max_size=3))
    def delete(self, keys: list[int]) -> None:
        assert isinstance(self.rows, dict)
        present = [k for k in dict.fromkeys(keys) if k in self.rows]  # (a key given twice)
        snap = self.tbl.delete(pa.table({"k": pa.array(keys, pa.int32())}))
        for k in present:
            del self.rows[k]
        if present:  # deleting only absent keys commits nothing
            assert snap is not None
            self.record(snap.id)

    def expected_changes(self, start: list[Row], end: list[Row]) -> list[dict[str, Any]]:
        """The model's changes from ``start`` to ``end`` in the current schema."""
        if not self.primary_key:  # appends only: the rows written after start
            return [{**view(self.fields, r), "_rl_kind": "+I"} for r in end[len(start) :]]
        before = {r[0]: view(self.fields, r) for r in start}
        after = {r[0]: view(self.fields, r) for r in end}
        rows: list[dict[str, Any]] = []
        for key in before.keys() | after.keys():
            if key not in before:
                rows.append({**after[key], "_rl_kind": "+I"})
            elif key not in after:
                rows.append({**before[key], "_rl_kind": "-D"})
            elif before[key] != after[key]:
                rows.append({**before[key], "_rl_kind": "-U"})
                rows.append({**after[key], "_rl_kind": "+U"})
        return rows

    # -- checks --------------------------------------------------------------------

    @invariant()
    def every_snapshot_reads_as_the_model(self) -> None:
        for snapshot_id, (fields, rows) in self.snapshots.items():
            actual = self.tbl.to_arrow(snapshot_id=snapshot_id)
            assert actual.schema.names == [name for _, name, _ in fields]
            expected = [view(fields, r) for r in rows]
            assert self.same_rows(actual.to_pylist(), expected), snapshot_id

    @invariant()
    def latest_reads_under_the_current_schema(self) -> None:
        actual = self.tbl.to_arrow()
        assert actual.schema.names == [name for _, name, _ in self.fields]
        expected = [view(self.fields, r) for r in self.current_rows()]
        assert self.same_rows(actual.to_pylist(), expected)
        for fid, name, _ in self.value_columns():
            nulls = [r for r in self.current_rows() if r.get(fid) is None]
            assert self.tbl.count(filter=f"{name} is null") == len(nulls), name
            above = [r for r in self.current_rows() if (r.get(fid) or -1000) > 10]
            got = self.tbl.to_arrow(filter=f"{name} > 10", columns=["k"]).num_rows
            assert got == len(above), name

    @invariant()
    def changes_to_the_latest_are_the_models_difference(self) -> None:
        ids = sorted(self.snapshots)
        for start in {0, *ids[-2:-1]} if ids else ():
            before = self.snapshots[start][1] if start else []
            expected = self.expected_changes(before, self.snapshots[ids[-1]][1])
            actual = self.tbl.changes(start, ids[-1], include_row_kind=True).to_arrow()
            assert actual.schema.names == [*(n for _, n, _ in self.fields), "_rl_kind"]
            assert self.same_rows(actual.to_pylist(), expected), start


class PrimaryKeySchemaMachine(SchemaMachine):
    primary_key = True


def run(machine: type[SchemaMachine], root: Path) -> None:
    run_state_machine_as_test(
        lambda: machine(root),
        settings=settings(
            max_examples=examples(12),
            stateful_step_count=10,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def test_append_table_evolves_as_the_model(tmp_path: Path) -> None:
    run(SchemaMachine, tmp_path)


def test_primary_key_table_evolves_as_the_model(tmp_path: Path) -> None:
    run(PrimaryKeySchemaMachine, tmp_path)
