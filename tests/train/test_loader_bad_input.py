"""The loaders' keywords other than the epoch ones (test_loader_arguments.py) are checked
when the loader is made: a wrong type or value raises InvalidArgumentError naming the
keyword, never a later error from inside a read, a Ray iterator or a tf.data pipeline."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import raylake
from raylake.errors import InvalidArgumentError, SchemaError, UnknownColumnError

torch = pytest.importorskip("torch")
from raylake.train.ray import iter_torch_batches  # noqa: E402
from raylake.train.torch import LakeMapDataset  # noqa: E402

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "x": [1.0, 2.0, 3.0]})
ONE_COLUMN = "columns must be a list of column names (for one column: ['id'])"


@pytest.fixture
def uri(tmp_path: Path) -> str:
    return raylake.from_pandas(ROWS.to_pandas(), str(tmp_path / "t")).uri


LOADERS = ["iterable", "map", "stream", "tf"]


def make_loader(kind: str, uri: str, **kwargs: Any) -> Any:
    """The loader ``kind`` over ``uri``, made (each takes the batch keywords)."""
    from raylake.train.torch import LakeIterableDataset, LakeStreamDataset

    if kind == "tf":
        pytest.importorskip("tensorflow")
        from raylake.train.tf import to_tf_dataset

        return to_tf_dataset(uri, **kwargs)
    if kind == "stream":
        return LakeStreamDataset(uri, start="earliest", until_snapshot=1, **kwargs)
    return {"iterable": LakeIterableDataset, "map": LakeMapDataset}[kind](uri, **kwargs)


@pytest.mark.parametrize("kind", LOADERS)
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"feature_columns": ["x", "x"]}, "feature_columns must be a list of distinct column "),
        ({"feature_columns": ["x", "id", "x"], "label_column": "id"}, "('x' is named twice)"),
        ({"columns": ["id", "x", "id"]}, "columns must be a list of distinct column names"),
        ({"feature_columns": ["x", "id"], "label_column": "x"}, "label_column must be a column"),
    ],
)
def test_a_column_named_twice_is_refused_when_the_loader_is_made(
    uri: str, kind: str, kwargs: dict[str, Any], message: str
) -> None:
    """Read once, a repeated column has no second place to go (pyarrow said it did not
    exist, in a bare KeyError)."""
    with pytest.raises(InvalidArgumentError, match=re.escape(message)) as e:
        make_loader(kind, uri, **kwargs)
    assert e.value.name in kwargs


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cache_bytes": -1}, "cache_bytes must be an int >= 0, got int -1"),
        ({"cache_bytes": 1.5}, "cache_bytes must be an int >= 0, got float 1.5"),
        ({"cache_bytes": "1G"}, "cache_bytes must be an int >= 0, got str '1G'"),
        ({"columns": "id"}, ONE_COLUMN),
        ({"transform": 5}, "transform must be a callable or None, got int 5"),
    ],
)
def test_the_map_dataset_names_a_bad_keyword(
    uri: str, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        LakeMapDataset(uri, **kwargs)


@pytest.mark.parametrize(
    ("data", "kwargs", "message"),
    [
        (None, {"prefetch_blocks": -1}, "prefetch_blocks must be an int >= 0, got int -1"),
        (None, {"prefetch_blocks": 1.5}, "prefetch_blocks must be an int >= 0, got float"),
        (ROWS, {}, "data must be a ray.data.Dataset or DataIterator"),
        ([ROWS], {"columns": "id"}, ONE_COLUMN),
        ([ROWS], {"device": "bogus"}, "device must be a torch device ('cpu', 'cuda'"),
    ],
)
def test_ray_batches_name_a_bad_keyword_before_asking_for_a_block(
    data: Any, kwargs: dict[str, Any], message: str
) -> None:
    class Blocks:  # stands in for a Ray iterator: the check comes before any block
        def iter_batches(self, **_: Any) -> Any:
            raise AssertionError("a block was asked for")

    with pytest.raises(InvalidArgumentError, match=re.escape(message)):  # when called
        iter_torch_batches(Blocks() if isinstance(data, list) else data, **kwargs)


def test_rank_and_world_size_are_checked_when_the_loader_is_made(uri: str) -> None:
    from raylake.train.torch import LakeIterableDataset

    with pytest.raises(InvalidArgumentError, match=re.escape("rank must be an int in [0, w")):
        LakeIterableDataset(uri, rank=2, world_size=2)
    with pytest.raises(InvalidArgumentError, match="world_size must be an int >= 1, got int 0"):
        LakeIterableDataset(uri, rank=0, world_size=0)


@pytest.mark.parametrize(
    ("worker", "num_workers", "message"),
    [
        (2, 2, "worker must be in [0, 2) (num_workers), got int 2"),
        (-1, 2, "worker must be an int >= 0, got int -1"),
        ("0", 1, "worker must be an int >= 0, got str '0'"),
    ],
)
def test_iter_shard_refuses_a_worker_it_does_not_have(
    uri: str, worker: Any, num_workers: int, message: str
) -> None:
    """A launcher's worker one past the last read nothing at all, silently."""
    from raylake.train.torch import LakeIterableDataset

    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        LakeIterableDataset(uri).iter_shard(worker, num_workers)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dtype": 5}, "dtype must be a numeric TensorFlow or numpy dtype"),
        ({"dtype": "string"}, "dtype must be a numeric TensorFlow or numpy dtype"),
        ({"dtype": object}, "dtype must be a numeric TensorFlow or numpy dtype"),
        ({"prefetch": "no"}, "prefetch must be True or False, got str 'no'"),
        ({"input_context": 5}, "input_context must be a tf.distribute.InputContext or None"),
        ({"rank": 2, "world_size": 2}, "rank must be an int in [0, world_size=2), got int 2"),
        ({"rank": "0", "world_size": 2}, "rank must be an int >= 0, got str '0'"),
        ({"rank": 0, "world_size": 0}, "world_size must be an int >= 1, got int 0"),
        ({"columns": "id"}, ONE_COLUMN),
    ],
)
def test_to_tf_dataset_names_a_bad_keyword_when_it_is_made(
    uri: str, kwargs: dict[str, Any], message: str
) -> None:
    pytest.importorskip("tensorflow")
    from raylake.train.tf import to_tf_dataset

    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        to_tf_dataset(uri, **kwargs)


