"""Arrow to tensors: types, zero copies, nulls, and refusals that name the column."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from property_depth import examples

import raylake
from raylake.errors import SchemaError, UnknownColumnError, UnsupportedTypeError
from raylake.train import convert as convert_module
from raylake.train.torch import LakeIterableDataset, LakeMapDataset, to_tensor

TYPES = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("i8", pa.int8()),
        ("u8", pa.uint8()),
        ("i16", pa.int16()),
        ("i32", pa.int32()),
        ("f16", pa.float16()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("b", pa.bool_()),
        ("ts", pa.timestamp("us", "UTC")),
        ("ts_s", pa.timestamp("s")),
        ("d32", pa.date32()),
        ("dur", pa.duration("ms")),
        ("emb", pa.list_(pa.float32(), 3)),
        ("grid", pa.list_(pa.list_(pa.int16(), 2), 2)),
        ("s", pa.string()),
        ("dec", pa.decimal128(10, 2)),
        ("lst", pa.list_(pa.int32())),
        ("st", pa.struct([("a", pa.int32()), ("b", pa.float64())])),
        ("mp", pa.map_(pa.string(), pa.int32())),
        ("nul", pa.null()),
        ("tags", pa.list_(pa.string(), 2)),
    ]
)
N = 40


def typed_rows() -> pa.Table:
    ids = np.arange(N)
    epoch = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    return pa.table(
        {
            "id": ids,
            "i8": (ids % 100).astype(np.int8),
            "u8": (ids % 200).astype(np.uint8),
            "i16": ids.astype(np.int16),
            "i32": ids.astype(np.int32),
            "f16": ids.astype(np.float16),
            "f32": ids.astype(np.float32) / 2,
            "f64": ids.astype(np.float64) / 4,
            "b": ids % 2 == 0,
            "ts": [epoch + dt.timedelta(milliseconds=int(i) * 1500) for i in ids],
            "ts_s": pa.array(ids * 10, pa.timestamp("s")),
            "d32": pa.array(ids.astype(np.int32), pa.date32()),
            "dur": pa.array(ids * 7, pa.duration("ms")),
            "emb": pa.FixedSizeListArray.from_arrays(
                pa.array(np.repeat(ids, 3).astype(np.float32)), 3
            ),
            "grid": pa.array(
                [[[i, i + 1], [i + 2, i + 3]] for i in ids], pa.list_(pa.list_(pa.int16(), 2), 2)
            ),
            "s": [f"s{i}" for i in ids],
            "dec": pa.array([None] * N, pa.decimal128(10, 2)),
            "lst": [[1]] * N,
            "st": [{"a": int(i), "b": i / 2} for i in ids],
            "mp": [[("k", int(i))] for i in ids],
            "nul": pa.nulls(N),
            "tags": [["a", "b"]] * N,
        },
        schema=TYPES,
    )


@pytest.fixture(scope="module")
def typed(tmp_path_factory: pytest.TempPathFactory) -> raylake.Table:
    tbl = raylake.create_table(str(tmp_path_factory.mktemp("types") / "t"), TYPES)
    tbl.write(typed_rows())
    return tbl


TENSOR_COLUMNS = [
    "id",
    "i8",
    "u8",
    "i16",
    "i32",
    "f16",
    "f32",
    "f64",
    "b",
    "ts",
    "ts_s",
    "d32",
    "dur",
    "emb",
    "grid",
]


def test_every_supported_type(typed: raylake.Table) -> None:
    ds = LakeIterableDataset(typed, columns=TENSOR_COLUMNS, batch_size=N, shuffle=False)
    (batch,) = list(ds)
    order = batch["id"].numpy()
    assert sorted(order.tolist()) == list(range(N))
    dtypes = {k: v.dtype for k, v in batch.items()}
    assert dtypes == {
        "id": torch.int64,
        "i8": torch.int8,
        "u8": torch.uint8,
        "i16": torch.int16,
        "i32": torch.int32,
        "f16": torch.float16,
        "f32": torch.float32,
        "f64": torch.float64,
        "b": torch.bool,
        "ts": torch.int64,
        "ts_s": torch.int64,
        "d32": torch.int32,
        "dur": torch.int64,
        "emb": torch.float32,
        "grid": torch.int16,
    }
    epoch_ms = 1_704_067_200_000
    assert batch["ts"].tolist() == [epoch_ms + 1500 * i for i in order]
    assert batch["ts_s"].tolist() == [10_000 * i for i in order]
    assert batch["d32"].tolist() == order.tolist()
    assert batch["dur"].tolist() == [7 * i for i in order]
    assert batch["b"].tolist() == [i % 2 == 0 for i in order]
    assert batch["emb"].shape == (N, 3) and batch["emb"][:, 2].tolist() == order.tolist()
    assert (
        batch["grid"].shape == (N, 2, 2) and batch["grid"][:, 1, 1].tolist() == (order + 3).tolist()
    )


def test_features_stack_and_cast(typed: raylake.Table) -> None:
    ds = LakeIterableDataset(
        typed,
        feature_columns=["f32", "emb", "b"],
        label_column="i32",
        batch_size=8,
        dtype=torch.bfloat16,
    )
    features, label = next(iter(ds))
    assert features.shape == (8, 5) and features.dtype == torch.bfloat16
    assert label.dtype == torch.int32
    default = LakeIterableDataset(typed, feature_columns=["f32", "f64"], batch_size=8)
    assert next(iter(default)).dtype == torch.float64  # the common type


@pytest.mark.parametrize(
    ("column", "match"),
    [
        ("s", "'s' has type string.*tokenize"),
        ("dec", "'dec' has type decimal.*float64"),
        ("lst", "'lst'.*use a fixed-size list"),
        ("st", "'st' has type struct.*write the fields to train on as columns of their own"),
        ("mp", "'mp' has type map.*write the values to train on as columns of their own"),
        ("nul", "'nul' has type null.*give it a type with update_schema"),
        ("tags", "'tags' has type fixed_size_list.*write its values as numbers"),
    ],
)
def test_types_without_tensors_are_named(typed: raylake.Table, column: str, match: str) -> None:
    """Every type a table stores and no tensor holds is refused when the loader is made,
    naming the column and a fix (docs/training.md, "Batches")."""
    with pytest.raises(UnsupportedTypeError, match=match):
        LakeIterableDataset(typed, columns=["id", column])
    with pytest.raises(UnsupportedTypeError, match=match):
        LakeMapDataset(typed, feature_columns=["id", column])


def test_bad_layouts(typed: raylake.Table) -> None:
    with pytest.raises(UnknownColumnError, match="nope"):
        LakeIterableDataset(typed, feature_columns=["nope"])
    with pytest.raises(SchemaError, match="columns must be None with feature_columns="):
        LakeIterableDataset(typed, columns=["id"], feature_columns=["f32"])
    with pytest.raises(SchemaError, match="label_column must be a column that is not a feature"):
        LakeIterableDataset(typed, feature_columns=["f32", "i32"], label_column="i32")


@pytest.mark.skipif(
    int(pa.__version__.split(".")[0]) < 26,
    reason="pyarrow before 26 cannot write a null fixed-size list to Parquet (an Arrow bug)",
)
def test_nulls_need_a_fill_value(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("x", pa.float32()), ("e", pa.list_(pa.float32(), 2))])
    tbl = raylake.create_table(str(tmp_path / "t"), schema)
    tbl.write(
        pa.table(
            {"id": [1, 2, 3], "x": [1.0, None, 3.0], "e": [[1.0, None], None, [5.0, 6.0]]},
            schema=schema,
        )
    )
    with pytest.raises(SchemaError, match=r"column 'x' has 1 null.*fill_null=\{'x'"):
        list(LakeIterableDataset(tbl, columns=["id", "x"], shuffle=False))
    with pytest.raises(SchemaError, match="column 'e'"):
        list(LakeIterableDataset(tbl, columns=["e"], shuffle=False))
    (batch,) = list(
        LakeIterableDataset(
            tbl, columns=["id", "x", "e"], shuffle=False, fill_null={"x": -1, "e": 0}
        )
    )
    assert batch["x"].tolist() == [1.0, -1.0, 3.0]
    assert batch["e"].tolist() == [[1.0, 0.0], [0.0, 0.0], [5.0, 6.0]]
    (features,) = list(
        LakeIterableDataset(tbl, feature_columns=["x", "e"], shuffle=False, fill_null=9)
    )
    assert features.tolist() == [[1, 1, 9], [9, 9, 9], [3, 5, 6]]


def test_tensors_share_arrow_memory() -> None:
    """Read-only Arrow views become tensors without a copy where numpy can export them
    through DLPack (2.1 and later); before, a copy with the same values."""
    arr = pa.array(np.arange(10, dtype=np.float32)).to_numpy()
    assert not arr.flags.writeable
    shared = np.lib.NumpyVersion(np.__version__) >= "2.1.0"
    for view in (arr, arr[3:7]):
        t = to_tensor(view)
        assert t.tolist() == view.tolist()
        assert (t.data_ptr() == view.ctypes.data) is shared


def test_missing_torch_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "try:\n import raylake.train.torch\nexcept Exception as e:\n print(type(e).__name__, e)\n"
        "import raylake.train\n"
        "try:\n raylake.train.LakeIterableDataset\nexcept Exception as e:\n print(type(e).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "MissingDependencyError torch is required" in out.stdout
    assert "pip install 'raylake[torch]'" in out.stdout


def test_device_and_pin_memory_only_in_process(typed: Any) -> None:
    ds = LakeIterableDataset(typed, columns=["id"], batch_size=8, device="cpu")
    assert next(iter(ds))["id"].device.type == "cpu"


def test_features_of_several_chunks_stack_as_one() -> None:
    """A window of several pieces is stacked chunk by chunk: the same array as from one
    chunk, fill values included, and a null still names the whole column's count."""
    from raylake.train.convert import FEATURES, FEATURES_T, Converter, Layout

    schema = pa.schema([("a", pa.float32()), ("emb", pa.list_(pa.float32(), 2)), ("y", pa.int64())])
    first = pa.table({"a": [1.0, None], "emb": [[1.0, 2.0], None], "y": [0, 1]}, schema=schema)
    second = pa.table(
        {"a": [None, 4.0, 5.0], "emb": [[3.0, 4.0]] * 3, "y": [2, 3, 4]}, schema=schema
    )
    chunked = pa.concat_tables([first, second])
    layout = Layout.of(schema, columns=None, feature_columns=["a", "emb"], label_column="y")
    filled = Converter(schema, layout, target="torch tensors", fill_null=-1.0)
    np.testing.assert_array_equal(
        filled(chunked)[FEATURES], filled(chunked.combine_chunks())[FEATURES]
    )
    assert filled(chunked)[FEATURES].tolist() == [
        [1, 1, 2],
        [-1, -1, -1],
        [-1, 3, 4],
        [4, 3, 4],
        [5, 3, 4],
    ]
    strict = Converter(schema, layout, target="torch tensors")
    with pytest.raises(SchemaError, match=r"column 'a' has 2 null"):
        strict(chunked)
    # Columns first (the device path): the same values, transposed, and the same refusal.
    columns = filled.columns_first(chunked)
    assert FEATURES not in columns
    np.testing.assert_array_equal(columns[FEATURES_T].T, filled(chunked)[FEATURES])
    np.testing.assert_array_equal(columns["y"], filled(chunked)["y"])
    with pytest.raises(SchemaError, match=r"column 'a' has 2 null"):
        strict.columns_first(chunked)


