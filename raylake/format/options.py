"""Table options: the keys, their defaults, and their validation, in one place.

Options are stored as strings in the schema file (``options``), like Paimon's
and Iceberg's table properties; :class:`TableOptions` is their typed view.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from raylake.errors import InvalidOptionError

TARGET_FILE_SIZE = "write.target-file-size"
ROW_GROUP_ROWS = "write.row-group-rows"
COMPRESSION = "write.compression"
SPLIT_TARGET_SIZE = "read.split.target-size"
SPLIT_OPEN_FILE_COST = "read.split.open-file-cost"
MANIFEST_MERGE_MIN_COUNT = "manifest.merge-min-count"
COMMIT_MAX_RETRIES = "commit.max-retries"
# The user promises that one process at a time commits: needed on stores that cannot
# create a file atomically if absent (docs/object-stores.md).
COMMIT_SINGLE_WRITER = "commit.single-writer"
SNAPSHOT_RETAIN_MIN = "snapshot.num-retained.min"
# Paimon's key: a consumer whose progress is older than this stops protecting snapshots,
# and expiration removes it (docs/maintenance.md, "Consumer expiry").
CONSUMER_EXPIRATION_TIME = "consumer.expiration-time"
# Primary-key tables (docs/primary-keys.md).
MERGE_ENGINE = "merge-engine"
SEQUENCE_FIELD = "sequence.field"
CHANGELOG_PRODUCER = "changelog-producer"
DEFAULT_AGGREGATE = "fields.default-aggregate-function"
COMPACTION_AUTO = "compaction.auto"
COMPACTION_MAX_OVERLAP = "compaction.max-overlapping-files"
WRITE_BUFFER_SIZE = "write.buffer-size"
# Per-column keys: ``fields.<column>.aggregate-function`` (the column name may contain dots).
FIELD_PREFIX = "fields."
AGGREGATE_SUFFIX = ".aggregate-function"

# Options that mean something only for primary-key tables; an append table refuses them
# rather than silently ignoring them.
PRIMARY_KEY_ONLY = frozenset(
    {
        MERGE_ENGINE,
        SEQUENCE_FIELD,
        CHANGELOG_PRODUCER,
        DEFAULT_AGGREGATE,
        COMPACTION_AUTO,
        COMPACTION_MAX_OVERLAP,
        WRITE_BUFFER_SIZE,
    }
)

MERGE_ENGINES = ("deduplicate", "partial-update", "first-row", "aggregation")
CHANGELOG_PRODUCERS = ("none", "input", "lookup")
AGGREGATE_FUNCTIONS = ("sum", "min", "max", "last", "last-non-null", "first-non-null")

_COMPRESSIONS = {"zstd", "snappy", "lz4", "gzip", "brotli", "none"}


def _positive_int(key: str, raw: Any) -> int:
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise InvalidOptionError(key, raw, "expected an integer") from None
    if value <= 0:
        raise InvalidOptionError(key, raw, "expected a positive integer")
    return value


def _choice(choices: tuple[str, ...]) -> Any:
    def parse(key: str, raw: Any) -> str:
        value = str(raw).strip().lower()
        if value not in choices:
            raise InvalidOptionError(key, raw, f"expected one of {list(choices)}")
        return value

    return parse


def _boolean(key: str, raw: Any) -> bool:
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise InvalidOptionError(key, raw, "expected true or false")
    return value == "true"


# Flink's and Paimon's duration units (``TimeUtils.parseDuration``), in milliseconds; a
# number without a unit is milliseconds.
_DURATION_UNITS = {
    **dict.fromkeys(("", "ms", "milli", "millis", "millisecond", "milliseconds"), 1),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1000),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60_000),
    **dict.fromkeys(("h", "hour", "hours"), 3_600_000),
    **dict.fromkeys(("d", "day", "days"), 86_400_000),
}
_DURATION = re.compile(r"(\d+)\s*([a-z]*)")


def duration_millis(key: str, raw: Any) -> int:
    """A positive duration as Paimon writes it (``7 d``, ``12h``, ``30 min``), in ms."""
    found = _DURATION.fullmatch(str(raw).strip().lower())
    if found is None or found.group(2) not in _DURATION_UNITS:
        raise InvalidOptionError(key, raw, "expected a duration such as '7 d', '12 h' or '30 min'")
    millis = int(found.group(1)) * _DURATION_UNITS[found.group(2)]
    if millis <= 0:
        raise InvalidOptionError(key, raw, "expected a positive duration")
    return millis


def _column_name(key: str, raw: Any) -> str:
    value = str(raw).strip()
    if not value:
        raise InvalidOptionError(key, raw, "expected a column name")
    return value


def field_aggregate_column(key: str) -> str | None:
    """The column of a ``fields.<column>.aggregate-function`` key, else None."""
    if key.startswith(FIELD_PREFIX) and key.endswith(AGGREGATE_SUFFIX) and key != DEFAULT_AGGREGATE:
        column = key[len(FIELD_PREFIX) : -len(AGGREGATE_SUFFIX)]
        return column or None
    return None


@dataclass(frozen=True)
class TableOptions:
    """Typed, validated table options. Unknown keys are rejected."""

    target_file_size: int = 256 * 1024 * 1024  # bytes of in-memory Arrow data per file
    row_group_rows: int = 1024 * 1024
    compression: str = "snappy"
    split_target_size: int = 256 * 1024 * 1024  # in-memory bytes per read split
    split_open_file_cost: int = 4 * 1024 * 1024
    manifest_merge_min_count: int = 30
    commit_max_retries: int = 50
    commit_single_writer: bool = False
    snapshot_retain_min: int = 1
    consumer_expiration_millis: int | None = None  # None: consumers never expire
    merge_engine: str = "deduplicate"
    sequence_field: str | None = None
    changelog_producer: str = "none"
    default_aggregate: str = "last-non-null"
    # Column -> aggregate function, from the ``fields.<column>.aggregate-function`` keys.
    field_aggregates: Mapping[str, str] = field(default_factory=dict, compare=False)
    compaction_auto: bool = True
    compaction_max_overlap: int = 5  # auto-compact a bucket above this many overlapping files
    write_buffer_size: int = 512 * 1024 * 1024  # buffered Arrow bytes before a PK writer spills
    raw: Mapping[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> TableOptions:
        options = dict(options or {})
        values: dict[str, Any] = {}
        aggregates: dict[str, str] = {}
        for key, raw in options.items():
            column = field_aggregate_column(key)
            if column is not None:
                aggregates[column] = _choice(AGGREGATE_FUNCTIONS)(key, raw)
                continue
            if key not in _KEYS:
                known = ", ".join(sorted([*_KEYS, f"{FIELD_PREFIX}<column>{AGGREGATE_SUFFIX}"]))
                raise InvalidOptionError(key, raw, f"unknown option; known options: {known}")
            attr = _KEYS[key]
            if attr == "compression":
                if str(raw).lower() not in _COMPRESSIONS:
                    raise InvalidOptionError(key, raw, f"expected one of {sorted(_COMPRESSIONS)}")
                values[attr] = str(raw).lower()
            else:
                values[attr] = _PARSERS.get(attr, _positive_int)(key, raw)
        raw_options = {k: str(v) for k, v in options.items()}
        return cls(**values, field_aggregates=aggregates, raw=raw_options)


_KEYS: dict[str, str] = {
    TARGET_FILE_SIZE: "target_file_size",
    ROW_GROUP_ROWS: "row_group_rows",
    COMPRESSION: "compression",
    SPLIT_TARGET_SIZE: "split_target_size",
    SPLIT_OPEN_FILE_COST: "split_open_file_cost",
    MANIFEST_MERGE_MIN_COUNT: "manifest_merge_min_count",
    COMMIT_MAX_RETRIES: "commit_max_retries",
    COMMIT_SINGLE_WRITER: "commit_single_writer",
    SNAPSHOT_RETAIN_MIN: "snapshot_retain_min",
    CONSUMER_EXPIRATION_TIME: "consumer_expiration_millis",
    MERGE_ENGINE: "merge_engine",
    SEQUENCE_FIELD: "sequence_field",
    CHANGELOG_PRODUCER: "changelog_producer",
    DEFAULT_AGGREGATE: "default_aggregate",
    COMPACTION_AUTO: "compaction_auto",
    COMPACTION_MAX_OVERLAP: "compaction_max_overlap",
    WRITE_BUFFER_SIZE: "write_buffer_size",
}
# Parsers of the options that are not positive integers.
_PARSERS: dict[str, Any] = {
    "merge_engine": _choice(MERGE_ENGINES),
    "sequence_field": _column_name,
    "changelog_producer": _choice(CHANGELOG_PRODUCERS),
    "default_aggregate": _choice(AGGREGATE_FUNCTIONS),
    "compaction_auto": _boolean,
    "commit_single_writer": _boolean,
    "consumer_expiration_millis": duration_millis,
}
assert set(_KEYS.values()) <= {f.name for f in fields(TableOptions)}


def check_primary_key_only(options: Mapping[str, Any]) -> None:
    """Raise if an append table is given options that only primary-key tables use."""
    for key, raw in options.items():
        if key in PRIMARY_KEY_ONLY or field_aggregate_column(key) is not None:
            raise InvalidOptionError(
                key, raw, "applies only to primary-key tables; pass primary_key=[...]"
            )
