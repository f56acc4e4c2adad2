"""One exception hierarchy, rooted at :class:`RaylakeError`.

Every error names the offending value (column, type, path, snapshot id) and,
where there is one, the fix. Subclasses carry the facts as attributes so that
callers can react without parsing messages.

Import every error from here (or from :mod:`raylake`). The root, the plain argument
errors and the errors of commits and stores are defined in raylake/error_root.py,
raylake/argument_errors.py and raylake/commit_errors.py, modules below this one, and
re-exported: defined here they would make this module too long to read.
"""

from __future__ import annotations

from typing import Any

from raylake.argument_errors import InvalidArgumentError as InvalidArgumentError
from raylake.argument_errors import InvalidOptionError as InvalidOptionError
from raylake.argument_errors import UnknownKeywordError as UnknownKeywordError
from raylake.commit_errors import CommitConflictError as CommitConflictError
from raylake.commit_errors import CommitFailedError as CommitFailedError
from raylake.commit_errors import CommitLineageUnknownError as CommitLineageUnknownError
from raylake.commit_errors import CommitStateUnknownError as CommitStateUnknownError
from raylake.commit_errors import MissingCredentialsError as MissingCredentialsError
from raylake.commit_errors import StorageAccessDeniedError as StorageAccessDeniedError
from raylake.commit_errors import StorageFullError as StorageFullError
from raylake.commit_errors import StorageRetriesExhaustedError as StorageRetriesExhaustedError
from raylake.commit_errors import UnsafeCommitError as UnsafeCommitError
from raylake.error_root import RaylakeError as RaylakeError


class TableNotFoundError(RaylakeError, FileNotFoundError):
    """No table at a URI (no schema file under ``<uri>/schema``); ``reason`` says why,
    where more is known than that (an object store's bucket that does not exist)."""

    def __init__(self, uri: str, reason: str = "it has no schema/ directory") -> None:
        super().__init__(f"no raylake table at {uri!r}: {reason}")
        self.uri = uri


class TableNotVisibleError(RaylakeError, FileNotFoundError):
    """A table that was there when its work was planned is not there for the process that
    does the work (a Ray task or actor, a Spark executor): it was dropped or moved since,
    or it lies where only the planning process sees it (a local disk of another machine)."""

    def __init__(self, uri: str, process: str) -> None:
        super().__init__(
            f"the table at {uri!r} is not there for {process}, though it was when the work "
            "was planned: it was dropped or moved since, or its path is on a disk that only "
            "the driver's machine sees. Every node of a cluster must reach a table at the "
            "same path: put it on an object store (s3://...) or a filesystem that every "
            "node mounts"
        )
        self.uri = uri
        self.process = process


class TableAlreadyExistsError(RaylakeError, FileExistsError):
    """``create_table`` found a table already at the URI."""

    def __init__(
        self,
        uri: str,
        fix: str = "use open_table() or pass exist_ok=True",
        what: str = "a raylake table",
    ) -> None:
        super().__init__(f"{what} already exists at {uri!r}; {fix}")
        self.uri = uri


class TableLocationError(RaylakeError, ValueError):
    """A table cannot be at this path: the path is a file, or (creating) a directory that
    already holds files other than a table's (``found``: their names, first few)."""

    def __init__(self, path: str, reason: str, found: tuple[str, ...] = ()) -> None:
        super().__init__(f"no table can be at {path!r}: {reason}")
        self.path = path
        self.found = found


class SchemaError(RaylakeError, ValueError):
    """A schema is invalid, or data does not match the table's schema."""


class SchemaMismatchError(SchemaError):
    """Written data does not match the table schema."""

    def __init__(
        self,
        message: str,
        *,
        column: str | None = None,
        expected: Any = None,
        actual: Any = None,
    ) -> None:
        super().__init__(message)
        self.column = column
        self.expected = expected
        self.actual = actual


class NullConstraintError(SchemaError):
    """Nulls were written to a non-nullable column (or a primary-key column)."""

    def __init__(self, column: str, null_count: int, *, key: bool = False) -> None:
        if key:  # a pandas integer key with a missing value arrives as a float column
            message = (
                f"primary-key column {column!r} cannot hold nulls but the data has "
                f"{null_count} null value(s) in it"
            )
        else:
            message = (
                f"column {column!r} is not nullable but the data has {null_count} null value(s)"
            )
        super().__init__(message)
        self.key = key
        self.column = column
        self.null_count = null_count


class SchemaEvolutionError(SchemaError):
    """A schema change that cannot be made; nothing was committed."""

    def __init__(self, message: str, *, column: str | None = None) -> None:
        super().__init__(message)
        self.column = column


