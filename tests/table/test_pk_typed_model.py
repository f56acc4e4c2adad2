"""Model-based test of primary-key tables keyed by every key type, under schema evolution.

A hypothesis state machine drives one table and a dict-of-keys model. The key is one
or two columns of any key type (strings, binaries, fixed-size binaries, dates, times,
timestamps of any unit and time zone, durations, decimals, booleans, narrow and unsigned
64-bit integers), with or without a partition column in it (a string ``p``, or the
first key column itself); the table may order versions by a sequence field of another
of those types.
Steps: upserts (duplicate keys within one write), overwrites of a partition and of the
whole table, deletes by key and by filter, minor and full compactions, expirations, and
schema changes of the value columns (add, rename, delete, widen). Every read must equal
the model: projected and filtered reads and counts, reads split by split at several
split sizes (key-range parts), time travel to every retained snapshot under its own
schema, and ``changes()`` from a retained snapshot to the latest.
"""

from __future__ import annotations

import datetime as dt
import itertools
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, settings
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

UTC = dt.timezone.utc
TYPES: dict[str, tuple[pa.DataType, list[Any]]] = {
    "string": (pa.string(), ["", "a", "b", "é"]),
    "large_string": (pa.large_string(), ["x", "zz"]),
    "binary": (pa.binary(), [b"", b"\x00", b"\xff"]),
    "fixed_binary": (pa.binary(2), [b"ab", b"\x00\x00"]),
    "date": (pa.date32(), [dt.date(1969, 12, 31), dt.date(1970, 1, 1), dt.date(2024, 2, 29)]),
    "time": (pa.time64("us"), [dt.time(0, 0), dt.time(12, 30, 0, 5)]),
    "timestamp_tz": (
        pa.timestamp("us", tz="UTC"),
        [dt.datetime(1960, 1, 1, tzinfo=UTC), dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=UTC)],
    ),
    "timestamp_ny": (
        pa.timestamp("ms", tz="America/New_York"),
        [dt.datetime(2024, 3, 10, 7, tzinfo=UTC), dt.datetime(2024, 3, 10, 8, tzinfo=UTC)],
    ),
    "timestamp_s": (
        pa.timestamp("s"),
        [dt.datetime(1969, 12, 31, 23, 59, 59), dt.datetime(2024, 1, 1)],
    ),
    "date64": (pa.date64(), [dt.date(1969, 12, 31), dt.date(2024, 2, 29)]),
    "time32": (pa.time32("s"), [dt.time(0, 0, 1), dt.time(23, 59, 59)]),
    "duration": (pa.duration("ms"), [dt.timedelta(0), dt.timedelta(days=-1, milliseconds=5)]),
    "decimal": (pa.decimal128(9, 2), [Decimal("-1.50"), Decimal("0.00"), Decimal("12345.67")]),
    "bool": (pa.bool_(), [False, True]),
    "int16": (pa.int16(), [-32768, 7, 32767]),
    "uint64": (pa.uint64(), [0, 2**63, 2**64 - 1]),
}
SEQUENCE_TYPES = [
    "int16",
    "uint64",
    "date",
    "date64",
    "timestamp_s",
    "timestamp_ny",
    "decimal",
    "string",
    "binary",
    "bool",
]
VALUES: dict[str, tuple[pa.DataType, list[Any]]] = {
    "int32": (pa.int32(), [-5, 0, 3, None]),
    "string": (pa.string(), ["m", "", None]),
    "float32": (pa.float32(), [0.5, -2.25, None]),
}
WIDER = {"int32": ("int64", pa.int64()), "float32": ("float64", pa.float64())}
_dirs = itertools.count()

Row = dict[str, Any]


def order_of(value: Any) -> tuple[Any, ...]:
    """A total order over one column's values and nulls (for sorting rows to compare)."""
    return (1, 0) if value is None else (0, value)


def multiset(rows: list[Row], names: list[str]) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(r[n] for n in names) for r in rows), key=lambda t: [order_of(v) for v in t]
    )


