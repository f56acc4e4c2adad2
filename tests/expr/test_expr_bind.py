"""bind: column resolution and literal typing."""

from __future__ import annotations

import datetime
import decimal

import pyarrow as pa
import pytest

from raylake.errors import FilterError, UnknownColumnError
from raylake.expr import (
    Compare,
    Expr,
    In,
    IsNull,
    Not,
    NotIn,
    bind,
    col,
    evaluate_python,
    parse_filter,
    referenced_columns,
    to_arrow,
)

SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("i8", pa.int8()),
        ("f", pa.float64()),
        ("f32", pa.float32()),
        ("s", pa.string()),
        ("d", pa.date32()),
        ("b", pa.bool_()),
        ("ts", pa.timestamp("us")),
        ("tz", pa.timestamp("ns", tz="UTC")),
        ("dec", pa.decimal128(6, 2)),
        ("bin", pa.binary()),
        ("cat", pa.dictionary(pa.int32(), pa.string())),
        ("l", pa.list_(pa.int64())),
        ("st", pa.struct([("a", pa.int64())])),
        ("weird name", pa.int64()),
    ]
)


def bound_value(text: str) -> pa.Scalar:
    expr = bind(parse_filter(text), SCHEMA)
    assert isinstance(expr, Compare)
    assert isinstance(expr.value, pa.Scalar)
    return expr.value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("i = 3", pa.scalar(3, pa.int64())),
        ("i = 3.0", pa.scalar(3, pa.int64())),
        ("i8 < -100", pa.scalar(-100, pa.int8())),
        ("f = 3", pa.scalar(3.0, pa.float64())),
        ("f32 > 0.1", pa.scalar(0.1, pa.float32())),
        ("s = 'abc'", pa.scalar("abc")),
        ("d = '2024-01-31'", pa.scalar(datetime.date(2024, 1, 31), pa.date32())),
        ("d = '2024-01-31T00:00:00'", pa.scalar(datetime.date(2024, 1, 31), pa.date32())),
        ("b = false", pa.scalar(False)),
        (
            "ts >= '2024-01-31 12:30'",
            pa.scalar(datetime.datetime(2024, 1, 31, 12, 30), pa.timestamp("us")),
        ),
        ("ts >= '2024-01-31'", pa.scalar(datetime.datetime(2024, 1, 31), pa.timestamp("us"))),
        (
            "tz < '2024-01-31 12:00:00+01:00'",
            pa.scalar(
                datetime.datetime(2024, 1, 31, 11, tzinfo=datetime.timezone.utc),
                pa.timestamp("ns", tz="UTC"),
            ),
        ),
        (
            "ts = '2024-01-31 12:30:00.000123000'",
            pa.scalar(datetime.datetime(2024, 1, 31, 12, 30, 0, 123), pa.timestamp("us")),
        ),
        (
            "tz = '2025-04-25 01:00:02.000123001'",
            pa.scalar(1745542802000123001, pa.timestamp("ns", tz="UTC")),
        ),
        (
            "tz = '2025-04-25 02:00:02.000123001+01:00'",
            pa.scalar(1745542802000123001, pa.timestamp("ns", tz="UTC")),
        ),
        ("dec = 1.5", pa.scalar(decimal.Decimal("1.50"), pa.decimal128(6, 2))),
        ("dec = 2", pa.scalar(decimal.Decimal("2.00"), pa.decimal128(6, 2))),
        ("bin = 'ab'", pa.scalar(b"ab")),
        ("cat = 'x'", pa.scalar("x")),
        ('"weird name" = 1', pa.scalar(1)),
    ],
)
def test_literals_get_the_column_type(text: str, expected: pa.Scalar) -> None:
    value = bound_value(text)
    assert value.type == expected.type
    assert value.equals(expected)


@pytest.mark.parametrize(
    ("literal", "typ", "nanos"),
    [
        ("1899-01-01 00:59:20.001001002", pa.timestamp("ns"), -2240521239998998998),
        ("1970-01-01 00:00:00.000000001", pa.timestamp("ns", tz="UTC"), 1),
        ("1970-01-01 00:00:01.000000001+01:00", pa.timestamp("ns", tz="UTC"), -3599 * 10**9 + 1),
        ("1970-01-01 00:00:00.000001000", pa.timestamp("us"), 1000),
        ("1970-01-01 00:00:00.5", pa.timestamp("ms"), 500 * 10**6),
    ],
)
def test_timestamp_literals_keep_every_fractional_digit(
    literal: str, typ: pa.DataType, nanos: int
) -> None:
    """Python's datetime holds microseconds; a nanosecond literal binds exactly."""
    value = bind(parse_filter(f"t < '{literal}'"), pa.schema([("t", typ)])).value  # type: ignore[attr-defined]
    assert value.type == typ
    step = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[typ.unit]
    assert value.cast(pa.int64()).as_py() * step == nanos


