"""read_lake and write_lake take numpy integers for their counts (``override_num_blocks``,
``concurrency``), handed to Ray as Python ints: they were refused with
InvalidArgumentError, though the table API takes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

ray = pytest.importorskip("ray")

import raylake  # noqa: E402
from raylake import read_lake, write_lake  # noqa: E402

pytestmark = pytest.mark.ray

ROWS = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64())})


def _read(uri: str, **keywords: Any) -> list[int]:
    return sorted(row["id"] for row in read_lake(uri, **keywords).take_all())


def _write(uri: str, **keywords: Any) -> list[int]:
    write_lake(ray.data.from_arrow(ROWS), uri, **keywords)
    return sorted(raylake.open_table(uri).to_arrow()["id"].to_pylist())


CASES = {
    "read_lake override_num_blocks": lambda uri: _read(uri, override_num_blocks=np.int64(2)),
    "read_lake concurrency": lambda uri: _read(uri, concurrency=np.int32(1)),
    "read_lake snapshot_id": lambda uri: _read(uri, snapshot_id=np.int64(1)),
    "write_lake concurrency": lambda uri: _write(uri + "-copy", concurrency=np.int64(1)),
}


@pytest.mark.parametrize("case", CASES)
def test_a_numpy_count_is_taken_as_an_int(ray_cluster: Any, tmp_path: Path, case: str) -> None:
    uri = str(tmp_path / "t")
    raylake.from_pandas(ROWS.to_pandas(), uri)
    assert CASES[case](uri) == [1, 2, 3, 4]
