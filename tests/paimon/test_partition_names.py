"""Partition directory names as Java prints the values (raylake/paimon/partition_names.py).

The fixtures partition_names and partition_names_cast hold the names pypaimon writes,
as Java does; the cases here are the rest of Java's rules: LocalDateTime.toString()
keeps 3, 6 or 9 digits of fraction, the cast of a TIMESTAMP keeps its precision's.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pandas as pd
import pytest

from raylake.paimon.partition_names import partition_text
from raylake.paimon.types import PaimonType

TS = dt.datetime(2024, 1, 2, 3, 4)


@pytest.mark.parametrize(
    ("value", "legacy", "precision", "name"),
    [
        (TS, True, 6, "2024-01-02T03%3A04"),
        (TS.replace(second=5), True, 6, "2024-01-02T03%3A04%3A05"),
        (TS.replace(microsecond=120000), True, 6, "2024-01-02T03%3A04%3A00.120"),
        (TS.replace(microsecond=5), True, 6, "2024-01-02T03%3A04%3A00.000005"),
        (pd.Timestamp(TS) + pd.Timedelta(nanoseconds=7), True, 9, "2024-01-02T03%3A04%3A00.000000007"),
        (TS, False, 3, "2024-01-02 03%3A04%3A00.000"),
        (TS, False, 0, "2024-01-02 03%3A04%3A00"),
        (TS.replace(microsecond=120000), False, 6, "2024-01-02 03%3A04%3A00.120000"),
        (TS.replace(microsecond=120000), False, 1, "2024-01-02 03%3A04%3A00.12"),
        (dt.datetime(999, 1, 1), True, 6, "0999-01-01T00%3A00"),
    ],
)  # fmt: skip
def test_timestamps_print_as_java_prints_them(
    value: Any, legacy: bool, precision: int, name: str
) -> None:
    t = PaimonType("TIMESTAMP", precision=precision)
    assert partition_text(value, t, "__DEFAULT_PARTITION__", legacy, "UTC") == name


def test_a_local_time_zone_timestamp_cast_prints_in_the_session_zone() -> None:
    t = PaimonType("TIMESTAMP_LTZ", precision=0)
    utc = dt.datetime(2024, 1, 1, 23, 30)
    assert partition_text(utc, t, "d", True, "Asia/Tokyo") == "2024-01-01T23%3A30"
    assert partition_text(utc, t, "d", False, "Asia/Tokyo") == "2024-01-02 08%3A30%3A00"


@pytest.mark.parametrize(
    ("millis", "precision", "cast"),
    [(0, 0, "00:00:00"), (0, 3, "00:00:00.0"), (101, 2, "00:00:00.10"), (120, 3, "00:00:00.12")],
)
def test_times_print_as_milliseconds_or_as_their_cast(
    millis: int, precision: int, cast: str
) -> None:
    t = PaimonType("TIME", precision=precision)
    value = dt.time(0, 0, 0, millis * 1000)
    assert partition_text(value, t, "d", True, "UTC") == str(millis)
    assert partition_text(value, t, "d", False, "UTC") == cast.replace(":", "%3A")


@pytest.mark.parametrize(
    ("value", "name"),
    [(Decimal("1E-7"), "0.0000001"), (Decimal("1.50"), "1.50"), (Decimal("-2E+3"), "-2000")],
)
def test_decimals_print_without_an_exponent(value: Decimal, name: str) -> None:
    assert (
        partition_text(value, PaimonType("DECIMAL", precision=10, scale=2), "d", True, "UTC")
        == name
    )


def test_dates_print_as_day_numbers_or_iso_and_nulls_as_the_default() -> None:
    t = PaimonType("DATE")
    assert partition_text(dt.date(1970, 1, 11), t, "d", True, "UTC") == "10"
    assert partition_text(dt.date(1970, 1, 11), t, "d", False, "UTC") == "1970-01-11"
    assert partition_text(None, t, "__DEFAULT_PARTITION__", True, "UTC") == "__DEFAULT_PARTITION__"
    assert partition_text(" ", PaimonType("STRING"), "dflt", True, "UTC") == "dflt"
