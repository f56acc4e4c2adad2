"""to_tf_dataset: signatures from the schema, values, InputContext sharding, model.fit."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from conftest import FILTER, expected_ids
from test_convert import TYPES, N, typed_rows

import raylake
from raylake.errors import InvalidArgumentError, UnsupportedTypeError

tf = pytest.importorskip("tensorflow")
from raylake.train.tf import to_tf_dataset  # noqa: E402

TF_COLUMNS = ["id", "i8", "u8", "i32", "f16", "f32", "f64", "b", "ts", "d32", "emb", "grid", "s"]


@pytest.fixture(scope="module")
def typed(tmp_path_factory: pytest.TempPathFactory) -> raylake.Table:
    tbl = raylake.create_table(str(tmp_path_factory.mktemp("tf") / "t"), TYPES)
    tbl.write(typed_rows())
    return tbl


def test_signature_and_values_of_every_type(typed: raylake.Table) -> None:
    ds = to_tf_dataset(typed, columns=TF_COLUMNS, label_column="i32", batch_size=N, shuffle=False)
    features, label = ds.element_spec
    assert {k: (v.dtype, tuple(v.shape)) for k, v in features.items()} == {
        "id": (tf.int64, (None,)),
        "i8": (tf.int8, (None,)),
        "u8": (tf.uint8, (None,)),
        "f16": (tf.float16, (None,)),
        "f32": (tf.float32, (None,)),
        "f64": (tf.float64, (None,)),
        "b": (tf.bool, (None,)),
        "ts": (tf.int64, (None,)),
        "d32": (tf.int32, (None,)),
        "emb": (tf.float32, (None, 3)),
        "grid": (tf.int16, (None, 2, 2)),
        "s": (tf.string, (None,)),
    }
    assert (label.dtype, tuple(label.shape)) == (tf.int32, (None,))
    ((values, labels),) = list(ds)
    ids = values["id"].numpy()
    assert sorted(ids.tolist()) == list(range(N))
    assert [s.decode() for s in values["s"].numpy()] == [f"s{i}" for i in ids]
    assert values["ts"].numpy().tolist() == [1_704_067_200_000 + 1500 * i for i in ids]
    assert values["emb"].numpy()[:, 0].tolist() == ids.tolist()
    assert values["b"].numpy().tolist() == [i % 2 == 0 for i in ids]
    assert labels.numpy().tolist() == ids.tolist()


def test_stacked_features_static_shapes_and_refusals(typed: raylake.Table) -> None:
    ds = to_tf_dataset(typed, ["f32", "emb"], "b", batch_size=8, drop_last=True, dtype=tf.float16)
    features, label = ds.element_spec
    assert tuple(features.shape) == (8, 4) and features.dtype == tf.float16
    assert tuple(label.shape) == (8,) and label.dtype == tf.bool
    assert int(ds.cardinality()) == N // 8
    with pytest.raises(UnsupportedTypeError, match="'s'"):
        to_tf_dataset(typed, ["f32", "s"])
    with pytest.raises(UnsupportedTypeError, match="'dec'"):
        to_tf_dataset(typed, columns=["dec"])


@pytest.mark.parametrize(
    ("column", "fix"),
    [
        ("st", "write the fields to train on as columns of their own"),
        ("mp", "write the values to train on as columns of their own"),
        ("nul", "give it a type with update_schema"),
    ],
)
def test_structs_maps_and_null_columns_are_refused_with_a_fix(
    typed: raylake.Table, column: str, fix: str
) -> None:
    with pytest.raises(UnsupportedTypeError, match=f"'{column}'.*TensorFlow.*{fix}"):
        to_tf_dataset(typed, columns=["id", column])


@pytest.mark.parametrize("pipelines", [1, 2, 3])
def test_input_context_sharding_reads_each_row_once(table: raylake.Table, pipelines: int) -> None:
    seen: Counter[int] = Counter()
    steps = set()
    for i in range(pipelines):
        ctx = tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=i)
        ds = to_tf_dataset(
            table, ["id", "x"], "label", batch_size=16, filter=FILTER, input_context=ctx
        )
        batches = [f.numpy()[:, 0].astype(int).tolist() for f, _ in ds]
        assert len(batches) == int(ds.cardinality())
        steps.add(len(batches))
        seen.update(i for b in batches for i in b)
    assert len(steps) == 1
    expected = expected_ids(table, FILTER)
    assert set(seen) == set(expected) and sum(seen.values()) - len(expected) <= pipelines - 1


def test_same_order_as_torch_and_reshuffled_per_iteration(append_table: raylake.Table) -> None:
    from raylake.train.torch import LakeIterableDataset

    ds = to_tf_dataset(append_table, ["id"], None, batch_size=32, seed=4, epoch=2)
    first = [int(i) for f in ds for i in f.numpy()[:, 0]]
    second = [int(i) for f in ds for i in f.numpy()[:, 0]]
    torch_ds = LakeIterableDataset(append_table, feature_columns=["id"], batch_size=32, seed=4)
    torch_ds.set_epoch(2)
    assert first == [int(i) for f in torch_ds for i in f[:, 0]]
    assert sorted(first) == sorted(second) and first != second
    fixed = to_tf_dataset(append_table, ["id"], batch_size=32, reshuffle_each_iteration=False)
    assert [f.numpy().tolist() for f in fixed] == [f.numpy().tolist() for f in fixed]


@pytest.mark.parametrize("shuffle", [False, True])
def test_batches_are_torch_batches_when_runs_straddle_windows(
    append_table: raylake.Table, shuffle: bool
) -> None:
    """Runs of batches cross into TensorFlow whole and are split there: the batches
    (sizes, order, values, the tail) are the torch loader's, with batches of 24 rows
    straddling windows of 64."""
    from raylake.train.torch import LakeIterableDataset

    kwargs = {"batch_size": 24, "shuffle": shuffle, "shuffle_window": 64, "seed": 3}
    ds = to_tf_dataset(append_table, ["id", "x"], "label", **kwargs)
    got = [(f.numpy(), y.numpy()) for f, y in ds]
    torch_ds = LakeIterableDataset(
        append_table, feature_columns=["id", "x"], label_column="label", **kwargs
    )
    want = [(f.numpy(), y.numpy()) for f, y in torch_ds]
    assert len(got) == len(want) == int(ds.cardinality()) > 10
    for (f, y), (wf, wy) in zip(got, want):
        assert np.array_equal(f, wf) and np.array_equal(y, wy)


def test_as_of_pins_the_snapshot_current_then(append_table: raylake.Table) -> None:
    first = append_table.snapshot(1)
    ds = to_tf_dataset(append_table, columns=["id"], as_of=first.time, shuffle=False)
    ids = sorted(i for batch in ds for i in batch["id"].numpy().tolist())
    assert ids == sorted(append_table.to_arrow(snapshot_id=1).column("id").to_pylist())


def test_model_fit_runs(append_table: raylake.Table) -> None:
    ds = to_tf_dataset(append_table, ["x", "emb"], "label", batch_size=64, dtype=tf.float32)
    model = tf.keras.Sequential(
        [tf.keras.Input((3,)), tf.keras.layers.Dense(3, activation="softmax")]
    )
    model.compile("adam", "sparse_categorical_crossentropy")
    history = model.fit(ds, epochs=2, verbose=0, shuffle=False)  # the dataset shuffles
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()


def test_bad_batch_size_raises_before_the_table_is_opened(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        to_tf_dataset(str(tmp_path / "no-table"), batch_size=0)
    with pytest.raises(ValueError, match="shuffle must be True or False"):
        to_tf_dataset(str(tmp_path / "no-table"), shuffle="false")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epoch": -1}, "epoch must be an int >= 0, got int -1"),
        ({"epoch": "1"}, "epoch must be an int >= 0, got str '1'"),
        ({"reshuffle_each_iteration": "false"}, "reshuffle_each_iteration must be True or False"),
    ],
)
def test_bad_iteration_keywords_raise_when_the_dataset_is_made(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    """Not at the first iteration, wrapped in TensorFlow's error (a string epoch), nor
    taken as true (reshuffle_each_iteration="false")."""
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        to_tf_dataset(str(tmp_path / "no-table"), **kwargs)


def test_an_input_context_of_a_pipeline_out_of_range_is_refused_when_made(
    append_table: raylake.Table,
) -> None:
    """InputContext takes any numbers; pipeline 5 of 2 failed only at the first batch,
    inside TensorFlow's iterator, after the dataset was handed to the strategy."""
    ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=5)
    with pytest.raises(InvalidArgumentError, match=r"input_pipeline_id=5, num_input_pipelines=2"):
        to_tf_dataset(append_table, ["x"], "label", input_context=ctx)


