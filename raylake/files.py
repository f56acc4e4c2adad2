"""Reading user files (Parquet, CSV, JSON lines) as Arrow batches, for ``raylake write``."""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import pyarrow as pa
import pyarrow.dataset as ds

from raylake.errors import RaylakeError
from raylake.file_types import cast_columns, csv_readable, json_readable
from raylake.map_arrays import from_zero, map_from_parts
from raylake.progress import track

FORMATS = ("auto", "parquet", "csv", "json")
_SUFFIXES = {"parquet": "parquet", "parq": "parquet", "csv": "csv", "json": "json",
             "jsonl": "json", "ndjson": "json"}  # fmt: skip


def file_format(path: str, fmt: str = "auto") -> str:
    if fmt != "auto":
        return fmt
    suffix = os.path.splitext(path)[1].lower().lstrip(".")
    if suffix not in _SUFFIXES:
        raise RaylakeError(f"cannot tell the format of {path!r}; pass --format parquet|csv|json")
    return _SUFFIXES[suffix]


@contextmanager
def reading(path: str) -> Iterator[None]:
    """Name the file whose contents pyarrow could not parse (a value that does not fit
    the table's type, a malformed line) instead of a traceback from pyarrow."""
    try:
        yield
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise RaylakeError(f"cannot read {path!r}: {exc}") from exc