@pytest.mark.parametrize(
    ("literal", "typ", "fragment"),
    [
        ("1970-01-01 00:00:00.000000001", pa.timestamp("us"), "finer than the column's unit"),
        ("1970-01-01 00:00:00.5", pa.timestamp("s"), "finer than the column's unit"),
        ("1970-01-01 00:00:00.0000000001", pa.timestamp("ns"), "at most nine fractional"),
        ("1500-01-01", pa.timestamp("ns"), "out of the range"),
    ],
)
def test_a_timestamp_literal_its_column_cannot_hold_is_refused(
    literal: str, typ: pa.DataType, fragment: str
) -> None:
    """Truncating would change the rows: `t = '...00.5'` would match 00:00:00."""
    with pytest.raises(FilterError, match=fragment):
        bind(parse_filter(f"t = '{literal}'"), pa.schema([("t", typ)]))


def test_filtering_a_nanosecond_column_by_a_nanosecond_literal() -> None:
    values = pa.array([1, 2, 3], pa.timestamp("ns"))
    table = pa.table({"t": values})
    got = table.filter(
        to_arrow(bind(parse_filter("t >= '1970-01-01 00:00:00.000000002'"), table.schema))
    )
    assert got.column("t").cast(pa.int64()).to_pylist() == [2, 3]


