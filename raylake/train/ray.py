"""Ray Data to torch, a block at a time (docs/training.md, "Ray Train").

``iter_torch_batches(shard, ...)`` takes a Ray ``Dataset`` or the ``DataIterator``
of ``ray.train.get_dataset_shard``, asks Ray for whole blocks as Arrow tables (zero
copies out of the object store), and makes each block a window of the loaders'
window path (raylake/train/windows.py): converted once with the columnar converter
and, with a CUDA ``device``, packed into pinned memory and copied to the GPU once, on
a side stream, while the trainer takes the previous block's batches. A batch is a
view: no per-batch conversion, pin or copy (Ray's own ``iter_torch_batches`` makes
each of those per batch).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from raylake.arguments import check_callable, check_flag, check_integer, refuse_unknown_keywords
from raylake.errors import InvalidArgumentError
from raylake.train.convert import FillNull
from raylake.train.passes import Pass, close
from raylake.train.prefetch import background
from raylake.train.stats import FeedRecorder, FeedStats
from raylake.train.tensors import TensorBatches, check_device, torch_spec
from raylake.train.windows import DEFAULT_FEED_BYTES


@refuse_unknown_keywords
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
    feed_bytes: int = DEFAULT_FEED_BYTES,
) -> RayBatches:
    """Batches of tensors from a Ray ``Dataset`` or ``DataIterator``, shaped as the Lake
    datasets shape them: ``(features, label)``, a dict of tensors, or ``(dict, label)``.

    As Ray's own ``iter_torch_batches``, the result is an iterable whose every iteration
    reads the data again (one epoch each). Its ``stats()`` tells how the latest pass fed
    the trainer, as the Lake datasets' ``ds.stats()`` does (docs/training.md, "Is the
    GPU starved?"); Ray's blocks are its windows. Nothing is read before the first
    batch is asked for."""
    batch_size = check_integer("batch_size", batch_size, 1)
    drop_last = check_flag("drop_last", drop_last)
    prefetch_blocks = check_integer("prefetch_blocks", prefetch_blocks)
    device = check_device(device)
    # Checked here as the output's others are, not at the first block Ray has read.
    check_callable("transform", transform)
    feed_bytes = check_integer("feed_bytes", feed_bytes, 1)
    if not hasattr(data, "iter_batches"):
        raise InvalidArgumentError(
            "data", data, "a ray.data.Dataset or DataIterator (ray.train.get_dataset_shard)"
        )
    spec = torch_spec(columns, feature_columns, label_column, dtype, fill_null)

    def start(recorder: FeedRecorder) -> Iterator[tuple[Any, int]]:
        return _batches(
            data, spec, batch_size, drop_last, dtype, device, transform, prefetch_blocks,
            feed_bytes, recorder,
        )  # fmt: skip

    return RayBatches(start)


class RayBatches(Iterable[Any]):
    """What :func:`iter_torch_batches` returns: as Ray's own, an iterable whose every
    ``iter()`` is a new pass over the data, so a loop over epochs that holds it reads
    every epoch (a single pass read the first epoch and then nothing, without a word).
    ``next()`` takes the next batch of the pass in progress (the first pass, at first)."""

    def __init__(self, start: Callable[[FeedRecorder], Iterator[tuple[Any, int]]]) -> None:
        self._start = start
        self._pass: Pass | None = None
        self._recorder = FeedRecorder()

    def __iter__(self) -> Pass:
        self.close()  # one pass at a time: an earlier one left mid-way stops its threads
        self._recorder = FeedRecorder()
        self._pass = Pass(self._start(self._recorder), [], self._recorder)
        return self._pass

    def __next__(self) -> Any:
        return next(self._pass if self._pass is not None else iter(self))

    def stats(self) -> FeedStats:
        """How the pass in progress, or the last one, fed the trainer."""
        return self._recorder.snapshot()

    def close(self) -> None:
        """Stop the pass in progress (its threads are joined)."""
        if self._pass is not None:
            self._pass.close()


def _batches(
    data: Any,
    spec: Any,
    batch_size: int,
    drop_last: bool,
    dtype: Any,
    device: Any,
    transform: Any,
    prefetch_blocks: int,
    feed_bytes: int,
    recorder: FeedRecorder,
) -> Iterator[tuple[Any, int]]:
    tables = iter(
        data.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=prefetch_blocks)
    )
    first = next(tables, None)
    if first is None:
        return
    converter = spec.converter(first.schema)
    output = TensorBatches(converter.layout, dtype, transform, device, False, 0, feed_bytes)
    feed = output.feed(recorder)
    convert = converter.columns_first if feed.device_layout else converter
    blocks = (convert(t) for t in itertools.chain([first], tables))
    windows = feed.windows(blocks)
    # The next block converted and copied on a thread while this one's batches are taken.
    ahead = background(windows, 1, "raylake-convert")
    batches = feed.batches(ahead, itertools.repeat(batch_size))
    try:
        for batch, rows in batches:
            if drop_last and rows < batch_size:
                return
            yield batch, rows
    finally:
        for stage in (batches, ahead, windows, blocks):
            close(stage)
