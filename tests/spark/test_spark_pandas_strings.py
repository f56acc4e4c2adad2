"""The RayDP hand-off's frames reach PySpark 3.5 with strings as Python objects: a pandas
Arrow-backed string column of several chunks (pandas 3's default string dtype, after the
blocks of a partition are concatenated) fails in mapInPandas with "Expected Array, got
ChunkedArray"."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from pyspark.sql.pandas.serializers import ArrowStreamPandasUDFSerializer

from raylake.spark.ray_blocks import strings_as_objects

pytestmark = pytest.mark.spark

STRUCT = pa.struct([("s", pa.string()), ("n", pa.int64())])


def _batch(df: pd.DataFrame) -> pa.RecordBatch:
    """What mapInPandas does with a frame a function yields (PySpark 3.5)."""
    serializer = ArrowStreamPandasUDFSerializer("UTC", True, True, True)
    return serializer._create_batch([(df, STRUCT)])


def test_an_arrow_backed_string_column_reaches_pyspark_as_objects() -> None:
    two_blocks = [pd.Series([text], dtype="string[pyarrow]") for text in ("a", None)]
    df = pd.DataFrame({"s": pd.concat(two_blocks, ignore_index=True), "n": [1, 2]})
    with pytest.raises(TypeError, match="Expected Array"):
        _batch(df)
    fixed = strings_as_objects(df.copy())
    assert fixed["s"].dtype == object and fixed["n"].dtype == df["n"].dtype
    assert _batch(fixed).column(0).to_pylist() == [{"s": "a", "n": 1}, {"s": None, "n": 2}]