def test_a_nanosecond_literal_selects_its_own_instant() -> None:
    """Python's datetime drops digits after the microsecond; a literal that kept only
    those would select the row 1 ns before it (Java's Paimon tests compare such rows)."""
    base = 1745542802000123000
    table = pa.table({"tz": pa.array([base, base + 1, None], pa.timestamp("ns", tz="UTC"))})
    for text, want in [
        ("tz = '2025-04-25 01:00:02.000123001'", [base + 1]),
        ("tz < '2025-04-25 01:00:02.000123001'", [base]),
        ("tz != '2025-04-25 01:00:02.000123000'", [base + 1]),
    ]:
        expr = bind(parse_filter(text), table.schema)
        got = table.filter(to_arrow(expr)).column("tz").cast(pa.int64()).to_pylist()
        oracle = [
            v
            for v, row in zip(table.column("tz").cast(pa.int64()).to_pylist(), table.to_pylist())
            if evaluate_python(expr, row)
        ]
        assert got == oracle == want, text


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_time_of_day_literals_bind_to_time_columns(unit: str) -> None:
    """'HH:MM[:SS[.fraction]]' and datetime.time, as a filter prints them back."""
    typ = pa.time32(unit) if unit in ("s", "ms") else pa.time64(unit)
    counts = pa.int32() if unit in ("s", "ms") else pa.int64()
    step = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
    table = pa.table({"t": pa.array([3600 * step, 3601 * step, None], typ)})
    for text, want in [
        ("t = '01:00:00'", [3600]),
        ("t = '01:00'", [3600]),
        ("t > '01:00:00'", [3601]),
        ("t in ('01:00:01', '02:00:00')", [3601]),
        ("t between '00:59' and '01:00:00.000'" if unit != "s" else "t <= '01:00'", [3600]),
        (str(col("t") == datetime.time(1, 0, 1)), [3601]),
    ]:
        expr = bind(parse_filter(text), table.schema)
        got = table.filter(to_arrow(expr)).column("t").cast(counts).to_pylist()
        assert [v // step for v in got] == want, text
    seconds = bind(col("t") == pa.scalar(3601, pa.time32("s")), table.schema)
    assert table.filter(to_arrow(seconds)).num_rows == 1
    nanos = col("t") == pa.scalar(3601 * 10**9 + 1, pa.time64("ns"))
    assert str(nanos) == "t = '01:00:01.000000001'"
    for literal, fragment in [
        ("25:00", "23:59:59"),
        ("noon", "time of day"),
        ("01:00:00.0000000001", "time of day"),
    ]:
        with pytest.raises(FilterError, match=fragment):
            bind(parse_filter(f"t = '{literal}'"), table.schema)
    if unit != "ns":
        with pytest.raises(FilterError, match="finer than the column"):
            bind(parse_filter("t = '01:00:00.000000001'"), table.schema)


def test_duration_literals_keep_their_nanoseconds() -> None:
    """A timedelta finer than its column is refused, not truncated into a match, as a
    timestamp literal is (pandas.Timedelta holds nanoseconds, datetime's microseconds)."""
    import numpy as np
    import pandas as pd

    table = pa.table({"d": pa.array([5000, 7000, None], pa.duration("ms"))})
    for literal in (
        datetime.timedelta(seconds=5),
        pd.Timedelta(seconds=5),
        np.timedelta64(5, "s"),
        pa.scalar(5, pa.duration("s")),
        5000,
    ):
        got = table.filter(to_arrow(bind(col("d") == literal, table.schema)))
        assert got.num_rows == 1, literal
    for literal in (pd.Timedelta(nanoseconds=5_000_000_001), datetime.timedelta(0, 5, 1)):
        with pytest.raises(FilterError, match="finer than the column"):
            bind(col("d") == literal, table.schema)
    with pytest.raises(FilterError, match="expected a duration"):
        bind(col("d") == "5 seconds", table.schema)


def test_numpy_durations_of_any_fixed_unit_are_literals() -> None:
    """np.timedelta64 of weeks, days, hours or minutes (Arrow's durations stop at
    seconds) raised pyarrow's bare 'Unsupported timedelta64 time unit'; months and years
    have no length, and a datetime64 finer than nanoseconds was truncated to its second:
    FilterError names them."""
    import numpy as np

    table = pa.table({"d": pa.array([86_400, 7 * 86_400, None], pa.duration("s"))})
    for literal in (np.timedelta64(1, "D"), np.timedelta64(24, "h"), np.timedelta64(1440, "m")):
        assert table.filter(to_arrow(bind(col("d") == literal, table.schema))).num_rows == 1
    in_weeks = col("d").isin([np.timedelta64(1, "W")])
    assert table.filter(to_arrow(bind(in_weeks, table.schema))).num_rows == 1
    for bad in (np.timedelta64(1, "M"), np.timedelta64(1, "Y")):
        with pytest.raises(FilterError, match="not a fixed duration"):
            _ = col("d") == bad
    with pytest.raises(FilterError, match="finer than nanoseconds"):
        _ = col("t") == np.datetime64("2024-01-01T00:00:00.000000000001", "ps")


def test_date_strings_bind_to_date32() -> None:
    expr = bind(col("d").isin(["2024-01-01", datetime.date(2024, 1, 2)]), SCHEMA)
    assert expr == In(
        "d",
        (
            pa.scalar(datetime.date(2024, 1, 1), pa.date32()),
            pa.scalar(datetime.date(2024, 1, 2), pa.date32()),
        ),
    )


def test_bind_keeps_structure_and_is_idempotent() -> None:
    expr = parse_filter("not (i = 1 or s not in ('a', 'b')) and d is null")
    bound = bind(expr, SCHEMA)
    assert isinstance(bound.children()[0], Not)
    assert bind(bound, SCHEMA) == bound
    assert parse_filter(str(bound)) != bound  # literals are typed scalars after binding
    assert bind(parse_filter(str(bound)), SCHEMA) == bound
    assert NotIn("s", (pa.scalar("a"), pa.scalar("b"))) in [
        bound.children()[0].children()[0].children()[1]  # type: ignore[attr-defined]
    ]


def test_rebinding_a_scalar_of_another_type_converts_it() -> None:
    assert bind(Compare("=", "f", pa.scalar(1, pa.int32())), SCHEMA) == Compare(
        "=", "f", pa.scalar(1.0)
    )


def test_unknown_column() -> None:
    with pytest.raises(UnknownColumnError) as info:
        bind(parse_filter("i = 1 and nope is null"), SCHEMA)
    assert info.value.column == "nope"
    assert info.value.available == SCHEMA.names
    assert "nope" in str(info.value)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("i = 'abc'", "expected an integer"),
        ("i = 1.5", "expected an integer"),
        ("i = true", "not a boolean"),
        ("i8 = 300", "300 is outside int8's range (-128 to 127)"),
        ("f = 'x'", "expected a number"),
        # a float32 literal of 1e39 was inf: x > 1e39 left inf out, x <= 1e39 took it in
        ("f32 > 1e39", "1e+39 is outside float's range (finite values up to 3.40282e+38)"),
        ("f32 in (1, -1e308)", "-1e+308 is outside float's range"),
        ("s = 1", "expected a string"),
        ("b = 1", "true or false"),
        ("d = 'abc'", "expected a date"),
        ("d = '2024-13-01'", "expected a date"),
        ("d = '2024-01-01 10:00'", "time of day"),
        ("d = 20240101", "expected a date"),
        ("ts = 'yesterday'", "ISO 8601"),
        ("ts = '2024-01-31 12:30:00.000123001'", "finer than the column's unit (us)"),
        ("tz = '2024-01-31 12:30:00.0000000001'", "at most nine fractional digits"),
        ("dec = 1.234", "decimal"),
        ("l = 1", "not supported"),
        ("st in (1)", "not supported"),
        ("i in (1, 'a')", "'a'"),
    ],
)
def test_bad_literals(text: str, fragment: str) -> None:
    with pytest.raises(FilterError) as info:
        bind(parse_filter(text), SCHEMA)
    message = str(info.value)
    assert fragment in message
    column = text.split()[0]
    assert repr(column) in message  # names the column ...
    assert str(SCHEMA.field(column).type) in message  # ... and its type


