"""TensorFlow datasets over raylake tables (docs/training.md).

:func:`to_tf_dataset` builds a ``tf.data.Dataset`` whose ``output_signature`` comes
from the table schema, sharded exactly over ``tf.distribute`` input pipelines (an
``InputContext``) with equal step counts, in the same order as the PyTorch loader.

TensorFlow is imported on the first call, not with this module: importing it starts
TensorFlow's C++ logging (oneDNN and CPU feature lines on stderr) and configures absl
logging, which an import of raylake must not do.
"""

from __future__ import annotations

import importlib.util
import numbers
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from raylake.arguments import check_flag, check_integer, integer, refuse_unknown_keywords
from raylake.errors import InvalidArgumentError, MissingDependencyError

if importlib.util.find_spec("tensorflow") is None:
    raise MissingDependencyError("tensorflow", "tf")

if TYPE_CHECKING:
    import tensorflow as tf

from raylake.expr import Expr
from raylake.table import Table
from raylake.train.arrow_numpy import inner_shape, numpy_dtype
from raylake.train.convert import FEATURES, Converter, FillNull
from raylake.train.loader import Epochs, ShardedLoader
from raylake.train.passes import NumpyRunFeed
from raylake.train.setup import (
    DEFAULT_SHUFFLE_WINDOW,
    BatchSpec,
    TableRows,
    check_rank,
    open_source,
    structure,
)
from raylake.train.source import LakeSource


@refuse_unknown_keywords
def to_tf_dataset(
    table: str | Table,
    feature_columns: Sequence[str] | None = None,
    label_column: str | None = None,
    batch_size: int = 1024,
    *,
    columns: Sequence[str] | None = None,
    filter: str | Expr | None = None,
    snapshot_id: int | None = None,
    as_of: datetime | int | None = None,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    reshuffle_each_iteration: bool = True,
    drop_last: bool = False,
    shuffle_window: int = DEFAULT_SHUFFLE_WINDOW,
    dtype: Any = None,
    fill_null: FillNull = None,
    input_context: tf.distribute.InputContext | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    prefetch: bool = True,
    storage_options: Mapping[str, Any] | None = None,
) -> tf.data.Dataset:
    """A ``tf.data.Dataset`` of batches of a raylake table (one pinned snapshot: the
    latest, ``snapshot_id``, or the one current at ``as_of``, a datetime or epoch millis).

    Elements are ``(features, label)`` with the ``feature_columns`` stacked into one
    2-D tensor (cast to ``dtype``), or a dict of the ``columns`` (all by default; their
    floats cast to ``dtype``), and with a ``label_column`` ``(dict, label)``. The label
    keeps its type, as in the torch loaders. Types: ints, floats and bools as they
    are, strings as ``tf.string``, timestamps as int64 milliseconds, dates and times
    as their integer storage, fixed-size lists as 2-D tensors.

    Sharding: ``input_context`` (from ``strategy.distribute_datasets_from_function``)
    makes this dataset pipeline ``input_pipeline_id`` of ``num_input_pipelines``;
    ``rank``/``world_size`` say the same directly. Every pipeline reads a disjoint part
    and the same number of batches of ``batch_size`` (the per-replica batch size), and
    together they read the snapshot exactly once per pass. TensorFlow's own
    auto-sharding is turned off for a sharded dataset: it would shard a second time.

    Each new iteration (a Keras epoch) reads the next epoch's order (``epoch``,
    ``epoch + 1``, ...) unless ``reshuffle_each_iteration=False``.
    """
    tf = _tensorflow()
    prefetch = check_flag("prefetch", prefetch)
    reshuffle_each_iteration = check_flag("reshuffle_each_iteration", reshuffle_each_iteration)
    epoch = check_integer("epoch", epoch)  # here, not inside TensorFlow's iterator
    if input_context is not None:
        if not hasattr(input_context, "num_input_pipelines"):
            raise InvalidArgumentError(
                "input_context", input_context, "a tf.distribute.InputContext or None"
            )
        if rank is not None or world_size is not None:
            raise InvalidArgumentError(
                "input_context",
                input_context,
                "None where rank/world_size are given (one or the other)",
            )
        given = input_context.input_pipeline_id, input_context.num_input_pipelines
        rank, world_size = integer(given[0]), integer(given[1])
        # InputContext takes any numbers: a wrong one would fail inside TensorFlow's iterator.
        if rank is None or world_size is None or not 0 <= rank < world_size:
            raise InvalidArgumentError(
                "input_context",
                input_context,
                "an InputContext whose input_pipeline_id is an int in [0, "
                f"num_input_pipelines) (it has input_pipeline_id={given[0]!r}, "
                f"num_input_pipelines={given[1]!r})",
            )
    else:
        rank, world_size = check_rank(rank, world_size)
    sharded = world_size is not None and world_size > 1
    rank, world_size = rank or 0, world_size or 1

    epochs = Epochs(batch_size, shuffle, seed, drop_last, shuffle_window)
    np_dtype = None if dtype is None else np.dtype(_tf_dtype(tf, dtype).as_numpy_dtype)
    spec = BatchSpec(
        columns,
        feature_columns,
        label_column,
        "TensorFlow tensors",
        np_dtype,
        fill_null,
        strings=True,
    )
    rows = TableRows(table, filter, snapshot_id, storage_options, as_of)
    source, converter = open_source(rows, spec)
    layout = converter.layout
    loader = ShardedLoader(source, converter, epochs)
    batch = None if not drop_last else epochs.batch_size
    signature = output_signature(source, converter, batch, runs=True)
    passes = [0]

    def generate() -> Iterator[Any]:
        loader.set_epoch(epoch + passes[0] if reshuffle_each_iteration else epoch)
        passes[0] += 1
        for block in loader.batches(rank, world_size, 0, 1, NumpyRunFeed()):
            yield structure(layout, block)

    # Runs of batches (views of a window) cross into TensorFlow as one element each and
    # are split there: the per-element conversion of from_generator is paid per run
    # (about a window), not per batch.
    ds = tf.data.Dataset.from_generator(generate, output_signature=signature).unbatch()
    # The exact step count (the same on every pipeline) lets Keras size its epochs.
    ds = ds.apply(tf.data.experimental.assert_cardinality(loader.steps(world_size)))
    if sharded:
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        ds = ds.with_options(options)
    if prefetch:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    return ds


