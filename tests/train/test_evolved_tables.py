"""Loaders and TensorFlow signatures of an evolved table (issue 18): the pinned
snapshot's schema, old files read by field id."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

import raylake
from raylake.train.torch import LakeIterableDataset, LakeMapDataset

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float32()), ("label", pa.int8())])


@pytest.fixture
def evolved(tmp_path: Path) -> raylake.Table:
    """Snapshot 1: id, x (float32), label (int8); then x -> feature (float64),
    label widened to int32, and a column c added; snapshot 2 writes c."""
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA)
    tbl.write(pa.table({"id": [0, 1, 2, 3], "x": [0.5, 1.5, 2.5, 3.5], "label": [0, 1, 0, 1]},
                       schema=SCHEMA))  # fmt: skip
    with tbl.update_schema() as u:
        u.rename_column("x", "feature")
        u.update_column("feature", pa.float64())
        u.update_column("label", pa.int32())
        u.add_column("c", pa.float32())
    tbl.write(pa.table({"id": [4, 5], "feature": [4.5, 5.5], "label": [300, 301],
                        "c": pa.array([1.0, 2.0], pa.float32())}))  # fmt: skip
    return tbl


def test_torch_loaders_read_old_files_under_the_pinned_schema(evolved: raylake.Table) -> None:
    ds = LakeIterableDataset(
        evolved, feature_columns=["id", "feature"], label_column="label", shuffle=False,
        batch_size=6, dtype=torch.float64,
    )  # fmt: skip
    ((features, labels),) = list(ds)
    order = np.argsort(features[:, 0].numpy())
    assert features[order, 1].tolist() == [0.5, 1.5, 2.5, 3.5, 4.5, 5.5]
    assert labels[order].tolist() == [0, 1, 0, 1, 300, 301] and labels.dtype == torch.int32
    old = LakeMapDataset(evolved, columns=["id", "x", "label"], snapshot_id=1)
    assert len(old) == 4
    row = old[0]
    assert set(row) == {"id", "x", "label"} and row["label"].dtype == torch.int8
    new = LakeMapDataset(evolved, columns=["c"], fill_null=0.0)
    assert sorted(float(new[i]["c"]) for i in range(len(new))) == [0, 0, 0, 0, 1.0, 2.0]


def test_tf_signatures_follow_the_schema_of_the_snapshot(evolved: raylake.Table) -> None:
    tf = pytest.importorskip("tensorflow")
    from raylake.train.tf import to_tf_dataset

    ds = to_tf_dataset(
        evolved, columns=["id", "feature"], label_column="label", batch_size=6, shuffle=False
    )
    features, label = ds.element_spec
    assert {k: v.dtype for k, v in features.items()} == {"id": tf.int64, "feature": tf.float64}
    assert label.dtype == tf.int32
    ((values, labels),) = list(ds)
    order = np.argsort(values["id"].numpy())
    assert values["feature"].numpy()[order].tolist() == [0.5, 1.5, 2.5, 3.5, 4.5, 5.5]
    assert labels.numpy()[order].tolist() == [0, 1, 0, 1, 300, 301]
    old = to_tf_dataset(
        evolved, columns=["id", "x"], label_column="label", batch_size=4, snapshot_id=1
    )
    features, label = old.element_spec
    assert features["x"].dtype == tf.float32 and label.dtype == tf.int8
