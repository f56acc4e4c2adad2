"""VECTOR and BLOB columns, and Paimon's cast rules, value by value.

The VECTOR table is built from Paimon's spec (paimon_spec.py): a schema change adds a
``VECTOR<FLOAT, 3>`` column in the JSON form Java writes (``{"type": "VECTOR",
"element": "FLOAT", "length": 3}``) and a COMPACT snapshot rewrites the files with it.
The casts are checked on values Java's tests read (tests/paimon/java_fixtures) in the
corpus test; here each rule is pinned on its edge values.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import zoneinfo
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paimon_spec import commit, live_entries
from property_depth import examples

import raylake
from raylake.errors import UnsupportedPaimonError
from raylake.paimon.casts import paimon_cast
from raylake.paimon.types import PaimonType, parse_type

VECTOR = {"type": "VECTOR", "element": "FLOAT", "length": 3}


def _add_column(table: Path, field: dict[str, Any], values: Any) -> None:
    """Schema 1 adds ``field``; a COMPACT snapshot rewrites every file with it."""
    schema = json.loads((table / "schema" / "schema-0").read_text())
    schema.update(id=1, fields=[*schema["fields"], field], highestFieldId=field["id"])
    (table / "schema" / "schema-1").write_text(json.dumps(schema))
    added, deleted = [], []
    for entry in live_entries(table):
        name = entry["_FILE"]["_FILE_NAME"]
        source = next(table.rglob(name))
        rows = pq.read_table(source)
        rows = rows.append_column(field["name"], values(rows))
        target = source.with_name("v-" + name)
        pq.write_table(rows, target)
        record = copy.deepcopy(entry)
        record["_FILE"].update(
            _FILE_NAME=target.name,
            _FILE_SIZE=target.stat().st_size,
            _SCHEMA_ID=1,
        )
        added.append(record)
        deleted.append(entry)
    commit(table, kind="COMPACT", added=added, deleted=deleted)


def _embeddings(rows: pa.Table) -> pa.Array:
    ids = rows.column("id").to_numpy()
    return pa.array([[float(i), float(i) / 2, -1.0] for i in ids], pa.list_(pa.float32()))


def test_vector_column_is_a_fixed_size_list(paimon_copy: Any) -> None:
    table = paimon_copy("append_unaware")
    _add_column(table, {"id": 3, "name": "emb", "type": VECTOR}, _embeddings)
    got = raylake.open_table(str(table)).to_arrow()
    assert got.schema.field("emb").type == pa.list_(pa.field("element", pa.float32()), 3)
    for row in got.to_pylist():
        assert row["emb"] == [row["id"], row["id"] / 2, -1.0]


def test_vector_column_is_a_2d_feature_tensor(paimon_copy: Any) -> None:
    torch = pytest.importorskip("torch")
    from raylake.train.torch_iterable import LakeIterableDataset

    table = paimon_copy("append_unaware")
    _add_column(table, {"id": 3, "name": "emb", "type": VECTOR}, _embeddings)
    ds = LakeIterableDataset(str(table), columns=["id", "emb"], batch_size=4, shuffle=False)
    batch = next(iter(ds))
    assert isinstance(batch["emb"], torch.Tensor)
    assert batch["emb"].shape == (4, 3)
    ids = batch["id"].numpy().astype(np.float32)
    assert np.array_equal(batch["emb"][:, 0].numpy(), ids)


@pytest.mark.parametrize("shuffle", [False, True])
def test_vector_column_in_feature_and_label_positions(paimon_copy: Any, shuffle: bool) -> None:
    """Stacked beside a scalar feature (batch x (1 + 3), float64: the common type), alone as the features, and as
    the label: a (batch, 3) tensor each time, row for row with the id."""
    torch = pytest.importorskip("torch")
    from raylake.train.torch_iterable import LakeIterableDataset

    table = paimon_copy("append_unaware")
    _add_column(table, {"id": 3, "name": "emb", "type": VECTOR}, _embeddings)
    kwargs: dict[str, Any] = dict(batch_size=3, shuffle=shuffle, shuffle_window=4)

    def expected(ids: Any) -> Any:
        ids = ids.to(torch.float32)
        return torch.stack([ids, ids / 2, torch.full_like(ids, -1.0)], dim=1)

    x_of = {r["id"]: r["x"] for r in raylake.open_table(str(table)).to_arrow().to_pylist()}
    seen = []
    for features, label in LakeIterableDataset(
        str(table), feature_columns=["x", "emb"], label_column="id", **kwargs
    ):
        assert features.shape == (len(label), 4)
        assert features[:, 0].tolist() == [x_of[i] for i in label.tolist()]
        assert torch.equal(features[:, 1:].to(torch.float32), expected(label))
        seen += label.tolist()
    assert sorted(seen) == sorted(x_of)
    for features, label in LakeIterableDataset(
        str(table), feature_columns=["emb"], label_column="id", **kwargs
    ):
        assert features.shape == (len(label), 3)
        assert torch.equal(features, expected(label))
    for named, label in LakeIterableDataset(
        str(table), columns=["id"], label_column="emb", **kwargs
    ):
        assert label.shape == (len(named["id"]), 3)
        assert torch.equal(label, expected(named["id"]))


@pytest.mark.parametrize(
    ("fixture", "column"),
    [
        ("parquet_blob_data_evolution_with_dense_stats", "f0"),
        ("orc_blob_data_evolution_with_dense_stats", "f0"),
        ("parquet_blob_append_table_alter_table_with_cast_with_data_evolution", "f5"),
        ("orc_blob_append_table_alter_table_with_cast_with_data_evolution", "f5"),
    ],
)
def test_java_blob_column_reaches_a_torch_transform(fixture: str, column: str) -> None:
    """A BLOB column of a Java-written table (its values in .blob files, merged by row
    id) reaches LakeIterableDataset's transform as a list of bytes per batch."""
    torch = pytest.importorskip("torch")
    from java_corpus import ROOT

    from raylake.train.torch_iterable import LakeIterableDataset

    path = str(ROOT / fixture)
    want = raylake.open_table(path).to_arrow().to_pylist()

    def decode(batch: dict[str, Any]) -> Any:
        assert all(isinstance(v, bytes) for v in batch[column])
        lengths = torch.tensor([len(v) for v in batch[column]])
        return batch["f3"], lengths, batch[column]

    ds = LakeIterableDataset(path, columns=["f3", column], transform=decode, batch_size=3)
    got = []
    for f3, lengths, blobs in ds:
        assert lengths.tolist() == [len(v) for v in blobs]
        got += list(zip(f3.tolist(), blobs))
    assert sorted(got) == sorted((r["f3"], r[column]) for r in want)


