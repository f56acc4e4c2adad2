"""Binary and string columns reach a LakeIterableDataset's transform as lists, per batch.

The table holds small encoded images (a header, the shape, then the pixels, each a
function of the row's id) and a null every 13th row; the transform decodes them into a
tensor, as a torchvision/PIL decode would. Order, sharding and resume are checked
against the same dataset read without the binary column (the model: it must not change
which rows a batch holds), and every decoded image against its row's id.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from conftest import expected_ids
from hypothesis import given, settings
from hypothesis import strategies as st
from property_depth import examples
from torch.utils.data import DataLoader

import raylake
from raylake.errors import SchemaError, UnsupportedOperationError, UnsupportedTypeError
from raylake.train.binary import BinaryColumns
from raylake.train.convert import ARROW
from raylake.train.torch import LakeIterableDataset, LakeMapDataset, LakeStreamDataset

ROWS = 300
MAGIC = b"RLIMG"
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def encode(i: int) -> bytes | None:
    if i % 13 == 5:
        return None
    h, w = 2, 3
    pixels = ((np.arange(h * w) + i) % 251).astype(np.uint8)
    return MAGIC + bytes([h, w]) + pixels.tobytes()


def decode(data: bytes | None) -> torch.Tensor:
    if data is None:  # a null: an all-zero image
        return torch.zeros(2, 3, dtype=torch.uint8)
    assert data[:5] == MAGIC
    h, w = data[5], data[6]
    return torch.from_numpy(np.frombuffer(data, np.uint8, offset=7).reshape(h, w).copy())


def expected_image(i: int) -> torch.Tensor:
    return decode(encode(i))


def transform(batch: dict[str, Any]) -> dict[str, torch.Tensor]:
    assert isinstance(batch["image"], list)
    assert all(v is None or isinstance(v, bytes) for v in batch["image"])
    return {"id": batch["id"], "image": torch.stack([decode(v) for v in batch["image"]])}


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> raylake.Table:
    path = tmp_path_factory.mktemp("binary") / "images"
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("image", pa.binary())])
    tbl = raylake.create_table(str(path), schema, options={"write.row-group-rows": "17"})
    for start in range(0, ROWS, 100):
        ids = list(range(start, start + 100))
        tbl.write(pa.table({"id": ids, "image": [encode(i) for i in ids]}, schema=schema))
    return tbl


def check(batch: dict[str, torch.Tensor]) -> list[int]:
    ids = batch["id"].tolist()
    assert torch.equal(batch["image"], torch.stack([expected_image(i) for i in ids]))
    return ids


@settings(max_examples=examples(25), deadline=None)
@given(
    batch_size=st.integers(1, 40),
    shuffle=st.booleans(),
    window=st.integers(1, 120),
    seed=st.integers(0, 3),
    drop_last=st.booleans(),
    world=st.integers(1, 3),
    workers=st.integers(1, 2),
)
def test_batches_hold_the_rows_the_numeric_read_holds(
    images: raylake.Table,
    batch_size: int,
    shuffle: bool,
    window: int,
    seed: int,
    drop_last: bool,
    world: int,
    workers: int,
) -> None:
    common = dict(
        batch_size=batch_size, shuffle=shuffle, shuffle_window=window, seed=seed,
        drop_last=drop_last, world_size=world,
    )  # fmt: skip
    for rank in range(world):
        with_images = LakeIterableDataset(
            images, columns=["id", "image"], transform=transform, rank=rank, **common
        )
        model = LakeIterableDataset(images, columns=["id"], rank=rank, **common)
        for w in range(workers):
            got = [check(b) for b in with_images.iter_shard(w, workers)]
            assert got == [b["id"].tolist() for b in model.iter_shard(w, workers)]


def test_every_row_once_through_dataloader_workers(images: raylake.Table) -> None:
    ds = LakeIterableDataset(
        images, columns=["id", "image"], transform=transform, batch_size=32, shuffle_window=50
    )
    seen = [i for b in DataLoader(ds, batch_size=None, num_workers=2) for i in check(b)]
    assert sorted(seen) == expected_ids(images)


def test_a_resumed_pass_reads_the_rest_with_its_images(images: raylake.Table) -> None:
    def make() -> LakeIterableDataset:
        return LakeIterableDataset(
            images, columns=["id", "image"], transform=transform, batch_size=24,
            shuffle_window=70, seed=3,
        )  # fmt: skip

    whole = [check(b) for b in make()]
    first = make()
    it = iter(first)
    head = [check(next(it)) for _ in range(5)]
    state = first.state_dict()
    again = make()
    again.load_state_dict(state)
    assert head + [check(b) for b in again] == whole


def test_prefetched_transform_and_string_label(table: raylake.Table) -> None:
    """A string column as the label, on the append and the primary-key (merged) table,
    transformed on the prefetch thread."""

    def to_parity(batch: Any) -> Any:
        named, dt = batch
        assert all(isinstance(v, str) for v in dt)
        return named["id"], torch.tensor([v == "b" for v in dt])

    ds = LakeIterableDataset(
        table, columns=["id"], label_column="dt", transform=to_parity, batch_size=19,
        shuffle_window=40, prefetch=2,
    )  # fmt: skip
    seen = []
    for ids, odd in ds:
        assert torch.equal(odd, ids % 2 == 1)
        seen += ids.tolist()
    assert sorted(seen) == expected_ids(table)


def test_large_types_and_several_columns(tmp_path: Any) -> None:
    ids = list(range(50))
    data = pa.table(
        {
            "id": ids,
            "s": pa.array([f"s{i}" for i in ids], pa.large_string()),
            "b": pa.array([bytes([i]) for i in ids], pa.large_binary()),
        }
    )
    tbl = raylake.create_table(str(tmp_path / "t"), data.schema)
    tbl.write(data)

    def both(batch: dict[str, Any]) -> list[tuple[int, str, bytes]]:
        return list(zip(batch["id"].tolist(), batch["s"], batch["b"]))

    ds = LakeIterableDataset(tbl, transform=both, batch_size=7, shuffle_window=9)
    rows = [r for batch in ds for r in batch]
    assert sorted(rows) == [(i, f"s{i}", bytes([i])) for i in ids]


def test_fill_null_named_for_the_column_fills_its_nulls(images: raylake.Table) -> None:
    def lengths(batch: dict[str, Any]) -> Any:
        assert all(isinstance(v, bytes) for v in batch["image"])
        return batch["id"], torch.tensor([len(v) for v in batch["image"]])

    ds = LakeIterableDataset(
        images, columns=["id", "image"], transform=lengths, batch_size=50,
        fill_null={"image": b""},
    )  # fmt: skip
    for ids, n in ds:
        assert torch.equal(n == 0, ids % 13 == 5)
    # One value for every column is for the numbers: the nulls stay None.
    ds = LakeIterableDataset(images, columns=["id", "image"], transform=transform, fill_null=0)
    assert sorted(i for b in ds for i in check(b)) == expected_ids(images)
    with pytest.raises(
        SchemaError, match=r"fill_null must be a value that column 'image' \(binary\)"
    ):
        LakeIterableDataset(
            images, columns=["id", "image"], transform=transform, fill_null={"image": 1.5}
        )


def test_without_a_transform_the_column_is_refused_by_name(images: raylake.Table) -> None:
    with pytest.raises(UnsupportedTypeError, match=r"'image' has type binary.*transform="):
        LakeIterableDataset(images, columns=["id", "image"])
    with pytest.raises(UnsupportedTypeError, match=r"'image'.*not feature_columns="):
        LakeIterableDataset(images, feature_columns=["id", "image"], transform=transform)
    with pytest.raises(UnsupportedOperationError, match=r"'image'.*device="):
        LakeIterableDataset(images, columns=["id", "image"], transform=transform, device="cuda")


@pytest.mark.parametrize("dataset", [LakeMapDataset, LakeStreamDataset])
def test_map_and_stream_datasets_refuse_it_by_name(images: raylake.Table, dataset: Any) -> None:
    with pytest.raises(UnsupportedTypeError, match=r"'image'.*LakeIterableDataset"):
        dataset(images, columns=["id", "image"], transform=transform)


def test_a_windows_column_is_let_go_once_a_later_window_is_cut() -> None:
    columns = BinaryColumns(["b"])

    def window(values: list[bytes]) -> dict[str, np.ndarray]:
        held = np.empty((), dtype=object)
        held[()] = pa.chunked_array([pa.array(values)])
        return {"b": np.arange(len(values), dtype=np.int64), ARROW + "b": held}

    first = columns.window(window([b"a", b"b", b"c"]))
    second = columns.window(window([b"d", b"e"]))
    # A batch of the first window's last row and the second's first, then a shuffled one.
    straddle = torch.from_numpy(np.concatenate([first["b"][2:], second["b"][:1]]))
    assert columns.values({"b": [straddle]})["b"] == [[b"c", b"d"]]
    assert len(columns._columns) == 2  # the batch started in the first window
    shuffled = torch.from_numpy(second["b"][[1, 0]])
    assert columns.values({"b": [shuffled]})["b"] == [[b"e", b"d"]]
    assert list(columns._columns) == [1]
