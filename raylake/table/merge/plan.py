"""What a merge does to the rows it read: the SQL rules, vectorised (docs/merge.md).

``decide`` joins the target rows a merge read with the source on the ``on`` keys
(a hash join of row numbers, not of rows), checks that no target row matched twice,
and then applies the clauses of each group in order, first match wins:

* matched pairs: ``when_matched_update`` / ``when_matched_delete``;
* source rows no target row matched: ``when_not_matched_insert``;
* target rows no source row matched: ``when_not_matched_by_source_*``.

Clauses are few; each is one pyarrow evaluation over all candidate rows, so no
Python runs per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import MergeCardinalityError
from raylake.expr.value_eval import evaluate, evaluate_condition
from raylake.expr.values import Ref, ValueExpr, refs
from raylake.table.merge.assign import assigned

_T_ROW = "__raylake_t_row__"
_S_ROW = "__raylake_s_row__"
_KEY = "__raylake_key_"

MATCHED, NOT_MATCHED, BY_SOURCE = "matched", "not_matched", "not_matched_by_source"


@dataclass(frozen=True)
class Clause:
    group: str  # MATCHED, NOT_MATCHED or BY_SOURCE
    action: str  # "update", "delete" or "insert"
    predicate: ValueExpr | None
    # Target column -> expression; None: every column from the source's same-named one.
    values: tuple[tuple[str, ValueExpr], ...] | None = None

    def describe(self) -> str:
        name = {MATCHED: "when_matched", NOT_MATCHED: "when_not_matched"}.get(
            self.group, "when_not_matched_by_source"
        )
        return f"{name}_{self.action}"


@dataclass(frozen=True)
class JoinOn:
    """Equalities ``t.<target> = s.<source>`` and an optional residual condition."""

    pairs: tuple[tuple[str, str], ...]
    residual: ValueExpr | None = None

    @property
    def target_keys(self) -> list[str]:
        return [t for t, _ in self.pairs]

    @property
    def source_keys(self) -> list[str]:
        return [s for _, s in self.pairs]


@dataclass(frozen=True)
class Outcome:
    """What to write: target row positions to replace or drop, and the new rows."""

    updated: np.ndarray  # positions in the target rows read
    updated_rows: pa.Table  # their new values, in the same order, target schema
    deleted: np.ndarray  # positions in the target rows read
    inserted_rows: pa.Table  # target schema
    # Positions of the source rows some target row matched (whatever the clauses did).
    matched_source: np.ndarray

    @property
    def changes_nothing(self) -> bool:
        return not (len(self.updated) or len(self.deleted) or self.inserted_rows.num_rows)


def decide(
    target: pa.Table,
    source: pa.Table,
    on: JoinOn,
    clauses: tuple[Clause, ...],
    schema: pa.Schema,
    primary_key: Sequence[str] = (),
) -> Outcome:
    """Apply ``clauses`` to ``target`` (rows read, ``schema``) and ``source`` (conformed);
    ``primary_key``: the table's, which the inserted rows may not share."""
    t_rows, s_rows = _join(target, source, on)
    matched_clauses = [c for c in clauses if c.group == MATCHED]
    if matched_clauses:
        _check_cardinality(target, on, t_rows)
    changes = _TargetChanges()

    if matched_clauses and len(t_rows):
        cols = _columns(clauses, MATCHED, target, t_rows, source, s_rows)
        changes.apply(matched_clauses, t_rows, cols, target, schema)

    by_source = [c for c in clauses if c.group == BY_SOURCE]
    if by_source:
        unmatched = others(target.num_rows, t_rows)
        if len(unmatched):
            cols = _columns(clauses, BY_SOURCE, target, unmatched, source, None)
            changes.apply(by_source, unmatched, cols, target, schema)

    inserts = [c for c in clauses if c.group == NOT_MATCHED]
    inserted = schema.empty_table()
    if inserts:
        new = others(source.num_rows, s_rows)
        if len(new):
            cols = _columns(clauses, NOT_MATCHED, None, None, source, new)
            parts = [
                _insert_rows(clause, source.take(new[sel]), _subset(cols, sel), schema)
                for clause, sel in _first_match(inserts, cols, len(new))
            ]
            parts = [p for p in parts if p.num_rows]
            if parts:
                inserted = pa.concat_tables(parts)
    if primary_key:
        _check_inserted_keys(inserted, primary_key)
    return Outcome(
        updated=_positions(changes.updated),
        updated_rows=(
            pa.concat_tables(changes.updated_rows) if changes.updated_rows else schema.empty_table()
        ),
        deleted=_positions(changes.deleted),
        inserted_rows=inserted,
        matched_source=np.unique(s_rows),
    )