def test_numpy_integers_are_taken_as_ints(append_table: raylake.Table) -> None:
    """``epoch=np.int64(e)`` from a numpy loop, a numpy batch size and an InputContext of
    numpy ids read what Python ints read (they were refused, or failed inside TensorFlow)."""
    ctx = tf.distribute.InputContext(num_input_pipelines=np.int64(2), input_pipeline_id=np.int64(1))
    numpy = to_tf_dataset(
        append_table, ["id"], batch_size=np.int32(32), seed=np.int64(4), epoch=np.int64(2),
        drop_last=True, input_context=ctx,
    )  # fmt: skip
    plain = to_tf_dataset(
        append_table, ["id"], batch_size=32, seed=4, epoch=2, drop_last=True, rank=1,
        world_size=2,
    )  # fmt: skip
    assert numpy.element_spec.shape == (32, 1)
    assert [f.numpy().tolist() for f in numpy] == [f.numpy().tolist() for f in plain]


@pytest.mark.parametrize("dtype", ["string", "qint8", "resource", "variant"])
def test_a_dtype_numbers_are_not_cast_to_is_refused_when_made(
    append_table: raylake.Table, dtype: str
) -> None:
    """tf.string failed at the first batch inside TensorFlow's iterator ("Unsupported
    object type float"), tf.resource with a bare KeyError; tf.qint8 ran."""
    with pytest.raises(InvalidArgumentError, match="dtype must be a numeric TensorFlow"):
        to_tf_dataset(append_table, ["x"], "label", dtype=getattr(tf, dtype))


