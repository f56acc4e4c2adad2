"""``Table.merge``: the MERGE INTO builder and its checks of the join and the source
(docs/merge.md; the clauses are checked in checks.py).

The builder only records clauses (parsing each expression at once, so a syntax
error points at the call that made it); ``execute`` checks every column, type and
rule against the table and the source before reading or writing anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from raylake.arguments import refuse_unknown_keywords
from raylake.errors import (
    MergeArgumentError,
    MergeError,
    SchemaMismatchError,
    UnknownColumnError,
    UnsupportedOperationError,
)
from raylake.expr.tree import plain_literal
from raylake.expr.value_eval import evaluate_condition
from raylake.expr.values import (
    Lit,
    Op,
    Ref,
    ValueExpr,
    parse_condition,
    parse_value,
)
from raylake.table.conform import (
    _castable,
    _conform_column,
    is_dataframe,
    iter_input,
    pandas_to_arrow,
)
from raylake.table.merge.checks import check_clause, check_refs, empty_columns
from raylake.table.merge.plan import BY_SOURCE, MATCHED, NOT_MATCHED, Clause, JoinOn
from raylake.table.pandas_types import refuse_duplicate_names

if TYPE_CHECKING:
    from raylake.table.table import Table

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SIDES = {MATCHED: "ts", NOT_MATCHED: "s", BY_SOURCE: "t"}


@dataclass(frozen=True)
class MergeResult:
    """What one merge did. ``snapshot_id`` is the snapshot it committed (the latest one,
    or None for a table without snapshots, when it changed nothing)."""

    inserted: int
    updated: int
    deleted: int
    snapshot_id: int | None
    files_rewritten: int = 0  # append tables: files replaced by copy-on-write
    files_added: int = 0
    attempts: int = 1  # 1 + the retries after a concurrent commit changed what it read


class TableMerger:
    """Built by :meth:`Table.merge`; add clauses, then :meth:`execute`."""

    def __init__(self, tbl: Table, source: Any, on: Any, *, schema_mode: str = "strict") -> None:
        from raylake.table.evolve import schema_mode_arg

        self._tbl = tbl
        self._source = source_table(source, tbl.schema)
        self._on = on
        self._schema_mode = schema_mode_arg(schema_mode)
        self._clauses: list[Clause] = []

    def __repr__(self) -> str:
        clauses = len(self._clauses)
        return f"TableMerger({self._tbl.uri!r}, on={self._on!r}, {clauses} clause(s))"

    @refuse_unknown_keywords
    def when_matched_update(
        self, updates: Mapping[str, Any] | None = None, predicate: str | None = None
    ) -> TableMerger:
        """Update a matched target row: ``{"col": "s.col", "n": "t.n + s.n"}``; None
        sets every target column the source has (except key and partition columns)."""
        return self._add(MATCHED, "update", predicate, updates)

    @refuse_unknown_keywords
    def when_matched_delete(self, predicate: str | None = None) -> TableMerger:
        return self._add(MATCHED, "delete", predicate, None)

    @refuse_unknown_keywords
    def when_not_matched_insert(
        self, values: Mapping[str, Any] | None = None, predicate: str | None = None
    ) -> TableMerger:
        """Insert a source row no target row matched: ``{"col": "s.x * 2"}`` (columns not
        named are null) or None for the source's columns by name."""
        return self._add(NOT_MATCHED, "insert", predicate, values)

    @refuse_unknown_keywords
    def when_not_matched_by_source_update(
        self, updates: Mapping[str, Any], predicate: str | None = None
    ) -> TableMerger:
        """Update a target row no source row matched (expressions over ``t.`` only)."""
        if updates is None:
            raise MergeArgumentError("updates", updates, "a mapping of the columns to set")
        return self._add(BY_SOURCE, "update", predicate, updates)

    @refuse_unknown_keywords
    def when_not_matched_by_source_delete(self, predicate: str | None = None) -> TableMerger:
        return self._add(BY_SOURCE, "delete", predicate, None)

    def _add(
        self, group: str, action: str, predicate: Any, values: Mapping[str, Any] | None
    ) -> TableMerger:
        sides = _SIDES[group]
        if predicate is not None and not isinstance(predicate, str):
            raise MergeArgumentError("predicate", predicate, "an expression string or None")
        parsed = None if predicate is None else parse_condition(predicate, sides)
        assignments = None
        if values is not None:
            if not isinstance(values, Mapping) or not values:
                none = "" if group == BY_SOURCE else ", or None"
                raise MergeArgumentError(
                    "updates" if action == "update" else "values",
                    values,
                    f"a non-empty dict of column -> expression{none}",
                )
            assignments = tuple(
                (_target_name(name), _value(expr, sides)) for name, expr in values.items()
            )
        clause = Clause(group, action, parsed, assignments)
        _check_assigned_once(clause, values or {})
        self._clauses.append(clause)
        return self

    def execute(self) -> MergeResult:
        """Check everything, then apply the clauses as one commit (retried on the new
        state if a concurrent commit changed what the merge read)."""
        from raylake.table.merge.execute import merge_once, with_attempts

        # Checked again each attempt: a retry plans the source's new columns on the
        # schema as it is then (an earlier attempt may have committed them).
        return self.adopt_schema(with_attempts(lambda: merge_once(*self.checked())))

    def adopt_schema(self, result: MergeResult) -> MergeResult:
        """``result``, once the table object this merger was built on has loaded the
        columns the merge added (``schema_mode="merge"``)."""
        if self._schema_mode == "merge":
            self._tbl.refresh()
        return result

    def checked(self) -> tuple[Table, pa.Table, JoinOn, tuple[Clause, ...]]:
        """The table, the conformed source, the join and the clauses, all checked.

        Under ``schema_mode="merge"`` the table is a copy under the schema with the
        source's new columns, planned but not committed: the merge's commit adds them
        with its data (``commit_merge``), so a merge refused here or later, for its
        data, adds no column."""
        if not self._clauses:
            raise MergeError(
                "a merge needs at least one clause: when_matched_update(), "
                "when_matched_delete(), when_not_matched_insert() or "
                "when_not_matched_by_source_update()/_delete()"
            )
        tbl, source = self._tbl, self._source
        check_merge_engine(tbl)
        if self._schema_mode == "merge":
            tbl = _with_new_columns(tbl, source.schema)
        else:
            tbl = _under_latest_schema(tbl)
        schema = tbl.table_schema.arrow_schema
        on = join_on(self._on, schema, source.schema)
        source = conform_source(source, schema, on)
        clauses = tuple(
            _complete(c, schema, source.schema, tbl.table_schema) for c in self._clauses
        )
        for clause in clauses:
            check_clause(clause, schema, source.schema, tbl.table_schema)
        if on.residual is not None:
            check_refs(on.residual, schema, source.schema, f"on={self._on!r}")
            evaluate_condition(on.residual, empty_columns(schema, source.schema), 0)
        return tbl, source, on, clauses


