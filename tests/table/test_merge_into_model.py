"""A model of MERGE: a list of rows and the SQL rules, in plain Python, against both
table kinds.

A hypothesis state machine writes random rows and merges random sources (keys that
match, that do not, duplicates) with random clause lists drawn from a menu whose
every entry has a Python twin. After every step the table must equal the model, and
every snapshot so far must still read as the model did then (time travel). A merge
the model says matches a target row twice must raise MergeCardinalityError and
commit nothing. The partitioned variants join on a composite key whose second column
partitions the table.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from property_depth import examples

import raylake
from raylake.errors import MergeCardinalityError

Row = dict[str, Any]
SCHEMA = pa.schema([("k", pa.int64()), ("a", pa.int64()), ("b", pa.string()), ("p", pa.string())])
SOURCE = SCHEMA


def _gt(x: Any, y: Any) -> bool:
    return x is not None and y is not None and x > y


def _add(x: Any, y: Any) -> Any:
    return None if x is None or y is None else x + y


# Each entry: (the merge's text, its Python twin). Twins take (t, s) rows.
PREDICATES: dict[str, list[tuple[str | None, Callable[[Row, Row], bool]]]] = {
    "matched": [
        (None, lambda t, s: True),
        ("s.a > t.a", lambda t, s: _gt(s["a"], t["a"])),
        ("s.b is null", lambda t, s: s["b"] is None),
        ("t.a < 3 or s.b = 'x'", lambda t, s: _gt(3, t["a"]) or s["b"] == "x"),
    ],
    "not_matched": [
        (None, lambda t, s: True),
        ("s.a > 0", lambda t, s: _gt(s["a"], 0)),
        ("s.b in ('x', 'y')", lambda t, s: s["b"] in ("x", "y")),
    ],
    "by_source": [
        (None, lambda t, s: True),
        ("t.a > 2", lambda t, s: _gt(t["a"], 2)),
        ("t.b = 'x' and t.k < 5", lambda t, s: t["b"] == "x" and _gt(5, t["k"])),
    ],
}
UPDATES: list[tuple[dict[str, str], Callable[[Row, Row], Row]]] = [
    ({"a": "s.a"}, lambda t, s: {**t, "a": s["a"]}),
    ({"a": "t.a + s.a", "b": "coalesce(s.b, t.b)"},
     lambda t, s: {**t, "a": _add(t["a"], s["a"]), "b": s["b"] if s["b"] is not None else t["b"]}),
    ({"b": "'u'", "a": "s.a * 2 - 1"},
     lambda t, s: {**t, "b": "u", "a": None if s["a"] is None else s["a"] * 2 - 1}),
]  # fmt: skip
SOURCE_UPDATES: list[tuple[dict[str, str], Callable[[Row, Row], Row]]] = [
    ({"a": "t.a - 1"}, lambda t, s: {**t, "a": _add(t["a"], -1)}),
    ({"b": "null"}, lambda t, s: {**t, "b": None}),
]
INSERTS: list[tuple[dict[str, str] | None, Callable[[Row], Row]]] = [
    (None, lambda s: dict(s)),
    ({"k": "s.k", "a": "coalesce(s.a, 0) + 10", "p": "s.p"},
     lambda s: {"k": s["k"], "a": (s["a"] or 0) + 10, "b": None, "p": s["p"]}),
]  # fmt: skip

keys = st.integers(0, 9)
values = st.one_of(st.none(), st.integers(-3, 6))
texts = st.sampled_from([None, "x", "y", "z"])
parts = st.sampled_from(["x", "y"])
rows_st = st.lists(
    st.fixed_dictionaries({"k": keys, "a": values, "b": texts, "p": parts}), max_size=8
)
clause_st = st.one_of(
    st.tuples(st.just("matched"), st.sampled_from(["update", "delete"]), st.integers(0, 3),
              st.integers(0, len(UPDATES) - 1)),
    st.tuples(st.just("not_matched"), st.just("insert"), st.integers(0, 2),
              st.integers(0, len(INSERTS) - 1)),
    st.tuples(st.just("by_source"), st.sampled_from(["update", "delete"]), st.integers(0, 2),
              st.integers(0, len(SOURCE_UPDATES) - 1)),
)  # fmt: skip


def key_of(row: Row, on: tuple[str, ...]) -> tuple | None:
    """The row's join key; None where a column of it is null (it matches nothing)."""
    key = tuple(row[c] for c in on)
    return None if None in key else key