@pytest.mark.parametrize(
    "dtype", [np.int64(5), np.int32(1), 1.0, np.True_, np.float32(3)], ids=repr
)
def test_a_number_is_no_dtype(append_table: raylake.Table, dtype: Any) -> None:
    """tf.as_dtype takes a number as an enum value: np.int64(5) made int16 features and
    1.0 or np.True_ float32 ones, without a word (a Python int was refused already)."""
    with pytest.raises(InvalidArgumentError, match="dtype must be a numeric TensorFlow"):
        to_tf_dataset(append_table, ["x"], "label", dtype=dtype)


def test_a_fixed_size_binary_column_is_a_binary_column(tmp_path: Path) -> None:
    """Hashes and UUIDs (fixed_size_binary) become tf.string as binaries do, and reach a
    torch transform as bytes (None for a null): both refused it as a type without
    tensors."""
    from raylake.train.torch import LakeIterableDataset

    ids = np.arange(10)
    digests = [bytes([i]) * 4 if i % 3 else None for i in ids]
    rows = pa.table({"id": ids, "h": pa.array(digests, pa.binary(4))})
    tbl = raylake.create_table(str(tmp_path / "t"), rows.schema)
    tbl.write(rows)
    ds = to_tf_dataset(tbl, columns=["h"], label_column="id", fill_null={"h": b"...."})
    assert ds.element_spec[0]["h"].dtype == tf.string
    got = {int(i): h for named, label in ds for h, i in zip(named["h"].numpy(), label.numpy())}
    assert got == {i: d or b"...." for i, d in zip(ids.tolist(), digests)}
    torch_ds = LakeIterableDataset(
        tbl, columns=["h"], label_column="id", shuffle=False, transform=lambda batch: batch
    )
    ((named, label),) = list(torch_ds)
    assert named["h"] == digests and label.tolist() == ids.tolist()


def test_a_string_feature_is_refused_with_tensorflows_own_fix(typed: raylake.Table) -> None:
    """The hint sent TensorFlow users to a torch LakeIterableDataset with a transform."""
    with pytest.raises(UnsupportedTypeError, match="'s'") as refused:
        to_tf_dataset(typed, ["f32", "s"])
    assert "columns= (not feature_columns=), where it is a tf.string tensor" in str(refused.value)
    assert "LakeIterableDataset" not in str(refused.value)


def test_one_fill_value_fills_no_string_column(tmp_path: Path) -> None:
    """NaN for every column fills the floats, not a string column (b"nan"): its nulls
    raise, naming the column; a dict's number for it is refused when made."""
    rows = pa.table({"x": pa.array([1.0, None], pa.float32()), "s": pa.array(["a", None])})
    tbl = raylake.create_table(str(tmp_path / "t"), rows.schema)
    tbl.write(rows)
    ds = to_tf_dataset(tbl, columns=["x", "s"], shuffle=False, fill_null=float("nan"))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"column 's' .*nan is not a value"):
        list(ds)
    with pytest.raises(InvalidArgumentError, match=r"column 's' .* can hold"):
        to_tf_dataset(tbl, columns=["s"], fill_null={"s": 0})


@pytest.mark.parametrize("layout", ["features", "dict"])
def test_dtype_casts_the_features_and_the_label_keeps_its_type(tmp_path: Path, layout: str) -> None:
    """As in torch: dtype=float16 made a float64 label (a price) float16, 1e5 -> inf."""
    rows = pa.table({"x": np.arange(4, dtype=np.float32), "price": [1e5, 2.5, 3.0, 7e4]})
    tbl = raylake.create_table(str(tmp_path / "t"), rows.schema)
    tbl.write(rows)
    kwargs = {"feature_columns" if layout == "features" else "columns": ["x"]}
    ds = to_tf_dataset(
        tbl, label_column="price", shuffle=False, dtype=tf.float16, batch_size=4, **kwargs
    )
    ((features, price),) = list(ds)
    assert tf.nest.flatten(features)[0].dtype == tf.float16
    assert price.dtype == tf.float64 and price.numpy().tolist() == [1e5, 2.5, 3.0, 7e4]


def test_epoch_resumes_a_job_at_an_epochs_start(
    append_table: raylake.Table, tmp_path: Path
) -> None:
    """What docs/training.md offers in place of a checkpointed iterator (TensorFlow
    refuses to save from_generator's): epoch=e reads epoch e, then e + 1, ..."""
    ds = to_tf_dataset(append_table, ["id"], batch_size=64, seed=2)
    epochs = [[f.numpy().tolist() for f in ds] for _ in range(3)]
    resumed = to_tf_dataset(append_table, ["id"], batch_size=64, seed=2, epoch=1)
    assert [[f.numpy().tolist() for f in resumed] for _ in range(2)] == epochs[1:]
    with pytest.raises(tf.errors.FailedPreconditionError, match="PyFunc is stateful"):
        tf.train.Checkpoint(iterator=iter(ds)).write(str(tmp_path / "ckpt"))