def test_stacked_windows_reuse_memory_only_when_no_batch_refers_to_it() -> None:
    """A window's stacked features are written into an earlier window's memory only once
    nothing refers to it: a batch (a view) kept alive keeps its window's values."""
    from raylake.train.convert import FEATURES, Converter, Layout

    schema = pa.schema([("a", pa.float32()), ("b", pa.float32()), ("label", pa.int32())])
    layout = Layout.of(schema, columns=None, feature_columns=["a", "b"], label_column="label")
    converter = Converter(schema, layout, target="torch tensors")

    def window(value: float, n: int = 100) -> pa.Table:
        col = pa.array(np.full(n, value, dtype=np.float32))
        return pa.table({"a": col, "b": col, "label": pa.array(np.zeros(n, np.int32))})

    kept = to_tensor(converter(window(1.0))[FEATURES])[10:20]  # a batch of window 1
    pointers = set()
    for value in (2.0, 3.0, 4.0, 5.0, 6.0):  # more windows than the pool keeps
        pointers.add(to_tensor(converter(window(value))[FEATURES]).data_ptr())
        assert bool((kept == 1.0).all())  # never overwritten while the batch lives
    assert len(pointers) < 5  # windows nothing refers to any more were reused
    again = to_tensor(converter(window(8.0))[FEATURES])
    assert again.data_ptr() in pointers and bool((again == 8.0).all())
    assert kept.data_ptr() not in pointers and bool((kept == 1.0).all())