def model_merge(
    target: list[Row], source: list[Row], clauses: list[tuple], on: tuple[str, ...] = ("k",)
) -> list[Row] | None:
    """The SQL rules; None where a target row matches more than one source row."""
    matched = [c for c in clauses if c[0] == "matched"]
    hits = [
        [s for s in source if key_of(s, on) is not None and key_of(s, on) == key_of(t, on)]
        for t in target
    ]
    if matched and any(len(h) > 1 for h in hits):
        return None
    out: list[Row] = []
    for t, h in zip(target, hits):
        group, s = ("matched", h[0]) if h else ("by_source", {})
        row: Row | None = t
        for g, action, p, v in clauses:
            if g != group or not PREDICATES[g][p][1](t, s):
                continue
            if action == "delete":
                row = None
            else:
                row = (UPDATES if g == "matched" else SOURCE_UPDATES)[v][1](t, s)
            break
        if row is not None:
            out.append(row)
    target_keys = {key_of(t, on) for t in target} - {None}
    for s in source:
        if key_of(s, on) in target_keys:  # a null key matches nothing
            continue
        for g, _, p, v in clauses:
            if g == "not_matched" and PREDICATES[g][p][1]({}, s):
                out.append(INSERTS[v][1](s))
                break
    return out


def canonical(rows: list[Row]) -> list[tuple]:
    return sorted(((r["k"], r["a"], r["b"], r["p"]) for r in rows), key=repr)