class ColumnExistsError(SchemaEvolutionError):
    """A schema change adds or renames to a name that the table already has."""

    def __init__(self, column: str) -> None:
        super().__init__(
            f"column {column!r} already exists; pick another name or delete it first",
            column=column,
        )


class IncompatibleTypeChangeError(SchemaEvolutionError):
    """A type change that could lose values (a narrowing or an unrelated type)."""

    def __init__(self, column: str, current: Any, requested: Any) -> None:
        super().__init__(
            f"cannot change column {column!r} from {current} to {requested}: only widening "
            "changes that keep every value are allowed (int8->int16->int32->int64, "
            "float32->float64, ...; see docs/schema-evolution.md)",
            column=column,
        )
        self.current = current
        self.requested = requested


class ProtectedColumnError(SchemaEvolutionError):
    """A schema change touches a primary-key, partition or sequence column."""

    def __init__(self, column: str, role: str, change: str) -> None:
        super().__init__(
            f"cannot {change} column {column!r}: it is a {role} column, and data files, "
            "buckets or merges depend on it as written",
            column=column,
        )
        self.role = role


class UnknownColumnError(RaylakeError, KeyError):
    """A projection or filter names a column the table does not have."""

    def __init__(
        self, column: str, available: list[str], *, owner: str = "the table", where: str = ""
    ) -> None:
        """``owner`` has the ``available`` columns (a merge's source, say); ``where``
        names the expression or clause that named ``column``."""
        at = f" in {where}" if where else ""
        super().__init__(f"unknown column {column!r}{at}; {owner} has columns {available}")
        self.column = column
        self.available = available
        self.owner = owner
        self.where = where

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class FilterError(RaylakeError, ValueError):
    """A filter cannot be parsed, bound to the schema, or evaluated."""


class FilterArgumentError(InvalidArgumentError, FilterError):
    """A ``filter=`` that is no filter at all (bytes, a number, a pyarrow expression): an
    argument mistake, as a stream's refusal of it is, and a FilterError as it was."""


class FilterParseError(FilterError):
    """A string filter is malformed."""

    def __init__(self, message: str, text: str, position: int) -> None:
        pointer = " " * position + "^"
        super().__init__(f"{message} at position {position}:\n  {text}\n  {pointer}")
        self.text = text
        self.position = position


class SnapshotNotFoundError(RaylakeError, LookupError):
    """A snapshot id or timestamp that the table has no snapshot for."""

    def __init__(self, message: str, *, snapshot_id: int | None = None) -> None:
        super().__init__(message)
        self.snapshot_id = snapshot_id


class SnapshotExpiredError(SnapshotNotFoundError):
    """A snapshot that expiration already removed (older than the earliest one kept)."""

    def __init__(self, snapshot_id: int, earliest: int, uri: str) -> None:
        super().__init__(
            f"snapshot {snapshot_id} of {uri} expired: the earliest snapshot is {earliest}",
            snapshot_id=snapshot_id,
        )
        self.earliest = earliest


class CorruptMetadataError(RaylakeError):
    """A metadata file (schema, snapshot, manifest, consumer) cannot be decoded."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"corrupted metadata file {path!r}: {reason}")
        self.path = path
        self.reason = reason


class ConsumerError(RaylakeError, ValueError):
    """A consumer id or consumer progress is invalid (bad id, snapshot id, rewind)."""

    def __init__(self, message: str, *, consumer_id: str | None = None) -> None:
        super().__init__(message)
        self.consumer_id = consumer_id


class StreamPositionExpiredError(ConsumerError):
    """A stream reader (or consumer) needs a snapshot that expiration already removed."""

    def __init__(self, needed: int, earliest: int, uri: str, consumer_id: str | None = None):
        who = f"consumer {consumer_id!r}" if consumer_id else "the stream reader"
        # A Paimon table refuses reset_consumer (raylake does not write it): Paimon's own
        # reset_consumer procedure moves its consumers.
        hint = (
            f"; move it with Table.reset_consumer({consumer_id!r}, {earliest}) (on a Paimon "
            "table: Paimon's reset_consumer procedure) and accept the gap"
            if consumer_id
            else ""
        )
        super().__init__(
            f"{who} needs snapshot {needed} of {uri}, but it expired: the earliest snapshot "
            f"is {earliest}{hint}",
            consumer_id=consumer_id,
        )
        self.needed = needed
        self.earliest = earliest


class StreamError(RaylakeError, ValueError):
    """A stream was asked for something it cannot do (bad start, shard spec, overwrite)."""


# Argument mistakes of streams, consumers and schemas used to raise StreamError,
# ConsumerError or SchemaError, depending on the module. They are InvalidArgumentErrors
# now (raylake/arguments.py); these subclasses keep ``except StreamError`` (...) working.


class StreamArgumentError(InvalidArgumentError, StreamError):
    """A stream's argument has the wrong type or value (``start``, ``shard``,
    ``on_overwrite``, a job's ``num_shards``, ...)."""