def others(n: int, taken: np.ndarray) -> np.ndarray:
    """The positions 0..n-1 not in ``taken`` (a mask: no sort, no hash)."""
    mask = np.ones(n, dtype=bool)
    mask[taken] = False
    return np.flatnonzero(mask)


def target_columns(
    clauses: tuple[Clause, ...], keys: list[str], schema: pa.Schema
) -> list[str] | None:
    """The target columns a merge must read, or None for all: the keys and what its
    expressions read, when it deletes nothing and every update sets every other column."""
    names = set(keys)
    for clause in clauses:
        if clause.action == "delete":
            return None  # a delete writes the whole old row (changelogs)
        exprs = [clause.predicate] if clause.predicate is not None else []
        exprs += [e for _, e in clause.values or ()]
        names |= {r.name for e in exprs for r in refs(e) if r.side == "t"}
        if clause.action == "update":
            assigned_names = {n for n, _ in clause.values or ()}
            if set(schema.names) - set(keys) - assigned_names:
                return None
    return [n for n in schema.names if n in names]


def _join(target: pa.Table, source: pa.Table, on: JoinOn) -> tuple[np.ndarray, np.ndarray]:
    """Row positions of the matching (target, source) pairs; a null key matches nothing."""
    if not target.num_rows or not source.num_rows:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    # Keys are joined by position, not name: one column may appear in two equalities
    # (t.id = s.id and t.id = s.n), and the target's and source's names differ.
    names = [f"{_KEY}{i}" for i in range(len(on.pairs))]
    left = _keys(target, on.target_keys, names, _T_ROW)
    right = _keys(source, on.source_keys, names, _S_ROW)
    joined = left.join(right, keys=names, join_type="inner", use_threads=True)
    t_rows = joined.column(_T_ROW).to_numpy()
    s_rows = joined.column(_S_ROW).to_numpy()
    if on.residual is not None and len(t_rows):
        refs_read = {str(r) for r in refs(on.residual)}
        cols = _pair_columns(refs_read, target, t_rows, source, s_rows)
        keep = evaluate_condition(on.residual, cols, len(t_rows)).to_numpy(zero_copy_only=False)
        t_rows, s_rows = t_rows[keep], s_rows[keep]
    return t_rows, s_rows


def _keys(rows: pa.Table, columns: list[str], names: list[str], row_name: str) -> pa.Table:
    """The key ``columns`` of ``rows`` (named ``names``) and the row positions, without
    the rows whose key cannot equal anything: a null, or a float NaN."""
    arrays = [_join_key(rows.column(c)) for c in columns]
    keys = pa.table([*arrays, pa.array(np.arange(rows.num_rows))], names=[*names, row_name])
    valid = None
    for array in arrays:
        v = pc.is_valid(array)
        if pa.types.is_floating(array.type):
            v = pc.and_(v, pc.invert(pc.is_nan(array)))
        valid = v if valid is None else pc.and_(valid, v)
    if valid is not None and not pc.all(valid).as_py():
        keys = keys.filter(valid)
    return keys


