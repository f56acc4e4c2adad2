"""The Paimon table options raylake reads, and the refusal of any it cannot honour.

Options fall in three groups: those that change what a read returns (raylake
implements them, or refuses the values it does not implement), those that only
steer writers, compaction and maintenance (harmless to a reader), and everything
else, which raises :class:`UnsupportedPaimonError` naming the option: raylake never
returns rows that Paimon would not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from raylake.errors import UnsupportedPaimonError
from raylake.paimon.casts import session_time_zone

# Paimon's aggregate functions raylake's merge kernel computes, by Paimon name.
AGGREGATES = {
    "sum": "sum",
    "min": "min",
    "max": "max",
    "last_value": "last",
    "last_non_null_value": "last-non-null",
    "first_non_null_value": "first-non-null",
}
ENGINES = ("deduplicate", "partial-update", "first-row", "aggregation")
PRODUCERS = ("none", "input", "lookup", "full-compaction")
BUCKET_UNAWARE, BUCKET_POSTPONE = -1, -2

# Options a reader may ignore: writers, compaction, expiration, catalogs, file encoding.
_HARMLESS_PREFIXES = (
    "bucket-key",
    "write-",
    "write.",
    "compaction.",
    "full-compaction.",
    "num-sorted-run.",
    "num-levels",
    "target-file-size",
    "file.compression",
    "file.block-size",
    "file.suffix",
    "file-index.",
    "file-reader-async-threshold",
    "manifest.",
    "snapshot.",
    "changelog.",
    "changelog-producer",
    "changelog-file.",
    "consumer.",
    "consumer-id",
    "tag.",
    "sink.",
    "lookup.",
    "lookup-wait",
    "commit.",
    "dynamic-bucket.",
    "dynamic-partition-overwrite",
    "cross-partition-upsert.",
    "partition.expiration",
    "partition.timestamp",
    "partition.mark-done",
    "partition.idle-time",
    "metadata.",
    "parquet.",
    "orc.",
    "avro.",
    "page-size",
    "cache-page-size",
    "local-sort.",
    "sort-",
    "spill-",
    "sequence.auto-padding",
    "rowkind.field",
    "streaming-read-overwrite",
    "path",
    "owner",
    "comment",
    "bucket-append-ordered",
    "read.batch-size",
    "source.",
    "continuous.discovery-interval",
    "precommit-compact",
    "record-level.",
    "local-merge-buffer-size",
    "row-kind",
    "format-table.",
    "incremental-between-scan-mode",  # tunes an incremental read (refused: below)
    "incremental-between-tag-to-snapshot",
    "force-lookup",
    "lookup-compact",
    "changelog-producer.",
    "stats-mode",
    "metastore.",
    "async-file-write",
    "end-input.",
    "zorder.",
    "blob.",
    "primary-key",
    "partition",
)
# Options whose value changes which rows a default Paimon read returns.
_SCAN_OPTIONS = (
    "scan.mode",
    "scan.snapshot-id",
    "scan.timestamp-millis",
    "scan.timestamp",
    "scan.tag-name",
    "scan.watermark",
    "scan.file-creation-time-millis",
    "scan.bounded.watermark",
    "scan.version",
    "scan.creation-time-millis",
    "scan.bucket",
    "scan.primary-branch",
    "scan.fallback-delta-branch",
    "scan.fallback-snapshot-branch",
    # A batch read of only the changes between two snapshots or tags (startup mode
    # incremental), not the table.
    "incremental-between",
    "incremental-between-timestamp",
    "incremental-to-auto-tag",
)


@dataclass(frozen=True)
class PaimonOptions:
    """The options of a Paimon schema that decide what a read returns."""

    bucket: int = -1
    merge_engine: str = "deduplicate"
    changelog_producer: str = "none"
    # sequence.field, in its order, and sequence.field.sort-order (raylake/paimon/sequence.py).
    sequence_fields: tuple[str, ...] = ()
    sequence_ascending: bool = True
    ignore_delete: bool = False
    remove_record_on_delete: bool = False
    aggregates: Mapping[str, str] = field(default_factory=dict)  # column -> raylake function
    default_aggregate: str = "last-non-null"
    deletion_vectors: bool = False
    file_format: str = "parquet"
    partition_default_name: str = "__DEFAULT_PARTITION__"
    legacy_partition_name: bool = True
    # The zone of casts between wall clocks and instants (raylake/paimon/casts.py),
    # fixed when the table is opened so that every worker casts alike.
    session_time_zone: str = "UTC"
    index_in_data_dir: bool = False
    data_evolution: bool = False
    fallback_branch: str | None = None
    # Paimon's numLevels(): 'num-levels', else 'num-sorted-run.compaction-trigger' + 1.
    # A full compaction writes the top level, num_levels - 1.
    num_levels: int = 6


def parse_options(
    options: Mapping[str, str], columns: list[str], primary_keys: tuple[str, ...], uri: str
) -> PaimonOptions:
    """Validate a schema's options for reading, naming the first one raylake cannot honour."""
    known = _known_keys(columns)
    for key in options:
        harmless = key.startswith(_HARMLESS_PREFIXES) or key.startswith("scan.")
        if key in _SCAN_OPTIONS or not (key in known or harmless):
            raise UnsupportedPaimonError(uri, f"the table option {key!r}={options[key]!r}")
    bucket = int(options.get("bucket", "-1"))
    if bucket == BUCKET_POSTPONE:
        raise UnsupportedPaimonError(
            uri,
            "'bucket'='-2' (postponed bucket): its rows wait in bucket-postpone until a "
            "compaction assigns them, and a read would miss them",
        )
    # Paimon reads enum options in any case (OptionsUtils.convertToEnum): 'LOOKUP' is
    # the lookup producer, whose changelog comes in COMPACT snapshots.
    engine = options.get("merge-engine", "deduplicate").lower()
    if engine not in ENGINES:
        raise UnsupportedPaimonError(uri, f"the merge engine {options['merge-engine']!r}")
    producer = options.get("changelog-producer", "none").lower()
    if producer not in PRODUCERS:
        raise UnsupportedPaimonError(uri, f"'changelog-producer'={options['changelog-producer']!r}")
    sequence = tuple(f.strip() for f in options.get("sequence.field", "").split(",") if f.strip())
    if sequence:
        if engine != "deduplicate":
            raise UnsupportedPaimonError(uri, f"'sequence.field' with merge-engine={engine!r}")
        for name in sequence:
            if name not in columns:
                raise UnsupportedPaimonError(uri, f"'sequence.field'={name!r} is no column")
    order = options.get("sequence.field.sort-order", "ascending").lower()
    if order not in ("ascending", "descending"):
        raise UnsupportedPaimonError(uri, f"'sequence.field.sort-order'={order!r}")
    fmt = options.get("file.format", "parquet").lower()
    if fmt not in ("parquet", "orc", "avro"):
        raise UnsupportedPaimonError(
            uri, f"'file.format'={fmt!r} (raylake reads parquet, orc and avro)"
        )
    if _flag(options, "data-evolution.enabled") and primary_keys:
        raise UnsupportedPaimonError(
            uri,
            "'data-evolution.enabled'='true' on a primary-key table",
        )
    if options.get("type", "table") != "table":
        raise UnsupportedPaimonError(uri, f"'type'={options['type']!r}")
    aggregates, default = _aggregates(options, columns, primary_keys, engine, uri)
    return PaimonOptions(
        bucket=bucket,
        merge_engine=engine,
        changelog_producer=producer,
        sequence_fields=sequence,
        sequence_ascending=order == "ascending",
        ignore_delete=_ignore_delete(options),
        remove_record_on_delete=_flag(options, f"{engine}.remove-record-on-delete"),
        aggregates=aggregates,
        default_aggregate=default,
        deletion_vectors=_flag(options, "deletion-vectors.enabled"),
        file_format=fmt,
        partition_default_name=options.get("partition.default-name", "__DEFAULT_PARTITION__"),
        legacy_partition_name=options.get("partition.legacy-name", "true").lower() == "true",
        session_time_zone=session_time_zone(),
        index_in_data_dir=_flag(options, "index-file-in-data-file-dir"),
        data_evolution=_flag(options, "data-evolution.enabled"),
        fallback_branch=options.get("scan.fallback-branch") or None,
        num_levels=_num_levels(options, uri),
    )


