"""The arguments of a commit and of a partition overwrite, checked before anything is
committed (a wrong one commits nothing and leaves the written files for a corrected call)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from raylake.arguments import integer
from raylake.errors import InvalidArgumentError, UnsupportedOperationError
from raylake.expr import AlwaysTrue, Expr, as_expr
from raylake.format.schema import TableSchema
from raylake.table.commit import CommitRequest, check_partition_filter
from raylake.table.kind import WRITE_MODES
from raylake.table.writer import CommitMessage
from raylake.table.written_partitions import (
    WrittenPartitions,
    check_dynamic_mode,
    is_dynamic,
    partition_overwrite_mode_arg,
)


def check_rows_inside(
    partitions: Iterable[tuple[Any, ...]], ts: TableSchema, expr: Expr, *, where: str = "data"
) -> None:
    """A partition overwrite may not write rows outside the partitions it replaces."""
    from raylake.expr import bind, evaluate_python

    bound = bind(expr, ts.partition_schema)
    for partition in partitions:
        row = dict(zip(ts.partition_keys, partition))
        if not evaluate_python(bound, row):
            raise UnsupportedOperationError(
                f"overwrite_filter {expr} replaces only some partitions, but the {where} has "
                f"rows in partition {row}; nothing was committed"
            )


def check_messages_inside(
    messages: Sequence[CommitMessage], ts: TableSchema, overwrite: object
) -> None:
    """The same for a commit of writers' messages (Ray, Spark, ``Table.commit``): the
    partitions their new files lie in. Refused before anything is committed, with the
    files left for a corrected call."""
    if isinstance(overwrite, Expr) and not isinstance(overwrite, AlwaysTrue):
        written = dict.fromkeys(f.partition for m in messages for f in m.new_files)
        check_rows_inside(written, ts, overwrite, where="messages' data")


def messages_arg(messages: Any) -> list[CommitMessage]:
    """A list of the writers' CommitMessages, in the order they commit (a key's upserts
    in a later message win, so a set, whose order is arbitrary, is refused); anything
    else is refused, and the files of the messages it holds are left as they are, to be
    committed by a corrected call."""
    listed = isinstance(messages, Sequence) and not isinstance(messages, str)
    if listed and all(isinstance(m, CommitMessage) for m in messages):
        return list(messages)
    raise InvalidArgumentError(
        "messages", messages, "a list of CommitMessage (what prepare_commit() returns)"
    )


def check_commit_args(
    mode: Any, base_snapshot_id: Any, commit_user: Any, commit_identifier: Any
) -> tuple[int | None, int | None]:
    """The keywords of :meth:`Table.commit`; a wrong one commits nothing (a string
    ``commit_identifier`` used to be written, and the snapshot then failed to load).
    Returns ``base_snapshot_id`` and ``commit_identifier``, numpy's as Python ints (the
    snapshot file is JSON)."""
    if mode not in WRITE_MODES:
        raise InvalidArgumentError("mode", mode, f"one of {list(WRITE_MODES)}")
    base = integer(base_snapshot_id)
    if base_snapshot_id is not None and (base is None or base < 0):
        raise InvalidArgumentError(
            "base_snapshot_id", base_snapshot_id, "a snapshot id (an int >= 0) or None"
        )
    if not isinstance(commit_user, str):
        raise InvalidArgumentError("commit_user", commit_user, "a string")
    identifier = integer(commit_identifier)
    if commit_identifier is not None and identifier is None:
        raise InvalidArgumentError("commit_identifier", commit_identifier, "an int or None")
    return base, identifier


def overwrite_arg(
    mode: str,
    overwrite_filter: str | Expr | None,
    ts: TableSchema,
    partition_overwrite_mode: str = "static",
) -> Expr | WrittenPartitions | None:
    """What ``mode``, ``overwrite_filter`` and ``partition_overwrite_mode`` replace: None
    for no overwrite, AlwaysTrue for the whole table, a filter on partition columns only
    (checked here, before any data file is written), or, for a dynamic overwrite of a
    partitioned table, the partitions the data will be written into (known at commit)."""
    partition_overwrite_mode = partition_overwrite_mode_arg(partition_overwrite_mode)
    dynamic = partition_overwrite_mode == "dynamic"
    check_dynamic_mode(partition_overwrite_mode, mode)
    if mode != "overwrite":
        if overwrite_filter is not None:
            raise UnsupportedOperationError("overwrite_filter applies only to mode='overwrite'")
        return None
    if dynamic and overwrite_filter is not None:
        raise UnsupportedOperationError(
            "overwrite_filter names the partitions an overwrite replaces, "
            "partition_overwrite_mode='dynamic' replaces those the data is written into: "
            "give one of them"
        )
    if is_dynamic(mode, partition_overwrite_mode, ts.partition_keys):
        return WrittenPartitions.to_come(ts)
    overwrite = AlwaysTrue() if overwrite_filter is None else as_expr(overwrite_filter)
    check_partition_filter(overwrite, ts)
    return overwrite


def commit_request(
    messages: list[CommitMessage],
    overwrite: Expr | WrittenPartitions | None,
    *,
    allow_empty: bool,
    base_snapshot_id: int | None,
    commit_user: str = "",
    commit_identifier: int | None = None,
    properties: Mapping[str, str] | None = None,
) -> CommitRequest | None:
    """The request that commits checked arguments; None where there is nothing to commit
    (messages that add and remove nothing, no overwrite, no ``allow_empty``). A dynamic
    overwrite replaces the partitions the messages' files lie in: none where they wrote
    no rows, which commits nothing, as an append of no rows."""
    if isinstance(overwrite, WrittenPartitions):
        written = overwrite.written_by(messages)
        overwrite = written if written.values else None
    if overwrite is None and not allow_empty and all(m.is_empty for m in messages):
        return None
    return CommitRequest(
        messages=messages,
        kind="OVERWRITE" if overwrite is not None else "APPEND",
        overwrite=overwrite,
        base_snapshot_id=base_snapshot_id,
        commit_user=commit_user,
        commit_identifier=commit_identifier,
        properties=properties,
    )
