"""The checks of a merge's clauses against the table and the source, before any row
is read (docs/merge.md, "Checked before any work")."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from raylake.errors import MergeError, SchemaMismatchError, UnknownColumnError
from raylake.expr.value_eval import evaluate, evaluate_condition
from raylake.expr.values import ValueExpr, refs
from raylake.table.conform import _castable, _kind
from raylake.table.merge.assign import assigned
from raylake.table.merge.plan import Clause


def check_clause(clause: Clause, schema: pa.Schema, source: pa.Schema, ts: Any) -> None:
    """Columns exist, key and partition columns are not updated, types fit."""
    where = clause.describe()
    exprs = [clause.predicate] if clause.predicate is not None else []
    exprs += [e for _, e in clause.values or ()]
    for e in exprs:
        check_refs(e, schema, source, where)
    empty = empty_columns(schema, source)
    if clause.predicate is not None:
        evaluate_condition(clause.predicate, empty, 0)
    for name, expr in clause.values or ():
        if name not in schema.names:
            raise UnknownColumnError(name, list(schema.names), owner="the target", where=where)
        if clause.action == "update":
            for role, keys in (("primary-key", ts.primary_key), ("partition", ts.partition_keys)):
                if name in keys:
                    raise MergeError(
                        f"{where} cannot set {role} column {name!r}: delete the row and "
                        "insert it instead"
                    )
        field = schema.field(name)
        # A value of no column (a literal) is checked by its one value: cast on no rows,
        # 'str' into a double column passed here and failed only on the data (in the
        # tasks of a Spark or Ray merge, after their jobs started).
        value = evaluate(expr, empty, 0 if refs(expr) else 1)
        if refs(expr):
            _check_kind(where, name, expr, value.type, field.type)
        if not pa.types.is_null(value.type):
            assigned(name, value, field.with_nullable(True))
        if not field.nullable and value.null_count:  # a null literal: null on every row
            raise SchemaMismatchError(
                f"{where} sets non-nullable column {name!r} to null", column=name
            )
    if clause.action == "insert":
        # A column an insert gives no value is null in every row it inserts.
        given = source.names if clause.values is None else [n for n, _ in clause.values]
        missing = [f.name for f in schema if not f.nullable and f.name not in given]
        if missing and clause.values is None:
            raise SchemaMismatchError(
                f"when_not_matched_insert() takes the source's columns, but the source lacks "
                f"non-nullable column(s) {missing}",
                column=missing[0],
            )
        if missing:
            raise SchemaMismatchError(
                f"when_not_matched_insert() sets no value for non-nullable column(s) "
                f"{missing}; name them in its values",
                column=missing[0],
            )


def _check_kind(
    where: str, name: str, expr: ValueExpr, value: pa.DataType, column: pa.DataType
) -> None:
    """A value computed from columns is of the column's kind of type, by the rules of a
    write (``s.label`` does not parse into an int column, ``s.n`` is not formatted into
    a string one), so that whether it fits does not depend on the rows; numbers of any
    type fit a numeric column (cast safely: a fraction into an int column fails)."""
    numeric = ("number", "decimal")
    if pa.types.is_dictionary(value):
        value = value.value_type
    if value == column or pa.types.is_null(value) or _castable(value, column):
        return
    if _kind(value) in numeric and _kind(column) in numeric:
        return
    raise SchemaMismatchError(
        f"{where} sets column {name!r} of type {column} to {expr} of type {value}; "
        "a value of another kind is not converted (cast the source's column before the "
        "merge; a literal converts where its text fits)",
        column=name,
        expected=column,
        actual=value,
    )


def check_refs(expr: ValueExpr, schema: pa.Schema, source: pa.Schema, where: str) -> None:
    for ref in sorted(refs(expr), key=str):
        names = schema.names if ref.side == "t" else source.names
        if ref.name not in names:
            owner = "the target" if ref.side == "t" else "the source"
            raise UnknownColumnError(str(ref), list(names), owner=owner, where=where)


def empty_columns(schema: pa.Schema, source: pa.Schema) -> dict[str, pa.Array]:
    cols = {f"t.{f.name}": pa.array([], f.type) for f in schema}
    cols.update({f"s.{f.name}": pa.array([], f.type) for f in source})
    return cols