def test_rank_without_world_size_is_an_invalid_argument() -> None:
    """One mistake, one error type: InvalidArgumentError (it was a bare ValueError)."""
    from raylake.errors import InvalidArgumentError
    from raylake.train.setup import check_rank

    with pytest.raises(InvalidArgumentError, match="world_size must be given together"):
        check_rank(0, None)
    with pytest.raises(InvalidArgumentError, match="rank must be given together"):
        check_rank(None, 2)


CANNOT_FILL_ID = "fill_null must be a value that column 'id' (int64) can hold"
FITS_NONE = CANNOT_FILL_ID + " (it fits none of the columns read)"


@pytest.mark.parametrize("kind", LOADERS)
@pytest.mark.parametrize(
    ("fill_null", "message"),
    [
        ([0], FITS_NONE),
        ("n/a", FITS_NONE[:-1] + "; 'n/a' is not a value of a int64 column)"),
        (object(), FITS_NONE),
        (2**70, FITS_NONE),
        ({"id": 1.5}, CANNOT_FILL_ID + ", got float 1.5"),
        ({"id": float("nan")}, CANNOT_FILL_ID),
        ({"x": "n/a"}, "fill_null must be a value that column 'x' (double) can hold"),
    ],
)
def test_a_fill_value_a_column_cannot_hold_is_refused_when_the_loader_is_made(
    uri: str, kind: str, fill_null: Any, message: str
) -> None:
    """Checked against the columns' types, whether or not they hold nulls now: it used to
    fail with a bare Arrow error at the first nulls of an epoch, in a worker maybe. A
    dict's value must fit its column; one value for every column must fit one of them."""
    with pytest.raises(InvalidArgumentError, match=re.escape(message)) as e:
        make_loader(kind, uri, feature_columns=["id", "x"], fill_null=fill_null)
    assert e.value.name == "fill_null"