class ConsumerArgumentError(InvalidArgumentError, ConsumerError):
    """A consumer id or a consumer's snapshot id has the wrong type or value."""

    def __init__(
        self, name: str, value: Any, expected: str, *, consumer_id: str | None = None
    ) -> None:
        InvalidArgumentError.__init__(self, name, value, expected)
        self.consumer_id = consumer_id


class SchemaArgumentError(InvalidArgumentError, SchemaError):
    """A keyword that lays out a new table (``schema``, ``partition_by``, ``primary_key``,
    ``buckets``, ``options``) or names columns to read has the wrong type or value."""


class SchemaEvolutionArgumentError(InvalidArgumentError, SchemaEvolutionError):
    """A schema change's argument has the wrong type or value (a column name that is no
    string, a type that is no pyarrow DataType, ``after=`` and ``before=`` both)."""

    def __init__(self, name: str, value: Any, expected: str, *, column: str | None = None) -> None:
        InvalidArgumentError.__init__(self, name, value, expected)
        self.column = column


class MergeError(RaylakeError, ValueError):
    """A merge (``Table.merge``) was given clauses or input it cannot apply."""


class MergeArgumentError(InvalidArgumentError, MergeError):
    """A merge's argument has the wrong type or value (``on``, a column to set, a value)."""


class MergeCardinalityError(MergeError):
    """A target row of a merge matched more than one source row (SQL forbids it), or
    rows a merge would insert into a primary-key table share a key."""

    def __init__(self, key: dict[str, Any], count: int, *, inserted: bool = False) -> None:
        """``inserted``: ``count`` rows the merge would insert share primary key ``key``
        (a primary-key table keeps one row per key, so all but one would be lost)."""
        if inserted:
            message = (
                f"{count} source rows would insert primary key {key}; a primary-key table "
                "holds one row per key (deduplicate the source); nothing was written"
            )
        else:
            message = (
                f"a target row with key {key} matched {count} source rows; a merge may "
                "match each target row at most once (deduplicate the source); nothing was "
                "written"
            )
        super().__init__(message)
        self.key = key
        self.count = count
        self.inserted = inserted


class UnsupportedOperationError(RaylakeError):
    """The operation does not apply to this kind of table."""


class UnsupportedPaimonError(UnsupportedOperationError):
    """A Paimon table, option, engine or file that raylake cannot read correctly."""

    def __init__(self, uri: str, what: str) -> None:
        self.uri = uri
        self.what = what
        super().__init__(
            f"raylake cannot read the Paimon table at {uri!r}: {what} (see docs/paimon.md)"
        )


class MissingDependencyError(RaylakeError, ImportError):
    """An optional dependency is not installed; the message names the extra."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(f"{package} is required for this feature: pip install 'raylake[{extra}]'")
        self.package = package
        self.extra = extra


class UnsupportedTypeError(SchemaError):
    """A column has a type the other side (Spark, Torch, TensorFlow) cannot represent."""

    def __init__(self, column: str, dtype: Any, target: str, hint: str = "") -> None:
        self.column = column
        self.dtype = dtype
        self.target = target
        extra = f"; {hint}" if hint else ""
        super().__init__(f"column {column!r} has type {dtype}, which {target} cannot hold{extra}")


class EnvironmentSetupError(RaylakeError, RuntimeError):
    """Something outside raylake is missing or not running (Java, a Ray cluster)."""


class LoaderProcessError(RaylakeError, RuntimeError):
    """The process that makes a loader's windows (``window_process=True``) failed or ended."""


class ResumeStateError(RaylakeError, ValueError):
    """A training loader's saved position does not fit the loader it is loaded into
    (another table, snapshot, filter or order), or is not a position at all."""


class WorkerPositionError(ResumeStateError):
    """``state_dict()`` was asked of the main process's copy of a training dataset that
    DataLoader worker processes iterated: the batches were read by the workers' copies,
    so this copy does not know the position. The message names the fix."""

    def __init__(self, dataset: str, resume: str) -> None:
        self.dataset = dataset
        super().__init__(
            f"DataLoader worker processes iterated this {dataset}, each its own copy; this "
            "main-process copy read nothing, so its state_dict() would say nothing was "
            "consumed and a resume would read everything again. With num_workers > 0, make "
            "the loader with torchdata.stateful_dataloader.StatefulDataLoader(ds, "
            "batch_size=None, num_workers=...) and save loader.state_dict() (it holds each "
            f"worker's position as of the batches it delivered); {resume}. With "
            "num_workers=0 the dataset's own state_dict() is exact (docs/training.md, "
            "'Resume')."
        )
