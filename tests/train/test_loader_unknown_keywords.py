"""A misspelled loader keyword is refused by name, with the closest valid one, before
the table is opened (a loader keyword passed on would be ignored or fail in a worker)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.errors import UnknownKeywordError

torch = pytest.importorskip("torch")

from raylake.train.torch import LakeIterableDataset, LakeMapDataset  # noqa: E402


@pytest.fixture
def tbl(tmp_path: Path) -> raylake.Table:
    return raylake.from_pandas(
        pa.table({"id": [1, 2, 3], "x": [0.5, 1.5, 2.5]}).to_pandas(), str(tmp_path / "t")
    )


@pytest.mark.parametrize("loader", [LakeIterableDataset, LakeMapDataset])
def test_a_misspelled_loader_keyword_names_the_closest(loader: type, tbl: raylake.Table) -> None:
    with pytest.raises(UnknownKeywordError, match="'columns'"):
        loader(tbl, colums=["id"])


def test_ray_iter_torch_batches_names_the_closest() -> None:
    from raylake.train.ray import iter_torch_batches

    with pytest.raises(UnknownKeywordError, match="batch_size"):
        iter_torch_batches(None, batch_sise=2)  # type: ignore[call-arg]