def test_one_fill_value_fills_the_columns_it_fits(tmp_path: Path) -> None:
    """NaN for every column fills the float features; an int column without nulls
    needs none, and a null met in one raises naming the column and the value."""
    from raylake.train.torch import LakeIterableDataset

    schema = pa.schema([("label", pa.int64()), ("x", pa.float64())])
    tbl = raylake.create_table(str(tmp_path / "t"), schema)
    tbl.write(pa.table({"label": [1, 2], "x": [None, 2.0]}, schema=schema))
    ds = LakeIterableDataset(
        tbl, feature_columns=["x"], label_column="label", fill_null=float("nan"), shuffle=False
    )
    ((features, labels),) = list(ds)
    assert features.isnan().tolist() == [[True], [False]] and labels.tolist() == [1, 2]
    tbl.write(pa.table({"label": [None], "x": [3.0]}, schema=schema))
    ds = LakeIterableDataset(
        tbl, feature_columns=["x"], label_column="label", fill_null=float("nan")
    )
    with pytest.raises(SchemaError, match=re.escape("column 'label' (int64) has null values")):
        list(ds)


@pytest.mark.parametrize("column", ["flag", "pair"])
def test_one_fill_value_fills_no_column_of_another_kind(tmp_path: Path, column: str) -> None:
    """NaN for every column fills the floats, not a bool column (Arrow's cast made its
    nulls True, a whole null list of bools too): its nulls raise, naming the column. A
    dict's text for a number column is refused when the loader is made."""
    from raylake.train.torch import LakeIterableDataset

    if column == "pair" and int(pa.__version__.split(".")[0]) < 26:
        pytest.skip("pyarrow before 26 cannot write a null fixed-size list to Parquet")
    values = {
        "flag": pa.array([True, None]),
        "pair": pa.array([[True, False], None], pa.list_(pa.bool_(), 2)),
    }
    rows = pa.table({"x": pa.array([1.0, None], pa.float32()), column: values[column]})
    tbl = raylake.create_table(str(tmp_path / "t"), rows.schema)
    tbl.write(rows)
    ds = LakeIterableDataset(tbl, columns=["x", column], shuffle=False, fill_null=float("nan"))
    with pytest.raises(SchemaError, match=f"column '{column}' .*nan is not a bool"):
        list(ds)
    (filled,) = LakeIterableDataset(
        tbl, feature_columns=[column], shuffle=False, fill_null={column: 0}
    )
    zero_filled = {"flag": [[True], [False]], "pair": [[True, False], [False, False]]}
    assert filled.tolist() == zero_filled[column]
    with pytest.raises(InvalidArgumentError, match=r"column 'x' .* can hold"):
        LakeIterableDataset(tbl, columns=["x"], fill_null={"x": "1"})


def test_a_date_written_as_text_fills_a_timestamp_column(tmp_path: Path) -> None:
    """Text fills strings and binaries, and dates and times, which Arrow parses it as."""
    from raylake.train.torch import LakeIterableDataset

    rows = pa.table({"ts": pa.array([None, 1_000], pa.timestamp("ms"))})
    tbl = raylake.create_table(str(tmp_path / "t"), rows.schema)
    tbl.write(rows)
    ds = LakeIterableDataset(tbl, columns=["ts"], shuffle=False, fill_null={"ts": "2024-01-01"})
    (batch,) = list(ds)
    assert batch["ts"].tolist() == [1_704_067_200_000, 1_000]


@pytest.mark.parametrize("kind", ["iterable", "map", "tf"])
def test_an_int_fills_every_date_and_time_column_as_its_storage(tmp_path: Path, kind: str) -> None:
    """Dates and times reach tensors as their integer storage, and an int fills them so,
    32-bit ones too: date32 and time32 columns refused 0 as a value they cannot hold
    (Arrow casts no int64 to them), where date64 and time64 columns took it."""
    rows = pa.table(
        {
            "d32": pa.array([None, 3], pa.date32()),
            "t32": pa.array([None, 4], pa.time32("s")),
            "d64": pa.array([None, 86_400_000], pa.date64()),
            "t64": pa.array([None, 5], pa.time64("us")),
        }
    )
    tbl = raylake.create_table(str(tmp_path / "t"), rows.schema)
    tbl.write(rows)
    names = rows.column_names
    for fill in (0, {name: 0 for name in names}):
        order = {} if kind == "map" else {"shuffle": False}
        ds = make_loader(kind, tbl.uri, feature_columns=names, fill_null=fill, **order)
        features = ds[[0, 1]] if kind == "map" else next(iter(ds))
        assert features.numpy().tolist() == [[0, 0, 0, 0], [3, 4, 86_400_000, 5]]


