"""The two free functions most users need: ``read_lake`` and ``write_lake``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import ray.data

from raylake.arguments import (
    check_keywords,
    check_mapping,
    check_optional_count,
    refuse_unknown_keywords,
)
from raylake.datasource._ray_compat import (
    READ_TASK_PARAMETERS,
    detected_read_parallelism,
    task_options_problem,
)
from raylake.datasource.datasink import LakeDatasink, SinkMode
from raylake.datasource.datasource import FilterLike, LakeDatasource
from raylake.errors import InvalidArgumentError, UnknownKeywordError
from raylake.table import Snapshot
from raylake.table.written_partitions import PartitionOverwriteMode

if TYPE_CHECKING:
    from ray.data import Dataset


def read_task_options(ray_remote_args: dict[str, Any] | None) -> dict[str, Any]:
    """Keyword arguments of ``ray.data.read_datasource`` for the read tasks' Ray options.

    Ray 2.60 deprecates ``read_datasource(ray_remote_args=...)`` in favour of named
    parameters (``num_cpus``, ``runtime_env``, ...): options it names go there, and only
    the rest (``scheduling_strategy``, ...) still travel as ``ray_remote_args``.
    """
    args = check_task_options("ray_remote_args", ray_remote_args) or {}
    named = {k: v for k, v in args.items() if k in READ_TASK_PARAMETERS}
    rest = {k: v for k, v in args.items() if k not in READ_TASK_PARAMETERS}
    return {**named, "ray_remote_args": rest} if rest else named


def check_task_options(name: str, options: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """``options`` (``ray_remote_args``) if Ray takes them for a task, checked here on the
    driver: Ray checks them only when it builds the tasks, after the read has planned or
    the write has started, and raises its own ValueError naming no argument of ours."""
    check_mapping(name, options)
    problem = None if options is None else task_options_problem(dict(options))
    if problem is not None:
        raise InvalidArgumentError(name, options, f"Ray task options ({problem})")
    return options


def check_task_option(name: str, value: object) -> None:
    """One Ray task option given by name (``num_cpus=``), checked as ``ray_remote_args``."""
    problem = None if value is None else task_options_problem({name: value})
    if problem is not None:
        raise InvalidArgumentError(name, value, f"a value Ray takes ({problem})")


def check_read_args(read_args: Mapping[str, Any]) -> dict[str, Any]:
    """The ``ray.data.read_datasource`` keywords of ``read_lake``, checked on the driver
    as ``ray_remote_args`` are (:func:`check_task_options`); a numpy ``concurrency`` as
    the Python int Ray takes."""
    if "parallelism" in read_args:
        # Ray's deprecated name of override_num_blocks, where difflib offers max_calls.
        keywords = _read_lake_keywords()
        raise UnknownKeywordError("read_lake", "parallelism", keywords, "override_num_blocks")
    check_keywords("read_lake", read_args, _read_lake_keywords())
    args = dict(read_args)
    if "concurrency" in args:
        args["concurrency"] = check_optional_count("concurrency", args["concurrency"])
    for key in READ_TASK_PARAMETERS & args.keys():
        check_task_option(key, args[key])
    return args


def read_lake(
    uri: str,
    *,
    columns: Sequence[str] | None = None,
    filter: FilterLike = None,
    snapshot_id: int | None = None,
    as_of: datetime | int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    override_num_blocks: int | None = None,
    ray_remote_args: dict[str, Any] | None = None,
    **read_args: Any,
) -> Dataset:
    """A Ray Dataset over a raylake table (one pinned snapshot); see :class:`LakeDatasource`.

    ``override_num_blocks`` caps the number of read tasks (each reads whole splits);
    without it, a table with fewer splits than Ray's default parallelism gets one task
    per split whose output blocks Ray does not cut further (``whole_task_blocks``).
    Other keyword arguments go to ``ray.data.read_datasource`` if it names them (``num_cpus``,
    ``concurrency``, ...). Any other keyword (``colums=``) is refused, naming the closest.
    """
    read_args = check_read_args(read_args)
    override_num_blocks = check_optional_count("override_num_blocks", override_num_blocks)
    read_options = read_task_options(ray_remote_args)
    source = LakeDatasource(
        uri,
        columns=columns,
        filter=filter,
        snapshot_id=snapshot_id,
        as_of=as_of,
        storage_options=storage_options,
    )
    if override_num_blocks is None:
        override_num_blocks = whole_task_blocks(source)
    return ray.data.read_datasource(
        source,
        override_num_blocks=override_num_blocks,
        **read_options,
        **read_args,
    )


def whole_task_blocks(source: LakeDatasource) -> int | None:
    """The number of read tasks Ray's default parallelism gives ``source`` when that is
    fewer than the parallelism itself, else None (Ray's default applies as is).

    With fewer tasks than its parallelism Ray cuts each task's output into that many
    pieces (``SplitBlocks``): a table of 4 splits became 64 blocks of ~1 MB, each one
    more object-store put, fetch and split-coordinator call per epoch, and the cut also
    keeps a following ``map_batches`` from fusing into the read. Asking for exactly the
    tasks Ray would make keeps the same tasks (``pack_splits`` packs ``min(parallelism,
    splits)`` groups either way) and their blocks whole.
    """
    parallelism = detected_read_parallelism(source)
    tasks = len(source.get_read_tasks(parallelism))
    # Nothing to read (every split pruned): nothing to cut, Ray's default as it was.
    return tasks if 0 < tasks < parallelism else None


@refuse_unknown_keywords
def _read_lake_keywords() -> frozenset[str]:
    """read_lake's own keywords and those ``ray.data.read_datasource`` names (not its
    ``**read_args``, which LakeDatasource takes none of)."""
    import inspect

    own = inspect.signature(read_lake).parameters.values()
    ray_params = inspect.signature(ray.data.read_datasource).parameters.values()
    named = (p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) for p in ray_params)
    passed = {p.name for p, ok in zip(ray_params, named) if ok} - {"datasource", "parallelism"}
    return frozenset(passed | {p.name for p in own if p.kind is p.KEYWORD_ONLY})


@refuse_unknown_keywords
def write_lake(
    ds: Dataset,
    uri: str,
    *,
    mode: SinkMode | None = None,
    schema: pa.Schema | None = None,
    create_if_missing: bool = True,
    partition_by: Sequence[str] | None = (),
    primary_key: Sequence[str] | None = (),
    buckets: int | None = None,
    options: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    commit_properties: Mapping[str, str] | None = None,
    concurrency: int | None = None,
    ray_remote_args: dict[str, Any] | None = None,
    schema_mode: str = "strict",
    partition_overwrite_mode: PartitionOverwriteMode = "static",
) -> Snapshot | None:
    """Write ``ds`` into the table at ``uri`` as one snapshot and return it.

    Returns None when there was nothing to commit (an empty dataset in append or
    upsert mode). See :class:`LakeDatasink` for modes and table creation.
    """
    if not isinstance(ds, ray.data.Dataset):
        raise InvalidArgumentError(
            "ds", ds, "a ray.data.Dataset (make one with ray.data.from_arrow or from_pandas)"
        )
    concurrency = check_optional_count("concurrency", concurrency)
    check_task_options("ray_remote_args", ray_remote_args)
    sink = LakeDatasink(
        uri,
        mode=mode,
        schema=schema,
        create_if_missing=create_if_missing,
        partition_by=partition_by,
        primary_key=primary_key,
        buckets=buckets,
        options=options,
        storage_options=storage_options,
        commit_properties=commit_properties,
        schema_mode=schema_mode,
        partition_overwrite_mode=partition_overwrite_mode,
    )
    sink.check_schema(_known_schema(ds))
    ds.write_datasink(
        sink,
        concurrency=concurrency,
        ray_remote_args=ray_remote_args,
    )
    return sink.snapshot


def _known_schema(ds: Dataset) -> Any:
    """The dataset's schema if Ray knows it without executing anything, else None.

    Checked on the driver before any task runs; an unknown schema (after a map) is
    checked by ``on_write_start`` when the first block arrives, still before any write
    task. Blocks whose schemas do not unify have no one schema: each is checked as it
    is written."""
    try:
        return ds.schema(fetch_if_missing=False)
    except pa.ArrowException:
        return None
