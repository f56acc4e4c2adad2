"""Paimon tables written by Java Paimon, and the rows Java's readers return for them.

The tables under java_fixtures/ are test data that another Paimon reader (paimon-cpp)
committed; java_fixtures/cases.json names, per table, the repository, commit and path
it came from and the expected rows of that project's own tests (snapshot, session
time zone, rows in its JSON form: timestamps as strings, decimals as strings, maps as
key/value pairs, structs as lists), with the read's ``filter`` and ``columns`` where
the test reads with a predicate or a projection, and ``java_prunes_only`` where Java's
rows are what its index or statistics kept (a superset of the rows the predicate
matches): those are compared after the predicate is applied to them. :func:`outcome`
reads one table with raylake and says how it went; :func:`tally` counts the corpus.
"""

from __future__ import annotations

import calendar
import datetime as dt
import decimal
import functools
import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

import raylake
from raylake.errors import UnsupportedPaimonError
from raylake.expr import bind, evaluate_python, parse_filter, referenced_columns
from raylake.paimon.casts import TIME_ZONE_VARIABLE

ROOT = Path(__file__).parent / "java_fixtures"
CASES: dict[str, dict[str, Any]] = json.loads((ROOT / "cases.json").read_text())
NAMES = sorted(CASES)

EQUAL, READ, REFUSED, DIFFERENT, CRASHED = "equal", "read", "refused", "different", "crashed"


@contextmanager
def time_zone(zone: str | None) -> Iterator[None]:
    """The session time zone of a read (Java's tests set the JVM's zone)."""
    old = os.environ.get(TIME_ZONE_VARIABLE)
    os.environ[TIME_ZONE_VARIABLE] = zone or "UTC"
    try:
        yield
    finally:
        if old is None:
            del os.environ[TIME_ZONE_VARIABLE]
        else:
            os.environ[TIME_ZONE_VARIABLE] = old


@functools.cache
def outcome(name: str) -> tuple[str, str]:
    """How raylake reads one corpus table: (EQUAL/READ/REFUSED/DIFFERENT/CRASHED, detail).

    EQUAL: every expected read returned Java's rows; READ: read without error, the
    source has no expected rows; REFUSED: UnsupportedPaimonError (its message). A read
    may name a projection (``columns``) and a ``filter``; with ``java_prunes_only`` the
    reference is Java's rows that the filter selects."""
    case = CASES[name]
    try:
        runs = case["expected"] or [None]
        for run in runs:
            with time_zone(None if run is None else run.get("time_zone")):
                tbl = raylake.open_table(str(ROOT / name))
                snapshot = None if run is None else run.get("snapshot")
                if run is not None and "buckets" in run:
                    got = _read_buckets(tbl, snapshot, run["buckets"])
                elif run is None:
                    got = tbl.to_arrow()
                else:
                    columns, where = run.get("columns"), run.get("filter")
                    got = tbl.to_arrow(snapshot_id=snapshot, columns=columns, filter=where)
            if run is None:
                return READ, f"{got.num_rows} rows"
            rows = run["rows"]
            if run.get("java_prunes_only"):
                rows = java_rows_matching(rows, got.schema, run["filter"])
            diff = compare(got, rows)
            if diff:
                return DIFFERENT, f"{run['test']}: {diff}"
        return EQUAL, f"{len(runs)} read(s)"
    except UnsupportedPaimonError as exc:
        return REFUSED, str(exc)
    except Exception as exc:
        return CRASHED, f"{type(exc).__name__}: {exc}"


def _read_buckets(tbl: Any, snapshot: int | None, buckets: list[list[Any]]) -> pa.Table:
    """The rows of some (partition values, bucket)s at ``snapshot``: what a test that
    reads one data split of Java's plan expects."""
    wanted = {(tuple(partition), bucket) for partition, bucket in buckets}
    splits = [s for s in tbl.scan().at(snapshot).plan() if (tuple(s.partition), s.bucket) in wanted]
    batches = [b for s in splits for b in tbl.read_split(s)]
    return pa.Table.from_batches(batches) if batches else pa.table({})


def tally() -> Counter[str]:
    return Counter(outcome(name)[0] for name in NAMES)


def refusal(detail: str) -> str:
    """What a refusal names, without the table's path (one row of the docs table)."""
    reason = detail.split("': ", 1)[-1].split(" (see docs/")[0]
    reason = re.sub(r"^data file \S+ ", "a data file ", reason)
    return re.sub(r"^the table option ('[^']+')=.*", r"the option \1", reason)