def check_merge_engine(tbl: Table) -> None:
    """A primary-key table merges with the deduplicate engine only."""
    ts = tbl.table_schema
    if ts.is_primary_key_table and ts.table_options.merge_engine != "deduplicate":
        raise UnsupportedOperationError(
            f"merge needs the deduplicate merge engine; {tbl.uri} uses "
            f"{ts.table_options.merge_engine!r}, which would combine the merged rows with "
            "the old ones instead of replacing them"
        )


def _under_latest_schema(tbl: Table) -> Table:
    """``tbl`` under the table's latest schema: a merge rewrites rows (whole files of an
    append table), and under the schema of a ``Table`` opened before a schema change it
    would drop the newer columns of every row it rewrites."""
    from raylake.format.schema_files import load_schema
    from raylake.table.table import Table

    latest = load_schema(tbl.file_io)
    if latest.schema_id == tbl.table_schema.schema_id:
        return tbl
    return Table(tbl.file_io, latest, tbl.source)


def _with_new_columns(tbl: Table, source: pa.Schema) -> Table:
    """``tbl`` under its latest schema plus the source's new columns, not committed."""
    from raylake.table.evolve import with_new_columns
    from raylake.table.table import Table

    _, planned = with_new_columns(tbl, source)
    return Table(tbl.file_io, planned, tbl.source)


def source_table(source: Any, target: pa.Schema | None = None) -> pa.Table:
    """The merge source as one Arrow table (it is joined whole); a DataFrame's columns
    that ``target`` lacks in the types ``from_pandas`` gives (raylake/table/conform.py).
    A duplicate column name is refused: ``s.x`` would name two columns."""
    table = _as_table(source, target)
    refuse_duplicate_names(table.column_names, "the merge source")
    return table


