"""LakeDatasource: a raylake table as a Ray Data datasource, with pushdown.

Planning happens once per datasource on the driver, from manifests only; the plan
is cached and invalidated when Ray pushes a projection or predicate into a copy.
Read tasks are module-level functions bound with ``functools.partial`` to a
:class:`~raylake.table.scan.ReadContext` and the splits they read — never to the
datasource or a table — so that a serialized task stays a few kilobytes
(ray-project/ray#49107 shows what capturing ``self`` costs).
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask
from ray.data.expressions import Expr as RayExpr

from raylake.arguments import refuse_unknown_keywords
from raylake.datasource._ray_compat import BATCH_SIZE_STUB_COLUMN, column_references
from raylake.datasource.ray_expr import from_ray_expr, render, split_ray_predicate
from raylake.errors import FilterArgumentError, FilterError, UnknownColumnError
from raylake.expr import AlwaysTrue, Expr, and_, as_expr
from raylake.table import Split, TableScan, open_table
from raylake.table.counting import metadata_total
from raylake.table.rowfilter import filter_rows, widen
from raylake.table.scan import ReadContext
from raylake.table.visible import refuse_process_local

if TYPE_CHECKING:
    from ray.data.context import DataContext

FilterLike = str | Expr | RayExpr | None
S = TypeVar("S")


class LakeDatasource(Datasource):
    """Read a raylake table with ``ray.data.read_datasource(LakeDatasource(uri, ...))``.

    The snapshot is pinned when the datasource is created (the latest one unless
    ``snapshot_id`` or ``as_of`` choose another), so every read task of the dataset
    sees the same table. ``filter`` takes a string, a raylake expression or a Ray Data
    expression; Ray's ``select_columns`` and ``filter(expr=...)`` are pushed down too.
    """

    @refuse_unknown_keywords
    def __init__(
        self,
        uri: str,
        *,
        columns: Sequence[str] | None = None,
        filter: FilterLike = None,
        snapshot_id: int | None = None,
        as_of: datetime | int | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        refuse_process_local(uri, "read_lake")
        tbl = open_table(uri, storage_options=storage_options)
        # Time travel reads the snapshot's own schema: resolve it before the columns.
        scan = tbl.scan(snapshot_id=snapshot_id, as_of=as_of).pin()
        scan = scan.select(columns)  # a str is refused (columns_arg), never split up
        self._scan: TableScan = scan.where(
            _to_raylake_filter(filter, scan.table_schema.arrow_schema)
        )
        self._empty = self._scan.snapshot() is None
        self._residual: RayExpr | None = None
        self._projection_map: dict[str, str] | None = None
        self._plan_cache: list[Split] | None = None

    def __repr__(self) -> str:
        return (
            f"LakeDatasource({self._scan.file_io.uri!r}, snapshot={self._scan.snapshot_id}, "
            f"columns={self._output_columns()}, filter={self._scan.filter})"
        )

    def get_name(self) -> str:
        return "Lake"

    @property
    def snapshot_id(self) -> int | None:
        """The snapshot this datasource reads (None for a table without snapshots)."""
        return self._scan.snapshot_id

    # -- pushdown --------------------------------------------------------------------

    def supports_projection_pushdown(self) -> bool:
        return True

    def supports_predicate_pushdown(self) -> bool:
        return True

    def apply_projection(self, projection_map: dict[str, str] | None) -> LakeDatasource:
        """Read only the columns Ray asks for (renames stay in Ray's Project)."""
        if projection_map is None:
            return self
        current = self._output_columns()
        # A column the dataset lacks was dropped here, and Ray's stub column came back in
        # its place: refuse it on the driver, as ``columns=`` does.
        _check_known(projection_map, current, "select_columns")
        wanted = [c for c in projection_map if c in current]
        clone = self._copy()
        clone._projection_map = {c: c for c in wanted}
        clone._scan = self._scan.select(wanted)
        return clone

    def apply_predicate(self, predicate_expr: RayExpr) -> LakeDatasource:
        """Push the conjuncts raylake can evaluate exactly; keep the rest in the read task.

        Ray drops its ``Filter`` once a datasource accepts a predicate, so every part of
        it must be applied here: convertible terms prune files by statistics and filter
        rows in pyarrow; the others are evaluated on each batch with Ray's own pyarrow
        lowering. Either way the filter runs after a primary-key merge, so an older
        version of a row cannot resurface (the scan prunes only by key statistics).
        """
        _check_known(column_references(predicate_expr), self._output_columns(), "filter")
        split = split_ray_predicate(predicate_expr, self._scan.table_schema.arrow_schema)
        if split.residual is not None:
            _check_residual(split.residual, self._scan.table_schema.arrow_schema)
        clone = self._copy()
        clone._scan = self._scan.where(and_(self._scan.filter, split.pushed))
        if split.residual is not None:
            residual = split.residual
            clone._residual = residual if self._residual is None else self._residual & residual
        current = self._predicate_expr
        clone._predicate_expr = predicate_expr if current is None else current & predicate_expr
        return clone

    def _copy(self) -> LakeDatasource:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone._plan_cache = None
        return clone

    # -- planning --------------------------------------------------------------------

    def _splits(self) -> list[Split]:
        if self._plan_cache is None:
            self._plan_cache = [] if self._empty else self._scan.plan()
        return self._plan_cache

    def _output_columns(self) -> list[str]:
        columns = self._scan.columns
        return list(columns) if columns is not None else self._scan.table_schema.column_names

    def estimate_inmemory_data_size(self) -> int | None:
        """In-memory Arrow bytes of the projected columns, from manifest statistics."""
        return sum(s.size_bytes for s in self._splits())

    def get_read_tasks(
        self,
        parallelism: int,
        per_task_row_limit: int | None = None,
        data_context: DataContext | None = None,
    ) -> list[ReadTask]:
        """At most ``parallelism`` tasks, balanced by bytes; each reads whole splits (a
        contiguous run of them when Ray preserves order)."""
        splits = self._splits()
        output_schema = self._scan.output_schema
        if not splits:
            # One task that yields an empty block, so the dataset's schema stays known.
            metadata = BlockMetadata(num_rows=0, size_bytes=0, input_files=(), exec_stats=None)
            read_empty = functools.partial(_empty_block, output_schema)
            return [ReadTask(read_empty, metadata, schema=output_schema)]
        context, residual = self._read_context()
        tasks = []
        for group in pack_splits(splits, parallelism, in_order=_preserve_order(data_context)):
            read_fn = functools.partial(
                read_splits, context, tuple(group), residual, tuple(output_schema.names)
            )
            metadata = BlockMetadata(
                num_rows=self._exact_rows(group),
                size_bytes=sum(s.size_bytes for s in group),
                input_files=_input_files(context, group),
                exec_stats=None,
            )
            tasks.append(
                ReadTask(
                    read_fn, metadata, schema=output_schema, per_task_row_limit=per_task_row_limit
                )
            )
        return tasks

    def _exact_rows(self, group: Sequence[Split]) -> int | None:
        """Rows from manifests alone; None when a filter or a key merge may drop rows."""
        if not isinstance(self._scan.filter, AlwaysTrue) or self._residual is not None:
            return None
        return metadata_total(self._scan.read_context(), group)

    def _read_context(self) -> tuple[ReadContext, pc.Expression | None]:
        """The context read tasks carry, widened by the columns a residual filter needs."""
        context = self._scan.read_context()
        if self._residual is None:
            return context, None
        residual = self._residual.to_pyarrow()
        needed = column_references(self._residual)
        columns = widen(self._scan.columns, needed, self._scan.table_schema.column_names)
        if columns is not None:
            context = self._scan.select(columns).read_context()
        return context, residual


def _split_bytes(split: Any) -> int:
    return int(split.size_bytes)


def pack_splits(
    splits: Sequence[S],
    parallelism: int,
    weight: Callable[[S], int] = _split_bytes,
    *,
    in_order: bool = False,
) -> list[list[S]]:
    """Pack splits into ``min(parallelism, len(splits))`` groups of about equal ``weight``
    (bytes).

    Largest first onto the lightest group (LPT), then each group and the groups are
    put back in plan order, so a read is deterministic and a retried task yields
    the same blocks in the same order. A group may then hold splits that are not
    adjacent, so reading the groups one after another is not plan order: with
    ``in_order`` each group is a contiguous run of the plan instead
    (:func:`contiguous_groups`), less balanced where sizes are skewed.
    """
    count = max(1, min(parallelism, len(splits)))
    weights = [max(weight(s), 1) for s in splits]
    if in_order and splits:
        bounds = contiguous_groups(weights, count)
        return [list(splits[a:b]) for a, b in itertools.pairwise(bounds)]
    heap = [(0, g) for g in range(count)]
    members: list[list[int]] = [[] for _ in range(count)]
    order = sorted(range(len(splits)), key=lambda i: (-weights[i], i))
    for i in order:
        total, g = heapq.heappop(heap)
        members[g].append(i)
        heapq.heappush(heap, (total + weights[i], g))
    groups = sorted((sorted(m) for m in members if m), key=lambda m: m[0])
    return [[splits[i] for i in m] for m in groups]


def contiguous_groups(weights: Sequence[int], count: int) -> list[int]:
    """Cut ``weights`` (positive) into ``count`` non-empty runs, as few as there are
    weights, whose largest total is the least possible; the runs' bounds, from 0 to
    ``len(weights)``.

    The least largest total is found by bisection over a greedy fill (fill a run up
    to the bound, then start the next), O(n log total); the last runs are cut into
    single weights where needed to make ``count`` runs, which never raises the largest.
    """
    count = min(count, len(weights))
    low, high = max(weights, default=0), sum(weights)
    while low < high:
        bound = (low + high) // 2
        if len(_fill(weights, bound, 0)) - 1 <= count:
            high = bound
        else:
            low = bound + 1
    return _fill(weights, low, count)


def _fill(weights: Sequence[int], bound: int, count: int) -> list[int]:
    """Greedy runs of at most ``bound`` in total, but no fewer than ``count``: once the
    weights left are no more than the runs still to start, each starts one."""
    bounds, total = [0], 0
    for i, w in enumerate(weights):
        runs = len(bounds)  # started so far, the one being filled included
        if i > bounds[-1] and (total + w > bound or len(weights) - i <= count - runs):
            bounds.append(i)
            total = 0
        total += w
    bounds.append(len(weights))
    return bounds


def _preserve_order(data_context: DataContext | None) -> bool:
    """Whether Ray keeps the order of blocks; read on the driver, where Ray plans."""
    from ray.data.context import DataContext

    context = data_context or DataContext.get_current()
    return bool(context.execution_options.preserve_order)


def read_splits(
    context: ReadContext,
    splits: tuple[Split, ...],
    residual: pc.Expression | None,
    output_columns: tuple[str, ...],
) -> Iterator[pa.Table]:
    """The body of one read task: stream each batch as a small Arrow table.

    Ray's output buffer coalesces batches into blocks of ``target_max_block_size`` and
    slices larger ones, so a large split becomes several blocks without this function
    holding more than one batch.
    """
    columns = None if residual is None else output_columns
    batches = filter_rows(context.read_all(splits), residual, columns)
    empty = context.output_schema.empty_table().select(list(output_columns))
    for block in blocks_of(batches, empty):
        yield _keep_row_count(block)


def blocks_of(batches: Iterable[pa.RecordBatch], empty: pa.Table) -> Iterator[pa.Table]:
    """Each non-empty batch as a small Arrow table, or ``empty`` when there is none: one
    empty block keeps the schema known downstream."""
    found = False
    for batch in batches:
        if batch.num_rows:
            found = True
            yield pa.Table.from_batches([batch])
    if not found:
        yield empty


def _empty_block(schema: pa.Schema) -> Iterator[pa.Table]:
    yield schema.empty_table()


def _keep_row_count(block: pa.Table) -> pa.Table:
    """A zero-column block (``count()``, ``select_columns([])``) keeps its rows.

    ``pa.concat_tables`` of zero-column tables has zero rows, so Ray's output buffer
    would lose them; Ray's Parquet source adds the same all-null stub column, which
    Ray Data recognizes and drops.
    """
    if block.num_columns or not block.num_rows:
        return block
    return block.append_column(BATCH_SIZE_STUB_COLUMN, pa.nulls(block.num_rows))


def _input_files(context: ReadContext, group: Sequence[Split]) -> tuple[str, ...]:
    paths = dict.fromkeys(path for split in group for path in split.paths)
    return tuple(context.file_io.full_path(p) for p in paths)


def _check_known(columns: Iterable[str], known: list[str], where: str) -> None:
    for name in columns:
        if name not in known:
            raise UnknownColumnError(name, known, owner="the dataset", where=where)


def _check_residual(residual: RayExpr, schema: pa.Schema) -> None:
    """Evaluate the terms the read tasks will evaluate on an empty table, on the driver:
    one pyarrow cannot type (a string column compared with an int) fails here as a
    FilterError naming it, not as Arrow's error from inside every read task."""
    try:
        schema.empty_table().filter(residual.to_pyarrow())
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise FilterError(f"cannot evaluate the filter `{render(residual)}`: {exc}") from exc


def _to_raylake_filter(filter: FilterLike, schema: pa.Schema) -> Expr:
    if isinstance(filter, RayExpr):
        return from_ray_expr(filter, schema)
    if filter is None or isinstance(filter, (str, Expr)):
        return as_expr(filter)
    raise FilterArgumentError(
        "filter",
        filter,
        "a filter string, a raylake expression, a ray.data.expressions.Expr or None",
    )