def _starts_array(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(4096).lstrip().startswith(b"[")


def file_dataset(path: str, fmt: str = "auto", schema: pa.Schema | None = None) -> ds.Dataset:
    """One file as a dataset; CSV and JSON columns are parsed as ``schema``'s types."""
    with reading(path):
        return _dataset(path, fmt, schema)


def _without_row_numbers(dataset: ds.Dataset) -> ds.Dataset:
    """A Parquet file pandas wrote from a DataFrame with an unnamed index other than a
    range (what a filter leaves): pyarrow stored it as ``__index_level_0__``. It is row
    numbering, which ``from_pandas`` does not store either (docs/pandas.md); a named
    index is a column and stays."""
    index = (dataset.schema.pandas_metadata or {}).get("index_columns", [])
    unnamed = {c for c in index if isinstance(c, str) and _ROW_NUMBERS.fullmatch(c)}
    if not unnamed:
        return dataset
    kept = pa.schema([f for f in dataset.schema if f.name not in unnamed])
    return ds.dataset(dataset.files, format="parquet", schema=kept, filesystem=dataset.filesystem)


_NAN_TEXT = re.compile(r"nan|#ind", re.IGNORECASE)
_ROW_NUMBERS = re.compile(r"__index_level_\d+__")


def _dataset(path: str, fmt: str, schema: pa.Schema | None) -> ds.Dataset:
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson

    kind = file_format(path, fmt)
    if kind == "parquet":
        return _without_row_numbers(ds.dataset(path, format="parquet"))
    if kind == "csv":
        types = None if schema is None else {f.name: csv_readable(f.type) for f in schema}
        # pyarrow's default null texts include NaN and nan: a float NaN is a value, and
        # `raylake scan` prints it so (the other defaults, "", NA, null, ..., stay null)
        nulls = [v for v in pcsv.ConvertOptions().null_values if not _NAN_TEXT.search(v)]
        options = pcsv.ConvertOptions(column_types=types, null_values=nulls)
        return ds.dataset(path, format=ds.CsvFileFormat(convert_options=options))

    # JSON lines are read whole: a dataset's schema inference ignores an explicit schema.
    def read(explicit: pa.Schema | None, source: str | pa.Buffer = path) -> pa.Table:
        parse = pjson.ParseOptions(explicit_schema=explicit, unexpected_field_behavior="infer")
        try:
            data = pa.BufferReader(source) if isinstance(source, pa.Buffer) else source
            return pjson.read_json(data, parse_options=parse)
        except pa.ArrowInvalid as exc:
            if _starts_array(path):  # pyarrow says "changed from object to array"
                raise RaylakeError(
                    f"cannot read {path!r}: it holds a JSON array, and a JSON file is read "
                    "as JSON lines (one object a line, as `jq -c '.[]'` writes them)"
                ) from exc
            raise

    if os.path.getsize(path) == 0:  # pyarrow: "Empty JSON file"; an empty CSV has no rows
        return ds.dataset(pa.table({}) if schema is None else schema.empty_table())
    if schema is None:
        return ds.dataset(read(None))
    return ds.dataset(
        cast_columns(_decoded_binaries(_typed(path, schema, read), schema, path), schema)
    )


_Reader = Callable[[pa.Schema, "str | pa.Buffer"], pa.Table]


def _typed(path: str, schema: pa.Schema, read: _Reader) -> pa.Table:
    """The file read as the types the JSON reader takes for ``schema``'s (json_readable).

    It converts to no duration, float16, dictionary or fixed-size binary, and reads a
    date or time from a number but not from text ("2024-01-01"): such columns are read
    as JSON holds them, then cast as a CSV column's text is parsed. What `scan --format
    json` writes and it cannot read at all, a float column's "NaN" and "Infinity" beside
    numbers and a map's [key, value] pairs, is read from the file rewritten (_rewritten):
    for a map always, for a float column only once the plain read failed."""
    maps = any(pa.types.is_map(f.type) for f in schema)
    floats = any(pa.types.is_floating(f.type) for f in schema)
    tries = [(False, maps), (True, maps)] + [(False, True), (True, True)] * (floats and not maps)
    text: pa.Buffer | None = None
    tried: list[pa.Schema] = []
    error: pa.ArrowInvalid | None = None
    for dates, rewrite in tries:
        readable = pa.schema([f.with_type(json_readable(f.type, dates)) for f in schema])
        if rewrite:
            readable = pa.schema([f.with_type(_rewritten_type(f.type)) for f in readable])
            text = text or _rewritten(path, schema)
        if any(readable.equals(t) for t in tried):
            continue
        tried.append(readable)
        source: str | pa.Buffer = text if rewrite and text is not None else path
        try:
            table = read(readable, source)
        except pa.ArrowInvalid as exc:
            error = exc
            continue
        # returned at once: the loop's next source is never seen
        table = _without_absent_fields(table, readable, lambda e: read(e, source))  # noqa: B023
        return _maps_from_entries(table, schema)
    assert error is not None
    raise error


def _rewritten_type(t: pa.DataType) -> pa.DataType:
    """What _rewritten makes of a column of type ``t``: floats as text, which Arrow's
    cast reads as numbers, "NaN", "Infinity" and "-Infinity" too; maps as lists of
    key-value structs, which the reader takes."""
    if pa.types.is_floating(t):
        return pa.string()
    if pa.types.is_map(t):
        entries = [
            ("key", json_readable(t.key_type, True)),
            ("value", json_readable(t.item_type, True)),
        ]
        return pa.list_(pa.struct(entries))
    return t


def _rewritten(path: str, schema: pa.Schema) -> pa.Buffer:
    """The file with every number of a float column as text, and every map as a list
    of {"key": k, "value": v}, from [[k, v], ...] (as `scan --format json` writes it) or
    an object (as Spark writes it). pyarrow's reader takes no value of two kinds in one
    column, so this is Python's parser, a line at a time; other values and lines that
    are no JSON object are left for the reader to refuse."""
    floats = {f.name for f in schema if pa.types.is_floating(f.type)}
    maps = {f.name for f in schema if pa.types.is_map(f.type)}
    lines = []
    with open(path, "rb") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                row = None
            if not isinstance(row, dict):
                lines.append(line.rstrip(b"\r\n"))
                continue
            for name in floats & row.keys():
                value = row[name]
                if isinstance(value, int | float) and not isinstance(value, bool):
                    row[name] = repr(value)  # repr reads back as the same double
            for name in maps & row.keys():
                row[name] = _entries(row[name])
            lines.append(json.dumps(row).encode())
    return pa.py_buffer(b"\n".join(lines) + b"\n")


def _entries(value: object) -> object:
    """A map's value as the reader's list of key-value objects; anything else as is."""
    if isinstance(value, dict):
        return [{"key": k, "value": v} for k, v in value.items()]
    if isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value):
        return [{"key": p[0], "value": p[1]} for p in value]
    return value


