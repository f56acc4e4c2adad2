"""Model-based tests of primary-key tables, one per merge engine.

A hypothesis state machine drives one table (random buckets, partitioning,
file sizes, write buffers, auto-compaction thresholds and changelog producer)
and a dict-of-keys model through random upserts (with duplicate keys in one
write), changelog inputs with row kinds, deletes by key and by filter, and
compactions. Every read - random projections, random filters on key and value
columns, time travel to any earlier snapshot, split by split - must equal the
model; every changelog must equal what the model says the commit changed.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)
from property_depth import examples as property_examples

import raylake
from raylake.expr import And, Compare, Expr, In, IsNull, Not, NotNull, Or, bind, evaluate_python
from raylake.table.pk.bucket import bucket_ids

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("p", pa.string(), nullable=False),
        ("a", pa.int64()),
        ("b", pa.string()),
        ("c", pa.int64()),
        ("d", pa.int64()),
        ("e", pa.string()),
    ]
)
NAMES = SCHEMA.names
VALUES = ["a", "b", "c", "d", "e"]
DOMAINS: dict[str, list[Any]] = {
    "p": ["x", "y"],
    "a": [-3, 0, 1, 2, 5, None],
    "b": ["", "m", "n", None],
    "c": [-1, 0, 4, 9, None],
    "d": [-2, 3, 6, None],
    "e": ["u", "v", "w", None],
}
KEYS = list(range(12))
AGGREGATES = {"a": "sum", "b": "first-non-null", "c": "max", "d": "min", "e": "last"}
KINDS = ["+I", "+U", "-U", "-D"]

Row = dict[str, Any]
State = dict[tuple[Any, ...], Row]


def fold(engine: str, old: Row | None, new: Row) -> Row:
    """The model: what one upserted row does to a key's current row."""
    if old is None or engine == "deduplicate":
        return dict(new)
    if engine == "first-row":
        return old
    if engine == "partial-update":
        return {c: new[c] if new[c] is not None else old[c] for c in new}
    out = dict(new)
    for c in VALUES:
        out[c] = _aggregate(AGGREGATES.get(c, "last-non-null"), old[c], new[c])
    out["p"] = new["p"] if new["p"] is not None else old["p"]
    return out


def _aggregate(function: str, old: Any, new: Any) -> Any:
    if function == "last":
        return new
    if old is None:
        return new
    if new is None:
        return old
    if function == "sum":
        return old + new
    if function == "max":
        return max(old, new)
    if function == "min":
        return min(old, new)
    if function == "first-non-null":
        return old
    return new  # last-non-null


def sort_key(row: Row, columns: list[str]) -> tuple[Any, ...]:
    return tuple((row[c] is None, row[c] if row[c] is not None else 0) for c in columns)


def as_multiset(rows: list[Row], columns: list[str]) -> list[tuple[Any, ...]]:
    ordered = sorted(rows, key=lambda r: sort_key(r, columns))
    return [tuple(r[c] for c in columns) for r in ordered]


row_values = st.fixed_dictionaries(
    {"k": st.sampled_from(KEYS), **{c: st.sampled_from(v) for c, v in DOMAINS.items()}}
)


def predicates() -> st.SearchStrategy[Expr]:
    def compare(column: str) -> st.SearchStrategy[Expr]:
        literals = st.sampled_from([v for v in DOMAINS.get(column, KEYS) if v is not None])
        ops = st.sampled_from(["=", "!=", "<", "<=", ">", ">="])
        return st.builds(lambda op, lit: Compare(op, column, lit), ops, literals)

    key_in = st.lists(st.sampled_from(KEYS), max_size=4).map(lambda ks: In("k", tuple(ks)))
    leaves = st.one_of(
        st.sampled_from(["k", *DOMAINS]).flatmap(compare),
        key_in,
        st.sampled_from(VALUES).map(IsNull),
        st.sampled_from(VALUES).map(NotNull),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.builds(And, inner, inner), st.builds(Or, inner, inner), st.builds(Not, inner)
        ),
        max_leaves=4,
    )