def test_the_next_pass_on_a_thread_of_its_own_reuses_the_windows_memory() -> None:
    """Each pass converts on a thread of its own: the pool is the converter's, so the
    next epoch writes its windows into the memory of the last one's (a pool per thread
    went with its thread, and every epoch began with fresh pages)."""
    import threading
    import weakref

    from raylake.train.convert import FEATURES, Converter, Layout

    schema = pa.schema([("a", pa.float32()), ("b", pa.float32())])
    layout = Layout.of(schema, columns=None, feature_columns=["a", "b"], label_column=None)
    converter = Converter(schema, layout, target="torch tensors")
    made: dict[str, np.ndarray] = {}

    def a_pass(name: str, value: float) -> None:
        col = pa.array(np.full(100, value, dtype=np.float32))
        made[name] = converter(pa.table({"a": col, "b": col}))[FEATURES]

    first = threading.Thread(target=a_pass, args=("first", 1.0))
    first.start()
    first.join()
    window = made.pop("first")
    memory = weakref.ref(window if window.base is None else window.base)
    del window
    assert memory() is not None  # kept by the converter, not by the finished thread
    second = threading.Thread(target=a_pass, args=("second", 2.0))
    second.start()
    second.join()
    assert np.shares_memory(made["second"], memory()) and bool((made["second"] == 2.0).all())


