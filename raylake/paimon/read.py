"""Reading the data files of Paimon splits: column mapping, deletion vectors, merging.

Every file is read under the current schema: its columns are found by field id in
the schema it was written with (renamed columns keep their id; columns added later
read as nulls; widened types are cast). Rows a deletion vector marks are dropped.

Append files are independent. Primary-key files carry ``_SEQUENCE_NUMBER`` and
``_VALUE_KIND`` (+I 0, -U 1, +U 2, -D 3, the same codes as raylake's row kinds) and
are merged per section (files of a bucket whose key ranges overlap) under raylake's
read plan (raylake/table/pk/read.py ``ReadPlan``, from the table's merge spec).
Engines that pick whole rows go through the merge-on-read kernel both formats use
(raylake/table/pk/kernel.py): each file's key, sequence and kind columns in (the
retracts as the merge engine treats them), a mask of winners per file out, decided
newest file first where it can (no ``_SEQUENCE_NUMBER`` read), kept per process;
each file is reduced to its winners before its columns are mapped. Partial-update and
aggregation merge every version (raylake/table/pk/engines.py). Only key and partition
predicates filter rows before a merge of every version; the whole filter runs on
merged rows, so an older version of a row never reappears.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylake.errors import UnsupportedPaimonError
from raylake.expr import Expr
from raylake.io.read_errors import reading
from raylake.paimon.avro_data import read_avro
from raylake.paimon.blob import read_blob
from raylake.paimon.casts import column_caster
from raylake.paimon.deletion import deleted_positions, keep_mask
from raylake.paimon.meta import PaimonFileSlice, PaimonInfo, PaimonTableSchema
from raylake.paimon.orc_time import java_timestamps
from raylake.paimon.sequence import ORDER, order_column, with_order
from raylake.paimon.types import PaimonType
from raylake.table.pk import kernel
from raylake.table.pk.dedupe import newest_wins_by_file
from raylake.table.pk.engines import merge
from raylake.table.pk.kernel import picks_rows
from raylake.table.pk.late import dictionary_columns
from raylake.table.pk.read import MERGE_THREADS, ReadPlan
from raylake.table.pk.schema import DELETE, KIND, SEQ, UPDATE_BEFORE, MergeSpec
from raylake.table.projection import FileProjection, identity_projection, projection_between
from raylake.table.readahead import read_ahead
from raylake.table.split import Split

PAIMON_SEQ, PAIMON_KIND = "_SEQUENCE_NUMBER", "_VALUE_KIND"
_RETRACT = pa.array([UPDATE_BEFORE, DELETE], pa.int8())


def read_file(
    ctx: Any, f: PaimonFileSlice, names: Sequence[str], *, system: bool = False
) -> pa.Table:
    """One file's ``names`` (current column names) in the current types, without the rows
    its deletion vector deletes; with ``_rl_seq``/``_rl_kind`` when ``system``."""
    raw, projection = _read_conformable(ctx, f, names, seq=system, kinds=system)
    data = projection.conform(raw, names)
    arrays, fields = list(data.columns), list(data.schema)
    if system:
        arrays += [raw.column(PAIMON_SEQ).cast(pa.int64()), raw.column(PAIMON_KIND).cast(pa.int8())]
        fields += [pa.field(SEQ, pa.int64(), nullable=False), pa.field(KIND, pa.int8(), False)]
    if not arrays:
        return pa.table({"_": pa.nulls(raw.num_rows)}).select([])
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _read_conformable(
    ctx: Any,
    f: PaimonFileSlice,
    names: Sequence[str],
    *,
    seq: bool = False,
    kinds: bool = False,
    dictionary: bool = False,
) -> tuple[pa.Table, FileProjection]:
    """The stored columns that hold ``names`` (and the system columns asked for), without
    the rows the file's deletion vector deletes, and how they map onto the current schema
    (``conform`` also turns the dictionary columns of ``dictionary`` into strings)."""
    ts: PaimonTableSchema = ctx.table_schema
    projection = file_projection(ts, f.schema_id)
    wanted = projection.file_columns(names)
    wanted += [PAIMON_SEQ] if seq else []
    wanted += [PAIMON_KIND] if kinds else []
    raw = _read_raw(ctx, f, list(dict.fromkeys(wanted)), dictionary)
    if f.deletion is not None:
        raw = raw.filter(keep_mask(raw.num_rows, deleted_positions(ctx.file_io, f.deletion)))
    return raw, projection


def file_projection(ts: PaimonTableSchema, schema_id: int) -> FileProjection:
    """How a file written under Paimon schema ``schema_id`` reads under ``ts``: columns
    by field id (raylake's schema-evolution projection), always cast to ``ts``'s types
    (Paimon's files may store another physical type than the schema's)."""

    def build() -> FileProjection:
        info = ts.info
        written = info.schemas.get(schema_id, info.current)
        names = {f.id: f.name for f in written.fields}
        found = projection_between(ts, names, written.arrow_schema())
        projection = identity_projection(ts) if found is None else found
        old = written.by_id()
        changed = {
            f.name: (old[f.id].type, f.type)
            for f in info.current.fields
            if f.id in old and _retyped(old[f.id].type, f.type)
        }
        if not changed:
            return projection
        caster = column_caster(changed, info.options.session_time_zone, info.uri)
        return replace(projection, caster=caster, by_name=False)

    return ts.derived(f"paimon.projection.{schema_id}", build)


def _retyped(old: PaimonType, new: PaimonType) -> bool:
    """Whether a schema change altered a column's type (nullability aside)."""
    return replace(old, nullable=True) != replace(new, nullable=True)


def _read_raw(ctx: Any, f: PaimonFileSlice, columns: list[str], dictionary: bool) -> pa.Table:
    fs = ctx.file_io.arrow_filesystem()
    path = ctx.file_io.full_path(f.path)
    with reading(path), fs.open_input_file(path) as source:
        if f.file_format == "blob":  # one BLOB column (raylake/paimon/blob.py)
            return read_blob(source, columns, path)
        if f.file_format == "avro":
            info = ctx.table_schema.info
            written = info.schemas.get(f.schema_id, info.current)
            return read_avro(source, columns, written.arrow_schema(), path)
        if f.file_format == "orc":
            from pyarrow import orc

            reader = orc.ORCFile(source)
            if not columns:
                return pa.table({"_": pa.nulls(reader.nrows)}).select([])
            return java_timestamps(reader.read(columns=columns), reader, source, path)
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(source)
        if not columns:
            return pa.table({"_": pa.nulls(parquet.metadata.num_rows)}).select([])
        strings = dictionary_columns(parquet.metadata, columns) if dictionary else []
        if strings:
            parquet = pq.ParquetFile(source, metadata=parquet.metadata, read_dictionary=strings)
        return parquet.read(columns=columns, use_threads=True)


def merge_spec(ts: PaimonTableSchema) -> MergeSpec:
    """How the versions of a key merge: the table's merge engine, the column its
    ``sequence.field`` orders by (sequence.py) and its aggregates (no key: an append
    table, whose rows never merge)."""

    def build() -> MergeSpec:
        opts = ts.info.options
        return MergeSpec(
            key=tuple(ts.primary_key),
            engine=opts.merge_engine,
            sequence_field=order_column(
                opts.sequence_fields, opts.sequence_ascending, ts.arrow_schema
            ),
            aggregates={
                c: opts.aggregates.get(c, opts.default_aggregate)
                for c in ts.column_names
                if c not in ts.primary_key
            },
        )

    return ts.derived("paimon.merge_spec", build)


def read_plan(ts: PaimonTableSchema, columns: Sequence[str] | None, filter: Expr) -> ReadPlan:
    """The primary-key read plan of raylake's tables, under the table's merge spec."""
    return ReadPlan.of(ts, columns, filter, merge_spec(ts), ts.info.options.sequence_fields)


# Below this many bytes on disk a read's sections are read on the calling thread.
SMALL_READ_BYTES = 1 << 20


def read_splits(ctx: Any, splits: Sequence[Split]) -> Iterator[pa.RecordBatch]:
    ts: PaimonTableSchema = ctx.table_schema
    plan = read_plan(ts, ctx.columns, ctx.filter)
    out_schema = ctx.output_schema
    sections = [
        section
        for split in splits
        for section in (split.merge_sections() if split.sections else [(f,) for f in split.files])
    ]
    # Sections are read and merged a few at a time on threads (pyarrow and numpy release
    # the GIL), in order; memory holds a window of sections, never the whole plan.
    window = min(max(len(sections), 1), MERGE_THREADS)
    if sum(f.file_size for section in sections for f in section) < SMALL_READ_BYTES:
        window = 1  # a few small files: starting threads costs more than they overlap
    for rows in read_ahead(partial(_read_section, ctx, plan), sections, window):
        if plan.output:
            rows = pa.Table.from_arrays([rows.column(c) for c in plan.output], schema=out_schema)
        else:
            rows = rows.select([])
        yield from rows.to_batches(max_chunksize=ctx.batch_size)


def _read_section(ctx: Any, plan: ReadPlan, files: Sequence[PaimonFileSlice]) -> pa.Table:
    ts: PaimonTableSchema = ctx.table_schema
    if not ts.primary_key:
        if len(files) > 1 or files[0].write_cols is not None:  # data evolution
            from raylake.paimon.evolution import read_row_range

            rows = read_row_range(ctx, files, plan.table_columns)
        else:
            rows = read_file(ctx, files[0], plan.table_columns)
    elif len(files) == 1 and (files[0].level > 0 or ts.info.options.deletion_vectors):
        # A compacted file (or any file of a deletion-vector table) holds each key once:
        # its retracts go, nothing is merged, _SEQUENCE_NUMBER is not decoded.
        raw, projection = _read_conformable(
            ctx, files[0], plan.table_columns, kinds=True, dictionary=True
        )
        retracts = _retracts(raw)
        if retracts is not None:
            raw = raw.filter(pa.array(~retracts))
        rows = projection.conform(raw, plan.table_columns)
    elif picks_rows(plan.spec):
        rows = _read_picked(ctx, plan, files)
    else:
        found = []
        for f in files:
            part = read_file(ctx, f, plan.table_columns, system=True)
            found.append(part if plan.key_filter is None else part.filter(plan.key_filter))
        rows = merge(
            prepare_merge(pa.concat_tables(found), plan, ts.info, ctx.file_io.uri), plan.spec
        )
    return rows if plan.full_filter is None else rows.filter(plan.full_filter)


def _read_picked(ctx: Any, plan: ReadPlan, files: Sequence[PaimonFileSlice]) -> pa.Table:
    """A deduplicate or first-row section, decided by the merge-on-read kernel
    (raylake/table/pk/kernel.py): each file read once, without ``_SEQUENCE_NUMBER``
    where the kernel decides newest file first, and reduced to its winners before its
    columns are mapped onto the current schema."""
    ts: PaimonTableSchema = ctx.table_schema
    spec = plan.spec
    seq = not newest_wins_by_file(spec, files, ts)
    # Kinds always: pypaimon 2.1 records a delete row count of 0 for files that hold -D
    # rows, so the manifest cannot say a file has none (an RLE column: cheap).
    raws = [
        _read_conformable(ctx, f, plan.table_columns, seq=seq, kinds=True, dictionary=True)
        for f in files
    ]

    def versions(columns: Sequence[str]) -> list[tuple[pa.Table, int]]:
        if SEQ in columns and PAIMON_SEQ not in raws[0][0].column_names:  # a sort after all
            raws[:] = [
                _read_conformable(ctx, f, plan.table_columns, seq=True, kinds=True) for f in files
            ]
        return [(rows, 0) for rows in _versions(ts, raws, columns)]

    key = None
    if len(files) > 1:  # one file: nothing worth keeping
        paths = tuple((f.path, f.deletion) for f in files)
        key = (ctx.file_io.uri, ts.info.current.id, spec.engine, spec.sequence_field, paths)
    decision = kernel.decide(key, spec, files, ts, versions)
    parts = []
    for i in decision.order:
        raw, projection = raws[i]
        keep = decision.selection(i)
        if keep.true_count < len(keep):
            raw = raw.filter(keep)
        parts.append(projection.conform(raw, plan.table_columns))
    return pa.concat_tables(parts)


def _versions(
    ts: PaimonTableSchema, raws: Sequence[tuple[pa.Table, FileProjection]], columns: Sequence[str]
) -> list[pa.Table]:
    """Each file's versions as the kernel takes them: ``columns`` under current names,
    ``_rl_kind`` always, retracts as the merge engine treats them (-U: no version,
    -D: removes the key), and :data:`ORDER` ranked over all the files together."""
    opts = ts.info.options
    order = ORDER in columns
    names = [c for c in ts.column_names if c in columns or (order and c in opts.sequence_fields)]
    ignored = opts.ignore_delete or opts.merge_engine == "first-row"
    found = []
    for raw, projection in raws:
        rows = projection.conform(raw.select(projection.file_columns(names)), names)
        kinds = np.asarray(raw.column(PAIMON_KIND).cast(pa.int8()).to_numpy(zero_copy_only=False))
        retract = (kinds & 1).view(bool)
        if retract.any():
            kinds = np.where(retract, np.int8(UPDATE_BEFORE if ignored else DELETE), kinds)
        rows = rows.append_column(KIND, pa.array(kinds, pa.int8()))
        if SEQ in columns:
            rows = rows.append_column(SEQ, raw.column(PAIMON_SEQ).cast(pa.int64()))
        found.append(rows)
    if order:
        fields = opts.sequence_fields
        ranks = with_order(
            pa.concat_tables([r.select(fields) for r in found]), fields, opts.sequence_ascending
        ).column(ORDER)
        offsets = np.cumsum([0, *(r.num_rows for r in found)])
        found = [
            r.append_column(ORDER, ranks.slice(offsets[i], r.num_rows)) for i, r in enumerate(found)
        ]
    return found


def _retracts(raw: pa.Table) -> np.ndarray | None:
    """Where ``raw`` holds -U (1) or -D (3) rows, or None where it holds none: the odd
    kinds (a bit test, several times cheaper than a set lookup)."""
    kinds = raw.column(PAIMON_KIND).cast(pa.int8()).combine_chunks()  # a required column
    found = (np.asarray(kinds.to_numpy(zero_copy_only=False)) & 1).view(bool)
    return found if found.any() else None


def prepare_merge(rows: pa.Table, plan: ReadPlan, info: PaimonInfo, uri: str) -> pa.Table:
    """A section's rows as the merge kernel takes them: retracts treated per engine,
    and the rank of the sequence fields where the kernel cannot order by them as they
    are (raylake/paimon/sequence.py)."""
    rows = prepare_kinds(rows, info, uri)
    if plan.spec is not None and plan.spec.sequence_field == ORDER:
        opts = info.options
        rows = with_order(rows, opts.sequence_fields, opts.sequence_ascending)
    return rows


def prepare_kinds(rows: pa.Table, info: PaimonInfo, uri: str) -> pa.Table:
    """Paimon's treatment of retract rows (-U, -D) per merge engine, as raylake row kinds.

    deduplicate: the latest version decides, and a retract removes the key (-U becomes
    -D). first-row, and any engine with ``ignore-delete``: retracts are ignored.
    partial-update and aggregation: a -D removes the key only with
    ``<engine>.remove-record-on-delete``; otherwise Paimon itself refuses them.
    """
    opts = info.options
    kinds = rows.column(KIND)
    retract = pc.is_in(kinds, value_set=_RETRACT)
    if not pc.any(retract).as_py():
        return rows
    if opts.ignore_delete or opts.merge_engine == "first-row":
        return rows.filter(pc.invert(retract))
    if opts.merge_engine == "deduplicate":
        fixed = pc.if_else(retract, pa.scalar(DELETE, pa.int8()), kinds)
        return rows.set_column(rows.column_names.index(KIND), KIND, fixed)
    if opts.remove_record_on_delete:
        before = pc.equal(kinds, pa.scalar(UPDATE_BEFORE, pa.int8()))
        return rows.filter(pc.invert(before))
    raise UnsupportedPaimonError(
        uri,
        f"a {opts.merge_engine} table holds retract (-U/-D) rows and neither 'ignore-delete' "
        f"nor '{opts.merge_engine}.remove-record-on-delete' is set (Paimon refuses them too)",
    )
