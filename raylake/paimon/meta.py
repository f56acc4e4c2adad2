"""What a Paimon table hands to raylake's scans and readers: a table schema and slices.

:class:`PaimonTableSchema` is a raylake :class:`~raylake.format.schema.TableSchema`
(the current Paimon schema as Arrow columns, keys and partitions) that also carries
every Paimon schema by id and the parsed options; its format's source
(raylake/paimon/source.py) names its table kind. It
pickles with the splits' read context, so workers need nothing else.
:class:`PaimonFileSlice` is a split's file with what reading it needs: the schema it
was written with and its deletion vector.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from raylake.format.schema import TableSchema
from raylake.paimon.deletion import DeletionFile
from raylake.paimon.options import PaimonOptions
from raylake.paimon.schema import PaimonSchema
from raylake.table.split import FileSlice


@dataclass(frozen=True)
class PaimonInfo:
    uri: str
    schemas: Mapping[int, PaimonSchema]
    current: PaimonSchema
    options: PaimonOptions
    # scan.fallback-branch: the branch's latest schema (raylake/paimon/fallback.py).
    fallback: PaimonTableSchema | None = None


@dataclass(frozen=True, eq=False)
class PaimonTableSchema(TableSchema):
    table_format: ClassVar[str] = "paimon"  # its source names its kind (PaimonSource)
    paimon: PaimonInfo | None = None

    @property
    def info(self) -> PaimonInfo:
        assert self.paimon is not None
        return self.paimon

    @property
    def stored_options(self) -> dict[str, str]:
        return dict(self.info.current.options)  # bucket, merge-engine, ... as Paimon wrote them


@dataclass(frozen=True)
class PaimonFileSlice(FileSlice):
    schema_id: int = 0
    deletion: DeletionFile | None = None
    file_format: str = "parquet"
    # Where the file lives: stream shards and change planning group files by bucket.
    partition: tuple[Any, ...] = ()
    bucket: int = 0
    # The bucket count it was written under (_TOTAL_BUCKETS; 0 where not recorded).
    total_buckets: int = 0
    # Data evolution: the row id of the first row, and the columns the file holds (by
    # its schema's names; None: all). raylake/paimon/evolution.py joins them.
    first_row_id: int | None = None
    write_cols: tuple[str, ...] | None = None
    # The fallback branch the file was planned from (None: the main branch).
    branch: str | None = None
