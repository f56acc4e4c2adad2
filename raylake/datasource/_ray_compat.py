"""The few Ray Data internals raylake relies on, imported in one place.

Ray does not promise these names; tests/datasource/test_ray_compat.py fails
loudly when a Ray upgrade moves or changes one, instead of a read quietly
losing rows or a filter's columns.
"""

from __future__ import annotations

import inspect
from typing import Any

import ray.data
from ray._common.ray_option_utils import validate_task_options
from ray._private.auto_init_hook import auto_init_ray
from ray.data._internal.arrow_block import (
    _BATCH_SIZE_PRESERVING_STUB_COL_NAME as BATCH_SIZE_STUB_COLUMN,
)
from ray.data._internal.execution.interfaces import TaskContext
from ray.data._internal.planner.plan_expression.expression_visitors import (
    _ColumnReferenceCollector,
)
from ray.data._internal.util import _autodetect_parallelism
from ray.data.expressions import Expr as RayExpr

__all__ = [
    "BATCH_SIZE_STUB_COLUMN",
    "READ_TASK_PARAMETERS",
    "TaskContext",
    "column_references",
    "detected_read_parallelism",
    "task_options_problem",
]

# Ray options that ``read_datasource`` takes as named parameters in this Ray version
# (2.60 deprecates passing them in ``ray_remote_args``).
READ_TASK_PARAMETERS = frozenset(
    {
        "num_cpus",
        "num_gpus",
        "memory",
        "label_selector",
        "fallback_strategy",
        "max_calls",
        "resources",
        "accelerator_type",
        "runtime_env",
    }
    & set(inspect.signature(ray.data.read_datasource).parameters)
)


def column_references(expr: RayExpr) -> set[str]:
    """The column names a Ray Data expression reads."""
    collector = _ColumnReferenceCollector()
    collector.visit(expr)
    return set(collector.get_column_refs() or [])


def detected_read_parallelism(source: ray.data.Datasource) -> int:
    """The read parallelism Ray picks for ``source`` when none is given (its default of
    200 bounded by block sizes and the cluster's CPUs), as its SetReadParallelism rule
    computes it (it counts the cluster's CPUs, so Ray starts here as ``read_datasource``
    would start it)."""
    auto_init_ray()
    ctx = ray.data.DataContext.get_current()
    parallelism, _, _ = _autodetect_parallelism(-1, ctx.target_max_block_size, ctx, source)
    return int(parallelism)


def task_options_problem(options: dict[str, Any]) -> str | None:
    """What Ray's own check of task options (``ray.remote(**options)``) refuses in
    ``options``, or None: Ray makes it only when it builds the tasks, after the read or
    write has started."""
    try:
        validate_task_options(options, in_options=False)
    except (TypeError, ValueError) as e:
        return str(e)
    return None
