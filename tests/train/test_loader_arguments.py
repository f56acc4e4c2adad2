"""The loaders' epoch keywords are checked before any table is opened or any block read:
a wrong type or value raises InvalidArgumentError naming the keyword (a float batch size
used to fail deep in the read, ``shuffle="false"`` used to shuffle)."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import raylake
from raylake.arguments import check_count, check_flag, check_integer
from raylake.errors import InvalidArgumentError, SchemaArgumentError, StreamArgumentError
from raylake.streaming import StreamPosition
from raylake.train.ray import iter_torch_batches
from raylake.train.torch import LakeIterableDataset, LakeMapDataset, LakeStreamDataset

BAD = [
    ({"batch_size": 0}, "batch_size must be an int >= 1, got int 0"),
    ({"batch_size": 8.0}, "batch_size must be an int >= 1, got float 8.0"),
    ({"batch_size": False}, "batch_size must be an int >= 1, got bool False"),
    ({"batch_size": "4"}, "batch_size must be an int >= 1, got str '4'"),
    ({"shuffle": "false"}, "shuffle must be True or False, got str 'false'"),
    ({"seed": -2}, "seed must be an int >= 0, got int -2"),
    ({"seed": 1.5}, "seed must be an int >= 0, got float 1.5"),
    ({"drop_last": 1}, "drop_last must be True or False, got int 1"),
    ({"drop_last": None}, "drop_last must be True or False, got NoneType None"),
]


@pytest.mark.parametrize("loader", [LakeIterableDataset, LakeStreamDataset])
@pytest.mark.parametrize(("kwargs", "message"), BAD)
def test_a_torch_dataset_names_a_bad_keyword_before_opening_the_table(
    tmp_path: Any, loader: type, kwargs: dict[str, Any], message: str
) -> None:
    """Here there is no table: opening it would raise another error."""
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        loader(str(tmp_path / "no-table"), **kwargs)


@pytest.mark.parametrize("loader", [LakeIterableDataset, LakeMapDataset, LakeStreamDataset])
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"feature_columns": pd.Index(["x"])}, "feature_columns must be a list of column names"),
        ({"feature_columns": np.array(["x"])}, "feature_columns must be a list of column names"),
        ({"feature_columns": 5}, "feature_columns must be a list of column names, got int 5"),
        ({"feature_columns": [1]}, "feature_columns must be a list of column names (strings)"),
        ({"feature_columns": {"x", "y"}}, "in the order to stack them (a set has none)"),
        ({"label_column": ["y"]}, "label_column must be a column name or None, got list"),
    ],
)
def test_column_keywords_are_checked_before_opening_the_table(
    tmp_path: Any, loader: type, kwargs: dict[str, Any], message: str
) -> None:
    """A pandas Index or an int as ``feature_columns`` failed inside the layout, after the
    table was opened, with pandas' "truth value of an Index is ambiguous" or a bare
    TypeError; a set stacked its columns in an order that changes between runs."""
    with pytest.raises(SchemaArgumentError, match=re.escape(message)):
        loader(str(tmp_path / "no-table"), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"until_snapshot": "3"}, "until_snapshot must be an int >= 1 or None (no end), got str"),
        ({"until_snapshot": 0}, "until_snapshot must be an int >= 1 or None (no end), got int 0"),
        ({"until_snapshot": -1}, "until_snapshot must be an int >= 1"),
        ({"until_snapshot": 2.5}, "until_snapshot must be an int >= 1"),
        ({"until_snapshot": True}, "until_snapshot must be an int >= 1"),
        ({"idle_timeout": "5"}, "idle_timeout must be a number of seconds >= 0 or None, got str"),
        ({"idle_timeout": -1}, "idle_timeout must be a number of seconds >= 0 or None"),
        ({"idle_timeout": float("nan")}, "idle_timeout must be a number of seconds >= 0"),
    ],
)
def test_the_stream_keywords_are_checked_before_opening_the_table(
    tmp_path: Any, kwargs: dict[str, Any], message: str
) -> None:
    """As poll_interval was: ``until_snapshot=0`` read nothing, ``2.5`` two snapshots, and a
    string failed at the first poll."""
    with pytest.raises(StreamArgumentError, match=re.escape(message)):
        LakeStreamDataset(str(tmp_path / "no-table"), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shuffle_window": 0}, "shuffle_window must be an int >= 1"),
        ({"feed_bytes": 0}, "feed_bytes must be an int >= 1"),
        ({"feed_bytes": 1.5}, "feed_bytes must be an int >= 1"),
        ({"worker_file_sharing": "yes"}, "worker_file_sharing must be True or False"),
        ({"pin_memory": "false"}, "pin_memory must be True or False"),
        # Parsed as torch parses it, with no GPU needed ("cuda" is a device name here).
        ({"device": "bogus"}, "device must be a torch device ('cpu', 'cuda', 'cuda:1', a torch"),
        ({"device": "cuda:x"}, "device must be a torch device"),
        ({"device": 1.5}, "device must be a torch device"),
        ({"device": -1}, "device must be a torch device"),
    ],
)
def test_the_window_keywords_are_checked_too(
    tmp_path: Any, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        LakeIterableDataset(str(tmp_path / "no-table"), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"), [b for b in BAD if set(b[0]) <= {"batch_size", "drop_last"}]
)
def test_ray_batches_name_a_bad_keyword_before_reading_a_block(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):  # when called
        iter_torch_batches(None, **kwargs)  # never asked for a block


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"transform": 3}, "transform must be a callable or None, got int 3"),
        ({"feed_bytes": 0}, "feed_bytes must be an int >= 1, got int 0"),
    ],
)
def test_ray_batches_check_their_output_before_reading_a_block(
    kwargs: dict[str, Any], message: str
) -> None:
    """Not at the first batch, after Ray has started reading the dataset."""
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        iter_torch_batches(Blocks(), **kwargs)


class Blocks:
    """A stand-in for a Ray Dataset that must not be read."""

    def iter_batches(self, **kwargs: Any) -> Any:
        raise AssertionError("a block was read")


def test_checks_return_good_values_and_raise_both_type_and_value_errors() -> None:
    assert check_count("n", 3, 1) == 3
    assert check_flag("f", False) is False
    with pytest.raises(TypeError):
        check_flag("f", 0)
    with pytest.raises(ValueError):
        check_count("n", 0, 1)


def test_the_loaders_take_numpy_integers_as_ints(append_table: raylake.Table) -> None:
    """What ``for epoch in np.arange(n)`` and numpy configs give: the same batches as
    Python ints, and a saved position of plain ints (torch.load(weights_only=True) and
    json refuse numpy scalars)."""
    given = {"batch_size": 64, "seed": 3, "shuffle_window": 100, "rank": 1, "world_size": 2}
    as_numpy = {k: np.int64(v) for k, v in given.items()}
    plain = LakeIterableDataset(append_table, feature_columns=["x"], label_column="id", **given)
    numpy = LakeIterableDataset(
        append_table, feature_columns=["x"], label_column="id", read_ahead=np.int32(2),
        prefetch=np.int8(1), feed_bytes=np.uint64(1 << 24), loader_threads=np.int16(1),
        **as_numpy,
    )  # fmt: skip
    for epoch in np.arange(2):
        plain.set_epoch(int(epoch))
        numpy.set_epoch(epoch)
        ours, theirs = [b[1].tolist() for b in numpy], [b[1].tolist() for b in plain]
        assert ours == theirs and ours
    state = numpy.state_dict()
    assert json.loads(json.dumps(state)) == json.loads(json.dumps(plain.state_dict()))
    stream = LakeStreamDataset(
        append_table, columns=["x"], batch_size=np.int64(8), seed=np.int64(1), rank=np.int64(0),
        world_size=np.int64(1),
    )  # fmt: skip
    assert type(stream._config.batch_size) is int and type(stream._config.seed) is int
    # A snapshot id read from a DataFrame starts and ends a stream, as it time-travels.
    last = np.int64(append_table.latest_snapshot().id)  # type: ignore[union-attr]
    stream = LakeStreamDataset(append_table, columns=["x"], start=last, until_snapshot=last)
    assert type(stream._config.until_snapshot) is int
    assert stream._config.stream.start == StreamPosition(int(last), True)


def test_the_loaders_travel_in_time_as_of_a_time(tmp_path: Any) -> None:
    """Table.to_arrow, read_lake and raylake.spark.read take as_of beside snapshot_id; the
    training loaders took snapshot_id alone (as_of was an unknown keyword)."""
    tbl = raylake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    tbl.write(pa.table({"id": [1, 2]}))
    tbl.write(pa.table({"id": [3]}))
    first = tbl.snapshot(1)
    for as_of in (first.time, first.time_millis):
        iterable = LakeIterableDataset(tbl, columns=["id"], as_of=as_of, shuffle=False)
        assert iterable.snapshot_id == 1
        assert [i for b in iterable for i in b["id"].tolist()] == [1, 2]
        mapped = LakeMapDataset(tbl, columns=["id"], as_of=as_of)
        assert mapped.snapshot_id == 1 and len(mapped) == 2
    with pytest.raises(InvalidArgumentError, match="as_of must be None when snapshot_id"):
        LakeMapDataset(tbl, columns=["id"], snapshot_id=2, as_of=first.time)


def test_the_stream_dataset_takes_numpy_numbers_of_its_stream(append_table: raylake.Table) -> None:
    """until_snapshot, idle_timeout, start and poll_interval were refused as numpy numbers
    (StreamArgumentError), though its other counts take them; kept as Python numbers."""
    stream = LakeStreamDataset(
        append_table, columns=["x"], start=np.int64(1), poll_interval=np.float32(0.5),
        until_snapshot=np.int64(1), idle_timeout=np.int32(2),
    )  # fmt: skip
    config = stream._config
    taken = (config.stream.start, config.until_snapshot, config.idle_timeout)
    assert [type(v) for v in taken] == [StreamPosition, int, float] and taken[1:] == (1, 2.0)
    assert type(config.stream.poll_interval) is float
    assert sum(len(b["x"]) for b in stream) == append_table.count(snapshot_id=1)


def test_a_numpy_bool_is_not_an_int() -> None:
    with pytest.raises(InvalidArgumentError, match="batch_size must be an int >= 1"):
        check_integer("batch_size", np.True_, 1)
    assert check_integer("seed", np.int64(-1), None) == -1


def test_the_loaders_take_numpy_bools_as_flags(append_table: raylake.Table) -> None:
    """``shuffle=np.True_`` (what ``arr.any()`` or a numpy config gives) is True, as torch
    and tf.data take it; the strings and ints a flag refuses stay refused."""
    flags = {"shuffle": False, "drop_last": True}
    plain = LakeIterableDataset(append_table, columns=["id"], batch_size=64, **flags)
    numpy = LakeIterableDataset(
        append_table, columns=["id"], batch_size=64, pin_memory=np.False_,
        worker_file_sharing=np.False_, window_process=np.False_,
        **{k: np.bool_(v) for k, v in flags.items()},
    )  # fmt: skip
    assert [b["id"].tolist() for b in numpy] == [b["id"].tolist() for b in plain]
    assert json.dumps(numpy.state_dict()) == json.dumps(plain.state_dict())
    stream = LakeStreamDataset(append_table, columns=["id"], shuffle=np.True_, drop_last=np.True_)
    assert stream._config.shuffle is True and stream._config.drop_last is True
    assert check_flag("f", np.True_) is True
    with pytest.raises(InvalidArgumentError, match="f must be True or False, got int 1"):
        check_flag("f", 1)