class TypedKeyMachine(RuleBasedStateMachine):
    engine = "deduplicate"
    root = Path()

    @initialize(
        k1=st.sampled_from(sorted(TYPES)),
        k2=st.none() | st.sampled_from(sorted(TYPES)),
        partition=st.sampled_from(["none", "p", "k1"]),
        buckets=st.integers(1, 3),
        tiny=st.booleans(),
        auto=st.booleans(),
        producer=st.sampled_from(["none", "input", "lookup"]),
        sequence=st.none() | st.sampled_from(SEQUENCE_TYPES),
    )
    def create(
        self,
        k1: str,
        k2: str | None,
        partition: str,
        buckets: int,
        tiny: bool,
        auto: bool,
        producer: str,
        sequence: str | None,
    ) -> None:
        columns = {"p": "string", "k1": k1, **({"k2": k2} if k2 else {})}
        fields = [pa.field(c, TYPES[t][0], nullable=False) for c, t in columns.items()]
        self.domains: dict[str, list[Any]] = {c: TYPES[t][1] for c, t in columns.items()}
        self.domains["p"] = ["x", "y"]
        self.key = ["p"] * (partition == "p") + [c for c in columns if c != "p"]
        self.partition = [] if partition == "none" else [partition]
        self.values: dict[str, str] = {"v0": "int32", "v1": "string", "v2": "float32"}
        fields += [pa.field(c, VALUES[t][0]) for c, t in self.values.items()]
        self.domains.update({c: VALUES[t][1] for c, t in self.values.items()})
        self.next_column = 3
        options: dict[str, Any] = {
            "merge-engine": self.engine,
            "changelog-producer": producer,
            "read.split.target-size": 256,
        }
        self.sequence = sequence is not None and self.engine == "deduplicate"
        if self.sequence:
            assert sequence is not None
            fields.append(pa.field("sq", TYPES[sequence][0]))
            self.domains["sq"] = [*TYPES[sequence][1], None]
            options["sequence.field"] = "sq"
        if tiny:  # several row groups, files and flushes per write
            options.update(
                {"write.row-group-rows": 2, "write.target-file-size": 1, "write.buffer-size": 64}
            )
        options.update(
            {"compaction.max-overlapping-files": 2} if auto else {"compaction.auto": "false"}
        )
        self.schema = pa.schema(fields)
        self.tbl = raylake.create_table(
            str(self.root / f"t{next(_dirs)}"),
            self.schema,
            primary_key=self.key,
            partition_by=self.partition,
            buckets=buckets,
            options=options,
        )
        self.rows: dict[tuple[Any, ...], Row] = {}
        # With a sequence field: each key's greatest version (order, row or None if deleted).
        self.greatest: dict[tuple[Any, ...], tuple[tuple[Any, ...], Row | None]] = {}
        self.versions = itertools.count()
        # snapshot id -> (its column names, its rows)
        self.snapshots: dict[int, tuple[list[str], list[Row]]] = {}

    # -- the model -------------------------------------------------------------------

    def key_of(self, row: Row) -> tuple[Any, ...]:
        return tuple(row[k] for k in self.key)

    def put(self, row: Row, gone: bool = False) -> None:
        """One version of a key, written (or deleted, ``gone``) after all before it."""
        key = self.key_of(row)
        if self.sequence:
            value = row["sq"]
            order = (value is not None, value if value is not None else 0, next(self.versions))
            if key in self.greatest and self.greatest[key][0] > order:
                return  # older than what the key holds
            self.greatest[key] = (order, None if gone else dict(row))
        old = self.rows.pop(key, None)
        if gone:
            return
        if old is None or self.engine == "deduplicate" or self.sequence:
            self.rows[key] = dict(row)
        elif self.engine == "first-row":
            self.rows[key] = old
        else:  # partial-update
            self.rows[key] = {c: old[c] if row[c] is None else row[c] for c in row}

    def committed(self) -> None:
        latest = self.tbl.latest_snapshot()
        first = max(self.snapshots, default=0) + 1
        for snapshot_id in range(first, (latest.id if latest else 0) + 1):
            self.snapshots[snapshot_id] = (self.schema.names, list(self.rows.values()))

    def draw_rows(self, data: st.DataObject) -> list[Row]:
        row = st.fixed_dictionaries(
            {n: st.sampled_from(self.domains[n]) for n in self.schema.names}
        )
        return data.draw(st.lists(row, max_size=8))

    def draw_filter(self, data: st.DataObject) -> Expr:
        def leaf() -> Expr:
            name = data.draw(st.sampled_from(self.schema.names))
            literals = [v for v in self.domains[name] if v is not None]
            kind = data.draw(st.sampled_from(["compare", "in", "null", "not null"]))
            if kind == "compare":
                op = data.draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">="]))
                return Compare(op, name, data.draw(st.sampled_from(literals)))
            if kind == "in":
                return In(name, tuple(data.draw(st.lists(st.sampled_from(literals), min_size=1))))
            return IsNull(name) if kind == "null" else NotNull(name)

        expr = leaf()
        for _ in range(data.draw(st.integers(0, 2))):
            how = data.draw(st.sampled_from([And, Or, Not]))
            expr = Not(expr) if how is Not else how(expr, leaf())
        return expr

    def selected(self, expr: Expr | None) -> list[Row]:
        if expr is None:
            return list(self.rows.values())
        bound = bind(expr, self.schema)
        return [r for r in self.rows.values() if evaluate_python(bound, r)]

    # -- writes ----------------------------------------------------------------------

    @rule(data=st.data())
    def upsert(self, data: st.DataObject) -> None:
        rows = self.draw_rows(data)
        for row in rows:
            self.put(row)
        self.tbl.write(pa.Table.from_pylist(rows, schema=self.schema))
        self.committed()

    @precondition(lambda self: self.partition)
    @rule(data=st.data())
    def overwrite_partition(self, data: st.DataObject) -> None:
        column = self.partition[0]
        value = data.draw(st.sampled_from(self.domains[column]))
        rows = [{**r, column: value} for r in self.draw_rows(data)]
        self.rows = {k: r for k, r in self.rows.items() if r[column] != value}
        at = self.key.index(column)
        self.greatest = {k: v for k, v in self.greatest.items() if k[at] != value}
        for row in rows:
            self.put(row)
        self.tbl.write(
            pa.Table.from_pylist(rows, schema=self.schema),
            mode="overwrite",
            overwrite_filter=Compare("=", column, value),
        )
        self.committed()

    @rule(data=st.data())
    def overwrite_all(self, data: st.DataObject) -> None:
        rows = self.draw_rows(data)
        self.rows, self.greatest = {}, {}
        for row in rows:
            self.put(row)
        self.tbl.write(pa.Table.from_pylist(rows, schema=self.schema), mode="overwrite")
        self.committed()

    @rule(data=st.data(), given_as=st.sampled_from(["arrow", "dict", "rows"]))
    def delete_keys(self, data: st.DataObject, given_as: str) -> None:
        key = st.tuples(*[st.sampled_from(self.domains[k]) for k in self.key])
        keys = data.draw(st.lists(key, max_size=4))
        for k in dict.fromkeys(keys):
            if k in self.rows:  # the -D row carries the current row's sequence field
                self.put(self.rows[k], gone=True)
        columns = {c: [k[i] for k in keys] for i, c in enumerate(self.key)}
        if given_as == "arrow":
            key_schema = pa.schema([self.schema.field(c) for c in self.key])
            self.tbl.delete(pa.table(columns, key_schema))
        elif given_as == "dict" or not keys:  # Python values, typed by the table
            self.tbl.delete(columns)
        else:
            self.tbl.delete([dict(zip(self.key, k, strict=True)) for k in keys])
        self.committed()

    @rule(data=st.data())
    def delete_where(self, data: st.DataObject) -> None:
        expr = self.draw_filter(data)
        for row in self.selected(expr):
            self.put(row, gone=True)
        self.tbl.delete(expr)
        self.committed()

    @rule(full=st.booleans())
    def compact(self, full: bool) -> None:
        self.tbl.compact(full=full)
        self.committed()

    @rule(keep=st.integers(1, 3))
    def expire(self, keep: int) -> None:
        self.tbl.expire_snapshots(retain_last=keep)
        alive = {s.id for s in self.tbl.snapshots()}
        self.snapshots = {i: s for i, s in self.snapshots.items() if i in alive}

    # -- schema changes of value columns --------------------------------------------

    def evolve(self, change: Any) -> None:
        with self.tbl.update_schema() as update:
            change(update)
        self.schema = self.tbl.schema
        self.rows = {k: {n: r.get(n) for n in self.schema.names} for k, r in self.rows.items()}

    @rule(kind=st.sampled_from(sorted(VALUES)))
    def add_column(self, kind: str) -> None:
        name = f"v{self.next_column}"
        self.next_column += 1
        self.evolve(lambda u: u.add_column(name, VALUES[kind][0]))
        self.values[name], self.domains[name] = kind, VALUES[kind][1]

    @precondition(lambda self: len(self.values) > 1)
    @rule(data=st.data())
    def delete_column(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.values)))
        self.evolve(lambda u: u.delete_column(name))
        del self.values[name], self.domains[name]

    @precondition(lambda self: self.values)
    @rule(data=st.data())
    def rename_column(self, data: st.DataObject) -> None:
        name, new = data.draw(st.sampled_from(sorted(self.values))), f"v{self.next_column}"
        self.next_column += 1
        for row in self.rows.values():
            row[new] = row[name]
        self.evolve(lambda u: u.rename_column(name, new))
        self.values[new], self.domains[new] = self.values.pop(name), self.domains.pop(name)

    @precondition(lambda self: any(t in WIDER for t in self.values.values()))
    @rule(data=st.data())
    def widen_column(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(n for n, t in self.values.items() if t in WIDER)))
        self.values[name], wide = WIDER[self.values[name]]
        self.evolve(lambda u: u.update_column(name, wide))

    # -- reads -----------------------------------------------------------------------

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        columns = data.draw(st.none() | st.lists(st.sampled_from(self.schema.names), unique=True))
        expr = self.draw_filter(data) if data.draw(st.booleans()) else None
        names = self.schema.names if columns is None else columns
        expected = multiset(self.selected(expr), names)
        actual = self.tbl.to_arrow(columns=columns, filter=expr)
        assert actual.column_names == names
        assert multiset(actual.to_pylist(), names) == expected
        assert self.tbl.count(filter=expr) == len(expected)

    @rule(size=st.sampled_from([1, 64, 4096]), data=st.data())
    def read_split_by_split(self, size: int, data: st.DataObject) -> None:
        expr = self.draw_filter(data) if data.draw(st.booleans()) else None
        plan = self.tbl.scan(filter=expr).with_split_size(size).plan()
        rows = [r for s in plan for b in self.tbl.read_split(s, filter=expr) for r in b.to_pylist()]
        names = self.schema.names
        assert multiset(rows, names) == multiset(self.selected(expr), names)

    @precondition(lambda self: self.snapshots)
    @rule(data=st.data())
    def time_travel(self, data: st.DataObject) -> None:
        snapshot_id = data.draw(st.sampled_from(sorted(self.snapshots)))
        names, rows = self.snapshots[snapshot_id]
        actual = self.tbl.to_arrow(snapshot_id=snapshot_id)
        assert actual.column_names == names
        assert multiset(actual.to_pylist(), names) == multiset(rows, names)
        assert self.tbl.count(snapshot_id=snapshot_id) == len(rows)

    @precondition(lambda self: self.snapshots)
    @rule(data=st.data())
    def changes_to_the_latest(self, data: st.DataObject) -> None:
        """The net change of every key, row kinds exact (whole rows where no schema
        change lies between the two ends, under the current schema)."""
        latest = max(self.snapshots)
        start = data.draw(st.sampled_from([0, *sorted(self.snapshots)]))
        names, end_rows = self.snapshots[latest]
        before = {} if start == 0 else {self.key_of(r): r for r in self.snapshots[start][1]}
        after = {self.key_of(r): r for r in end_rows}
        whole = names == self.schema.names and (start == 0 or self.snapshots[start][0] == names)
        expected: list[Row] = []
        for key in set(before) | set(after):
            old, new = before.get(key), after.get(key)
            if old is not None and new is None:
                expected.append({**old, "_rl_kind": "-D"})
            elif old is None and new is not None:
                expected.append({**new, "_rl_kind": "+I"})
            elif whole and old != new:
                expected += [{**old, "_rl_kind": "-U"}, {**new, "_rl_kind": "+U"}]
        changes = self.tbl.changes(start, latest, include_row_kind=True).to_arrow().to_pylist()
        if whole:
            columns = [*names, "_rl_kind"]
            assert multiset(changes, columns) == multiset(expected, columns)
        else:  # rows of another schema: the keys added and removed
            columns = [*self.key, "_rl_kind"]
            kept = [r for r in changes if r["_rl_kind"] in ("+I", "-D")]
            assert multiset(kept, columns) == multiset(expected, columns)


def run(root: Path, engine: str, examples: int) -> None:
    machine = type(f"{engine}Machine", (TypedKeyMachine,), {"engine": engine, "root": root})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=property_examples(examples),
            stateful_step_count=15,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def test_deduplicate_with_typed_keys_matches_the_model(tmp_path: Path) -> None:
    run(tmp_path, "deduplicate", 25)


def test_partial_update_with_typed_keys_matches_the_model(tmp_path: Path) -> None:
    run(tmp_path, "partial-update", 10)


def test_first_row_with_typed_keys_matches_the_model(tmp_path: Path) -> None:
    run(tmp_path, "first-row", 10)
