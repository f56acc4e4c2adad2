"""Ray Data to torch without Ray's per-batch conversions (docs/training.md, "Ray Train").

``iter_torch_batches(shard, ...)`` takes a Ray ``Dataset`` or the ``DataIterator``
of ``ray.train.get_dataset_shard``, asks Ray for whole blocks as Arrow tables (zero
copies out of the object store), converts each block once with the loaders' columnar
converter, and cuts zero-copy batches from it: the per-batch work is a slice.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

from raylake.arguments import check_count, check_flag
from raylake.errors import InvalidArgumentError
from raylake.train.convert import FillNull
from raylake.train.stream import Block, cut
from raylake.train.torch import TensorBatches, torch_spec


def iter_torch_batches(
    data: Any,
    *,
    feature_columns: Sequence[str] | None = None,
    label_column: str | None = None,
    columns: Sequence[str] | None = None,
    batch_size: int = 1024,
    drop_last: bool = False,
    dtype: Any = None,
    fill_null: FillNull = None,
    device: Any = None,
    transform: Any = None,
    prefetch_blocks: int = 1,
) -> Iterator[Any]:
    """Batches of tensors from a Ray ``Dataset`` or ``DataIterator``, shaped as the Lake
    datasets shape them: ``(features, label)``, a dict of tensors, or ``(dict, label)``."""
    check_count("batch_size", batch_size, 1)
    check_flag("drop_last", drop_last)
    check_count("prefetch_blocks", prefetch_blocks)
    if not hasattr(data, "iter_batches"):
        raise InvalidArgumentError(
            "data", data, "a ray.data.Dataset or DataIterator (ray.train.get_dataset_shard)"
        )
    spec = torch_spec(columns, feature_columns, label_column, dtype, fill_null)
    tables = iter(
        data.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=prefetch_blocks)
    )
    first = next(tables, None)
    if first is None:
        return
    converter = spec.converter(first.schema)
    output = TensorBatches(converter.layout, dtype, transform, device, False)
    blocks: Iterator[Block] = (converter(t) for t in itertools.chain([first], tables))
    for block in cut(blocks, itertools.repeat(batch_size)):
        if drop_last and len(next(iter(block.values()))) < batch_size:
            return
        yield output(block)