class MergeMachine(RuleBasedStateMachine):
    primary_key = False
    # The join key; a second column is also the table's partition column.
    on: tuple[str, ...] = ("k",)
    # The partition columns where not the join key's second column (None).
    partition_by: tuple[str, ...] | None = None

    @property
    def layout(self) -> tuple[list[str], tuple[str, ...]]:
        """The partition columns, and the primary key (the join key and those)."""
        parts = list(self.on[1:] if self.partition_by is None else self.partition_by)
        return parts, (*self.on, *[c for c in parts if c not in self.on])

    def __init__(self) -> None:
        super().__init__()
        self.model: list[Row] = []
        self.history: dict[int, list[tuple]] = {}

    @initialize(buckets=st.integers(1, 3), file_rows=st.sampled_from([2, 1000]))
    def create(self, buckets: int, file_rows: int) -> None:
        uri = f"memory://merge-model-{uuid.uuid4().hex}/t"
        partition_by, primary_key = self.layout
        if self.primary_key:
            schema = SCHEMA
            for name in primary_key:
                index = schema.get_field_index(name)
                schema = schema.set(index, schema.field(name).with_nullable(False))
            self.tbl = raylake.create_table(
                uri, schema, primary_key=list(primary_key), partition_by=partition_by,
                buckets=buckets,
            )  # fmt: skip
        else:  # small row groups and files: merges touch some files, not all
            self.tbl = raylake.create_table(
                uri, SCHEMA, partition_by=partition_by,
                options={"write.row-group-rows": str(file_rows)},
            )  # fmt: skip

    def snapshot_taken(self) -> None:
        snap = self.tbl.latest_snapshot()
        if snap is not None:
            self.history[snap.id] = canonical(self.model)

    @rule(rows=rows_st)
    def write(self, rows: list[Row]) -> None:
        if not rows:
            return
        self.tbl.write(pa.Table.from_pylist(rows, schema=SCHEMA))
        if self.primary_key:
            primary_key = self.layout[1]
            by_key = {key_of(r, primary_key): r for r in self.model}
            by_key.update({key_of(r, primary_key): r for r in rows})
            self.model = list(by_key.values())
        else:
            self.model += rows
        self.snapshot_taken()

    @rule(
        source=st.lists(
            st.fixed_dictionaries(
                {"k": st.one_of(keys, keys, st.none()), "a": values, "b": texts, "p": parts}
            ),
            max_size=8,
        ),
        clauses=st.lists(clause_st, min_size=1, max_size=5),
    )
    def merge(self, source: list[Row], clauses: list[tuple]) -> None:
        if self.primary_key:  # an inserted key must be new: one source row per key
            source = [r for r in source if key_of(r, self.on) is not None]
            source = list({key_of(r, self.on): r for r in source}.values())
        expected = model_merge(self.model, source, clauses, self.on)
        merger = self.tbl.merge(pa.Table.from_pylist(source, schema=SOURCE), on=list(self.on))
        for g, action, p, v in clauses:
            predicate = PREDICATES[g][p][0]
            if g == "matched" and action == "update":
                merger.when_matched_update(UPDATES[v][0], predicate=predicate)
            elif g == "matched":
                merger.when_matched_delete(predicate=predicate)
            elif g == "not_matched":
                merger.when_not_matched_insert(INSERTS[v][0], predicate=predicate)
            elif action == "update":
                merger.when_not_matched_by_source_update(SOURCE_UPDATES[v][0], predicate=predicate)
            else:
                merger.when_not_matched_by_source_delete(predicate=predicate)
        before = self.tbl.latest_snapshot()
        if expected is None:
            with pytest.raises(MergeCardinalityError):
                merger.execute()
            assert self.tbl.latest_snapshot() == before
            return
        result = merger.execute()
        self.model = expected
        if result.snapshot_id != (before.id if before else None):
            self.snapshot_taken()

    @invariant()
    def reads_equal_the_model(self) -> None:
        if not hasattr(self, "tbl"):
            return
        assert canonical(self.tbl.to_arrow().to_pylist()) == canonical(self.model)
        for snapshot_id, rows in self.history.items():
            assert canonical(self.tbl.to_arrow(snapshot_id=snapshot_id).to_pylist()) == rows


class PrimaryKeyMergeMachine(MergeMachine):
    primary_key = True


class PartitionedMergeMachine(MergeMachine):
    """A composite key whose second column partitions the table."""

    on = ("k", "p")


class PartitionedPrimaryKeyMergeMachine(PrimaryKeyMergeMachine):
    on = ("k", "p")


class JoinedOffPartitionMergeMachine(MergeMachine):
    """Partitioned by p, joined on k alone: a source row matches target rows of any
    partition (none pruned by the source's p)."""

    partition_by = ("p",)


class JoinedOffPartitionPrimaryKeyMergeMachine(PrimaryKeyMergeMachine):
    """Primary key (k, p), partitioned by p, joined on k alone: not a key lookup, the
    table is read (pruned by the source's k range)."""

    partition_by = ("p",)


SETTINGS = settings(
    max_examples=examples(25),
    stateful_step_count=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_append_merge_matches_the_model() -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(MergeMachine, settings=SETTINGS)


def test_primary_key_merge_matches_the_model() -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(PrimaryKeyMergeMachine, settings=SETTINGS)


def test_partitioned_append_merge_matches_the_model() -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(PartitionedMergeMachine, settings=SETTINGS)


def test_partitioned_primary_key_merge_matches_the_model() -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(PartitionedPrimaryKeyMergeMachine, settings=SETTINGS)


def test_append_merge_joined_off_the_partition_matches_the_model() -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(JoinedOffPartitionMergeMachine, settings=SETTINGS)


def test_primary_key_merge_joined_off_the_key_matches_the_model() -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(JoinedOffPartitionPrimaryKeyMergeMachine, settings=SETTINGS)