def test_blob_column_reads_as_bytes(paimon_copy: Any) -> None:
    table = paimon_copy("append_unaware")

    def blobs(rows: pa.Table) -> pa.Array:
        return pa.array([b"\x89PNG-%d" % i for i in rows.column("id").to_pylist()], pa.binary())

    _add_column(table, {"id": 3, "name": "image", "type": "BLOB"}, blobs)
    got = raylake.open_table(str(table)).to_arrow()
    assert got.schema.field("image").type == pa.binary()
    assert [r["image"] for r in got.to_pylist()] == [
        b"\x89PNG-%d" % r["id"] for r in got.to_pylist()
    ]


def test_vector_type_spellings() -> None:
    assert parse_type(VECTOR).to_arrow() == pa.list_(pa.field("element", pa.float32()), 3)
    vector = parse_type("VECTOR<DOUBLE, 8> NOT NULL")
    assert not vector.nullable
    assert vector.to_arrow() == pa.list_(pa.field("element", pa.float64()), 8)


def _cast(values: list[Any], source: str, dest: str, zone: str = "UTC") -> list[Any]:
    src, dst = parse_type(source), parse_type(dest)
    return paimon_cast(pa.array(values, src.to_arrow()), src, dst, zone).to_pylist()


def test_string_to_boolean_takes_paimons_words_in_any_case() -> None:
    words = ["t", "TRUE", "y", "Yes", "1", "f", "False", "N", "nO", "0", " yes ", None]
    expected = [True] * 5 + [False] * 5 + [True, None]
    assert _cast(words, "STRING", "BOOLEAN") == expected
    with pytest.raises(pa.ArrowInvalid, match="maybe"):
        _cast(["maybe"], "STRING", "BOOLEAN")