def output_signature(
    source: LakeSource, converter: Converter, batch: int | None, runs: bool = False
) -> Any:
    """The ``tf.TensorSpec`` structure of the batches, from the table schema (``runs``:
    of runs of batches, ``(k, batch, ...)``)."""
    lead: tuple[int | None, ...] = (None, batch) if runs else (batch,)
    tf = _tensorflow()
    layout = converter.layout
    schema = source.schema

    def spec(name: str, cast: bool = True) -> Any:
        dtype = schema.field(name).type
        np_type = numpy_dtype(dtype)
        if cast and converter.dtype is not None and np_type.kind == "f":
            np_type = converter.dtype
        tf_type = tf.string if np_type == np.dtype(object) else tf.as_dtype(np_type)
        return tf.TensorSpec((*lead, *inner_shape(dtype)), tf_type, name=name)

    specs = {c: spec(c) for c in layout.named}
    if layout.label is not None:
        # The label keeps its type, as the converter and the torch loaders keep it:
        # from_generator would cast it to the signature's (a float64 price to float16, inf).
        specs[layout.label] = spec(layout.label, cast=False)
    if layout.features is not None:
        width = (*lead, converter.features_width)
        specs[FEATURES] = tf.TensorSpec(width, tf.as_dtype(converter.features_dtype))
    return structure(layout, specs)  # the batches' own structure


def _tensorflow() -> Any:
    try:
        import tensorflow
    except ImportError as exc:  # found but broken, e.g. a missing shared library
        raise MissingDependencyError("tensorflow", "tf") from exc
    return tensorflow


def _tf_dtype(tf: Any, dtype: Any) -> Any:
    """``dtype`` as a TensorFlow dtype (``tf.float32``, ``np.float32`` or ``"float32"``);
    a number is refused, though ``tf.as_dtype`` takes one as an enum value (5 and
    np.int64(5) are int16, 1.0 and np.True_ float32),
    and so is a dtype that numbers are not cast to (strings, resources, quantized
    types): TensorFlow's iterator failed on them at the first batch, or a KeyError."""
    refused = InvalidArgumentError(
        "dtype", dtype, "a numeric TensorFlow or numpy dtype (tf.float32, np.float32, 'float32')"
    )
    if isinstance(dtype, numbers.Number | np.bool_):
        raise refused
    try:
        tf_dtype = tf.as_dtype(dtype)
    except TypeError:
        raise refused from None
    numeric = tf_dtype.is_bool or tf_dtype.is_integer or tf_dtype.is_floating
    if tf_dtype.is_quantized or not (numeric or tf_dtype.is_complex):
        raise refused
    return tf_dtype