def _convert_in_child(converter: object, queue: object) -> None:
    col = pa.array(np.full(10, 3.0, dtype=np.float32))
    out = converter(pa.table({"a": col, "b": col}))  # type: ignore[operator]
    queue.put(float(out["_rl_features"].sum()))  # type: ignore[attr-defined]


def test_a_forked_child_converts_while_the_parent_holds_the_pool() -> None:
    """A child forked while another thread of the parent was inside the pool (its lock
    held) makes a pool of its own instead of waiting for a lock nobody will release."""
    import multiprocessing

    from raylake.train.convert import FEATURES, Converter, Layout

    assert FEATURES == "_rl_features"
    schema = pa.schema([("a", pa.float32()), ("b", pa.float32())])
    layout = Layout.of(schema, columns=None, feature_columns=["a", "b"], label_column=None)
    converter = Converter(schema, layout, target="torch tensors")
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    with converter._kept_lock:  # as if a converting thread were taking a window
        child = context.Process(target=_convert_in_child, args=(converter, queue))
        child.start()
    child.join(timeout=120)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0 and queue.get(timeout=5) == 60.0


def test_gathered_windows_reuse_memory_like_stacked_ones() -> None:
    """A shuffled window's part is gathered into pooled memory; the rows are the ones
    asked for, in that order, and a batch kept alive keeps its values."""
    from raylake.train.convert import FEATURES, Converter, Layout

    schema = pa.schema([("a", pa.float32()), ("b", pa.float32()), ("label", pa.int32())])
    layout = Layout.of(schema, columns=None, feature_columns=["a", "b"], label_column="label")
    converter = Converter(schema, layout, target="torch tensors")
    n = 100
    values = np.arange(n, dtype=np.float32)
    table = pa.table({"a": values, "b": -values, "label": pa.array(np.arange(n, dtype=np.int32))})
    block = converter(table)
    picked = np.random.default_rng(0).permutation(n)[:60]
    kept = to_tensor(converter.gather(block, picked)[FEATURES])
    for _ in range(6):  # more gathers than the pool keeps
        again = converter.gather(block, picked[::-1].copy())
        assert np.array_equal(again[FEATURES][:, 0], picked[::-1])
        assert np.array_equal(again["label"], picked[::-1])
    assert np.array_equal(kept[:, 0].numpy(), picked) and np.array_equal(
        kept[:, 1].numpy(), -picked
    )