def _maps_from_entries(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Map columns read as lists of key-value structs (_rewritten_type) as maps, of
    the types the entries were read as; cast_columns casts them to the table's."""
    for i, name in enumerate(table.column_names):
        if name not in schema.names or not pa.types.is_map(schema.field(name).type):
            continue
        entry = table.column(i).type.value_type
        mapped = pa.map_(entry.field("key").type, entry.field("value").type)
        chunks = []
        for chunk in table.column(i).chunks:
            offsets, entries = from_zero(chunk.offsets, chunk.values)
            keys, values = entries.field("key"), entries.field("value")
            chunks.append(map_from_parts(offsets, keys, values, chunk.is_null()))
        column = pa.chunked_array(chunks, mapped)
        table = table.set_column(i, table.field(i).with_type(column.type), column)
    return table


def _without_absent_fields(
    table: pa.Table, explicit: pa.Schema, read: Callable[[pa.Schema], pa.Table]
) -> pa.Table:
    """``table`` less the columns of ``explicit`` that no line of the file has: the
    reader adds them as nulls, which a write stored over a primary key's values where a
    Parquet or CSV file without them is refused as missing columns. A column all null
    may be null in the file or absent from it: read again without such columns, the
    reader infers (as null) only those some line has. Inference of a column all null
    cannot fail, and the other columns keep the types the first read took."""
    unknown = [f.name for f in explicit if table.column(f.name).null_count == len(table)]
    if not unknown or not len(table):  # no line: nothing written, nothing to refuse
        return table
    present = read(pa.schema([f for f in explicit if f.name not in unknown])).column_names
    return table.drop_columns([name for name in unknown if name not in present])


def _decoded_binaries(table: pa.Table, schema: pa.Schema, path: str) -> pa.Table:
    """Binary columns of JSON lines hold base64 text, as ``raylake scan --format json``
    writes them and Spark reads them; read as the text's bytes, a round trip stored
    ``AAE=`` for the bytes 00 01. (Before the casts: a fixed-size binary's text is
    longer than its bytes.)"""
    for i, field in enumerate(table.schema):
        wanted = schema.field(field.name).type if field.name in schema.names else None
        if wanted is None or not _is_binary(wanted):
            continue
        try:
            values = [
                None if v is None else base64.b64decode(v, validate=True)
                for v in table.column(i).to_pylist()  # a CLI file's column, not a hot path
            ]
            column = pa.array(values, field.type)
        except (binascii.Error, ValueError, pa.ArrowInvalid) as exc:
            raise RaylakeError(
                f"cannot read {path!r}: binary column {field.name!r} holds text that is not "
                f"base64 ({exc}); JSON lines hold bytes as base64, as `raylake scan --format "
                "json` writes them"
            ) from exc
        table = table.set_column(i, field, column)
    return table


def _is_binary(t: pa.DataType) -> bool:
    types = pa.types
    return bool(types.is_binary(t) or types.is_large_binary(t) or types.is_fixed_size_binary(t))


def check_files(paths: Sequence[str], fmt: str = "auto") -> None:
    folders = [p for p in paths if os.path.isdir(p)]
    if folders:  # the shell expands a pattern; a directory's files are not guessed at
        pattern = os.path.join(folders[0], "*.parquet")
        raise RaylakeError(f"{folders[0]!r} is a directory; give its files (e.g. {pattern})")
    streams = [p for p in paths if os.path.exists(p) and not os.path.isfile(p)]
    if streams:  # /dev/stdin of a pipe, <(...): pyarrow reads files, seeking in them
        raise RaylakeError(
            f"{streams[0]!r} is not a regular file (a pipe, or stdin from one): "
            "save the data to a file and give its path"
        )
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise RaylakeError(f"no such file(s): {missing}")
    for path in paths:
        file_format(path, fmt)  # a format given (--format) is the format of every file


def file_batches(
    paths: Sequence[str], fmt: str = "auto", schema: pa.Schema | None = None
) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Every batch of every file, in order, with its file's path (a progress bar by file
    on a terminal)."""
    check_files(paths, fmt)
    # The CSV columns read as another type (csv_readable), cast to the table's.
    recast = pa.schema([f for f in schema or [] if csv_readable(f.type) != f.type])
    for path in track(paths, "write: files", total=len(paths)):
        with reading(path):
            for batch in file_dataset(path, fmt, schema).to_batches():
                if len(recast) and file_format(path, fmt) == "csv":
                    yield from ((path, b) for b in cast_columns(batch, recast).to_batches())
                else:
                    yield path, batch