class PrimaryKeyMachine(RuleBasedStateMachine):
    engine = "deduplicate"
    sequence_field: str | None = None

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        self.states: dict[int, State] = {0: {}}

    @initialize(
        partitioned=st.booleans(),
        buckets=st.integers(1, 3),
        producer=st.sampled_from(["none", "input", "lookup"]),
        overlap=st.integers(1, 4),
        tiny_files=st.booleans(),
        tiny_buffer=st.booleans(),
    )
    def create(
        self,
        partitioned: bool,
        buckets: int,
        producer: str,
        overlap: int,
        tiny_files: bool,
        tiny_buffer: bool,
    ) -> None:
        options: dict[str, Any] = {
            "merge-engine": self.engine,
            "changelog-producer": producer,
            "compaction.max-overlapping-files": overlap,
            "read.split.target-size": 256,
        }
        if self.engine == "aggregation":
            options.update({f"fields.{c}.aggregate-function": f for c, f in AGGREGATES.items()})
        if self.sequence_field:
            options["sequence.field"] = self.sequence_field
        if tiny_files:  # several row groups and files per flush
            options.update({"write.row-group-rows": 2, "write.target-file-size": 1})
        if tiny_buffer:  # several flushes per write
            options["write.buffer-size"] = 64
        self.key = ["p", "k"] if partitioned else ["k"]
        self.producer = producer
        self.tbl = raylake.create_table(
            str(self.root / uuid.uuid4().hex),
            SCHEMA,
            primary_key=self.key,
            partition_by=["p"] if partitioned else [],
            buckets=buckets,
            options=options,
        )

    @property
    def current(self) -> State:
        return self.states[max(self.states)]

    def key_of(self, row: Row) -> tuple[Any, ...]:
        return tuple(row[k] for k in self.key)

    def apply(self, state: State, row: Row, kind: str) -> None:
        key = self.key_of(row)
        if kind == "-D":
            state.pop(key, None)
        elif kind != "-U":
            state[key] = fold(self.engine, state.get(key), row)

    def deleted(self, key: tuple[Any, ...], before: Row) -> None:
        """``Table.delete`` wrote ``before`` back as a -D row."""

    def committed(self, state: State, written: list[tuple[str, Row]] | None = None) -> None:
        """Record the new snapshot(s) (an automatic compaction may follow the commit)."""
        before = self.current
        latest = self.tbl.latest_snapshot()
        first = max(self.states) + 1
        if latest is None or latest.id < first:  # nothing to write: nothing committed
            assert state == before
            return
        for snapshot_id in range(first, latest.id + 1):
            self.states[snapshot_id] = state
        self.check_changelog(first, before, state, written)

    def check_changelog(
        self, snapshot_id: int, before: State, after: State, written: list[tuple[str, Row]] | None
    ) -> None:
        if self.producer == "none":
            return
        rows = self.tbl.changelog(snapshot_id).to_pylist()
        actual = as_multiset(rows, [*NAMES, "_rl_kind"])
        if self.producer == "input":
            assert written is not None
            expected = [{**r, "_rl_kind": kind} for kind, r in written]
        else:
            expected = []
            for key in sorted(set(before) | set(after)):
                old, new = before.get(key), after.get(key)
                if old == new:
                    continue
                if old is not None:
                    expected.append({**old, "_rl_kind": "-U" if new is not None else "-D"})
                if new is not None:
                    expected.append({**new, "_rl_kind": "+U" if old is not None else "+I"})
        assert actual == as_multiset(expected, [*NAMES, "_rl_kind"])
        for i, row in enumerate(rows):  # a before-image directly precedes its after-image
            if row["_rl_kind"] == "-U" and self.producer == "lookup":
                assert rows[i + 1]["_rl_kind"] == "+U"
                assert self.key_of(rows[i + 1]) == self.key_of(row)

    def write(self, rows: list[Row], kinds: list[str] | None, chunks: int) -> None:
        data = pa.Table.from_pylist(rows, schema=SCHEMA)
        if kinds is not None:
            data = data.append_column("_rl_kind", pa.array(kinds, pa.string()))
        size = max(1, -(-len(rows) // chunks))
        self.tbl.write([data.slice(i, size) for i in range(0, max(len(rows), 1), size)])

    @rule(values=st.lists(row_values, max_size=10), chunks=st.integers(1, 3))
    def upsert(self, values: list[Row], chunks: int) -> None:
        state = dict(self.current)
        for row in values:
            self.apply(state, row, "+I")
        self.write(values, None, chunks)
        self.committed(state, [("+I", r) for r in values])

    @rule(
        values=st.lists(st.tuples(row_values, st.sampled_from(KINDS)), max_size=10),
        chunks=st.integers(1, 2),
    )
    def apply_changelog(self, values: list[tuple[Row, str]], chunks: int) -> None:
        state = dict(self.current)
        for row, kind in values:
            self.apply(state, row, kind)
        self.write([r for r, _ in values], [k for _, k in values], chunks)
        self.committed(state, [(k, r) for r, k in values])

    @rule(keys=st.lists(st.tuples(st.sampled_from(DOMAINS["p"]), st.sampled_from(KEYS))))
    def delete_keys(self, keys: list[tuple[str, int]]) -> None:
        state = dict(self.current)
        data = {"k": [k for _, k in keys]}
        if self.key == ["p", "k"]:
            data["p"] = [p for p, _ in keys]
        targets = {tuple(data[c][i] for c in self.key) for i in range(len(keys))}
        removed = [(key, state.pop(key)) for key in sorted(targets) if key in state]
        for key, row in removed:
            self.deleted(key, row)
        self.tbl.delete(pa.table(data, schema=pa.schema([SCHEMA.field(c) for c in data])))
        self.committed(state, [("-D", row) for _, row in removed])

    @rule(expr=predicates())
    def delete_where(self, expr: Expr) -> None:
        bound = bind(expr, SCHEMA)
        state = {key: row for key, row in self.current.items() if not evaluate_python(bound, row)}
        removed = [row for key, row in self.current.items() if key not in state]
        for row in removed:
            self.deleted(self.key_of(row), row)
        self.tbl.delete(expr)
        self.committed(state, [("-D", row) for row in removed])

    @rule(full=st.booleans())
    def compact(self, full: bool) -> None:
        snap = self.tbl.compact(full=full)
        if snap is not None:
            assert snap.commit_kind == "COMPACT"
            self.states[snap.id] = self.current

    @rule(
        columns=st.none() | st.lists(st.sampled_from(NAMES), unique=True),
        expr=st.none() | predicates(),
    )
    def read(self, columns: list[str] | None, expr: Expr | None) -> None:
        expected = list(self.current.values())
        if expr is not None:
            bound = bind(expr, SCHEMA)
            expected = [r for r in expected if evaluate_python(bound, r)]
        names = NAMES if columns is None else columns
        actual = self.tbl.to_arrow(columns=columns, filter=expr)
        assert actual.column_names == names
        assert actual.num_rows == len(expected)
        assert as_multiset(actual.to_pylist(), names) == as_multiset(expected, names)
        streamed = pa.Table.from_batches(
            list(self.tbl.to_batches(columns=columns, filter=expr)), schema=actual.schema
        )
        assert as_multiset(streamed.to_pylist(), names) == as_multiset(expected, names)
        assert self.tbl.count(filter=expr) == len(expected)

    @precondition(lambda self: len(self.states) > 1)
    @rule(data=st.data())
    def time_travel(self, data: st.DataObject) -> None:
        snapshot_id = data.draw(st.sampled_from(sorted(self.states)[1:]))
        actual = self.tbl.to_arrow(snapshot_id=snapshot_id).to_pylist()
        expected = list(self.states[snapshot_id].values())
        assert as_multiset(actual, NAMES) == as_multiset(expected, NAMES)
        assert self.tbl.count(snapshot_id=snapshot_id) == len(expected)

    @precondition(lambda self: len(self.states) > 1)
    @rule()
    def splits_are_bucket_aligned(self) -> None:
        rows: list[Row] = []
        for split in self.tbl.scan().plan():
            assert split.needs_merge
            part = pa.Table.from_batches(list(self.tbl.read_split(split)), schema=SCHEMA)
            keys = [part.column(k) for k in self.key]
            if part.num_rows:
                buckets = bucket_ids(keys, self.tbl.table_schema.buckets)
                assert set(np.unique(buckets).tolist()) == {split.bucket}
            rows += part.to_pylist()
        assert as_multiset(rows, NAMES) == as_multiset(list(self.current.values()), NAMES)


class SequenceFieldMachine(PrimaryKeyMachine):
    """Deduplicate ordered by ``c`` (nulls oldest), then by commit and input order.

    The model keeps each key's greatest version, deletes included: a row that comes
    late with an older ``c`` than a delete stays hidden, through compactions too.
    """

    sequence_field = "c"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.best: dict[tuple[Any, ...], tuple[tuple[Any, ...], Row | None]] = {}
        self.counter = 0

    def version(self, state: State, key: tuple[Any, ...], row: Row, gone: bool) -> None:
        self.counter += 1
        c = row[self.sequence_field]
        order = (c is not None, c if c is not None else 0, self.counter)
        if key in self.best and self.best[key][0] > order:
            return  # older than what the key holds: no effect
        self.best[key] = (order, None if gone else dict(row))
        if gone:
            state.pop(key, None)
        else:
            state[key] = dict(row)

    def apply(self, state: State, row: Row, kind: str) -> None:
        if kind != "-U":
            self.version(state, self.key_of(row), row, gone=kind == "-D")

    def deleted(self, key: tuple[Any, ...], before: Row) -> None:
        self.version({}, key, before, gone=True)


def run_machine(
    engine: str,
    root: Path,
    examples: int = 25,
    base: type[PrimaryKeyMachine] = PrimaryKeyMachine,
    draw_seed: int | None = None,
) -> None:
    """Without ``draw_seed`` the draws come from the derandomized seed, which is the same
    for every call here (it is the digest of the factory's source): each engine's short
    run draws the same 25 examples."""
    machine = type(f"{engine}Machine", (base,), {"engine": engine})

    def factory() -> PrimaryKeyMachine:
        return machine(root)

    run_state_machine_as_test(
        factory if draw_seed is None else seed(draw_seed)(factory),
        settings=settings(
            max_examples=property_examples(examples),
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def test_deduplicate_matches_model(tmp_path: Path) -> None:
    run_machine("deduplicate", tmp_path)


def test_first_row_matches_model(tmp_path: Path) -> None:
    run_machine("first-row", tmp_path)


def test_partial_update_matches_model(tmp_path: Path) -> None:
    run_machine("partial-update", tmp_path)


def test_aggregation_matches_model(tmp_path: Path) -> None:
    run_machine("aggregation", tmp_path)


def test_sequence_field_matches_model(tmp_path: Path) -> None:
    run_machine("deduplicate", tmp_path, base=SequenceFieldMachine)


# The long runs draw from seeds of their own: on the shared derandomized seed they
# repeated the short runs' first draws, and all four engines drew the same sequences.
LONG_SEEDS = {"deduplicate": 1, "first-row": 2, "partial-update": 3, "aggregation": 4}


@pytest.mark.slow
@pytest.mark.parametrize("engine", list(LONG_SEEDS))
def test_engines_match_model_long(tmp_path: Path, engine: str) -> None:
    run_machine(engine, tmp_path, examples=100, draw_seed=LONG_SEEDS[engine])


# Every key gets versions in several files, each setting other columns: the winner of a
# partial update or an aggregation takes its columns from different files, and in the
# sequence-field case the newest ``c`` sits in an older file (issue 20).
SCATTERED = [
    [{"k": k, "a": k, "b": None, "c": 4, "d": k, "e": "u"} for k in range(10)],
    [{"k": k, "a": None, "b": "m", "c": None, "d": None, "e": None} for k in range(0, 10, 2)],
    [{"k": k, "a": 2, "b": None, "c": 9, "d": -2, "e": "w"} for k in range(0, 10, 3)],
    [{"k": k, "a": None, "b": "n", "c": -1, "d": None, "e": None} for k in (1, 5, 6, 9)],
]


def scattered_model(engine: str, sequence_field: str | None) -> list[Row]:
    state: dict[int, tuple[tuple[Any, ...], Row]] = {}
    for position, row in enumerate(r for rows in SCATTERED for r in rows):
        row = {**row, "p": "x"}
        if sequence_field is None:
            old = state.get(row["k"])
            state[row["k"]] = ((), fold(engine, None if old is None else old[1], row))
            continue
        c = row[sequence_field]
        order = (c is not None, c if c is not None else 0, position)
        if row["k"] not in state or state[row["k"]][0] < order:
            state[row["k"]] = (order, row)
    return [row for _, row in state.values()]


@pytest.mark.parametrize(
    "engine, sequence_field",
    [(e, None) for e in ["deduplicate", "first-row", "partial-update", "aggregation"]]
    + [("deduplicate", "c")],
)
def test_winners_from_different_files_match_the_model(
    tmp_path: Path, engine: str, sequence_field: str | None
) -> None:
    options: dict[str, Any] = {
        "merge-engine": engine,
        "compaction.auto": "false",
        "write.row-group-rows": 2,  # several row groups per file: key-range parts cut them
    }
    if engine == "aggregation":
        options.update({f"fields.{c}.aggregate-function": f for c, f in AGGREGATES.items()})
    if sequence_field:
        options["sequence.field"] = sequence_field
    tbl = raylake.create_table(
        str(tmp_path / "t"), SCHEMA, primary_key=["k"], buckets=1, options=options
    )
    for rows in SCATTERED:
        tbl.write(pa.Table.from_pylist([{**r, "p": "x"} for r in rows], schema=SCHEMA))
    expected = scattered_model(engine, sequence_field)
    kept = [r for r in expected if r["a"] is not None and r["a"] > 1]

    def check() -> None:
        assert as_multiset(tbl.to_arrow().to_pylist(), NAMES) == as_multiset(expected, NAMES)
        parts = tbl.scan().with_split_size(1).plan()
        rows = [r for s in parts for b in tbl.read_split(s) for r in b.to_pylist()]
        assert as_multiset(rows, NAMES) == as_multiset(expected, NAMES)
        some = tbl.to_arrow(columns=["k", "b", "e"], filter="a > 1").to_pylist()
        assert as_multiset(some, ["k", "b", "e"]) == as_multiset(kept, ["k", "b", "e"])
        assert tbl.count(filter="a > 1") == len(kept)

    assert max(n for s in tbl.scan().plan() for n in s.sections) == len(SCATTERED)
    check()
    assert tbl.compact(full=True) is not None
    check()