@pytest.mark.parametrize("kind", LOADERS)
def test_a_fill_dict_names_columns_the_loader_reads(uri: str, kind: str) -> None:
    not_read = "a dict of columns the loader reads, ['x'] ('id' is a column of the table, but"
    with pytest.raises(InvalidArgumentError, match=re.escape(not_read)):
        make_loader(kind, uri, feature_columns=["x"], fill_null={"id": 0})
    with pytest.raises(UnknownColumnError, match=re.escape("the table has columns ['id', 'x']")):
        make_loader(kind, uri, feature_columns=["x"], fill_null={"nope": 0})


def test_one_fill_value_is_not_checked_against_a_column_without_nulls(tmp_path: Path) -> None:
    """A primary key cannot hold nulls: NaN for every column fills the floats."""
    from raylake.train.torch import LakeIterableDataset

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.float64())])
    tbl = raylake.create_table(str(tmp_path / "pk"), schema, primary_key=["id"])
    tbl.write(pa.table({"id": [1, 2], "x": [None, 2.0]}, schema=schema))
    ds = LakeIterableDataset(tbl, feature_columns=["id", "x"], fill_null=float("nan"))
    (features,) = list(ds)
    assert sorted(features[:, 1].isnan().tolist()) == [False, True]
    # Named in a dict, it is checked all the same: the mistake is in the dict.
    with pytest.raises(InvalidArgumentError, match=re.escape(CANNOT_FILL_ID)):
        LakeIterableDataset(tbl, feature_columns=["id", "x"], fill_null={"id": float("nan")})


@pytest.mark.parametrize("trainer", [None, 5, "TorchTrainer"], ids=repr)
def test_fit_names_a_trainer_that_is_not_one(trainer: Any) -> None:
    """Python's bare AttributeError ("'int' object has no attribute 'fit'") came out."""
    from raylake.train import fit

    with pytest.raises(InvalidArgumentError, match="trainer must be a Ray Train trainer"):
        fit(trainer)


@pytest.mark.parametrize(("dtype", "fill"), [(pa.float32(), 1e300), (pa.float16(), 70000.0)])
def test_a_fill_value_beyond_a_float_columns_range_is_refused(
    tmp_path: Path, dtype: pa.DataType, fill: float
) -> None:
    """As an int beyond an int column's range is (was: the nulls filled with inf);
    infinity itself is a value of every float column."""
    from raylake.train.torch import LakeIterableDataset

    # from numpy: pyarrow before 17 makes half floats of numpy's float16 only
    values = np.array([1.0, 0.0], dtype=dtype.to_pandas_dtype())
    rows = pa.table({"x": pa.array(values, mask=np.array([False, True]))})
    tbl = raylake.create_table(str(tmp_path / "t"), rows.schema)
    tbl.write(rows)
    with pytest.raises(InvalidArgumentError, match=r"column 'x' \((float|halffloat)\) can hold"):
        LakeIterableDataset(tbl, columns=["x"], fill_null={"x": fill})
    if dtype == pa.float32():  # pyarrow before 17 fills no half floats' nulls at all
        (filled,) = LakeIterableDataset(tbl, columns=["x"], shuffle=False, fill_null=float("inf"))
        assert filled["x"].tolist() == [1.0, float("inf")]


KINDS = pa.schema(
    [
        ("f32", pa.float32()),
        ("i32", pa.int32()),
        ("flag", pa.bool_()),
        ("t_s", pa.time32("s")),
        ("t_ms", pa.time32("ms")),
        ("t_us", pa.time64("us")),
        ("t_ns", pa.time64("ns")),
        ("d32", pa.date32()),
        ("d64", pa.date64()),
    ]
)


@pytest.fixture(scope="module")
def kinds(tmp_path_factory: pytest.TempPathFactory) -> raylake.Table:
    """One row of values (each type's zero) and one of nulls, in a column of each kind."""

    def zero_and_null(dtype: pa.DataType) -> pa.Array:
        if dtype.bit_width == 1:  # Arrow casts no int to a time32 or date32: view the ints
            return pa.array([False, None])
        return pa.array([0, None], pa.int32() if dtype.bit_width == 32 else pa.int64()).view(dtype)

    rows = pa.table({f.name: zero_and_null(f.type) for f in KINDS}, schema=KINDS)
    tbl = raylake.create_table(str(tmp_path_factory.mktemp("kinds") / "t"), KINDS)
    tbl.write(rows)
    return tbl