def _as_table(source: Any, target: pa.Schema | None) -> pa.Table:
    if isinstance(source, pa.Table):
        return source
    if isinstance(source, pa.RecordBatch):
        return pa.Table.from_batches([source])
    if isinstance(source, pa.RecordBatchReader):
        return source.read_all()
    if is_dataframe(source):
        return pandas_to_arrow(source, target)
    if hasattr(source, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(source).read_all()
    chunks = [
        c if isinstance(c, pa.Table) else pa.Table.from_batches([c]) for c in iter_input(source)
    ]
    if not chunks:
        raise MergeError("the merge source has no data and no schema")
    return pa.concat_tables(chunks, promote_options="default")


def conform_source(source: pa.Table, schema: pa.Schema, on: JoinOn | None = None) -> pa.Table:
    """Source columns the target also has, cast to the target's types (or an error), and
    the key columns of ``on`` the target does not have (``t.id = s.key``) to the types
    of the target keys they join: the hash join, the bucket hash and the pruning compare
    keys of one type."""
    fields = {f.name: f for f in schema}
    for t, s in on.pairs if on is not None else ():
        fields.setdefault(s, schema.field(t).with_name(s))
    columns = []
    for name in source.column_names:
        column = source.column(name)
        if name in fields:
            column = _conform_column(column, fields[name].with_nullable(True), False)
        columns.append(column)
    return pa.Table.from_arrays(columns, names=source.column_names)


def join_on(on: Any, schema: pa.Schema, source: pa.Schema) -> JoinOn:
    """``on`` as key pairs: a column name, a list of them, or ``"t.a = s.a and ..."``.

    ``source`` is the source's schema as given: a source column the target has is
    compared as it will be conformed (the target column's type), another as a type
    that casts to its target key's (int32 to int64, large_string to string)."""
    where = f"on={on!r}"
    if isinstance(on, str) and (_NAME_RE.fullmatch(on) or on in schema.names):
        on = [on]
    if isinstance(on, Sequence) and not isinstance(on, str):
        names = list(on)
        if not names or not all(isinstance(n, str) for n in names):
            raise MergeArgumentError("on", on, "a non-empty list of column names")
        pairs = tuple((n, n) for n in names)
        residual = None
    elif isinstance(on, str):
        pairs, residual = _split_condition(parse_condition(on, "ts"), on)
    else:
        raise MergeArgumentError("on", on, "a column name, a list of them or a condition string")
    # A source key the target lacks is cast to the type of the first target key it joins
    # (conform_source): a second key it joins must be of that type too.
    cast_to: dict[str, pa.DataType] = {}
    for t, s in pairs:
        if t not in schema.names:
            raise UnknownColumnError(t, list(schema.names), owner="the target", where=where)
        if s not in source.names:
            raise UnknownColumnError(s, list(source.names), owner="the source", where=where)
        t_type = schema.field(t).type
        s_type = schema.field(s).type if s in schema.names else source.field(s).type
        if pa.types.is_dictionary(s_type):
            s_type = s_type.value_type
        exact = s in schema.names or s in cast_to
        s_type = cast_to.get(s, s_type)
        if t_type != s_type and (exact or not _castable(s_type, t_type)):
            raise SchemaMismatchError(
                f"merge key t.{t} has type {t_type} but s.{s} has type {s_type}",
                column=t,
                expected=t_type,
                actual=s_type,
            )
        if s not in schema.names:
            cast_to.setdefault(s, t_type)
        if pa.types.is_nested(t_type):
            # No hash join, order or statistics compare them; SQL engines refuse too.
            raise MergeError(
                f"{where}: column {t!r} has nested type {t_type}, and nested types (list, "
                "struct, map) cannot be join keys; join on scalar columns"
            )
    return JoinOn(pairs, residual)


def _split_condition(expr: ValueExpr, text: str) -> tuple[tuple[tuple[str, str], ...], Any]:
    conjuncts: list[ValueExpr] = []

    def flatten(e: ValueExpr) -> None:
        if isinstance(e, Op) and e.op == "and":
            flatten(e.left)
            flatten(e.right)
        else:
            conjuncts.append(e)

    flatten(expr)
    pairs, rest = [], []
    for c in conjuncts:
        if (
            isinstance(c, Op)
            and c.op == "="
            and isinstance(c.left, Ref)
            and isinstance(c.right, Ref)
        ):
            sides = {c.left.side: c.left.name, c.right.side: c.right.name}
            if set(sides) == {"t", "s"}:
                pairs.append((sides["t"], sides["s"]))
                continue
        rest.append(c)
    if not pairs:
        raise MergeError(
            f"on={text!r} has no equality of a target and a source column (t.k = s.k); "
            "a merge joins on at least one"
        )
    residual = None
    for c in rest:
        residual = c if residual is None else Op("and", residual, c)
    return tuple(pairs), residual


def _check_assigned_once(clause: Clause, values: Mapping[str, Any]) -> None:
    """A column set twice in one clause (``n`` and ``t.n``): SQL refuses it, as no
    order between the two says which value wins."""
    first: dict[str, str] = {}
    for (name, _), written in zip(clause.values or (), values):
        if name in first:
            raise MergeError(
                f"{clause.describe()} sets column {name!r} twice (as {first[name]!r} and "
                f"{written!r}); give each column one value"
            )
        first[name] = written


def _target_name(name: Any) -> str:
    if not isinstance(name, str):
        raise MergeArgumentError("a column to set", name, "a column name (a string)")
    return name[2:] if name.startswith("t.") else name


def _value(expr: Any, sides: str) -> ValueExpr:
    if isinstance(expr, str):
        return parse_value(expr, sides)
    # numpy's numbers and bools (df.n.max(), np.True_) and pandas' NA, as filters take them
    plain = plain_literal(expr)
    if plain is None or isinstance(plain, bool | int | float):
        return Lit(plain)
    raise MergeArgumentError(
        "a merge value",
        expr,
        "an expression string (a date, time or timestamp as a quoted literal in it: "
        "\"'2024-01-31'\") or a number, bool or None",
    )


def _complete(clause: Clause, schema: pa.Schema, source: pa.Schema, ts: Any) -> Clause:
    """``when_matched_update()`` without values: every column the source shares."""
    if clause.action != "update" or clause.values is not None:
        return clause
    fixed = {*ts.primary_key, *ts.partition_keys}
    values = tuple(
        (f.name, Ref("s", f.name)) for f in schema if f.name in source.names and f.name not in fixed
    )
    if not values:
        raise MergeError("when_matched_update(): the source shares no updatable column")
    return Clause(clause.group, clause.action, clause.predicate, values)