def test_null_tests_work_on_nested_columns() -> None:
    assert bind(parse_filter("l is null"), SCHEMA) == IsNull("l")


def test_referenced_columns() -> None:
    expr = parse_filter("a = 1 and (b in (1) or not c is null) and a > 2 or true")
    assert referenced_columns(expr) == {"a", "b", "c"}
    assert referenced_columns(parse_filter("true")) == set()


def test_numpy_scalars_are_numbers() -> None:
    """What ``df.x.max()`` and ``df.x.unique()`` hand back: numbers that print as
    numbers and bind to the column's type (an np.int64 was refused as "expected an
    integer", and printed as a string)."""
    np = pytest.importorskip("numpy")
    expr = col("i") == np.int64(3)
    assert str(expr) == "i = 3"
    assert str(col("i").isin(np.array([1, 2]))) == "i in (1, 2)"
    assert str(col("f") > np.float32(0.5)) == "f > 0.5"
    table = pa.table({"i": [1, 2, 3], "s": ["a", "b", "c"], "b": [True, False, True]})
    for expr, want in [
        (col("i") == np.int64(3), [3]),
        (col("i").isin(np.array([1, 2], dtype=np.int32)), [1, 2]),
        (col("s") == np.str_("b"), [2]),
        (col("b") == np.bool_(False), [2]),
    ]:
        got = table.filter(to_arrow(bind(expr, table.schema))).column("i").to_pylist()
        assert got == want, str(expr)


def test_pandas_and_numpy_times_keep_their_nanoseconds() -> None:
    """``pandas.Timestamp`` is a ``datetime`` that also holds nanoseconds; binding it as
    a datetime dropped them, so ``=`` selected nothing and ``>`` the instant itself."""
    pd = pytest.importorskip("pandas")
    np = pytest.importorskip("numpy")
    base = 1704067200000000000
    ns = pa.table({"t": pa.array([base + 1, base + 2], pa.timestamp("ns"))})
    for literal in (pd.Timestamp(base + 1), np.datetime64(base + 1, "ns")):
        for expr, want in [
            (col("t") == literal, [base + 1]),
            (col("t") > literal, [base + 2]),
            (col("t") <= literal, [base + 1]),
            (col("t").isin([literal]), [base + 1]),
        ]:
            got = ns.filter(to_arrow(bind(expr, ns.schema))).column("t").cast(pa.int64())
            assert got.to_pylist() == want, (repr(literal), str(expr))
    aware = pa.table({"t": pa.array([base + 1, base + 2], pa.timestamp("ns", "UTC"))})
    paris = pd.Timestamp(base + 2, tz="UTC").tz_convert("Europe/Paris")
    got = aware.filter(to_arrow(bind(col("t") == paris, aware.schema)))
    assert got.column("t").cast(pa.int64()).to_pylist() == [base + 2]
    micros = pa.schema([("t", pa.timestamp("us"))])
    with pytest.raises(FilterError, match="finer than the column's unit"):
        bind(col("t") == pd.Timestamp(base + 1), micros)
    days = pa.table({"d": pa.array([datetime.date(2024, 1, 1), datetime.date(2024, 1, 2)])})
    got = days.filter(to_arrow(bind(col("d") > np.datetime64("2024-01-01"), days.schema)))
    assert got.column("d").to_pylist() == [datetime.date(2024, 1, 2)]
    with pytest.raises(FilterError, match="null"):
        _ = col("t") == np.datetime64("NaT", "ns")


