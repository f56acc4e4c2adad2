"""BinaryRow decoding (partitions, keys, statistics) and Paimon -> Arrow types."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

import fastavro
import pyarrow as pa
import pytest
from paimon_spec import encode_row
from paimon_util import FIXTURES

from raylake.errors import CorruptMetadataError
from raylake.paimon.binary_row import decode_row
from raylake.paimon.types import parse_type


def _types(*specs: str) -> list:
    return [parse_type(s) for s in specs]


def test_fixed_width_values_and_nulls() -> None:
    kinds = ["BIGINT", "INT", "DOUBLE", "BOOLEAN", "DATE", "BIGINT"]
    data = encode_row([-5, 7, 2.5, True, 19_723, None], kinds)
    types = _types("BIGINT", "INT", "DOUBLE", "BOOLEAN", "DATE", "BIGINT")
    assert decode_row(data, types) == (-5, 7, 2.5, True, date(2024, 1, 1), None)


def test_strings_inline_and_in_the_variable_part() -> None:
    data = encode_row(["short", "a longer string", "", None], ["STRING"] * 4)
    assert decode_row(data, _types("STRING", "STRING", "STRING", "STRING")) == (
        "short",
        "a longer string",
        "",
        None,
    )


def test_decimals_and_timestamps_compact_and_not() -> None:
    data = encode_row(
        [12345, -(10**30), 1_700_000_000_123, (1_700_000_000_123, 456_000)],
        ["DECIMAL18", "DECIMAL38", "TIMESTAMP3", "TIMESTAMP6"],
    )
    types = _types("DECIMAL(10, 2)", "DECIMAL(38, 4)", "TIMESTAMP(3)", "TIMESTAMP(6)")
    small, big, millis, micros = decode_row(data, types)
    assert small == Decimal("123.45")
    assert big == Decimal(-(10**30)).scaleb(-4)
    assert millis == datetime(2023, 11, 14, 22, 13, 20, 123_000)
    assert micros == datetime(2023, 11, 14, 22, 13, 20, 123_456)


def test_partitions_as_pypaimon_wrote_them() -> None:
    """The partition values of the fixture's manifests: a 10-byte string and a null."""
    found = set()
    for path in (FIXTURES / "append_partitioned" / "table" / "manifest").glob("manifest-[0-9a-f]*"):
        with open(path, "rb") as f:
            for record in fastavro.reader(f):
                found.add(decode_row(record["_PARTITION"], _types("STRING")))
    assert found == {("2024-01-01",), ("2024-01-02",), (None,)}


def test_a_row_of_the_wrong_arity_is_corrupt() -> None:
    with pytest.raises(CorruptMetadataError, match="2 fields"):
        decode_row(encode_row([1, 2], ["BIGINT", "BIGINT"]), _types("BIGINT"))


@pytest.mark.parametrize(
    ("spec", "arrow"),
    [
        ("BIGINT NOT NULL", pa.int64()),
        ("TINYINT", pa.int8()),
        ("SMALLINT", pa.int16()),
        ("FLOAT", pa.float32()),
        ("VARCHAR(20)", pa.string()),
        ("CHAR(3)", pa.string()),
        ("VARBINARY(8)", pa.binary()),
        ("DECIMAL(20, 3)", pa.decimal128(20, 3)),
        ("DATE", pa.date32()),
        ("TIME(3)", pa.time32("ms")),
        ("TIMESTAMP(3)", pa.timestamp("ms")),
        ("TIMESTAMP(6)", pa.timestamp("us")),
        ("TIMESTAMP(9)", pa.timestamp("ns")),
        ("TIMESTAMP(6) WITH LOCAL TIME ZONE", pa.timestamp("us", tz="UTC")),
        ({"type": "ARRAY", "element": "INT"}, pa.list_(pa.field("element", pa.int32()))),
        (
            {"type": "MAP", "key": "STRING NOT NULL", "value": "BIGINT"},
            pa.map_(pa.string(), pa.int64()),
        ),
        (
            {"type": "ROW", "fields": [{"id": 5, "name": "a", "type": "INT"}]},
            pa.struct([pa.field("a", pa.int32())]),
        ),
    ],
)
def test_type_mapping(spec: object, arrow: pa.DataType) -> None:
    t = parse_type(spec)
    assert t.to_arrow() == arrow
    assert t.nullable == (not str(spec).endswith("NOT NULL"))