def test_a_value_that_does_not_cast_is_refused_by_name() -> None:
    from raylake.paimon.casts import column_caster

    cast = column_caster(
        {"flag": (PaimonType("STRING"), PaimonType("BOOLEAN"))}, "UTC", "file:///t"
    )
    with pytest.raises(UnsupportedPaimonError, match=r"'flag'.*STRING to BOOLEAN"):
        cast("flag", pa.chunked_array([pa.array(["maybe"])]), pa.bool_())


def test_string_to_numbers_dates_and_times_trim_blanks() -> None:
    assert _cast([" 42 ", "-7"], "STRING", "INT") == [42, -7]
    assert _cast([" 2024-02-29"], "STRING", "DATE")[0].isoformat() == "2024-02-29"
    assert str(_cast(["12:34:56"], "STRING", "TIME")[0]) == "12:34:56"


def test_timestamps_and_numbers_are_seconds_in_the_session_zone() -> None:
    # 00:00:01 as a wall clock in Shanghai is 28799 s before the epoch; truncated.
    assert _cast([1_000, 1_999, -1_500], "TIMESTAMP(3)", "INT") == [1, 1, -1]
    shanghai = _cast([1_000], "TIMESTAMP(3)", "BIGINT", "Asia/Shanghai")
    assert shanghai == [1 - 8 * 3600]
    assert [str(v) for v in _cast([0, -1], "INT", "TIMESTAMP(0)", "Asia/Shanghai")] == [
        "1970-01-01 08:00:00",
        "1970-01-01 07:59:59",
    ]


def test_timestamps_print_with_the_types_precision() -> None:
    """The fraction keeps at least the type's precision; further zeros are dropped."""
    micros = pa.array([0, 1_500, 1_000_001], pa.timestamp("us"))
    src, dst = PaimonType("TIMESTAMP", precision=6), PaimonType("STRING")
    assert paimon_cast(micros, src, dst, "UTC").to_pylist() == [
        "1970-01-01 00:00:00.000000",
        "1970-01-01 00:00:00.001500",
        "1970-01-01 00:00:01.000001",
    ]
    nanos = pa.array([1_000_000_001], pa.timestamp("ns"))
    src9 = PaimonType("TIMESTAMP", precision=9)
    assert paimon_cast(nanos, src9, dst, "UTC").to_pylist() == ["1970-01-01 00:00:01.000000001"]
    seconds = pa.array([0], pa.timestamp("s"))
    src0 = PaimonType("TIMESTAMP", precision=0)
    assert paimon_cast(seconds, src0, dst, "UTC").to_pylist() == ["1970-01-01 00:00:00"]


def test_ltz_to_string_is_the_wall_clock_in_the_session_zone() -> None:
    assert _cast([2], "TIMESTAMP(6) WITH LOCAL TIME ZONE", "STRING", "Asia/Shanghai") == [
        "1970-01-01 08:00:00.000002"
    ]
    assert _cast([2], "TIMESTAMP(6) WITH LOCAL TIME ZONE", "STRING") == [
        "1970-01-01 00:00:00.000002"
    ]


def test_integers_narrow_by_wrapping_as_java_does() -> None:
    assert _cast([2**31 + 5, -1], "BIGINT", "INT") == [-(2**31) + 5, -1]


# -- the cast rules against a plain-Python model of them -------------------------------------

_WORDS = {"t": True, "true": True, "y": True, "yes": True, "1": True}
_WORDS |= {"f": False, "false": False, "n": False, "no": False, "0": False}
_EPOCH = dt.datetime(1970, 1, 1)
_ZONES = ["UTC", "Asia/Shanghai", "Asia/Kolkata"]  # no daylight saving in 2000-2030


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(_WORDS)), st.randoms(use_true_random=False)),
        max_size=20,
    )
)
def test_string_to_boolean_matches_the_model(words: list[tuple[str, Any]]) -> None:
    spelled = [
        " " * rnd.randint(0, 2)
        + "".join(c.upper() if rnd.random() < 0.5 else c for c in word)
        + " " * rnd.randint(0, 2)
        for word, rnd in words
    ]
    assert _cast(spelled, "STRING", "BOOLEAN") == [_WORDS[word] for word, _ in words]