def test_windows_larger_than_the_cap_are_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    from raylake.train import convert
    from raylake.train.convert import FEATURES, Converter, Layout

    monkeypatch.setattr(convert, "_KEPT_BYTES", 1000)
    schema = pa.schema([("a", pa.float32()), ("b", pa.float32())])
    layout = Layout.of(schema, columns=None, feature_columns=["a", "b"], label_column=None)
    converter = Converter(schema, layout, target="torch tensors")
    small, large = (pa.table({"a": np.ones(n, np.float32), "b": np.ones(n, np.float32)})
                    for n in (100, 200))  # fmt: skip
    assert converter(small)[FEATURES].shape == (100, 2)  # 800 bytes: kept
    assert converter(large)[FEATURES].shape == (200, 2)  # 1600 bytes: not kept
    assert [a.nbytes for a in converter._kept] == [800]


@settings(max_examples=examples(40), deadline=None)
@given(
    sizes=st.lists(st.integers(0, 1500), min_size=1, max_size=5),
    start=st.integers(0, 400),
    nulls=st.booleans(),
)
def test_stacking_equals_a_column_stack_whatever_the_chunks(
    sizes: list[int], start: int, nulls: bool
) -> None:
    """Windows are slices of several pieces' chunks, stacked in blocks of 1024 rows or
    more: whatever the chunk boundaries, blocks and offset, the stacked features equal a
    plain column stack of the whole columns (the model), row-major and columns first."""
    from raylake.train.convert import FEATURES, FEATURES_T, Converter, Layout

    schema = pa.schema(
        [("a", pa.float32()), ("n", pa.int64()), ("emb", pa.list_(pa.float32(), 2)),
         ("y", pa.int32())]
    )  # fmt: skip
    parts, row = [], 0
    for k in sizes:
        ids = np.arange(row, row + k)
        a = pa.array(ids * 0.5, pa.float32(), mask=(ids % 7 == 3) if nulls else None)
        emb = pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(ids, 2) * 2.0, pa.float32()), 2)
        y = pa.array(ids % 5, pa.int32())
        parts.append(pa.table([a, pa.array(-ids), emb, y], schema=schema))
        row += k
    table = pa.concat_tables(parts)
    table = table.slice(min(start, table.num_rows))
    layout = Layout.of(schema, columns=None, feature_columns=["a", "n", "emb"], label_column="y")
    convert = Converter(schema, layout, target="torch tensors", fill_null=-9.0)
    whole = table.combine_chunks()
    a = whole.column("a").fill_null(-9.0).to_numpy()
    emb = whole.column("emb").combine_chunks().values.to_numpy().reshape(-1, 2)
    model = np.column_stack([a, whole.column("n").to_numpy(), emb]).astype(np.float64)
    with mock.patch.object(convert_module, "_STACK_BYTES", 1):  # blocks of 1024 rows
        got = convert(table)
    np.testing.assert_array_equal(got[FEATURES], model.reshape(table.num_rows, 4))
    np.testing.assert_array_equal(got["y"], whole.column("y").to_numpy())
    np.testing.assert_array_equal(convert.columns_first(table)[FEATURES_T].T, got[FEATURES])