def _num_levels(options: Mapping[str, str], uri: str) -> int:
    key = "num-levels" if "num-levels" in options else "num-sorted-run.compaction-trigger"
    try:
        return int(options[key]) if key == "num-levels" else int(options.get(key, "5")) + 1
    except ValueError:
        raise UnsupportedPaimonError(uri, f"the table option {key!r}={options[key]!r}") from None


def _known_keys(columns: list[str]) -> set[str]:
    keys = {
        "bucket",
        "merge-engine",
        "sequence.field",
        "sequence.field.sort-order",
        "ignore-delete",
        "first-row.ignore-delete",
        "deduplicate.ignore-delete",
        "partial-update.ignore-delete",
        "partial-update.remove-record-on-delete",
        "aggregation.remove-record-on-delete",
        "fields.default-aggregate-function",
        "deletion-vectors.enabled",
        "deletion-vectors.bitmap64",
        "deletion-vectors.index-file.target-size",
        "deletion-vectors.modifiable",
        "file.format",
        "partition.default-name",
        "partition.legacy-name",
        "type",
        "index-file-in-data-file-dir",
        # Row ids (first row id per file) for _ROW_ID reads; rows read as without them.
        "row-tracking.enabled",
        "data-evolution.enabled",
    }
    keys |= {f"fields.{c}.aggregate-function" for c in columns}
    # Which statistics a writer keeps for a column: a reader only loses pruning.
    keys |= {f"fields.{c}.stats-mode" for c in columns}
    return keys


def _flag(options: Mapping[str, str], key: str) -> bool:
    return options.get(key, "false").strip().lower() == "true"


def _ignore_delete(options: Mapping[str, str]) -> bool:
    keys = ("ignore-delete", "first-row.ignore-delete", "deduplicate.ignore-delete")
    return any(_flag(options, k) for k in (*keys, "partial-update.ignore-delete"))


def _aggregates(
    options: Mapping[str, str],
    columns: list[str],
    primary_keys: tuple[str, ...],
    engine: str,
    uri: str,
) -> tuple[dict[str, str], str]:
    default_name = options.get("fields.default-aggregate-function", "last_non_null_value")
    functions = {
        c: options.get(f"fields.{c}.aggregate-function", default_name)
        for c in columns
        if c not in primary_keys
    }
    explicit = [k for k in options if k.endswith(".aggregate-function")]
    if engine != "aggregation":
        if explicit:
            raise UnsupportedPaimonError(
                uri, f"aggregate functions ({explicit}) with merge-engine={engine!r}"
            )
        return {}, "last-non-null"
    aggregates = {}
    for column, name in functions.items():
        if name not in AGGREGATES:
            raise UnsupportedPaimonError(
                uri, f"the aggregate function {name!r} of column {column!r}"
            )
        aggregates[column] = AGGREGATES[name]
    return aggregates, AGGREGATES.get(default_name, "last-non-null")
