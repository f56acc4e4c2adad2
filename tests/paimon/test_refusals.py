"""What raylake cannot read correctly is refused, naming it, before any data is read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from paimon_util import FIXTURES

import raylake
from raylake.paimon import UnsupportedPaimonError


def _set_options(table: Path, **options: str) -> None:
    """A new schema version with ``options`` added (as an ALTER TABLE SET would)."""
    path = table / "schema" / "schema-0"
    schema = json.loads(path.read_text())
    schema.update(id=1, options={**schema["options"], **options})
    (table / "schema" / "schema-1").write_text(json.dumps(schema))


@pytest.mark.parametrize(
    ("fixture", "options", "named"),
    [
        ("pk_deduplicate", {"bucket": "-2"}, "postponed bucket"),
        ("pk_deduplicate", {"merge-engine": "lookup-something"}, "'lookup-something'"),
        ("pk_deduplicate", {"changelog-producer": "Lookups"}, "'changelog-producer'='Lookups'"),
        ("pk_aggregation", {"fields.x.aggregate-function": "product"}, "'product'"),
        ("pk_partial_update", {"fields.name.sequence-group": "x"}, "fields.name.sequence-group"),
        ("append_unaware", {"file.format": "lance"}, "'lance'"),
        ("append_unaware", {"scan.snapshot-id": "1"}, "scan.snapshot-id"),
        ("pk_deduplicate", {"incremental-between": "1,3"}, "incremental-between"),
        ("pk_deduplicate", {"incremental-between-timestamp": "0,1"}, "incremental-between"),
        ("pk_deduplicate", {"scan.creation-time-millis": "0"}, "scan.creation-time-millis"),
        ("pk_deduplicate", {"scan.bucket": "0"}, "scan.bucket"),
        ("pk_deduplicate", {"scan.primary-branch": "b"}, "scan.primary-branch"),
        ("pk_deduplicate", {"data-evolution.enabled": "true"}, "data-evolution.enabled"),
        ("append_unaware", {"data-file.external-paths": "s3://b/x"}, "external-paths"),
        ("append_unaware", {"scan.fallback-branch": "rt"}, "scan.fallback-branch"),
        ("pk_deduplicate", {"deletion-vectors.merge-on-read": "true"}, "merge-on-read"),
        ("pk_deduplicate", {"sequence.field.sort-order": "newest"}, "sequence.field.sort-order"),
        ("pk_deduplicate", {"some.future.option": "1"}, "some.future.option"),
    ],
)
def test_unsupported_options_are_named(
    paimon_copy: Any, fixture: str, options: dict[str, str], named: str
) -> None:
    table = paimon_copy(fixture)
    _set_options(table, **options)
    with pytest.raises(UnsupportedPaimonError) as info:
        raylake.open_table(str(table))
    assert named in str(info.value) and str(table) in str(info.value)


@pytest.mark.parametrize("float_type", ["DOUBLE", "FLOAT"])
def test_a_float_partition_is_refused_as_unsupported(paimon_copy: Any, float_type: str) -> None:
    """Java names its directories by Double.toString; it raised a bare SchemaError."""
    table = paimon_copy("append_partitioned")
    path = table / "schema" / "schema-0"
    schema = json.loads(path.read_text())
    schema["fields"][-1]["type"] = float_type  # the partition column, dt
    path.write_text(json.dumps(schema))
    with pytest.raises(UnsupportedPaimonError, match=f"partitioned by {float_type} column 'dt'"):
        raylake.open_table(str(table))


def test_harmless_writer_options_are_accepted(paimon_copy: Any) -> None:
    table = paimon_copy("pk_deduplicate")
    _set_options(
        table,
        **{
            "write-buffer-size": "256 mb",
            "changelog-producer": "lookup",
            "snapshot.num-retained.min": "5",
            "num-sorted-run.compaction-trigger": "3",
            "incremental-between-scan-mode": "delta",
        },
    )
    assert raylake.open_table(str(table)).count() == 37


def test_enum_options_are_read_in_any_case(paimon_copy: Any) -> None:
    """As Paimon reads them (OptionsUtils.convertToEnum): 'LOOKUP' is the lookup producer,
    whose changelog a stream read nowhere when it took the value for another producer."""
    table = paimon_copy("pk_deduplicate")
    _set_options(table, **{"merge-engine": "DEDUPLICATE", "changelog-producer": "LOOKUP"})
    tbl = raylake.open_table(str(table))
    assert tbl.count() == 37
    assert tbl.table_schema.info.options.changelog_producer == "lookup"
    assert tbl.table_schema.info.options.merge_engine == "deduplicate"


def test_options_that_change_no_read_are_accepted(paimon_copy: Any) -> None:
    """Per-column statistics modes only steer writers; row tracking and data evolution
    over whole files read as the table without them; index files may lie with the data."""
    table = paimon_copy("append_unaware")
    _set_options(
        table,
        **{
            "fields.x.stats-mode": "none",
            "row-tracking.enabled": "true",
            "data-evolution.enabled": "true",
            "index-file-in-data-file-dir": "true",
            "manifest.format": "orc",
        },
    )
    tbl = raylake.open_table(str(table))
    plain = raylake.open_table(str(FIXTURES / "append_unaware" / "table"))
    assert sorted(tbl.to_arrow().column("id").to_pylist()) == sorted(
        plain.to_arrow().column("id").to_pylist()
    )
    assert tbl.count() == plain.count() > 0


def test_retracts_in_a_partial_update_table_are_refused(paimon_copy: Any) -> None:
    """Paimon refuses -D rows in a partial-update table without ignore-delete or
    remove-record-on-delete; raylake does not guess what they mean."""
    table = paimon_copy("pk_partial_update")
    import pyarrow.parquet as pq

    # Make one of the upserts a delete, in place (its key overlaps older files).
    for path in sorted(table.rglob("*.parquet")):
        rows = pq.read_table(path)
        if 2 in rows.column("_VALUE_KIND").to_pylist():
            kinds = [3 if k == 2 else k for k in rows.column("_VALUE_KIND").to_pylist()]
            import pyarrow as pa

            i = rows.column_names.index("_VALUE_KIND")
            rows = rows.set_column(i, rows.schema.field(i), pa.array(kinds, pa.int8()))
            pq.write_table(rows, path)
            break
    tbl = raylake.open_table(str(table))
    with pytest.raises(UnsupportedPaimonError, match="remove-record-on-delete"):
        tbl.to_arrow()
    _set_options(table, **{"partial-update.remove-record-on-delete": "true"})
    assert raylake.open_table(str(table)).to_arrow().num_rows < 40


def test_not_a_table_is_not_found(tmp_path: Path) -> None:
    from raylake.errors import TableNotFoundError

    (tmp_path / "schema").mkdir()
    with pytest.raises(TableNotFoundError):
        raylake.open_table(str(tmp_path))


def test_a_missing_avro_reader_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from paimon_util import FIXTURES

    from raylake.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, "fastavro", None)
    tbl = raylake.open_table(str(FIXTURES / "append_unaware" / "table"))
    with pytest.raises(MissingDependencyError, match=r"raylake\[paimon\]"):
        tbl.to_arrow()


def test_a_data_file_of_another_kind_is_named(paimon_copy: Any) -> None:
    import copy

    from paimon_spec import commit, live_entries

    table = paimon_copy("append_unaware")
    entry = live_entries(table)[0]
    other = copy.deepcopy(entry)
    other["_FILE"]["_FILE_NAME"] = entry["_FILE"]["_FILE_NAME"].replace(".parquet", ".lance")
    commit(table, kind="COMPACT", added=[other], deleted=[entry])
    with pytest.raises(UnsupportedPaimonError, match=r"'lance' file"):
        raylake.open_table(str(table)).to_arrow()