def _join_key(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A key column as the hash join must see it to agree with SQL's ``=`` (and the
    filters'): -0.0 equals 0.0, but their bits differ, so -0.0 becomes 0.0 (adding 0.0
    does that and keeps every other value)."""
    if pa.types.is_floating(column.type):
        return pc.add(column, pa.scalar(0.0, column.type))
    return column


def _check_cardinality(target: pa.Table, on: JoinOn, t_rows: np.ndarray) -> None:
    if len(t_rows) < 2:
        return
    counts = np.bincount(t_rows, minlength=target.num_rows)
    worst = int(np.argmax(counts))
    if counts[worst] > 1:
        key = {k: target.column(k)[worst].as_py() for k in on.target_keys}
        raise MergeCardinalityError(key, int(counts[worst]))


def _check_inserted_keys(inserted: pa.Table, primary_key: Sequence[str]) -> None:
    """Rows inserted into a primary-key table with one key: the table would keep only
    one of them, so the merge would lose rows it counts as inserted."""
    if inserted.num_rows < 2:
        return
    counts = inserted.group_by(list(primary_key)).aggregate([([], "count_all")])
    column = counts.column("count_all")
    worst = int(pc.index(column, pc.max(column)).as_py())
    if column[worst].as_py() > 1:
        key = {k: counts.column(k)[worst].as_py() for k in primary_key}
        raise MergeCardinalityError(key, column[worst].as_py(), inserted=True)


def _first_match(
    clauses: list[Clause], cols: dict[str, Any], n: int
) -> list[tuple[Clause, np.ndarray]]:
    """Each clause with the positions it applies to: the rows its predicate holds for
    that no earlier clause of its group took. A predicate is evaluated only on the rows
    still left, as SQL's WHEN conditions (a CASE) are: on a row an earlier clause took,
    ``t.n / s.d > 1`` after ``s.d = 0`` failed the merge dividing by zero."""
    left = np.arange(n)
    out = []
    for clause in clauses:
        if not len(left):
            break
        if clause.predicate is None:
            hit = np.ones(len(left), dtype=bool)
        else:
            rows = cols if len(left) == n else _subset(cols, left)
            condition = evaluate_condition(clause.predicate, rows, len(left))
            hit = condition.to_numpy(zero_copy_only=False)
        out.append((clause, left[hit]))
        left = left[~hit]
    return out


def _columns(
    clauses: tuple[Clause, ...],
    group: str,
    target: pa.Table | None,
    t_rows: np.ndarray | None,
    source: pa.Table,
    s_rows: np.ndarray | None,
) -> dict[str, Any]:
    """The ``t.``/``s.`` columns the group's clauses read, taken at the given rows."""
    names: set[str] = set()
    for c in clauses:
        if c.group != group:
            continue
        exprs = [c.predicate] if c.predicate is not None else []
        exprs += [e for _, e in c.values or ()]
        for e in exprs:
            names |= {str(r) for r in refs(e)}
    return _pair_columns(names, target, t_rows, source, s_rows)


def _pair_columns(
    names: set[str],
    target: pa.Table | None,
    t_rows: np.ndarray | None,
    source: pa.Table,
    s_rows: np.ndarray | None,
) -> dict[str, Any]:
    cols: dict[str, Any] = {}
    for name in names:
        side, _, column = name.partition(".")
        rows, table = (t_rows, target) if side == "t" else (s_rows, source)
        if rows is not None and table is not None:
            cols[name] = table.column(column).take(rows)
    return cols


def _subset(cols: dict[str, Any], sel: np.ndarray) -> dict[str, Any]:
    return {k: v.take(sel) for k, v in cols.items()}


def _positions(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


@dataclass
class _TargetChanges:
    """The target rows the clauses updated (with their new values) and deleted."""

    updated: list[np.ndarray] = field(default_factory=list)
    updated_rows: list[pa.Table] = field(default_factory=list)
    deleted: list[np.ndarray] = field(default_factory=list)

    def apply(
        self,
        clauses: list[Clause],
        positions: np.ndarray,
        cols: dict[str, Any],
        target: pa.Table,
        schema: pa.Schema,
    ) -> None:
        """Each of ``positions`` (target rows) to the first of ``clauses`` it meets."""
        for clause, sel in _first_match(clauses, cols, len(positions)):
            self._apply(clause, positions[sel], _subset(cols, sel), target, schema)

    def _apply(
        self,
        clause: Clause,
        positions: np.ndarray,
        cols: dict[str, Any],
        target: pa.Table,
        schema: pa.Schema,
    ) -> None:
        if not len(positions):
            return
        if clause.action == "delete":
            self.deleted.append(positions)
            return
        # The target may have been read with only the columns the merge needs (a key
        # lookup whose updates set every other column): those are added here.
        rows = target.take(positions)
        for name, expr in clause.values or ():
            target_field = schema.field(name)
            value = assigned(name, evaluate(expr, cols, len(positions)), target_field)
            index = rows.schema.get_field_index(name)
            if index < 0:
                rows = rows.append_column(target_field, value)
            else:
                rows = rows.set_column(index, target_field, value)
        self.updated.append(positions)
        self.updated_rows.append(rows.select(schema.names))


def _insert_rows(
    clause: Clause, source_rows: pa.Table, cols: dict[str, Any], schema: pa.Schema
) -> pa.Table:
    n = source_rows.num_rows
    values: dict[str, ValueExpr | None]
    if clause.values is None:
        values = {
            f.name: (Ref("s", f.name) if f.name in source_rows.column_names else None)
            for f in schema
        }
    else:
        values = dict(clause.values)
    arrays = []
    for f in schema:
        expr = values.get(f.name)
        if expr is None:
            arrays.append(assigned(f.name, pa.nulls(n, f.type), f))
        elif isinstance(expr, Ref) and expr.side == "s":
            arrays.append(assigned(f.name, source_rows.column(expr.name), f))
        else:
            arrays.append(assigned(f.name, evaluate(expr, cols, n), f))
    return pa.Table.from_arrays(arrays, schema=schema)
