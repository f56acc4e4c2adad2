"""Table options: the keys, their defaults, and their validation, in one place.

Options are stored as strings in the schema file (``options``), like Paimon's
and Iceberg's table properties; :class:`TableOptions` is their typed view.
"""

from __future__ import annotations

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
SNAPSHOT_RETAIN_MIN = "snapshot.num-retained.min"

_COMPRESSIONS = {"zstd", "snappy", "lz4", "gzip", "brotli", "none"}


def _positive_int(key: str, raw: Any) -> int:
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise InvalidOptionError(key, raw, "expected an integer") from None
    if value <= 0:
        raise InvalidOptionError(key, raw, "expected a positive integer")
    return value


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
    snapshot_retain_min: int = 1
    raw: Mapping[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> TableOptions:
        options = dict(options or {})
        values: dict[str, Any] = {}
        for key, raw in options.items():
            if key not in _KEYS:
                known = ", ".join(sorted(_KEYS))
                raise InvalidOptionError(key, raw, f"unknown option; known options: {known}")
            attr = _KEYS[key]
            if attr == "compression":
                if str(raw).lower() not in _COMPRESSIONS:
                    raise InvalidOptionError(key, raw, f"expected one of {sorted(_COMPRESSIONS)}")
                values[attr] = str(raw).lower()
            else:
                values[attr] = _positive_int(key, raw)
        return cls(**values, raw={k: str(v) for k, v in options.items()})


_KEYS: dict[str, str] = {
    TARGET_FILE_SIZE: "target_file_size",
    ROW_GROUP_ROWS: "row_group_rows",
    COMPRESSION: "compression",
    SPLIT_TARGET_SIZE: "split_target_size",
    SPLIT_OPEN_FILE_COST: "split_open_file_cost",
    MANIFEST_MERGE_MIN_COUNT: "manifest_merge_min_count",
    COMMIT_MAX_RETRIES: "commit_max_retries",
    SNAPSHOT_RETAIN_MIN: "snapshot_retain_min",
}
assert set(_KEYS.values()) <= {f.name for f in fields(TableOptions)}
