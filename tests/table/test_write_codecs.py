"""Floating-point columns the codec does not shrink are stored uncompressed (writer.py).

Random or measured floats (features, embeddings) do not compress with Snappy or LZ4;
compressing them only adds a copy to every read (issue 20). The codec is kept for
every other column, for floats it shrinks, and when it is zstd (which shrinks even
random floats by about a tenth).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raylake
from raylake.train.source import LakeSource

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("noise", pa.float32()),
        ("steps", pa.float64()),
        ("label", pa.int32()),
    ]
)


def rows(start: int, n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + n)
    return pa.table(
        {
            "id": ids,
            "noise": rng.random(n, dtype=np.float32),
            "steps": np.round(ids / 7) * 0.5,  # few distinct bytes: compresses well
            "label": rng.integers(0, 2, n, dtype=np.int32),
        },
        schema=SCHEMA,
    )


def codecs(tbl: raylake.Table) -> list[dict[str, str]]:
    found = []
    for split in tbl.scan().plan():
        for f in split.files:
            meta = pq.ParquetFile(Path(tbl.uri.removeprefix("file://")) / f.path).metadata
            group = meta.row_group(0)
            found.append(
                {group.column(j).path_in_schema: group.column(j).compression for j in range(4)}
            )
    return found


@pytest.mark.parametrize("primary_key", [[], ["id"]])
def test_incompressible_floats_are_stored_uncompressed(
    tmp_path: Path, primary_key: list[str]
) -> None:
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, primary_key=primary_key)
    data = rows(0, 50_000, seed=1)
    tbl.write(data)
    (found,) = codecs(tbl)
    assert found["noise"] == "UNCOMPRESSED"
    assert found["steps"] == found["id"] == found["label"] == "SNAPPY"
    assert tbl.to_arrow().sort_by("id").equals(data)


@pytest.mark.parametrize(("codec", "stored"), [("zstd", "ZSTD"), ("lz4", "UNCOMPRESSED")])
def test_a_codec_that_shrinks_random_floats_keeps_them(
    tmp_path: Path, codec: str, stored: str
) -> None:
    options = {"write.compression": codec}
    tbl = raylake.create_table(str(tmp_path / "t"), SCHEMA, options=options)
    tbl.write(rows(0, 50_000, seed=2))
    (found,) = codecs(tbl)
    assert found["noise"] == stored
    assert found["id"] != "UNCOMPRESSED"


def test_files_of_both_kinds_merge_in_one_section(tmp_path: Path) -> None:
    """A file whose floats compress (stored with the codec, as every file was before)
    and an upsert whose floats do not are merged in one read."""
    tbl = raylake.create_table(
        str(tmp_path / "t"),
        SCHEMA,
        primary_key=["id"],
        options={"compaction.auto": "false", "write.row-group-rows": "4096"},
    )
    base = rows(0, 20_000, seed=3).set_column(1, "noise", pa.array(np.zeros(20_000, np.float32)))
    tbl.write(base)
    update = rows(0, 20_000, seed=4).filter(pa.array(np.arange(20_000) % 3 == 0))
    tbl.write(update)
    first, second = sorted(codecs(tbl), key=lambda c: c["noise"])
    assert first["noise"] == "SNAPPY" and second["noise"] == "UNCOMPRESSED"
    got = tbl.to_arrow().sort_by("id")
    expected = pa.concat_tables([base.filter(pa.array(np.arange(20_000) % 3 != 0)), update])
    assert got.equals(expected.sort_by("id"))
    source = LakeSource.open(tbl, columns=["noise"])
    assert source.total == 20_000


def test_a_nested_schema_keeps_the_codec_everywhere(tmp_path: Path) -> None:
    schema = pa.schema([("x", pa.float32()), ("v", pa.list_(pa.float32()))])
    tbl = raylake.create_table(str(tmp_path / "t"), schema)
    rng = np.random.default_rng(5)
    x = rng.random(10_000, dtype=np.float32)
    tbl.write(pa.table({"x": x, "v": [[float(a)] for a in x]}, schema=schema))
    (split,) = tbl.scan().plan()
    meta = pq.ParquetFile(tmp_path / "t" / split.files[0].path).metadata.row_group(0)
    assert {meta.column(j).compression for j in range(meta.num_columns)} == {"SNAPPY"}