def test_pandas_missing_values_are_nulls() -> None:
    """pandas.NaT (in ``df.t.unique()`` of a column with missing times) compared as the
    instant 1677-09-21, so ``t != NaT`` selected every time; pandas.NA was 'expected an
    integer'. Both are refused as None is, with the way to ask for nulls."""
    pd = pytest.importorskip("pandas")
    times = pd.Series(pd.to_datetime(["2024-01-01", None]))
    for build in (
        lambda: col("t") != pd.NaT,
        lambda: col("t") > pd.NaT,
        lambda: col("i") == pd.NA,
        lambda: col("t").between(pd.NaT, pd.Timestamp("2024-01-02")),
    ):
        with pytest.raises(FilterError, match="with null is never true; use is_null"):
            build()
    for values in (times.unique(), [1, pd.NA], pd.array([1, None], dtype="Int64")):
        with pytest.raises(FilterError, match="null never matches; use is_null"):
            col("t").isin(values)


def test_nan_in_a_column_that_holds_no_nan_is_named_a_missing_value() -> None:
    """pandas 3 gives a missing string as nan, so ``isin(df.s.unique())`` of a column
    with nulls held one: it was 'expected a string'. A float column compares with NaN."""
    schema = pa.schema([("s", pa.string()), ("d", pa.date32()), ("f", pa.float64())])
    for expr in (col("s").isin(["a", float("nan")]), col("d") == float("nan")):
        with pytest.raises(FilterError, match="nan, pandas' missing value: a null never matches"):
            bind(expr, schema)
    bind(col("f").isin([1.0, float("nan")]), schema)


@pytest.mark.parametrize(
    "text",
    ["2024-01-01T12:00:00Z", "2024-01-01 12:00:00.5z", "2024-01-01T21:00+0900", "2024-01-01T12Z"],
)
def test_timestamp_literals_in_utc_or_with_offsets_bind_on_every_python(text: str) -> None:
    """Python 3.10's fromisoformat refuses the Z and a colonless offset that 3.11's reads:
    the same filter was a FilterError on 3.10 only."""
    table = pa.table({"t": pa.array([1704110400_000000000], pa.timestamp("ns", "UTC"))})
    got = table.filter(to_arrow(bind(parse_filter(f"t >= '{text}'"), table.schema)))
    assert got.num_rows == (0 if ".5" in text else 1)


def test_half_float_columns_filter() -> None:
    """Arrow has no comparison kernels for float16: the column is compared as float32."""
    np = pytest.importorskip("numpy")
    halves = pa.array(np.array([0.5, 2.0, np.nan], dtype=np.float16))
    ones = np.array([0.0, 1.0, 1.0], dtype=np.float16)  # pyarrow 16 takes numpy's halves only
    table = pa.table({"id": [1, 2, 3], "h": halves}).append_column(
        "n", pa.array(ones, mask=np.array([True, False, False]))
    )
    for text, want in [
        ("h > 1", [2]),
        ("h = 0.5", [1]),
        ("h != 0.5", [2, 3]),
        ("h in (0.5, 2)", [1, 2]),
        ("h not in (0.5)", [2, 3]),
        ("n not in (2)", [2, 3]),
    ]:
        expr = bind(parse_filter(text), table.schema)
        got = table.filter(to_arrow(expr)).column("id").to_pylist()
        oracle = [r["id"] for r in table.to_pylist() if evaluate_python(expr, r)]
        assert got == oracle == want, text


@pytest.mark.parametrize(
    "expr",
    [
        parse_filter("f32 < 3.4028235e38"),
        parse_filter("f = 1e308"),
        col("f32") == float("inf"),
        col("f32") > float("-inf"),
    ],
)
def test_float_literals_within_range_or_infinite_are_bound(expr: Expr) -> None:
    """The largest float32 rounds to itself, and infinity is a value of every float type."""
    bind(expr, SCHEMA)
