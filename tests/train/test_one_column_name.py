"""``feature_columns="x"`` (or ``columns="x"``) is one column, not the letters of its name."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.train.convert import Layout

SCHEMA = pa.schema([("id", pa.float32()), ("y", pa.int64())])


def test_one_name_is_one_column() -> None:
    layout = Layout.of(SCHEMA, columns=None, feature_columns="id", label_column="y")
    assert layout.features == ("id",) and layout.columns == ("id", "y")
    named = Layout.of(SCHEMA, columns="id", feature_columns=None, label_column=None)
    assert named.named == ("id",)


def test_a_torch_dataset_takes_one_feature_name(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from raylake.train.torch import LakeIterableDataset

    tbl = raylake.create_table(str(tmp_path), SCHEMA)
    tbl.write(pa.table({"id": pa.array([1.0, 2.0], pa.float32()), "y": [0, 1]}))
    features, labels = next(
        iter(LakeIterableDataset(tbl, feature_columns="id", label_column="y", batch_size=2))
    )
    assert features.shape == (2, 1) and isinstance(labels, torch.Tensor)