NOT_A_TIME = "is not a time of day: a {} column holds 0 to {} {} since midnight"


@pytest.mark.parametrize(
    ("column", "fill", "why"),
    [
        ("f32", False, "False is a bool, which fills bool columns only"),
        ("f32", np.True_, "is a bool, which fills bool columns only"),
        ("i32", True, "True is a bool, which fills bool columns only"),
        ("flag", 0.0, "0.0 is not a bool: a bool column takes True, False, 0 or 1"),
        ("flag", 1.0, "1.0 is not a bool"),
        ("flag", np.float32(1.0), "is not a bool: a bool column takes"),
        ("t_s", 99_999_999, "99999999 " + NOT_A_TIME.format("time32[s]", 86_399, "s")),
        ("t_s", -5, "-5 " + NOT_A_TIME.format("time32[s]", 86_399, "s")),
        ("t_s", 86_400, "86400 " + NOT_A_TIME.format("time32[s]", 86_399, "s")),
        ("t_ms", 86_400_000, NOT_A_TIME.format("time32[ms]", 86_399_999, "ms")),
        ("t_us", -1, NOT_A_TIME.format("time64[us]", 86_399_999_999, "us")),
        ("t_us", 86_400_000_000, NOT_A_TIME.format("time64[us]", 86_399_999_999, "us")),
        ("t_ns", 86_400 * 10**9, NOT_A_TIME.format("time64[ns]", 86_399_999_999_999, "ns")),
        ("d32", 2**31, "2147483648 is beyond the range of date32[day], stored as int32"),
        ("d64", 1, "1 is not a date: a date64 column holds whole days of 86400000 ms"),
        ("t_s", "12:00:00.5", "is not a value of a time32[s] column: the literal is finer"),
        ("t_s", "25:00", "'25:00' is not a value of a time32[s] column: a time of day is"),
        ("d32", "2024-02-30", "'2024-02-30' is not a value of a date32[day] column"),
    ],
    ids=str,
)
def test_a_fill_value_of_another_kind_or_beyond_the_range_is_refused_when_made(
    kinds: raylake.Table, column: str, fill: Any, why: str
) -> None:
    """A value fits a column of its kind, where it is in the column's range: Arrow's cast
    filled a float column's nulls with 0.0 for False, an int column's with 1 for True,
    a bool column's with True for 1.0, and a time of day with 99,999,999 s or -5 s."""
    from raylake.train.torch import LakeIterableDataset

    dtype = KINDS.field(column).type
    refused = f"fill_null must be a value that column '{column}' ({dtype}) can hold ("
    for fill_null in ({column: fill}, fill):
        with pytest.raises(InvalidArgumentError, match=re.escape(refused)) as e:
            LakeIterableDataset(kinds, columns=[column], fill_null=fill_null)
        assert why in str(e.value) and e.value.name == "fill_null"


@pytest.mark.parametrize(
    ("column", "fill", "filled"),
    [
        ("f32", -1, -1.0),  # an int is a number of a float column
        ("i32", 7.0, 7),  # as Arrow's safe cast takes it: a whole float
        ("flag", True, True),
        ("flag", np.True_, True),
        ("flag", 1, True),
        ("flag", np.int64(0), False),
        ("t_s", 86_399, 86_399),
        ("t_ms", 0, 0),
        ("t_ns", 86_400 * 10**9 - 1, 86_400 * 10**9 - 1),
        ("d32", -(2**31), -(2**31)),  # dates beyond Python's are stored (docs/format.md)
        ("d64", -2 * 86_400_000, -2 * 86_400_000),
        # text, read as a filter reads it (Arrow's cast reads no time of day)
        ("t_s", "12:00:01", 43_201),
        ("t_us", "00:00:00.5", 500_000),
        ("d32", "1970-01-03", 2),
    ],
    ids=str,
)
def test_a_fill_value_of_the_columns_kind_and_range_fills_it(
    kinds: raylake.Table, column: str, fill: Any, filled: Any
) -> None:
    from raylake.train.torch import LakeIterableDataset

    ds = LakeIterableDataset(kinds, columns=[column], shuffle=False, fill_null={column: fill})
    (batch,) = list(ds)
    assert batch[column].tolist() == [0, filled] or batch[column].tolist() == [False, filled]