def support_table() -> str:
    """docs/paimon.md's table of the corpus, from the reads themselves."""
    counts = tally()
    lines = [
        "| Java-written tables (paimon-cpp's test data) | tables |",
        "|---|---|",
        f"| read, equal to the rows Java's tests expect | {counts[EQUAL]} |",
        f"| read (the source's tests give no rows to compare) | {counts[READ]} |",
        f"| refused by name | {counts[REFUSED]} |",
        f"| failed or read differently | {counts[CRASHED] + counts[DIFFERENT]} |",
        "",
        "| Refused: what the refusal names | tables |",
        "|---|---|",
    ]
    reasons = Counter(refusal(outcome(n)[1]) for n in NAMES if outcome(n)[0] == REFUSED)
    lines += [f"| {reason} | {count} |" for reason, count in sorted(reasons.items())]
    return "\n".join(lines) + "\n"


def java_rows_matching(rows: list[list[Any]], schema: pa.Schema, text: str) -> list[list[Any]]:
    """Java's rows that ``text`` selects: for a read whose index or statistics only
    prune (Java's rows hold rows the predicate does not match), the reference for
    raylake's row-exact filter. Each row is typed by ``schema`` and judged by the
    filter's Python oracle, not by the Arrow path that raylake's read takes."""
    if not rows:
        return rows
    expr = bind(parse_filter(text), schema)
    # Only the filter's columns are typed: Java's JSON form of nested values (maps as
    # pairs, structs as lists) is not what Arrow takes, and the filter needs none.
    used = [i for i, f in enumerate(schema) if f.name in referenced_columns(expr)]
    columns = [_typed([r[i] for r in rows], schema.field(i).type) for i in used]
    typed = pa.Table.from_arrays(columns, schema=pa.schema([schema.field(i) for i in used]))
    return [r for r, t in zip(rows, typed.to_pylist()) if evaluate_python(expr, t)]


def _typed(values: list[Any], t: pa.DataType) -> pa.Array:
    """One column of Java's JSON rows as an Arrow array of type ``t``."""
    if pa.types.is_timestamp(t):
        nanos = [None if v is None else _nanos(v) for v in values]
        return pa.array(nanos, pa.int64()).cast(pa.timestamp("ns", t.tz)).cast(t)
    if pa.types.is_date(t):
        days = [None if v is None else canon(v, t) for v in values]
        return pa.array(days, pa.int32()).cast(t)
    if pa.types.is_decimal(t):
        return pa.array([None if v is None else decimal.Decimal(str(v)) for v in values], t)
    return pa.array(values, t)


def compare(got: pa.Table, rows: list[list[Any]]) -> str:
    """'' when ``got`` holds ``rows`` (in any order), else what differs."""
    if rows and len(rows[0]) != got.num_columns:
        return f"{got.num_columns} columns, Java has {len(rows[0])}"
    types = [f.type for f in got.schema]
    want = sorted(repr(tuple(canon(v, t) for v, t in zip(r, types))) for r in rows)
    have = sorted(
        repr(tuple(canon(v, t) for v, t in zip(r.values(), types))) for r in got.to_pylist()
    )
    if want == have:
        return ""
    missing = sorted(set(want) - set(have))[:3]
    extra = sorted(set(have) - set(want))[:3]
    return (
        f"{len(have)} rows, Java {len(want)}; Java's not read {missing}; read, not Java's {extra}"
    )


def canon(value: Any, t: pa.DataType) -> Any:
    """A value read by raylake, or in Java's tests' JSON form, as one comparable value."""
    if value is None:
        return None
    if pa.types.is_timestamp(t):
        return _nanos(value)
    if pa.types.is_date(t):
        return value if isinstance(value, int) else (_date(value) - dt.date(1970, 1, 1)).days
    if pa.types.is_decimal(t):
        return str(decimal.Decimal(str(value)).normalize())
    if pa.types.is_floating(t):
        return round(float(value), 5)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return value.decode("latin-1") if isinstance(value, bytes) else value
    if pa.types.is_map(t):
        pairs = [tuple(p) for p in value]
        return sorted((repr(canon(k, t.key_type)), repr(canon(v, t.item_type))) for k, v in pairs)
    if pa.types.is_list(t) or pa.types.is_fixed_size_list(t):
        return [canon(v, t.value_type) for v in value]
    if pa.types.is_struct(t):
        values = list(value.values()) if isinstance(value, dict) else list(value)
        return [canon(v, t.field(i).type) for i, v in enumerate(values)]
    return value


def _date(value: Any) -> dt.date:
    return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))


def _nanos(value: Any) -> int:
    """Nanoseconds since the epoch of a read timestamp (its UTC instant for a zoned one)
    or of a JSON string (which Arrow's JSON reader takes as that UTC value)."""
    if isinstance(value, str):
        head, _, fraction = value.replace("T", " ").partition(".")
        whole = dt.datetime.fromisoformat(head).replace(tzinfo=dt.timezone.utc)
        return int(whole.timestamp()) * 10**9 + int((fraction or "0").ljust(9, "0")[:9])
    if hasattr(value, "nanosecond"):  # a pandas Timestamp (nanosecond units): exact
        return int(value.value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return calendar.timegm(value.utctimetuple()) * 10**9 + value.microsecond * 1000


if __name__ == "__main__":
    print(support_table())