@settings(max_examples=examples(100), deadline=None)
@given(
    st.integers(-(2**62) // 2, 2**62 // 2),
    st.integers(0, 9),
)
def test_timestamp_to_string_matches_the_model(nanos: int, precision: int) -> None:
    src = PaimonType("TIMESTAMP", precision=precision)
    unit = src.to_arrow().unit
    per = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[unit]
    value = nanos // per
    got = paimon_cast(pa.array([value], pa.timestamp(unit)), src, PaimonType("STRING"), "UTC")
    whole, rest = divmod(value * per, 10**9)
    fraction = f"{rest:09d}"
    while len(fraction) > precision and fraction.endswith("0"):
        fraction = fraction[:-1]
    text = (_EPOCH + dt.timedelta(seconds=whole)).strftime("%Y-%m-%d %H:%M:%S")
    assert got.to_pylist() == [f"{text}.{fraction}" if fraction else text]


@settings(max_examples=examples(100), deadline=None)
@given(
    st.integers(946_684_800_000, 1_893_456_000_000),  # 2000 to 2030, in milliseconds
    st.sampled_from(_ZONES),
)
def test_timestamp_to_seconds_in_a_zone_matches_the_model(millis: int, zone: str) -> None:
    wall = _EPOCH + dt.timedelta(milliseconds=millis)
    instant = wall.replace(tzinfo=zoneinfo.ZoneInfo(zone))
    utc_millis = round(
        (instant - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) / dt.timedelta(milliseconds=1)
    )
    expected = int(utc_millis / 1000) if utc_millis >= 0 else -(-utc_millis // 1000)
    assert _cast([millis], "TIMESTAMP(3)", "BIGINT", zone) == [expected]
    # and back: seconds since the epoch as the wall clock of that instant in the zone
    back = _cast([expected], "BIGINT", "TIMESTAMP(0)", zone)[0]
    assert back == (
        dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=expected)
    ).astimezone(zoneinfo.ZoneInfo(zone)).replace(tzinfo=None)


def test_lower_precision_and_float_to_integer_drop_digits() -> None:
    ns = pa.array([-1, 1_999_999, None], pa.timestamp("ns"))
    got = paimon_cast(ns, PaimonType("TIMESTAMP", precision=9), parse_type("TIMESTAMP(3)"), "UTC")
    assert got.cast(pa.int64()).to_pylist() == [-1, 1, None]
    assert _cast([1.9, -1.9, None], "DOUBLE", "INT") == [1, -1, None]


def test_casts_java_prints_its_own_way_are_refused_by_name() -> None:
    from raylake.paimon.casts import column_caster

    cast = column_caster({"x": (PaimonType("DOUBLE"), PaimonType("STRING"))}, "UTC", "file:///t")
    with pytest.raises(UnsupportedPaimonError, match=r"'x'.*DOUBLE to STRING.*Double.toString"):
        cast("x", pa.chunked_array([pa.array([1.0])]), pa.string())


def test_integers_and_decimals_widen_to_floats_rounding_as_java() -> None:
    """BIGINT 2**53 + 1 altered to DOUBLE was refused (Arrow's safe cast); Java's
    (double) rounds it to 2**53."""
    assert _cast([2**53 + 1, None], "BIGINT", "DOUBLE") == [2.0**53, None]
    assert _cast([16_777_217], "INT", "FLOAT") == [16_777_216.0]
    assert _cast([Decimal("0.1")], "DECIMAL(10, 1)", "DOUBLE") == [0.1]
    assert _cast([Decimal("5091.15")], "DECIMAL(20, 10)", "FLOAT") == [float(np.float32(5091.15))]


@settings(max_examples=examples(200), deadline=None)
@given(st.decimals(min_value=-(10**9), max_value=10**9, places=10, allow_nan=False))
def test_decimals_to_floats_round_to_the_nearest(value: Decimal) -> None:
    """As BigDecimal.doubleValue() and floatValue(); Arrow's cast of a decimal read
    5091.15 as 5091.150000000001."""
    assert _cast([value], "DECIMAL(20, 10)", "DOUBLE") == [float(value)]


def test_a_refused_decimal_cast_names_the_scale() -> None:
    from raylake.paimon.casts import column_caster

    types = (PaimonType("STRING"), PaimonType("DECIMAL", precision=10, scale=2))
    cast = column_caster({"d": types}, "UTC", "file:///t")
    with pytest.raises(UnsupportedPaimonError, match=r"STRING to DECIMAL\(10, 2\)"):
        cast("d", pa.chunked_array([pa.array(["1.005"])]), pa.decimal128(10, 2))
