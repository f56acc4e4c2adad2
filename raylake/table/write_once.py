"""``Table.write``: write data and commit it as one snapshot, every argument checked first."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from raylake.arguments import check_flag
from raylake.expr import Expr
from raylake.format.snapshot import Snapshot
from raylake.table.aborted import raise_named
from raylake.table.args import properties_arg
from raylake.table.commit import commit_or_abort
from raylake.table.commit_args import check_rows_inside, commit_request, overwrite_arg
from raylake.table.evolve import adopt_planned_schema, merged_input, schema_mode_arg
from raylake.table.writer import writing

if TYPE_CHECKING:
    from raylake.table.table import Table


def write_once(
    tbl: Table,
    data: Any,
    *,
    mode: str,
    overwrite_filter: str | Expr | None,
    partition_overwrite_mode: str,
    properties: Mapping[str, str] | None,
    allow_empty: bool,
    schema_mode: str,
) -> Snapshot | None:
    tbl.kind.check_write_mode(mode)
    # Every argument is checked before any data file is written, so that from here on
    # a failure can only be the commit's, which deletes what was written.
    properties = properties_arg(properties)
    check_flag("allow_empty", allow_empty)
    overwrite = overwrite_arg(mode, overwrite_filter, tbl.table_schema, partition_overwrite_mode)
    target = tbl  # under merge mode, a copy under the planned schema
    if schema_mode_arg(schema_mode) == "merge":
        target, data = merged_input(tbl, data)
    base = tbl.source.latest_id()
    try:
        with writing(target.new_writer()) as writer:
            writer.write(data)
            if overwrite_filter is not None and isinstance(overwrite, Expr):
                check_rows_inside(writer.partitions(), target.table_schema, overwrite)
            messages = writer.prepare_commit()
    except OSError as exc:  # the writer deleted what it wrote
        raise_named(tbl.file_io, exc)
        raise
    adopt_planned_schema(tbl, target, messages)
    request = commit_request(
        messages,
        overwrite,
        allow_empty=allow_empty,
        base_snapshot_id=base,
        properties=properties,
    )
    if request is None:
        return tbl.latest_snapshot()
    return commit_or_abort(tbl.file_io, tbl.table_schema, request)
